#include "client/format/printable.h"

#include <string>

#include "common/text.h"

namespace overlap::client {
namespace {

constexpr size_t kMaxIdBytes = 128;
constexpr size_t kMaxNameBytes = 256;
constexpr size_t kMaxErrorBytes = 4096;

void Clean(std::string* text, size_t max_bytes) {
  // The common case costs one scan and no copy.
  if (text->size() <= max_bytes && !HasControlCharacters(*text) && !FirstInvalidUtf8(*text)) {
    return;
  }
  *text = Excerpt(*text, max_bytes);
}

void CleanAll(google::protobuf::RepeatedPtrField<std::string>* texts, size_t max_bytes) {
  for (std::string& text : *texts) Clean(&text, max_bytes);
}

void CleanTimeline(v1::Timeline* timeline) {
  for (v1::TimelineSpan& span : *timeline->mutable_spans()) Clean(span.mutable_op(), kMaxIdBytes);
}

}  // namespace

void MakePrintable(v1::Job* job) {
  Clean(job->mutable_id(), kMaxIdBytes);
  Clean(job->mutable_name(), kMaxNameBytes);
  Clean(job->mutable_owner(), kMaxNameBytes);
  Clean(job->mutable_owner_name(), kMaxNameBytes);
  Clean(job->mutable_error(), kMaxErrorBytes);
  if (job->has_progress()) Clean(job->mutable_progress()->mutable_op_id(), kMaxIdBytes);
  if (!job->has_result()) return;
  v1::JobResult* result = job->mutable_result();
  for (v1::OpResult& op : *result->mutable_ops()) {
    Clean(op.mutable_id(), kMaxIdBytes);
    if (op.has_timeline()) CleanTimeline(op.mutable_timeline());
  }
  CleanAll(result->mutable_layer_deferred(), kMaxIdBytes);
  CleanAll(result->mutable_layer_joined_before(), kMaxIdBytes);
  CleanAll(result->mutable_layer_order(), kMaxIdBytes);
  for (v1::LayerDeferral& d : *result->mutable_layer_deferrals()) {
    Clean(d.mutable_op(), kMaxErrorBytes);  // a bucket names every op it merges
    Clean(d.mutable_joined_before(), kMaxIdBytes);
  }
  Clean(result->mutable_layer_note(), kMaxErrorBytes);
  if (result->has_layer_timeline()) CleanTimeline(result->mutable_layer_timeline());
}

}  // namespace overlap::client
