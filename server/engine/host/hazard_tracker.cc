#include "server/engine/host/hazard_tracker.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace overlap::engine::host {
namespace {

void MaxInto(HazardTracker::Clock& into, const HazardTracker::Clock& from) {
  for (size_t i = 0; i < into.size(); ++i) into[i] = std::max(into[i], from[i]);
}

}  // namespace

HazardTracker::HazardTracker(std::vector<std::string> stream_names)
    : names_(std::move(stream_names)),
      host_(static_cast<int>(names_.size())),
      clocks_(names_.size() + 1, Clock(names_.size() + 1, 0)) {
  names_.push_back("host");
}

const std::string& HazardTracker::StreamName(int stream) const { return names_[stream]; }

absl::Status HazardTracker::Op(absl::Span<const int> streams, absl::Span<const Access> accesses,
                               const char* op_name) {
  Clock clock = clocks_[host_];
  for (int s : streams) MaxInto(clock, clocks_[s]);
  for (int s : streams) ++clock[s];

  for (const Access& access : accesses) {
    if (access.region.empty()) continue;
    auto it = records_.find(access.buffer);
    if (it == records_.end()) continue;
    for (const Record& r : it->second) {
      if (!access.write && !r.write) continue;
      if (Ordered(clock, r) || !r.region.Overlaps(access.region)) continue;
      const char* mine = access.write ? "writes" : "reads";
      const char* theirs = r.write ? "write" : "read";
      const std::string who = access.stream == host_
                                  ? std::string("the host")
                                  : absl::StrCat("stream ", StreamName(access.stream));
      const char* why = access.stream == host_ ? "not synchronized with the host"
                                               : (r.write ? "no event path from that write"
                                                          : "no event path from that read");
      return absl::FailedPreconditionError(absl::StrCat(
          "hazard: ", who, " (", op_name, ") ", mine, " buffer ", access.buffer, " ",
          access.region.ToString(), " while ", StreamName(r.stream), " (", r.op, ") may still ",
          theirs, " it at ", r.region.ToString(), " (", why, ")"));
    }
  }

  for (int s : streams) clocks_[s] = clock;
  if (std::find(streams.begin(), streams.end(), host_) != streams.end()) {
    // Host accesses are not recorded: later ops merge the host clock anyway.
    return absl::OkStatus();
  }
  for (const Access& access : accesses) {
    if (access.region.empty()) continue;
    Insert(records_[access.buffer],
           Record{access.region, access.write, access.stream, clock[access.stream], op_name},
           clock);
  }
  return absl::OkStatus();
}

// Keeps the lists short. A record may go when the new one covers it and every
// later access that must be ordered after the old one must also be ordered after
// the new one, which already is ordered after the old (the check just passed):
// a write subsumes anything it covers; a read subsumes covered reads that
// happened before it.
void HazardTracker::Insert(std::vector<Record>& list, const Record& record, const Clock& clock) {
  list.erase(std::remove_if(list.begin(), list.end(),
                            [&](const Record& r) {
                              if (!record.region.Covers(r.region)) return false;
                              if (record.write) return true;
                              return !r.write && Ordered(clock, r);
                            }),
             list.end());
  list.push_back(record);
}

HazardTracker::Clock HazardTracker::Snapshot(int stream) const {
  Clock clock = clocks_[stream];
  MaxInto(clock, clocks_[host_]);
  return clock;
}

void HazardTracker::Merge(int stream, const Clock& snapshot) { MaxInto(clocks_[stream], snapshot); }

void HazardTracker::SyncHost(absl::Span<const int> streams) {
  for (int s : streams) MaxInto(clocks_[host_], clocks_[s]);
  // Records ordered before the host are ordered before everything from now on.
  const Clock& host = clocks_[host_];
  for (auto it = records_.begin(); it != records_.end();) {
    auto& list = it->second;
    list.erase(std::remove_if(list.begin(), list.end(),
                              [&](const Record& r) { return Ordered(host, r); }),
               list.end());
    it = list.empty() ? records_.erase(it) : std::next(it);
  }
}

size_t HazardTracker::RecordCount(int64_t buffer) const {
  auto it = records_.find(buffer);
  return it == records_.end() ? 0 : it->second.size();
}

}  // namespace overlap::engine::host
