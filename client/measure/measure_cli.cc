// The rows of the commands that measure: `bench` (the op sweep; with --peers
// the gradient all-reduces across daemons) and `commbench` (the collectives
// alone; with --peers the all-reduce across daemons), whose options' text is
// parsed after CLI11 is done (shapes, a graph file, byte sizes); and `check`
// (a slow GPU or link).
#include "client/measure/measure_cli.h"

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/core/command_io.h"
#include "client/measure/bench.h"
#include "client/measure/check.h"
#include "client/measure/cluster_check.h"
#include "client/measure/commbench.h"
#include "client/measure/grad_bench.h"
#include "client/views/views_cli.h"
#include "common/byte_size.h"

namespace overlap::client {
namespace {

// --peers (peer addresses, comma-separated), which the options in `local_only`,
// declared before it, do not go with.
CLI::Option* AddPeersOption(CLI::App& app, std::vector<std::string>& peers, const char* help,
                            std::initializer_list<const char*> local_only) {
  CLI::Option* option = app.add_option("--peers", peers, help)->delimiter(',');
  for (const char* flag : local_only) option->excludes(app.get_option(flag));
  AddPeersOnlyRefusal(app);
  return option;
}

struct BenchCliOptions {
  BenchOptions bench;
  std::string shapes;  // op:MxKxN,...; empty: the standard sweep (or the graph's)
  std::string graph;   // a layer graph file whose shapes to sweep
  std::string json_out;
  bool no_verify = false;
  bool use_tuned = false;
  // --peers: the gradient all-reduces across daemons instead of the op sweep.
  GradBenchOptions grads;
  std::string grad_sizes;  // 1MiB,4MiB,...; empty: DefaultGradSizes
  std::string gemm;        // MxKxN; empty: DefaultGradGemm
};

struct CommBenchCliOptions {
  CommBenchOptions comm;
  std::string min_bytes = "1MiB";
  std::string max_bytes = "1GiB";
  std::string json_out;
  bool no_verify = false;
};

struct CheckCliOptions {
  CheckOptions check;
  bool no_links = false;
  ClusterViewOptions nodes;
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
  app.add_option("--devices", bench.devices,
                 "the TP group, e.g. 0,1,2,3 (default: every device); with --peers each node's")
      ->delimiter(',');
  app.add_option("--json-out", options.json_out, "also write the JSON report to this file");
  app.add_flag("--torch-peers", options.bench.torch_peers,
               "after the sweep, time PyTorch's serial NCCL + cuBLAS and async TP at the same "
               "shapes on the same GPUs (torchrun bench/peers/torch_tp.py), beside overlapd's "
               "figures; export --format torchtitan --bench answers from them");
  app.add_option("--html", options.bench.html_file,
                 "also write the charts (step against ideal and serial, hidden %, predicted beside "
                 "measured) to this self-contained HTML page");
  // bench --peers: the gradient all-reduces across daemons. The sweep's own
  // options do not apply there.
  GradBenchOptions& grads = options.grads;
  CLI::Option* peers = AddPeersOption(
      app, grads.nodes,
      "time the data-parallel gradient all-reduces across these daemons (peer addresses, this "
      "one's among them) in a layer step beside GEMMs: whole, bucketed and chunked, instead of "
      "the op sweep",
      {"--shapes", "--graph", "--transport", "--chunks", "--repeats", "--peak-tflops",
       "--use-tuned", "--head-start"});
  app.add_option("--grad-sizes", options.grad_sizes,
                 "each rank's gradients, e.g. 1MiB,4MiB,16MiB,64MiB (the default; on the host "
                 "backend 256KiB,1MiB,4MiB)")
      ->needs(peers);
  app.add_option("--gemm", options.gemm,
                 "the GEMMs standing in for the backward, MxKxN global (n splits over each "
                 "node's devices; default 8192x8192x8192, on the host backend 256x256x256)")
      ->needs(peers);
  app.add_option("--gemms-per-grad", grads.gemms_per_grad,
                 "GEMMs before each gradient's all-reduce (and after the last)")
      ->needs(peers)
      ->capture_default_str();
  app.add_option("--bucket-mib", grads.bucket_mib, "the bucketed form's buckets")
      ->needs(peers)
      ->capture_default_str();
  app.add_option("--chunk-kib", grads.chunk_kib, "the chunked form's pieces")
      ->needs(peers)
      ->capture_default_str();
}

int RunGradBenchCommand(const BenchCliOptions& options, const CliContext& context) {
  GradBenchOptions grads = options.grads;
  const BenchOptions& bench = options.bench;
  grads.devices = bench.devices;
  grads.dtype = bench.dtype;
  grads.iterations = bench.iterations;
  grads.warmup = bench.warmup;
  grads.seed = bench.seed;
  grads.verify = !options.no_verify;
  if (!options.grad_sizes.empty()) {
    absl::StatusOr<std::vector<int64_t>> sizes = ParseGradSizes(options.grad_sizes);
    if (!sizes.ok()) return UsageError(sizes.status(), context.err);
    grads.grad_bytes = *sizes;
  }
  if (!options.gemm.empty() &&
      !ParseShapeDims(options.gemm, &grads.gemm.m, &grads.gemm.k, &grads.gemm.n)) {
    context.err << "overlapctl: --gemm: \"" << options.gemm << "\" is not MxKxN\n";
    return kExitUsage;
  }
  return RunGradBench(context.client, grads, options.json_out, context.json, context.err_is_tty,
                      context.out, context.err);
}

int RunBenchCommand(const BenchCliOptions& options, const CLI::App& app,
                    const CliContext& context) {
  if (!options.grads.nodes.empty()) return RunGradBenchCommand(options, context);
  BenchOptions bench = options.bench;
  bench.verify = !options.no_verify;
  bench.retune = !options.use_tuned;
  if (!options.shapes.empty()) {
    absl::StatusOr<std::vector<BenchShape>> shapes = ParseBenchShapes(options.shapes);
    if (!shapes.ok()) return UsageError(shapes.status(), context.err);
    bench.shapes = *shapes;
  }
  if (!options.graph.empty()) {
    // --dtype and --devices, when given, win over the graph's.
    absl::StatusOr<std::string> text = ReadGraphFile(options.graph);
    absl::StatusOr<GraphBench> from_graph =
        text.ok() ? BenchFromGraph(*text, options.graph) : text.status();
    if (!from_graph.ok()) return UsageError(from_graph.status(), context.err);
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
  app.add_option("--devices", comm.devices,
                 "the group, e.g. 0,1 (default: every device); with --peers each node's")
      ->delimiter(',');
  AddPeersOption(app, comm.nodes,
                 "across these daemons (peer addresses, this one's among them): the "
                 "all_reduce over each tp rank's dp group, over the world flat and "
                 "hierarchical (on the host backend sizes 64KiB to 4MiB by default)",
                 {"--collectives", "--transports", "--algorithms"});
  app.add_option("--dtype", comm.dtype, "bf16 | fp16 | fp32")->capture_default_str();
  app.add_option("--iterations", comm.iterations, "timed iterations per size")
      ->capture_default_str();
  app.add_option("--warmup", comm.warmup, "warm-up iterations per size")->capture_default_str();
  app.add_flag("--no-verify", options.no_verify, "skip the float64 verification");
  app.add_option("--json-out", options.json_out, "also write the JSON report to this file");
  app.add_option("--html", options.comm.html_file,
                 "also write bus bandwidth against message size, per collective, to this "
                 "self-contained HTML page");
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
  comm.min_bytes_given = app.count("--min-bytes") > 0;
  if (!comm.nodes.empty()) {  // across daemons: the all_reduce over NCCL (Gloo on host) only
    comm.collectives = {"all_reduce"};
    comm.transports = {"nccl"};
  }
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

CliCommand CheckCommand() {
  return MakeCliCommand<CheckCliOptions>(
      "check",
      "find a slow GPU or link: the same GEMM on every GPU at once, then an all-gather "
      "over every pair (exit 1 when something is slow)",
      [](CLI::App& app, CheckCliOptions& options) {
        CheckOptions& check = options.check;
        app.add_option("--devices", check.devices, "GPUs to check, e.g. 0,1,2,3 (default: all)")
            ->delimiter(',');
        app.add_option("--gemm-size", check.gemm_size,
                       absl::StrCat("m = k = n of each GPU's bf16 GEMM (default: ", check.gemm_size,
                                    "; ", kHostCheckGemmSize, " on the host backend)"))
            ->check(CLI::Range(int64_t{16}, int64_t{65536}));
        app.add_option(
               "--link-mib", check.link_mib,
               absl::StrCat("MiB per rank in each pair's all-gather (default: ", check.link_mib,
                            "; ", kHostCheckLinkMib, " on the host backend)"))
            ->check(CLI::Range(int64_t{1}, int64_t{16384}));
        app.add_option("--iterations", check.iterations, "timed iterations per job")
            ->check(CLI::Range(1, 10000))
            ->capture_default_str();
        app.add_flag("--no-links", options.no_links, "check the GPUs only");
        AddNodesOptions(app, options.nodes);
      },
      [](const CheckCliOptions& options, const CLI::App& app, const CliContext& context) {
        CheckOptions check = options.check;
        check.links = !options.no_links;
        // A host backend gets smaller sizes, but only those the user left alone.
        check.gemm_size_given = app.count("--gemm-size") > 0;
        check.link_mib_given = app.count("--link-mib") > 0;
        if (!options.nodes.given()) {
          return RunCheck(context.client, check, context.json, context.out, context.err);
        }
        return WithNodes(app, options.nodes, context, [&](std::vector<NodeClient>& nodes) {
          return RunClusterCheck(nodes, check, context.json, context.out, context.err);
        });
      });
}

}  // namespace overlap::client
