// Energy bookkeeping on the host backend: a fake counter that moves by a known
// step at every read, so that each timed phase's window holds exactly one
// step per device; the report's joules and watts must be those deltas over
// the steps and the windows' time. Also the figures alone (serial beside
// overlapped, the note) and the report without a counter.
#include "server/runner/energy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/engine/host/host_engine.h"
#include "server/runner/job_runner.h"
#include "tests/job_result_util.h"
#include "tests/op_spec_util.h"

namespace overlap::runner {
namespace {

using ::testing::HasSubstr;

constexpr double kJoulesPerRead = 10;  // what the fake counter adds at each read of a device

// Every device's counter moves by kJoulesPerRead at each read: a window
// (a read before a phase's timed iterations, one after) sees exactly that much.
class SteppingCounter {
 public:
  absl::StatusOr<double> Read(int device) {
    absl::MutexLock lock(&mu_);
    return joules_[device] += kJoulesPerRead;
  }

 private:
  absl::Mutex mu_;
  std::map<int, double> joules_ ABSL_GUARDED_BY(mu_);
};

std::unique_ptr<engine::Engine> HostEngine(SteppingCounter* counter) {
  engine::HostEngineOptions options;
  options.device_count = 2;
  options.hazard_checks = true;
  if (counter != nullptr) {
    options.energy_counter = [counter](int device) { return counter->Read(device); };
  }
  return std::move(engine::CreateHostEngine(options)).value();
}

// Two ops on two ranks with fixed schedules (no autotune), one timed
// iteration each: one round, so one window per phase.
JobSpec TwoOps() {
  JobSpec spec;
  spec.name = "energy";
  spec.dtype = DType::kF32;
  spec.iterations = 1;
  spec.warmup = 1;
  OpSpec fc1 = MakeOp("fc1", OpType::kAgGemm, 128, 64, 96);
  fc1.mode = OverlapMode::kRing;
  fc1.transport = Transport::kP2p;
  OpSpec fc2 = MakeOp("fc2", OpType::kGemmRs, 128, 96, 64, {"fc1"});
  fc2.mode = OverlapMode::kChunked;
  fc2.chunks = 2;
  fc2.transport = Transport::kP2p;
  spec.ops = {fc1, fc2};
  return spec;
}

TEST(EnergyTest, ReportHoldsTheCounterDeltasOverStepsAndTime) {
  SteppingCounter counter;
  auto engine = HostEngine(&counter);
  absl::StatusOr<v1::JobResult> result = RunJobResult(*engine, TwoOps(), {0, 1}, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  // One window of the step per op, each device read twice: 2 devices x 10 J.
  const double window_joules = 2 * kJoulesPerRead;
  ASSERT_EQ(result->ops_size(), 2);
  for (const v1::OpResult& op : result->ops()) {
    SCOPED_TRACE(op.id());
    ASSERT_TRUE(op.has_energy());
    const v1::Energy& e = op.energy();
    EXPECT_EQ(e.steps(), 1);
    EXPECT_DOUBLE_EQ(e.step_joules(), window_joules);
    ASSERT_GT(e.window_s(), 0);
    EXPECT_DOUBLE_EQ(e.step_watts(), window_joules / e.window_s());
    // Serial: the GEMM alone's window and the collective alone's, one step each.
    ASSERT_TRUE(e.serial_valid());
    EXPECT_DOUBLE_EQ(e.serial_joules(), 2 * window_joules);
    EXPECT_GT(e.serial_watts(), 0);
    EXPECT_DOUBLE_EQ(e.serial_ms(), op.gemm_alone().median_ms() + op.comm_alone().median_ms());
    const double flops = 2.0 * static_cast<double>(op.m()) * op.k() * op.n();
    EXPECT_DOUBLE_EQ(e.joules_per_tflop(), window_joules / (flops / 1e12));
  }
  ASSERT_TRUE(result->has_layer_energy());
  const v1::Energy& layer = result->layer_energy();
  EXPECT_DOUBLE_EQ(layer.step_joules(), window_joules);
  EXPECT_DOUBLE_EQ(layer.step_watts(), window_joules / layer.window_s());
  // Beside the layer, its ops op by op: each op's own step window, one step
  // of each (not their GEMM alone and collective alone: 4 windows), joules
  // and seconds from those same windows.
  ASSERT_TRUE(layer.serial_valid());
  EXPECT_DOUBLE_EQ(layer.serial_joules(), 2 * window_joules);
  const v1::Energy& fc1 = result->ops(0).energy();
  const v1::Energy& fc2 = result->ops(1).energy();
  EXPECT_DOUBLE_EQ(layer.serial_joules(), fc1.step_joules() + fc2.step_joules());
  EXPECT_DOUBLE_EQ(layer.serial_watts(),
                   (fc1.step_joules() + fc2.step_joules()) /
                       (fc1.window_s() / fc1.steps() + fc2.window_s() / fc2.steps()));
  EXPECT_DOUBLE_EQ(layer.serial_ms(), result->total_step_ms());
}

TEST(EnergyTest, NoCounterNoEnergy) {
  auto engine = HostEngine(nullptr);
  absl::StatusOr<v1::JobResult> result = RunJobResult(*engine, TwoOps(), {0, 1}, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  for (const v1::OpResult& op : result->ops()) EXPECT_FALSE(op.has_energy()) << op.id();
  EXPECT_FALSE(result->has_layer_energy());
}

TEST(EnergyTest, SimulatedPowerIsTheHostCounter) {
  engine::HostEngineOptions options;
  options.device_count = 1;
  options.simulated_power_w = 250;
  auto engine = std::move(engine::CreateHostEngine(options)).value();
  const engine::DeviceMonitor* monitor = engine->Monitor();
  ASSERT_NE(monitor, nullptr);
  absl::StatusOr<double> first = monitor->EnergyJoules(0);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<double> second = monitor->EnergyJoules(0);
  ASSERT_TRUE(second.ok());
  EXPECT_GE(*second, *first);  // a counter never runs backwards
  EXPECT_TRUE(monitor->Telemetry(0).energy_valid);
  EXPECT_EQ(monitor->EnergyJoules(1).status().code(), absl::StatusCode::kInvalidArgument);
  options.simulated_power_w = 0;
  auto plain = std::move(engine::CreateHostEngine(options)).value();
  EXPECT_EQ(plain->Monitor()->EnergyJoules(0).status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_FALSE(plain->Monitor()->Telemetry(0).energy_valid);
}

TEST(EnergyFiguresTest, PerStepPowerAndTheNoteWhenOverlapDrawsMore) {
  // Overlapped: 30 J over 0.1 s in 10 steps of 10 ms; serial: 40 J over 0.2 s
  // in 10 steps of 20 ms. Faster, 300 W against 200 W.
  const EnergyWindow step{true, 30, 0.1, 10};
  const EnergyWindow serial{true, 40, 0.2, 10};
  const EnergyFigures f = EnergyOf(step, 10, serial, 20);
  ASSERT_TRUE(f.valid);
  EXPECT_DOUBLE_EQ(f.step_joules, 3);
  EXPECT_DOUBLE_EQ(f.step_watts, 300);
  ASSERT_TRUE(f.serial_valid);
  EXPECT_DOUBLE_EQ(f.serial_joules, 4);
  EXPECT_DOUBLE_EQ(f.serial_watts, 200);
  EXPECT_THAT(f.note, HasSubstr("saves 50% of the time but draws 50% more power"));
  // Slower than serial, or no more power: nothing to say.
  EXPECT_EQ(EnergyOf(step, 30, serial, 20).note, "");
  EXPECT_EQ(EnergyOf(EnergyWindow{true, 10, 0.1, 10}, 10, serial, 20).note, "");
  // Within 2% of serial's power is the counter's noise: 203 W against 200 W.
  EXPECT_EQ(EnergyOf(EnergyWindow{true, 20.3, 0.1, 10}, 10, serial, 20).note, "");
  EXPECT_FALSE(EnergyOf(EnergyWindow{}, 10, serial, 20).valid);
}

// The layer's ops op by op at a constant power P: whatever each window's
// steps and wall time, one step of each draws P. Dividing the windows'
// joules by anything but their own seconds (the steps' median times, which
// leave out the host's sync and the head start's GEMMs) would read more.
TEST(EnergyFiguresTest, OpByOpAtConstantPowerIsThatPower) {
  constexpr double kWatts = 700;
  // Seconds and steps of three ops' step windows; joules = P x seconds.
  const double seconds[] = {0.0123, 0.0457, 0.2};
  const int steps[] = {5, 20, 3};
  std::vector<EnergyWindow> windows;
  double joules_per_step = 0;
  for (int i = 0; i < 3; ++i) {
    windows.push_back(EnergyWindow{true, kWatts * seconds[i], seconds[i], steps[i]});
    joules_per_step += kWatts * seconds[i] / steps[i];
  }
  const EnergyWindow op_by_op = OneStepOfEach(windows);
  ASSERT_TRUE(op_by_op.valid);
  EXPECT_EQ(op_by_op.steps, 1);
  EXPECT_NEAR(op_by_op.Watts(), kWatts, 1e-9 * kWatts);
  EXPECT_NEAR(op_by_op.JoulesPerStep(), joules_per_step, 1e-12);
  // The layer's figures: 25 ms op by op (the medians); power from the windows.
  const EnergyWindow layer{true, 7.0, 0.01, 1};  // 7 J in 10 ms: 700 W
  const EnergyFigures f = EnergyOf(layer, 10, op_by_op, 25, "op by op");
  ASSERT_TRUE(f.serial_valid);
  EXPECT_NEAR(f.serial_watts, kWatts, 1e-9 * kWatts);
  EXPECT_DOUBLE_EQ(f.serial_joules, op_by_op.joules);
  EXPECT_DOUBLE_EQ(f.serial_ms, 25);
  EXPECT_EQ(f.note, "");  // the same power
  // One window without a counter, or without steps: no figure.
  windows.push_back(EnergyWindow{});
  EXPECT_FALSE(OneStepOfEach(windows).valid);
  EXPECT_FALSE(OneStepOfEach({}).valid);
  EXPECT_FALSE(OneStepOfEach({EnergyWindow{true, 1, 1, 0}}).valid);
}

// A counter that moves every 100 ms bounds each window's joules by one
// period's energy at the window's power: as a fraction, period / window,
// whatever the window's length; summed windows add their bounds.
TEST(EnergyFiguresTest, TheCounterPeriodBoundsEachFigure) {
  SteppingCounter counter;
  engine::HostEngineOptions options;
  options.device_count = 2;
  options.energy_counter = [&counter](int device) { return counter.Read(device); };
  options.energy_counter_period = absl::Milliseconds(100);
  std::unique_ptr<engine::Engine> engine = std::move(engine::CreateHostEngine(options)).value();
  std::optional<EnergyMeter> meter = EnergyMeter::Start(*engine, {0, 1});
  ASSERT_TRUE(meter.has_value());
  absl::SleepFor(absl::Milliseconds(2));
  const EnergyWindow w = meter->Finish(4);
  ASSERT_TRUE(w.valid);
  EXPECT_DOUBLE_EQ(w.joules, 2 * kJoulesPerRead);
  EXPECT_DOUBLE_EQ(w.period_s, 0.1);
  EXPECT_NEAR(w.error_joules / w.joules, 0.1 / w.seconds, 1e-9);
  const EnergyFigures f = EnergyOf(w, 1, EnergyWindow{}, 0);
  EXPECT_NEAR(f.step_error, 0.1 / w.seconds, 1e-9);
  EXPECT_DOUBLE_EQ(f.counter_period_ms, 100);

  // Op by op: each window's bound per step, summed, over the joules per step.
  const EnergyWindow a{true, 70, 1.0, 10, 7, 0.1};   // 7 J a step, within 0.7 J
  const EnergyWindow b{true, 35, 0.05, 5, 35, 0.1};  // 7 J a step, within 7 J
  const EnergyWindow ops = OneStepOfEach({a, b});
  EXPECT_DOUBLE_EQ(ops.joules, 14);
  EXPECT_DOUBLE_EQ(ops.error_joules, 0.7 + 7);
  const EnergyFigures layer = EnergyOf(a, 100, ops, 200, "op by op");
  EXPECT_NEAR(layer.step_error, 0.1, 1e-12);
  EXPECT_NEAR(layer.serial_error, 7.7 / 14, 1e-12);
  // More power within the bounds is not "more power".
  const EnergyWindow hot{true, 80, 0.1, 10, 16, 0.1};  // 800 W, within 20%
  EXPECT_EQ(EnergyOf(hot, 10, EnergyWindow{true, 70, 0.1, 5}, 20).note, "");
  EXPECT_THAT(EnergyOf(EnergyWindow{true, 80, 0.1, 10}, 10, EnergyWindow{true, 70, 0.1, 5}, 20).note,
              HasSubstr("more power"));
}

TEST(EnergyFiguresTest, TheNoteNamesWhatTheStepIsComparedWith) {
  const EnergyWindow step{true, 30, 0.1, 10};  // 300 W, 10 ms a step
  const EnergyWindow ops{true, 40, 0.2, 10};   // 200 W
  EXPECT_THAT(EnergyOf(step, 10, ops, 20, "op by op").note,
              HasSubstr("(300 W vs 200 W op by op): 3 J per step vs 4 J op by op"));
}

TEST(EnergyFiguresTest, BackToBackSumsOneStepOfEach) {
  const EnergyWindow gemm{true, 20, 0.2, 4};  // 5 J, 50 ms a step
  const EnergyWindow comm{true, 6, 0.1, 2};   // 3 J, 50 ms a step
  const EnergyWindow both = BackToBack(gemm, comm);
  ASSERT_TRUE(both.valid);
  EXPECT_EQ(both.steps, 1);
  EXPECT_DOUBLE_EQ(both.joules, 8);
  EXPECT_DOUBLE_EQ(both.Watts(), 80);
  EXPECT_FALSE(BackToBack(gemm, EnergyWindow{}).valid);
  EnergyWindow sum;
  sum.Add(gemm);
  sum.Add(comm);
  EXPECT_DOUBLE_EQ(sum.JoulesPerStep(), 26.0 / 6);
  EXPECT_DOUBLE_EQ(JoulesPerTflop(2, 4e12), 0.5);
  EXPECT_EQ(JoulesPerTflop(2, 0), 0);
}

}  // namespace
}  // namespace overlap::runner
