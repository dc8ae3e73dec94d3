// PieceGraphs (a session op replayed as graphs) and the lanes' engine's
// captures, over the host backend with a graph capture that only records what
// it was asked: which run is direct, captured or launched, the order of the
// waits around a launch on the streams a capture joined, a capture that fails,
// and the devices' mutexes held across a capture.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/engine/device_lanes.h"
#include "server/engine/forwarding_engine.h"
#include "server/engine/lane_shared_engine.h"
#include "server/sessions/piece_graphs.h"
#include "tests/host_engine_util.h"

namespace overlap::sessions {
namespace {

using engine::EventId;
using engine::GraphId;
using engine::StreamId;

// Records the calls; a capture records nothing (the wrapped host engine runs
// what is enqueued during it).
class RecordingGraphs : public engine::GraphCapture {
 public:
  absl::Status BeginCapture(StreamId origin) override {
    log.push_back(absl::StrCat("begin ", origin));
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<StreamId>> JoinedStreams(StreamId origin) override {
    log.push_back(absl::StrCat("joined ", origin));
    return joined;
  }
  absl::StatusOr<GraphId> EndCapture(StreamId origin) override {
    log.push_back(absl::StrCat("end ", origin));
    if (!end_status.ok()) return end_status;
    return next_graph++;
  }
  absl::Status LaunchGraph(GraphId graph, StreamId stream) override {
    log.push_back(absl::StrCat("launch ", graph, " on ", stream));
    return absl::OkStatus();
  }
  void DestroyGraph(GraphId graph) override { log.push_back(absl::StrCat("destroy ", graph)); }

  std::vector<std::string> log;
  std::vector<StreamId> joined;
  absl::Status end_status;
  GraphId next_graph = 7;
};

// The host backend with RecordingGraphs as its graphs; its event calls logged
// into the same log.
class GraphsEngine : public engine::ForwardingEngine {
 public:
  GraphsEngine(engine::Engine& inner, RecordingGraphs& graphs)
      : ForwardingEngine(inner), graphs_(graphs) {}
  engine::GraphCapture* Graphs() const override { return &graphs_; }
  absl::Status RecordEvent(EventId event, StreamId stream) override {
    graphs_.log.push_back(absl::StrCat("record on ", stream));
    return ForwardingEngine::RecordEvent(event, stream);
  }
  absl::Status WaitEvent(StreamId stream, EventId event) override {
    graphs_.log.push_back(absl::StrCat("wait on ", stream));
    return ForwardingEngine::WaitEvent(stream, event);
  }

