// `bench` (the op sweep) and `commbench` (the collectives alone): options
// whose text is parsed after CLI11 is done (shapes, a graph file, byte sizes).
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/bench.h"
#include "client/cli_commands.h"
#include "client/commands.h"
#include "client/commbench.h"
#include "common/byte_size.h"

namespace overlap::client {
namespace {

struct BenchCliOptions {
  BenchOptions bench;
  std::string shapes;  // op:MxKxN,...; empty: the standard sweep (or the graph's)
  std::string graph;   // a layer graph file whose shapes to sweep
  std::string json_out;
  bool no_verify = false;
  bool use_tuned = false;
};

struct CommBenchCliOptions {
  CommBenchOptions comm;
  std::string min_bytes = "1MiB";
  std::string max_bytes = "1GiB";
  std::string json_out;
  bool no_verify = false;
};

void AddBenchOptions(CLI::App& app, BenchCliOptions& options) {
  BenchOptions& bench = options.bench;
  CLI::Option* shapes = app.add_option("--shapes", options.shapes,
                                       "op:MxKxN,... (global shapes; default: the standard sweep)");
  app.add_option("--graph", options.graph,
                 "sweep the ag_gemm, gemm_rs and gemm_ar shapes of this layer graph, in its "
                 "dtype and on its devices (- reads standard input)")
      ->excludes(shapes);
  app.add_option("--dtype", bench.dtype, "bf16 | fp16 | fp32 | fp8")->capture_default_str();
  app.add_option("--transport", bench.transport,
                 "transport auto may choose: auto | nccl | p2p | direct (serial is always "
                 "NCCL; direct narrows gemm_rs and gemm_ar only)")
      ->check(CLI::IsMember({"auto", "nccl", "p2p", "direct"}))
      ->capture_default_str();
  app.add_option("--chunks", bench.chunks,
                 "pieces for auto's chunked and ring candidates (0: its usual counts)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--iterations", bench.iterations, "timed iterations per op")
      ->capture_default_str();
  app.add_option("--warmup", bench.warmup, "warm-up iterations per op")->capture_default_str();
  app.add_option("--repeats", bench.repeats, "interleaved auto/serial repeats")
      ->capture_default_str();
  app.add_option("--seed", bench.seed, "seed of the random inputs")->capture_default_str();
  app.add_option("--peak-tflops", bench.peak_tflops,
                 "per-GPU peak for MFU (default: the dtype's dense H100/H200 SXM datasheet "
                 "peak: 989 bf16/fp16, 1979 fp8, 67 fp32)");
  app.add_flag("--no-verify", options.no_verify, "skip the float64 verification");
  app.add_flag("--use-tuned", options.use_tuned,
               "let auto answer from schedules tuned before this sweep (default: tune afresh)");
  app.add_option("--head-start", bench.head_start,
                 "what the GPUs do while the host enqueues a timed iteration: heat (the op's "
                 "GEMM, as in a training loop) | idle")
      ->check(CLI::IsMember({"heat", "idle"}))
      ->capture_default_str();
  app.add_option("--devices", bench.devices, "the TP group, e.g. 0,1,2,3 (default: every device)")
      ->delimiter(',');
  app.add_option("--json-out", options.json_out, "also write the JSON report to this file");
}

int RunBenchCommand(const BenchCliOptions& options, const CLI::App& app,
                    const CliContext& context) {
  BenchOptions bench = options.bench;
  bench.verify = !options.no_verify;
  bench.retune = !options.use_tuned;
  if (!options.shapes.empty()) {
    absl::StatusOr<std::vector<BenchShape>> shapes = ParseBenchShapes(options.shapes);
    if (!shapes.ok()) {
      context.err << "overlapctl: " << shapes.status().message() << "\n";
      return kExitUsage;
    }
    bench.shapes = *shapes;
  }
  if (!options.graph.empty()) {
    // --dtype and --devices, when given, win over the graph's.
    absl::StatusOr<std::string> text = ReadGraphFile(options.graph);
    absl::StatusOr<GraphBench> from_graph =
        text.ok() ? BenchFromGraph(*text, options.graph) : text.status();
    if (!from_graph.ok()) {
      context.err << "overlapctl: " << from_graph.status().message() << "\n";
      return kExitUsage;
    }
    bench.shapes = from_graph->shapes;
    if (app.count("--dtype") == 0) bench.dtype = from_graph->dtype;
    if (app.count("--devices") == 0) bench.devices = from_graph->devices;
  }
  // A long sweep: no per-call deadline beyond the client's default on unary calls.
  return RunBench(context.client, bench, options.json_out, context.json, context.err_is_tty,
                  context.out, context.err);
}

void AddCommBenchOptions(CLI::App& app, CommBenchCliOptions& options) {
  CommBenchOptions& comm = options.comm;
  app.add_option("--collectives", comm.collectives, "which, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--transports", comm.transports, "nccl, p2p (copy engines)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--algorithms", comm.algorithms,
                 "all_reduce also by layout: ring, tree (NCCL_ALGO over nccl; copy engines "
                 "over p2p), ps (parameter server, p2p)")
      ->delimiter(',');
  app.add_option("--min-bytes", options.min_bytes, "smallest size, e.g. 64KiB")
      ->capture_default_str();
  app.add_option("--max-bytes", options.max_bytes, "largest size")->capture_default_str();
  app.add_option("--factor", comm.factor, "each size is this many times the last")
      ->capture_default_str();
  app.add_option("--devices", comm.devices, "the group, e.g. 0,1 (default: every device)")
      ->delimiter(',');
  app.add_option("--dtype", comm.dtype, "bf16 | fp16 | fp32")->capture_default_str();
  app.add_option("--iterations", comm.iterations, "timed iterations per size")
      ->capture_default_str();
  app.add_option("--warmup", comm.warmup, "warm-up iterations per size")->capture_default_str();
  app.add_flag("--no-verify", options.no_verify, "skip the float64 verification");
  app.add_option("--json-out", options.json_out, "also write the JSON report to this file");
}

// `text` as a byte count ("64KiB"), or false after saying what is wrong with `flag`.
bool ParseByteFlag(const std::string& text, const char* flag, int64_t* bytes, std::ostream& err) {
  absl::StatusOr<int64_t> parsed = ParseByteSize(text);
  if (!parsed.ok()) {
    err << "overlapctl: " << flag << ": " << parsed.status().message() << "\n";
    return false;
  }
  *bytes = *parsed;
  return true;
}

int RunCommBenchCommand(const CommBenchCliOptions& options, const CLI::App& app,
                        const CliContext& context) {
  CommBenchOptions comm = options.comm;
  comm.verify = !options.no_verify;
  // A host backend gets a smaller largest size, unless the user chose one.
  comm.max_bytes_given = app.count("--max-bytes") > 0;
  if (!ParseByteFlag(options.min_bytes, "--min-bytes", &comm.min_bytes, context.err) ||
      !ParseByteFlag(options.max_bytes, "--max-bytes", &comm.max_bytes, context.err)) {
    return kExitUsage;
  }
  return RunCommBench(context.client, comm, options.json_out, context.json, context.err_is_tty,
                      context.out, context.err);
}

}  // namespace

CliCommand BenchCommand() {
  return MakeCliCommand<BenchCliOptions>("bench", "run the op benchmark sweep on the daemon",
                                         AddBenchOptions, RunBenchCommand);
}

CliCommand CommBenchCommand() {
  return MakeCliCommand<CommBenchCliOptions>(
      "commbench",
      "the collectives alone over a range of sizes, NCCL and copy engines side by side "
      "(nccl-tests' time, algbw, busbw), each checked against float64",
      AddCommBenchOptions, RunCommBenchCommand);
}

}  // namespace overlap::client
