// Chains on real GPUs: the MLP block with fc2 reading fc1's output through
// SwiGLU (the elementwise kernel, and in fp8 its cast to E4M3), checked
// against float64 of the whole chain after a layer iteration, over every
// visible GPU (OVERLAP_TEST_RANKS_PER_GPU=2: two ranks on one), and the
// Llama-70B block (deploy/graphs/llama70b-mlp.yaml) at one rank. Prints what
// the elementwise kernels cost beside the GEMMs. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "common/graph_parser.h"
#include "server/cuda/cuda_engine.h"
#include "server/runner/job_runner.h"
#include "tests/gpu_ranks_util.h"
#include "tests/job_result_util.h"

namespace overlap::runner {
namespace {

class ChainGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto engine = CreateTestCudaEngine(int64_t{16} << 30);
    if (!engine.ok()) GTEST_SKIP() << "no GPU visible: " << engine.status().message();
    engine_ = std::move(*engine);
    for (int d = 0; d < engine_->DeviceCount(); ++d) devices_.push_back(d);
  }
  void TearDown() override { engine_.reset(); }

  // Runs `spec`, checks its one chain and prints its figures.
  void RunChain(const JobSpec& spec, const std::vector<int>& devices) {
    auto result = RunJobResult(*engine_, spec, devices, {}, nullptr);
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->layer_chains_size(), 1);
    const v1::LayerChainCheck& chain = result->layer_chains(0);
    EXPECT_EQ(chain.chain(), "fc1 -swiglu-> fc2");
    EXPECT_GT(chain.max_rel_error(), 0);
    EXPECT_LE(chain.max_rel_error(), chain.tolerance());
    double elementwise_ms = 0, gemm_ms = 0;
    int kernels = 0;
    for (const v1::TimelineSpan& span : result->layer_timeline().spans()) {
      if (span.rank() != 0) continue;
      const double ms = span.end_ms() - span.start_ms();
      if (span.kind() == "elementwise") {
        elementwise_ms += ms;
        ++kernels;
      }
      if (span.kind() == "gemm") gemm_ms += ms;
    }
    EXPECT_GT(kernels, 0);
    std::printf(
        "chain %s %s over %zu rank(s): max error %.2e (tolerance %.2e); layer step %.3f ms, op by "
        "op %.3f ms; rank 0 traced: %d elementwise kernel(s) %.3f ms beside GEMMs %.3f ms\n",
        spec.name.c_str(), DTypeName(spec.dtype).c_str(), devices.size(), chain.max_rel_error(),
        chain.tolerance(), result->layer_step().median_ms(), result->total_step_ms(), kernels,
        elementwise_ms, gemm_ms);
  }

  std::unique_ptr<engine::Engine> engine_;
  std::vector<int> devices_;
};

JobSpec MlpBlock(int tp, DType dtype) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(
      absl::StrCat("name: mlp-chain\niterations: 5\nwarmup: 2\nops:\n"
                   "  - {id: fc1, type: ag_gemm, m: ",
                   1024 * tp, ", k: 1024, n: ", 4096 * tp,
                   ", mode: serial, transport: nccl}\n"
                   "  - {id: fc2, type: gemm_rs, m: ",
                   1024 * tp, ", k: ", 2048 * tp,
                   ", n: 1024, mode: serial, transport: nccl, input: fc1, activation: swiglu}\n"));
  spec->dtype = dtype;
  return *spec;
}

TEST_F(ChainGpuTest, MlpBlockVerifiesEndToEndOnEveryRank) {
  const int tp = static_cast<int>(devices_.size());
  for (const DType dtype : {DType::kBF16, DType::kFP8}) {
    SCOPED_TRACE(DTypeName(dtype));
    RunChain(MlpBlock(tp, dtype), devices_);
  }
}

// A GPT-style MLP at one rank: fc1's GEMM writes gelu(fc1) into fc2's input
// in cuBLASLt's GELU_AUX epilogue (its own output beside it), so the step has
// no elementwise kernel; the chain verifies against float64 in bf16 and fp16.
TEST_F(ChainGpuTest, GeluRunsInTheGemmEpilogueAtOneRank) {
  for (const DType dtype : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    absl::StatusOr<JobSpec> spec = ParseJobSpec(
        "name: gelu-chain\niterations: 5\nwarmup: 2\nops:\n"
        "  - {id: fc1, type: ag_gemm, m: 2048, k: 1024, n: 4096, mode: serial, transport: nccl}\n"
        "  - {id: fc2, type: gemm_rs, m: 2048, k: 4096, n: 1024, mode: serial, transport: nccl, "
        "input: fc1, activation: gelu}\n");
    ASSERT_TRUE(spec.ok()) << spec.status();
    spec->dtype = dtype;
    auto result = RunJobResult(*engine_, *spec, {0}, {}, nullptr);
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->ops_size(), 2);
    EXPECT_EQ(result->ops(1).edge(), "epilogue gelu");
    ASSERT_EQ(result->layer_chains_size(), 1);
    const v1::LayerChainCheck& chain = result->layer_chains(0);
    EXPECT_EQ(chain.chain(), "fc1 -gelu-> fc2");
    EXPECT_GT(chain.max_rel_error(), 0);
    EXPECT_LE(chain.max_rel_error(), chain.tolerance());
    int elementwise = 0;
    for (const v1::TimelineSpan& span : result->layer_timeline().spans()) {
      elementwise += span.kind() == "elementwise" ? 1 : 0;
    }
    EXPECT_EQ(elementwise, 0);
    EXPECT_EQ(result->layer_activation_ms(), 0);
    std::printf(
        "gelu epilogue %s: max error %.2e (tolerance %.2e); layer step %.3f ms, op by op "
        "%.3f ms\n",
        DTypeName(dtype).c_str(), chain.max_rel_error(), chain.tolerance(),
        result->layer_step().median_ms(), result->total_step_ms());
  }
}

TEST_F(ChainGpuTest, Llama70bMlpVerifiesEndToEndAtOneRank) {
  // From the repo root (where bench/gpu_check.sh runs the bundle), else the source tree.
  const std::string graph = "deploy/graphs/llama70b-mlp.yaml";
  std::ifstream in(graph);
  if (!in) in.open(std::string(OVERLAP_SOURCE_DIR) + "/" + graph);
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<JobSpec> spec = ParseJobSpec(text.str());
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->iterations = 5;
  spec->warmup = 2;
  for (OpSpec& op : spec->ops) op.mode = OverlapMode::kSerial;
  RunChain(*spec, {0});
}

}  // namespace
}  // namespace overlap::runner
