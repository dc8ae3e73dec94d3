// A seeded random walk through the real daemon's lifecycle: submissions (one at
// a time, and in bursts from several clients at once), cancels, SIGKILLs (some
// in the middle of a burst) and SIGTERM drains, each followed by a restart on
// the same state directory. Whatever the interleaving:
//   - no job a client was given an id for is lost, and a job the daemon took
//     but could not answer for (killed first) is kept too;
//   - a finished job never changes: its state, error and result stay as first
//     seen, across restarts;
//   - every job ends; a job only fails for a restart, and is only cancelled
//     when asked to or by a drain; a job that succeeded verified every op;
//   - jobs that share a device start in priority-then-submission order.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/harness.h"
#include "tests/random_int.h"

namespace overlap::testing {
namespace {

using ::testing::HasSubstr;

// A small graph on a random device group: 1-3 ops of any type, mode and
// all-reduce layout, shapes that split evenly over the group.
nlohmann::json RandomGraph(std::mt19937& rng) {
  static const char* const kTypes[] = {"ag_gemm",        "gemm_rs",    "gemm_ar", "all_gather",
                                       "reduce_scatter", "all_reduce", "gemm"};
  static const char* const kModes[] = {"serial", "bulk", "chunked", "ring", "auto"};
  static const char* const kDtypes[] = {"fp32", "bf16", "fp16"};
  const int tp = 1 << RandomInt(rng, 0, 2);
  std::vector<int> devices = {0, 1, 2, 3};
  std::shuffle(devices.begin(), devices.end(), rng);
  devices.resize(tp);
  std::sort(devices.begin(), devices.end());

  nlohmann::json ops = nlohmann::json::array();
  const int op_count = RandomInt(rng, 1, 3);
  for (int i = 0; i < op_count; ++i) {
    const std::string type = kTypes[RandomInt(rng, 0, 6)];
    nlohmann::json op = {{"id", "o" + std::to_string(i)},
                         {"type", type},
                         {"m", 64 * tp * RandomInt(rng, 1, 3)},
                         {"n", 64 * tp * RandomInt(rng, 1, 3)}};
    const bool collective_only = type.find("gemm") == std::string::npos;
    if (!collective_only) op["k"] = 64 * tp * RandomInt(rng, 1, 3);
    if (type == "ag_gemm" || type == "gemm_rs" || type == "gemm_ar") {
      op["mode"] = kModes[RandomInt(rng, 0, 4)];
      if (op["mode"] == "chunked") op["chunks"] = 2;
    }
    // Half the all-reduces pin a copy-engine layout (every backend has those).
    static const char* const kAlgorithms[] = {"ring", "tree", "ps"};
    if (type == "all_reduce" && RandomInt(rng, 0, 1) == 1) {
      op["algorithm"] = kAlgorithms[RandomInt(rng, 0, 2)];
      op["transport"] = "p2p";
    }
    if (i > 0 && RandomInt(rng, 0, 1) == 1) op["after"] = {"o" + std::to_string(i - 1)};
    ops.push_back(op);
  }
  return {{"name", "walk"},
          {"devices", devices},
          {"dtype", kDtypes[RandomInt(rng, 0, 2)]},
          {"iterations", RandomInt(rng, 1, 30)},
          {"warmup", 1},
          {"priority", RandomInt(rng, -2, 2)},
          {"ops", ops}};
}

bool IsTerminal(const std::string& state) {
  return state == "SUCCEEDED" || state == "FAILED" || state == "CANCELLED" || state == "ABORTED";
}

// What the walk knows of one job.
struct Tracked {
  int op_count = 0;
  bool cancel_asked = false;            // a cancel of it was accepted
  bool restarted = false;               // it had not ended when the daemon was killed
  bool drained = false;                 // it had not ended when the daemon was told to stop
  std::optional<nlohmann::json> final;  // as first seen in a terminal state
};

class RandomLifecycleTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure() && daemon_) std::cerr << "overlapd log:\n" << daemon_->Log();
  }

  void StartDaemon() {
    // A short drain, so that some drains cancel the running job and some do not.
    daemon_ =
        std::make_unique<Daemon>(dir_.path(), std::vector<std::string>{"--drain-timeout", "0.3"});
    ASSERT_TRUE(daemon_->Start());
  }

  std::string WriteGraph(const nlohmann::json& graph) {
    const std::string path = dir_.File("graph-" + std::to_string(graphs_written_++) + ".json");
    WriteFileOrDie(path, graph.dump());
    return path;
  }

  // The whole job (a list holds summaries, without spec or ops).
  nlohmann::json GetJob(const std::string& id) {
    RunResult get = daemon_->Ctl({"get", id, "--json"});
    EXPECT_EQ(get.exit_code, 0) << Describe(get);
    return ParseJson(get.out);
  }

  void Track(const nlohmann::json& submitted, bool restarted) {
    const std::string id = submitted["id"];
    ASSERT_EQ(jobs_.count(id), 0u) << "id " << id << " given out twice";
    const nlohmann::json whole = !submitted.value("spec", "").empty() ? submitted : GetJob(id);
    Tracked& job = jobs_[id];
    job.op_count =
        static_cast<int>(nlohmann::json::parse(whole["spec"].get<std::string>())["ops"].size());
    job.restarted = restarted;
  }

  void MarkUnfinished(bool Tracked::*flag) {
    for (auto& [id, job] : jobs_) {
      if (!job.final.has_value()) job.*flag = true;
    }
  }

  // Lists every job and checks it against what was seen before.
  void Observe() {
    RunResult list = daemon_->Ctl({"list", "--limit", "100000", "--json"});
    ASSERT_EQ(list.exit_code, 0) << Describe(list);
    std::set<std::string> listed;
    const nlohmann::json parsed = ParseJson(list.out);
    for (const nlohmann::json& job : parsed["jobs"]) {
      const std::string id = job["id"];
      listed.insert(id);
      // The daemon stored it but was killed before its answer reached the client.
      if (jobs_.count(id) == 0) Track(job, /*restarted=*/true);
      Tracked& tracked = jobs_[id];
      if (tracked.final.has_value()) {
        const nlohmann::json& final = *tracked.final;
        const nlohmann::json none = nlohmann::json::object();
        const nlohmann::json& result = final.contains("result") ? final["result"] : none;
        const nlohmann::json& totals = job.contains("result") ? job["result"] : none;
        EXPECT_EQ(job["state"], final["state"]) << id << " changed after it ended";
        EXPECT_EQ(job.value("error", ""), final.value("error", "")) << id;
        EXPECT_EQ(job.value("ops_finished", 0),
                  static_cast<int>(result.contains("ops") ? result["ops"].size() : 0))
            << id;
        EXPECT_EQ(totals.value("total_step_ms", 0.0), result.value("total_step_ms", 0.0)) << id;
        EXPECT_EQ(GetJob(id).value("result", none), result) << id << " changed after it ended";
      } else if (IsTerminal(job["state"])) {
        tracked.final = GetJob(id);
        EXPECT_EQ((*tracked.final)["state"], job["state"]) << id;
      }
    }
    for (const auto& [id, job] : jobs_) EXPECT_EQ(listed.count(id), 1u) << id << " was lost";
  }

  void SubmitOne(std::mt19937& rng) {
    RunResult submit = daemon_->Ctl({"submit", WriteGraph(RandomGraph(rng)), "--json"});
    if (submit.exit_code == 3 && submit.err.find("RESOURCE_EXHAUSTED") != std::string::npos) return;
    ASSERT_EQ(submit.exit_code, 0) << Describe(submit);
    Track(ParseJson(submit.out), /*restarted=*/false);
  }

  // Several clients submit at once; half of the time the daemon is killed
  // while they do.
  void SubmitBurst(std::mt19937& rng) {
    const bool kill = RandomInt(rng, 0, 1) == 1;
    std::vector<std::unique_ptr<Child>> clients;
    const int count = RandomInt(rng, 2, 6);
    for (int i = 0; i < count; ++i) {
      clients.push_back(daemon_->CtlAsync({"submit", WriteGraph(RandomGraph(rng)), "--json"}));
    }
    if (kill) {
      MarkUnfinished(&Tracked::restarted);
      std::this_thread::sleep_for(std::chrono::milliseconds(RandomInt(rng, 0, 40)));
      daemon_->Kill();
    }
    for (std::unique_ptr<Child>& client : clients) {
      RunResult submit = client->Wait(std::chrono::seconds(30));
      if (submit.exit_code == 0) {
        Track(ParseJson(submit.out), /*restarted=*/kill);
      } else {
        EXPECT_TRUE(kill) << Describe(submit);
      }
    }
    if (kill) StartDaemon();
  }

  void CancelOne(std::mt19937& rng) {
    auto it = jobs_.begin();
    std::advance(it, RandomInt(rng, 0, static_cast<int>(jobs_.size()) - 1));
    RunResult cancel = daemon_->Ctl({"cancel", it->first});
    if (cancel.exit_code == 0) {
      it->second.cancel_asked = true;
      EXPECT_FALSE(it->second.final.has_value()) << "cancel of finished " << it->first << " taken";
    } else {
      EXPECT_EQ(cancel.exit_code, 3) << Describe(cancel);
      EXPECT_THAT(cancel.err, HasSubstr("FAILED_PRECONDITION")) << it->first;
    }
  }

  // Each job's end is one the walk explains.
  void CheckEnds() {
    for (const auto& [id, job] : jobs_) {
      ASSERT_TRUE(job.final.has_value()) << id << " never ended";
      const nlohmann::json& final = *job.final;
      const std::string state = final["state"];
      const std::string error = final["error"];
      if (state == "SUCCEEDED") {
        ASSERT_EQ(final["result"]["ops"].size(), static_cast<size_t>(job.op_count)) << id;
        for (const nlohmann::json& op : final["result"]["ops"]) {
          EXPECT_TRUE(op.value("verified", false)) << id << " op " << op["id"];
        }
      } else if (state == "FAILED") {
        EXPECT_TRUE(job.restarted) << id << " failed: " << error;
        EXPECT_THAT(error, HasSubstr("daemon restarted")) << id;
      } else {
        EXPECT_EQ(state, "CANCELLED") << id << ": " << error;
        EXPECT_TRUE(job.cancel_asked || job.drained) << id << " cancelled unasked: " << error;
      }
    }
  }

  // No job started while a higher-ranked job that shares one of its devices
  // was waiting (ranked by priority, then submission).
  void CheckStartOrder() {
    std::vector<const nlohmann::json*> started;
    for (const auto& [id, job] : jobs_) {
      if ((*job.final)["start_time_ms"].get<int64_t>() > 0) {
        started.push_back(&*job.final);
      }
    }
    auto ms = [](const nlohmann::json& job, const char* key) { return job[key].get<int64_t>(); };
    int contended = 0;
    for (const nlohmann::json* a : started) {
      for (const nlohmann::json* b : started) {
        std::vector<int> shared;
        const std::vector<int> a_devices = (*a)["devices"];
        const std::vector<int> b_devices = (*b)["devices"];
        std::set_intersection(a_devices.begin(), a_devices.end(), b_devices.begin(),
                              b_devices.end(), std::back_inserter(shared));
        if (a == b || shared.empty()) continue;
        // a was waiting when b started (millisecond clock: strictly inside).
        if (!(ms(*a, "submit_time_ms") < ms(*b, "start_time_ms") &&
              ms(*b, "start_time_ms") < ms(*a, "start_time_ms"))) {
          continue;
        }
        ++contended;
        const std::pair<int, int64_t> a_rank = {-(*a)["priority"].get<int>(),
                                                (*a)["sequence"].get<int64_t>()};
        const std::pair<int, int64_t> b_rank = {-(*b)["priority"].get<int>(),
                                                (*b)["sequence"].get<int64_t>()};
        EXPECT_LT(b_rank, a_rank) << (*b)["id"] << " started while " << (*a)["id"]
                                  << ", ranked above it, waited";
      }
    }
    std::map<std::string, int> ends;
    for (const auto& [id, job] : jobs_) ++ends[(*job.final)["state"].get<std::string>()];
    std::cout << "the walk left " << jobs_.size() << " jobs:";
    for (const auto& [state, count] : ends) std::cout << " " << count << " " << state;
    std::cout << "; " << contended
              << " pairs sharing a device where one waited as the other started\n";
    EXPECT_GT(contended, 0) << "nothing waited: the order check checked nothing";
  }

  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
  std::map<std::string, Tracked> jobs_;
  int graphs_written_ = 0;
};

