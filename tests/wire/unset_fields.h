// What a mapping's test asks of a message made from a value with every field
// set: that no field of it was left behind.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/message.h"

namespace overlap::wire {

// The fields of `message` left at their default (a repeated one empty), by
// path, recursively through the first element of each; messages of the type
// named `skip` ("overlap.v1.JobResult") are not entered.
inline void CollectUnset(const google::protobuf::Message& message, const std::string& path,
                         const std::string& skip, std::vector<std::string>* unset) {
  using google::protobuf::FieldDescriptor;
  const auto* descriptor = message.GetDescriptor();
  const auto* reflection = message.GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    const std::string name = absl::StrCat(path, field->name());
    const bool set = field->is_repeated() ? reflection->FieldSize(message, field) > 0
                                          : reflection->HasField(message, field);
    if (!set) {
      unset->push_back(name);
      continue;
    }
    if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE || field->is_map()) continue;
    if (field->message_type()->full_name() == skip) continue;
    const auto& inner = field->is_repeated() ? reflection->GetRepeatedMessage(message, field, 0)
                                             : reflection->GetMessage(message, field);
    CollectUnset(inner, name + ".", skip, unset);
  }
}

inline std::vector<std::string> Unset(const google::protobuf::Message& message,
                                      const std::string& skip = "") {
  std::vector<std::string> unset;
  CollectUnset(message, "", skip, &unset);
  return unset;
}

}  // namespace overlap::wire