 private:
  RecordingGraphs& graphs_;
};

TEST(PieceGraphsTest, FirstRunDirectSecondCapturedThenOnlyLaunched) {
  auto host = CheckedHostEngine(1);
  RecordingGraphs graphs;
  GraphsEngine engine(*host, graphs);
  const StreamId compute = engine.GetStream(0, engine::StreamRole::kCompute);
  int enqueued = 0;
  {
    PieceGraphs pieces(engine, graphs, compute, 0, 1, "session s op fc1");
    auto enqueue = [&] {
      ++enqueued;
      return absl::OkStatus();
    };
    absl::StatusOr<bool> replayed = pieces.Run(0, enqueue);
    ASSERT_TRUE(replayed.ok());
    EXPECT_FALSE(*replayed);
    EXPECT_EQ(enqueued, 1);
    EXPECT_TRUE(graphs.log.empty()) << "the first run chooses the GEMMs: direct";
    replayed = pieces.Run(0, enqueue);
    ASSERT_TRUE(replayed.ok());
    EXPECT_TRUE(*replayed);
    EXPECT_EQ(enqueued, 2) << "recorded once, inside the capture";
    replayed = pieces.Run(0, enqueue);
    ASSERT_TRUE(replayed.ok());
    EXPECT_TRUE(*replayed);
    EXPECT_EQ(enqueued, 2) << "replayed, not enqueued again";
    EXPECT_EQ(pieces.launches(), 2);
    EXPECT_EQ(pieces.direct(), 1);
    const std::vector<std::string> want = {
        absl::StrCat("begin ", compute),           absl::StrCat("joined ", compute),
        absl::StrCat("end ", compute),             absl::StrCat("launch 7 on ", compute),
        absl::StrCat("launch 7 on ", compute)};
    EXPECT_EQ(graphs.log, want) << "no stream joined: no waits around the launches";
  }
  EXPECT_EQ(graphs.log.back(), "destroy 7");
}

TEST(PieceGraphsTest, StreamsTheCaptureJoinedAreOrderedAroundEachLaunch) {
  auto host = CheckedHostEngine(1);
  RecordingGraphs graphs;
  GraphsEngine engine(*host, graphs);
  const StreamId compute = engine.GetStream(0, engine::StreamRole::kCompute);
  const StreamId comm = engine.GetStream(0, engine::StreamRole::kComm);
  graphs.joined = {comm};
  PieceGraphs pieces(engine, graphs, compute, 0, 2, "session s op grads");
  auto enqueue = [] { return absl::OkStatus(); };
  // Pieces are counted apart: piece 1's first run is direct after piece 0's.
  ASSERT_TRUE(pieces.Run(0, enqueue).ok());
  ASSERT_TRUE(pieces.Run(1, enqueue).ok());
  EXPECT_TRUE(graphs.log.empty());
  graphs.log.clear();
  ASSERT_TRUE(pieces.Run(0, enqueue).ok());
  const std::vector<std::string> want = {
      absl::StrCat("begin ", compute),
      absl::StrCat("joined ", compute),
      absl::StrCat("end ", compute),
      // The comm stream's queue before the graph, the graph before its later work.
      absl::StrCat("record on ", comm),
      absl::StrCat("wait on ", compute),
      absl::StrCat("launch 7 on ", compute),
      absl::StrCat("record on ", compute),
      absl::StrCat("wait on ", comm)};
  EXPECT_EQ(graphs.log, want);
  EXPECT_EQ(pieces.Run(2, enqueue).status().code(), absl::StatusCode::kInternal);
}

TEST(PieceGraphsTest, AFailedCaptureLeavesThePieceDirectForGood) {
  auto host = CheckedHostEngine(1);
  RecordingGraphs graphs;
  graphs.end_status = absl::FailedPreconditionError("operation not permitted when capturing");
  GraphsEngine engine(*host, graphs);
  const StreamId compute = engine.GetStream(0, engine::StreamRole::kCompute);
  PieceGraphs pieces(engine, graphs, compute, 0, 1, "session s op fc1");
  int enqueued = 0;
  auto enqueue = [&] {
    ++enqueued;
    return absl::OkStatus();
  };
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(pieces.Run(0, enqueue).ok());
  // Run 2: once inside the failed capture (it ran nothing), once directly.
  EXPECT_EQ(enqueued, 5);
  EXPECT_EQ(pieces.launches(), 0);
  EXPECT_EQ(pieces.direct(), 4);
  int begun = 0;
  for (const std::string& line : graphs.log) begun += line.rfind("begin", 0) == 0 ? 1 : 0;
  EXPECT_EQ(begun, 1) << "no second capture";
}

TEST(PieceGraphsTest, AFailingEnqueueInsideTheCaptureIsRetriedDirectly) {
  auto host = CheckedHostEngine(1);
  RecordingGraphs graphs;
  GraphsEngine engine(*host, graphs);
  const StreamId compute = engine.GetStream(0, engine::StreamRole::kCompute);
  PieceGraphs pieces(engine, graphs, compute, 0, 1, "session s op fc1");
  int calls = 0;
  // Refused while capturing (the second call), fine otherwise.
  auto enqueue = [&]() -> absl::Status {
    return ++calls == 2 ? absl::InternalError("refused in a capture") : absl::OkStatus();
  };
  ASSERT_TRUE(pieces.Run(0, enqueue).ok());
  ASSERT_TRUE(pieces.Run(0, enqueue).ok());
  EXPECT_EQ(calls, 3);
  const std::vector<std::string> want = {absl::StrCat("begin ", compute),
                                         absl::StrCat("end ", compute), "destroy 7"};
  EXPECT_EQ(graphs.log, want) << "the capture was ended and its graph dropped";
}

TEST(PieceGraphsTest, EligibleOnlyWhereTheEngineCapturesGraphs) {
  auto host = CheckedHostEngine(1);
  EXPECT_EQ(host->Graphs(), nullptr);
  RecordingGraphs graphs;
  GraphsEngine engine(*host, graphs);
  EXPECT_NE(engine.Graphs(), nullptr);
}

TEST(LaneSharedEngineGraphsTest, ACaptureHoldsTheDevicesAgainstOtherThreads) {
  auto host = CheckedHostEngine(2);
  RecordingGraphs graphs;
  GraphsEngine inner(*host, graphs);
  engine::DeviceLanes lanes(2);
  engine::LaneSharedEngine without(inner, lanes, {0, 1});
  EXPECT_EQ(without.Graphs(), nullptr) << "a job's lanes engine replays no graphs";
  engine::LaneSharedEngine shared(inner, lanes, {0, 1}, /*graphs=*/true);
  ASSERT_NE(shared.Graphs(), nullptr);
  const StreamId compute = shared.GetStream(0, engine::StreamRole::kCompute);
  absl::StatusOr<EventId> event = shared.CreateEvent(0);
  ASSERT_TRUE(event.ok());

  ASSERT_TRUE(shared.Graphs()->BeginCapture(compute).ok());
  // The capturing thread's own calls take no mutex (they would deadlock).
  ASSERT_TRUE(shared.RecordEvent(*event, compute).ok());
  EXPECT_EQ(shared.Graphs()->BeginCapture(compute).code(),
            absl::StatusCode::kFailedPrecondition);
  // Another user of the devices waits for the capture's end.
  engine::LaneSharedEngine job(inner, lanes, {0});
  std::atomic<bool> recorded{false};
  std::thread other([&] {
    EXPECT_TRUE(job.RecordEvent(*event, compute).ok());
    recorded = true;
  });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(recorded.load()) << "a call landed on a stream while it was captured";
  ASSERT_TRUE(shared.Graphs()->EndCapture(compute).ok());
  other.join();
  EXPECT_TRUE(recorded.load());
  // After the capture, the lanes' calls lock again (and do not deadlock).
  EXPECT_TRUE(shared.RecordEvent(*event, compute).ok());
  ASSERT_TRUE(shared.Synchronize({0}).ok());
  shared.DestroyEvent(*event);
}

}  // namespace
}  // namespace overlap::sessions
