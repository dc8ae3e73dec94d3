// Admission's memory estimate of a job with a layer step (layer_memory.h,
// JobBytesOf): every op's buffers at once, less the inputs the step aliases to
// their producers' outputs, by the step's own edge rule. Expected bytes are
// worked out by hand from the ops' local shapes; on the host backend, whose
// devices count every byte, the step fits in exactly that estimate.
#include "server/runner/layer_memory.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/graph_parser.h"
#include "server/engine/host/host_engine.h"
#include "server/runner/job_runner.h"
#include "tests/job_result_util.h"

namespace overlap::runner {
namespace {

// fc1 (ag_gemm 128 x 64 x `fc1_n`) -> fc2 (gemm_rs 128 x 128 x 64), bf16 at
// tp 2, serial over p2p (one candidate schedule each). `edge` is fc2's graph
// keys after its shape: "input: fc1" (an alias), "" (seeded inputs), or
// "input: fc1, activation: swiglu" (a fused pass, with fc1_n 256).
JobSpec TwoOps(const std::string& edge, int fc1_n = 128) {
  const std::string text = absl::StrCat(
      "name: memory\ndtype: bf16\niterations: 1\nwarmup: 0\ntimeline: false\nops:\n"
      "  - {id: fc1, type: ag_gemm, m: 128, k: 64, n: ",
      fc1_n,
      ", mode: serial, transport: p2p}\n"
      "  - {id: fc2, type: gemm_rs, m: 128, k: 128, n: 64, mode: serial, transport: p2p",
      edge.empty() ? "" : ", ", edge, "}\n");
  absl::StatusOr<JobSpec> spec = ParseJobSpec(text);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : JobSpec{};
}

constexpr int64_t kBf16 = 2;
// Per rank at tp 2, in elements. fc1 (ag_gemm, n 128): A shard 64 x 64, W
// 64 x 64, Y 128 x 64, the gathered A 128 x 64 and its spare beside the GEMM
// alone 128 x 64.
constexpr int64_t kFc1 = 64 * 64 + 64 * 64 + 128 * 64 + 128 * 64 + 128 * 64;
// fc1 with n 256 (before a SwiGLU): W 64 x 128, Y 128 x 128.
constexpr int64_t kFc1Wide = 64 * 64 + 64 * 128 + 128 * 128 + 128 * 64 + 128 * 64;
// fc2 (gemm_rs): A 128 x 64, W 64 x 64, Y 64 x 64, the full partial 128 x 64,
// one receive slot 64 x 64 and the spare 128 x 64.
constexpr int64_t kFc2Input = 128 * 64;
constexpr int64_t kFc2 = kFc2Input + 64 * 64 + 64 * 64 + 128 * 64 + 64 * 64 + 128 * 64;

TEST(LayerMemoryTest, AnAliasedInputIsNotCounted) {
  const int64_t seeded = LayerStepBytesPerDevice(TwoOps(""), 2);
  EXPECT_EQ(seeded, (kFc1 + kFc2) * kBf16);  // 139264
  // fc1's Y (128 x 64 per rank) is fc2's A as its schedules read it.
  const int64_t aliased = LayerStepBytesPerDevice(TwoOps("input: fc1"), 2);
  EXPECT_EQ(aliased, (kFc1 + kFc2 - kFc2Input) * kBf16);  // 122880
  EXPECT_EQ(aliased, seeded - kFc2Input * kBf16);
}

TEST(LayerMemoryTest, ASwigluEdgeKeepsItsInput) {
  // The fused pass writes fc2's own A: nothing is shared.
  EXPECT_EQ(LayerStepBytesPerDevice(TwoOps("input: fc1, activation: swiglu", 256), 2),
            (kFc1Wide + kFc2) * kBf16);  // 163840
  EXPECT_EQ(LayerStepBytesPerDevice(TwoOps("input: fc1, activation: swiglu", 256), 2),
            LayerStepBytesPerDevice(TwoOps("", 256), 2));
}

TEST(LayerMemoryTest, TheJobNeedsItsLargestOpAndHoldsTheStepAtMost) {
  const JobBytes bytes = JobBytesOf(TwoOps("input: fc1"), 2);
  EXPECT_EQ(bytes.required, kFc2 * kBf16);  // the larger op alone
  EXPECT_EQ(bytes.peak, (kFc1 + kFc2 - kFc2Input) * kBf16);
  EXPECT_EQ(JobBytesPerDevice(TwoOps("input: fc1"), 2), bytes.peak);
  // Without a layer step the ops run one at a time.
  JobSpec alone = TwoOps("input: fc1");
  alone.layer_step = false;
  EXPECT_EQ(JobBytesOf(alone, 2).peak, kFc2 * kBf16);
}

// Host devices of `bytes` each run the job: whether it had its layer step.
bool RunsTheLayerStep(const JobSpec& spec, int64_t bytes) {
  engine::HostEngineOptions options;
  options.device_count = 2;
  options.device_memory_bytes = bytes;
  auto engine = std::move(engine::CreateHostEngine(options)).value();
  absl::StatusOr<v1::JobResult> result = RunJobResult(*engine, spec, {0, 1}, {}, nullptr);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() && result->has_layer_step();
}

// What the step allocates is the estimate, to the byte: the step fits in it
// and not in a byte less (the runner then skips the step, with a note).
TEST(LayerMemoryTest, TheStepFitsInTheEstimateAndNotInLess) {
  for (const JobSpec& spec :
       {TwoOps("input: fc1"), TwoOps("input: fc1, activation: swiglu", 256)}) {
    const int64_t estimate = JobBytesPerDevice(spec, 2);
    SCOPED_TRACE(estimate);
    EXPECT_TRUE(RunsTheLayerStep(spec, estimate));
    EXPECT_FALSE(RunsTheLayerStep(spec, estimate - 1));
  }
}

}  // namespace
}  // namespace overlap::runner