TEST_F(RandomLifecycleTest, NothingIsLostOrChangedAcrossKillsAndDrains) {
  ASSERT_FALSE(dir_.path().empty());
  std::mt19937 rng(20261201);
  StartDaemon();
  for (int action = 0; action < 70 && !HasFatalFailure(); ++action) {
    const int roll = RandomInt(rng, 0, 99);
    if (roll < 40) {
      SubmitOne(rng);
    } else if (roll < 55 && !jobs_.empty()) {
      CancelOne(rng);
    } else if (roll < 65) {
      std::this_thread::sleep_for(std::chrono::milliseconds(RandomInt(rng, 0, 200)));
    } else if (roll < 75) {
      Observe();
    } else if (roll < 85) {
      SubmitBurst(rng);
    } else if (roll < 92) {
      Observe();
      MarkUnfinished(&Tracked::restarted);
      daemon_->Kill();
      StartDaemon();
    } else {
      Observe();
      MarkUnfinished(&Tracked::drained);
      RunResult stopped = daemon_->Terminate(std::chrono::seconds(30));
      EXPECT_EQ(stopped.exit_code, 0) << "SIGTERM must drain and exit 0\n" << daemon_->Log();
      StartDaemon();
    }
  }
  ASSERT_FALSE(HasFatalFailure());

  const auto deadline = Clock::now() + std::chrono::seconds(120);
  bool all_ended = false;
  while (!all_ended && Clock::now() < deadline && !HasFatalFailure()) {
    Observe();
    all_ended = std::all_of(jobs_.begin(), jobs_.end(),
                            [](const auto& entry) { return entry.second.final.has_value(); });
    if (!all_ended) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_GT(jobs_.size(), 20u) << "the walk should have left a crowd of jobs";
  CheckEnds();
  CheckStartOrder();
  EXPECT_EQ(daemon_->Terminate(std::chrono::seconds(30)).exit_code, 0) << daemon_->Log();
}

}  // namespace
}  // namespace overlap::testing
