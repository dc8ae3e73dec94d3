#include "client/core/proto_json.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/time/time.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"

namespace overlap::client {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

bool IsWideInteger(const FieldDescriptor* field) {
  return field->cpp_type() == FieldDescriptor::CPPTYPE_INT64 ||
         field->cpp_type() == FieldDescriptor::CPPTYPE_UINT64;
}

// The mapping's "123" as the number 123 (left alone if it is not one).
void ToNumber(const FieldDescriptor* field, nlohmann::json& value) {
  if (!value.is_string()) return;
  const std::string& text = value.get_ref<const std::string&>();
  if (field->cpp_type() == FieldDescriptor::CPPTYPE_UINT64) {
    uint64_t n = 0;
    if (absl::SimpleAtoi(text, &n)) value = n;
  } else {
    int64_t n = 0;
    if (absl::SimpleAtoi(text, &n)) value = n;
  }
}

// "submit_time_ms" -> "submit_time", "last_xid_unix_ms" -> "last_xid_time";
// "" for a field that is not a unix time.
std::string TimeName(const std::string& field) {
  if (absl::EndsWith(field, "_unix_ms")) {
    return field.substr(0, field.size() - std::string("_unix_ms").size()) + "_time";
  }
  if (absl::EndsWith(field, "_time_ms")) return field.substr(0, field.size() - 3);
  return "";
}

void Convert(const Descriptor* type, nlohmann::json& object);

// One field's value(s) in `object`.
void ConvertField(const FieldDescriptor* field, nlohmann::json& object) {
  auto it = object.find(field->name());
  if (it == object.end()) return;
  nlohmann::json& value = *it;
  if (field->is_map()) {
    const FieldDescriptor* map_value = field->message_type()->map_value();
    for (auto& [key, entry] : value.items()) {
      if (map_value->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        Convert(map_value->message_type(), entry);
      } else if (IsWideInteger(map_value)) {
        ToNumber(map_value, entry);
      }
    }
    return;
  }
  if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    if (field->is_repeated()) {
      for (nlohmann::json& element : value) Convert(field->message_type(), element);
    } else {
      Convert(field->message_type(), value);
    }
    return;
  }
  if (!IsWideInteger(field)) return;
  if (field->is_repeated()) {
    for (nlohmann::json& element : value) ToNumber(field, element);
    return;
  }
  ToNumber(field, value);
  if (const std::string name = TimeName(field->name()); !name.empty() && value.is_number()) {
    const int64_t ms = value.get<int64_t>();
    if (object.find(name) == object.end()) {
      object[name] = ms == 0 ? nlohmann::json(nullptr) : nlohmann::json(Rfc3339(ms));
    }
  }
}

void Convert(const Descriptor* type, nlohmann::json& object) {
  if (!object.is_object()) return;
  for (int i = 0; i < type->field_count(); ++i) ConvertField(type->field(i), object);
}

}  // namespace

std::string Rfc3339(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(unix_ms),
                          absl::UTCTimeZone());
}

nlohmann::json ProtoToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string text;
  if (!google::protobuf::util::MessageToJsonString(message, &text, options).ok()) {
    // Only malformed Any fields fail, which the API does not use.
    return nlohmann::json{{"error", "cannot print the message as JSON"}};
  }
  nlohmann::json json = nlohmann::json::parse(text);
  Convert(message.GetDescriptor(), json);
  return json;
}

}  // namespace overlap::client
