// overlapctl: submit layer-graph jobs to overlapd, follow them, print reports.
#include <grpc/support/log.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <tuple>

#include "CLI/CLI.hpp"
#include "client/bench.h"
#include "client/check.h"
#include "client/commands.h"
#include "client/commbench.h"
#include "client/daemon_client.h"
#include "client/graph_command.h"
#include "client/top.h"
#include "client/tuning.h"
#include "common/byte_size.h"
#include "common/config.h"

namespace {

// gRPC core's own log lines (a failed TLS handshake, in its format) say what
// overlapctl's error message says again; GRPC_VERBOSITY brings them back.
void QuietGrpcCore() {
  if (std::getenv("GRPC_VERBOSITY") == nullptr) gpr_set_log_function([](gpr_log_func_args*) {});
}

std::string FromEnv(const char* name) {
  const char* env = std::getenv(name);
  return env != nullptr ? env : "";
}

std::string DefaultAddress() {
  const std::string env = FromEnv("OVERLAPD_ADDR");
  return !env.empty() ? env : overlap::DefaultClientAddress();
}

}  // namespace

int main(int argc, char** argv) {
  using overlap::client::Commands;

  QuietGrpcCore();
  CLI::App app{"overlapctl: submit layer-graph jobs to overlapd and read their reports"};
  app.fallthrough();  // --addr/--json may follow the command
  app.require_subcommand(1);
  std::string address = DefaultAddress();
  bool json = false;
  app.add_option("--addr", address, "overlapd address: unix:/path or host:port (env OVERLAPD_ADDR)")
      ->capture_default_str();
  app.add_flag("--json", json, "print the protobuf JSON form instead of text");
  overlap::client::ClientTls tls{FromEnv("OVERLAPD_TLS_CA"), FromEnv("OVERLAPD_TLS_CERT"),
                                 FromEnv("OVERLAPD_TLS_KEY"), ""};
  app.add_option("--tls-ca", tls.ca_file,
                 "TLS: PEM CA that signed overlapd's certificate (env OVERLAPD_TLS_CA)");
  app.add_option("--tls-cert", tls.cert_file,
                 "TLS: PEM client certificate, for mutual TLS (env OVERLAPD_TLS_CERT)");
  app.add_option("--tls-key", tls.key_file,
                 "TLS: PEM private key of --tls-cert (env OVERLAPD_TLS_KEY)");
  app.add_option("--tls-server-name", tls.server_name,
                 "TLS: name to check overlapd's certificate against (default: the host)");

  std::string file, id, state;
  bool wait = false;
  int limit = 0;
  CLI::App* submit = app.add_subcommand("submit", "submit a layer graph (YAML or JSON file)");
  submit->add_option("FILE", file, "graph file; - reads standard input")->required();
  submit->add_flag("--wait", wait, "follow the job and print its report");
  CLI::App* get = app.add_subcommand("get", "show one job");
  get->add_option("ID", id, "job id")->required();
  CLI::App* list = app.add_subcommand("list", "list jobs, newest first");
  list->add_option("--state", state, "only jobs in this state (queued, running, ...)");
  list->add_option("--limit", limit, "at most this many jobs (0 = all)");
  CLI::App* cancel = app.add_subcommand("cancel", "cancel a queued or running job");
  cancel->add_option("ID", id, "job id")->required();
  CLI::App* watch = app.add_subcommand("watch", "follow a job to its end, then print its report");
  watch->add_option("ID", id, "job id")->required();
  CLI::App* node = app.add_subcommand("node", "show the daemon's backend and devices");
  CLI::App* stats = app.add_subcommand("stats", "show job counts and device usage");
  CLI::App* health = app.add_subcommand(
      "health",
      "the GPUs' health now, from NVML: PCIe link, NVLinks, ECC errors, row remaps, Xids "
      "(exit 1 when a GPU has a problem; no jobs run)");
  int forget_xids_device = -1;
  health
      ->add_option("--forget-xids", forget_xids_device,
                   "set this GPU's Xid counts of this boot back to 0 (after resetting it)")
      ->check(CLI::NonNegativeNumber);
  overlap::client::CheckOptions check_options;
  bool no_links = false;
  CLI::App* check = app.add_subcommand(
      "check",
      "find a slow GPU or link: the same GEMM on every GPU at once, then an all-gather "
      "over every pair (exit 1 when something is slow)");
  check
      ->add_option("--devices", check_options.devices, "GPUs to check, e.g. 0,1,2,3 (default: all)")
      ->delimiter(',');
  check->add_option("--gemm-size", check_options.gemm_size, "m = k = n of each GPU's bf16 GEMM")
      ->check(CLI::Range(int64_t{16}, int64_t{65536}))
      ->capture_default_str();
  check->add_option("--link-mib", check_options.link_mib, "MiB per rank in each pair's all-gather")
      ->check(CLI::Range(int64_t{1}, int64_t{16384}))
      ->capture_default_str();
  check->add_option("--iterations", check_options.iterations, "timed iterations per job")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  check->add_flag("--no-links", no_links, "check the GPUs only");
  overlap::client::TopOptions top_options;
  CLI::App* top = app.add_subcommand(
      "top",
      "live view of the GPUs, one line each per sample: clocks, temperature, power, "
      "utilization, memory, and the job, op and last step there");
  top->add_option("--interval", top_options.interval_s, "seconds between samples")
      ->check(CLI::Range(0.05, 3600.0))
      ->capture_default_str();
  top->add_option("--count", top_options.count, "samples to print (0: until interrupted)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  CLI::App* report = app.add_subcommand("report", "print the report of a finished job");
  report->add_option("ID", id, "job id")->required();
  std::string pin_out;
  CLI::App* pin = app.add_subcommand(
      "pin", "a job's graph with every op set to the schedule it ran (YAML), to submit again");
  pin->add_option("ID", id, "job id")->required();
  pin->add_option("-o,--output", pin_out, "write it to this file instead of standard output");
  std::string timeline_op, timeline_out;
  int timeline_width = 100;
  bool timeline_spans = false;
  CLI::App* timeline = app.add_subcommand(
      "timeline",
      "where each op's traced iteration spent its time: GEMMs, transfers and waits per rank "
      "and stream");
  timeline->add_option("ID", id, "job id")->required();
  timeline->add_option("--op", timeline_op, "this op only");
  timeline->add_option("--width", timeline_width, "chart width in characters")
      ->check(CLI::Range(10, 1000))
      ->capture_default_str();
  timeline->add_flag("--spans", timeline_spans,
                     "list every span, however many (by default up to 64 per timeline)");
  timeline->add_option(
      "-o,--output", timeline_out,
      "also write a Chrome trace (chrome://tracing, ui.perfetto.dev) to this file");
  std::string id_b;
  CLI::App* compare = app.add_subcommand(
      "compare", "two finished jobs op by op: schedules, steps and B's change against A");
  compare->add_option("A", id, "job id")->required();
  compare->add_option("B", id_b, "job id")->required();
  std::string tuning_op, tuning_shape;
  bool tuning_stale = false, tuning_all = false;
  CLI::App* tuning = app.add_subcommand(
      "tuning", "the schedules autotune chose and kept: list them, or forget them to re-tune");
  tuning->require_subcommand(1);
  CLI::App* tuning_list = tuning->add_subcommand("list", "list the tuned schedules");
  CLI::App* tuning_forget = tuning->add_subcommand(
      "forget", "forget tuned schedules: the next job with such an op tunes it again");
  for (CLI::App* sub : {tuning_list, tuning_forget}) {
    sub->add_option("--op", tuning_op, "only this op type, e.g. gemm_rs");
    sub->add_option("--shape", tuning_shape, "only this global shape, MxKxN");
    sub->add_flag("--stale", tuning_stale,
                  "only those no job here can use (another build, GPU, driver, library)");
  }
  tuning_forget->add_flag("--all", tuning_all, "every one (needed when nothing else is named)");
  overlap::client::BenchOptions bench_options;
  std::string bench_shapes, bench_graph, bench_json;
  bool no_verify = false;
  overlap::client::GraphCommandOptions graph_options;
  CLI::App* graph = app.add_subcommand(
      "graph", "write a layer graph from a model's dimensions (YAML for submit or bench --graph)");
  graph->add_option("--model", graph_options.model,
                    "a known model (--list-models), e.g. llama3-70b; the flags below change it");
  graph->add_flag("--list-models", graph_options.list_models, "list the known models");
  graph->add_option("--config", graph_options.config,
                    "a Hugging Face config.json: the model's dimensions from it");
  graph->add_option("--name", graph_options.name, "the model's name, which starts the graph's");
  graph->add_option("--hidden", graph_options.dims.hidden, "hidden size");
  graph->add_option("--ffn", graph_options.dims.ffn, "the MLP's intermediate size");
  graph->add_option("--heads", graph_options.dims.heads, "query heads");
  graph->add_option("--kv-heads", graph_options.dims.kv_heads,
                    "key/value heads (grouped-query attention; default: --heads)");
  graph->add_option("--head-dim", graph_options.dims.head_dim, "head size (default: hidden/heads)");
  graph->add_option("--mlp", graph_options.mlp,
                    "gated (SwiGLU: fc1 is 2 x ffn wide) | plain (default: the model's; gated)");
  graph->add_option("--tp", graph_options.tp,
                    "tensor-parallel size (default: --devices, else every GPU the daemon has)");
  graph->add_option("--devices", graph_options.devices, "the TP group, e.g. 0,1")->delimiter(',');
  graph->add_option("--seq", graph_options.seq, "sequence length")->capture_default_str();
  graph->add_option("--micro-batch", graph_options.micro_batch, "sequences per micro-batch")
      ->capture_default_str();
  graph->add_option("--layers", graph_options.layers,
                    "decoder layers, one after another (a layer's deferred gradient all-reduces "
                    "then run beside the next one's backward)")
      ->capture_default_str();
  bool no_sp = false;
  graph->add_flag("--no-sp", no_sp,
                  "no sequence parallelism: column-parallel ops are plain GEMMs, row-parallel "
                  "ones gemm_ar");
  graph->add_option("--pass", graph_options.pass, "forward | backward | both")
      ->capture_default_str();
  graph->add_flag("--grads", graph_options.grads,
                  "backward: add each weight gradient's data-parallel all-reduce (deferred)");
  graph->add_option("--dtype", graph_options.dtype, "bf16 | fp16 | fp32 | fp8")
      ->capture_default_str();
  graph->add_option("-o,--output", graph_options.output, "write it to this file");

  CLI::App* bench = app.add_subcommand("bench", "run the op benchmark sweep on the daemon");
  CLI::Option* shapes_option = bench->add_option(
      "--shapes", bench_shapes, "op:MxKxN,... (global shapes; default: the standard sweep)");
  bench
      ->add_option("--graph", bench_graph,
                   "sweep the ag_gemm, gemm_rs and gemm_ar shapes of this layer graph, in its "
                   "dtype and on its devices (- reads standard input)")
      ->excludes(shapes_option);
  CLI::Option* dtype_option =
      bench->add_option("--dtype", bench_options.dtype, "bf16 | fp16 | fp32 | fp8")
          ->capture_default_str();
  bench->add_option("--transport", bench_options.transport,
                    "transport auto may choose: auto | nccl | p2p | direct (serial is always "
                    "NCCL; direct narrows gemm_rs and gemm_ar only)")
      ->check(CLI::IsMember({"auto", "nccl", "p2p", "direct"}))
      ->capture_default_str();
  bench
      ->add_option("--chunks", bench_options.chunks,
                   "pieces for auto's chunked and ring candidates (0: its usual counts)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  bench->add_option("--iterations", bench_options.iterations, "timed iterations per op")
      ->capture_default_str();
  bench->add_option("--warmup", bench_options.warmup, "warm-up iterations per op")
      ->capture_default_str();
  bench->add_option("--repeats", bench_options.repeats, "interleaved auto/serial repeats")
      ->capture_default_str();
  bench->add_option("--seed", bench_options.seed, "seed of the random inputs")
      ->capture_default_str();
  bench->add_option("--peak-tflops", bench_options.peak_tflops,
                    "per-GPU peak for MFU (default: the dtype's dense H100/H200 SXM datasheet "
                    "peak: 989 bf16/fp16, 1979 fp8, 67 fp32)");
  bench->add_flag("--no-verify", no_verify, "skip the float64 verification");
  bool use_tuned = false;
  bench->add_flag("--use-tuned", use_tuned,
                  "let auto answer from schedules tuned before this sweep (default: tune afresh)");
  bench
      ->add_option("--head-start", bench_options.head_start,
                   "what the GPUs do while the host enqueues a timed iteration: heat (the op's "
                   "GEMM, as in a training loop) | idle")
      ->check(CLI::IsMember({"heat", "idle"}))
      ->capture_default_str();
  CLI::Option* devices_option =
      bench
          ->add_option("--devices", bench_options.devices,
                       "the TP group, e.g. 0,1,2,3 (default: every device)")
          ->delimiter(',');
  bench->add_option("--json-out", bench_json, "also write the JSON report to this file");

  overlap::client::CommBenchOptions comm_options;
  std::string comm_min = "1MiB", comm_max = "1GiB", comm_json;
  bool comm_no_verify = false;
  CLI::App* commbench = app.add_subcommand(
      "commbench",
      "the collectives alone over a range of sizes, NCCL and copy engines side by side "
      "(nccl-tests' time, algbw, busbw), each checked against float64");
  commbench->add_option("--collectives", comm_options.collectives, "which, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  commbench->add_option("--transports", comm_options.transports, "nccl, p2p (copy engines)")
      ->delimiter(',')
      ->capture_default_str();
  commbench
      ->add_option("--algorithms", comm_options.algorithms,
                   "all_reduce also by layout: ring, tree (NCCL_ALGO over nccl; copy engines "
                   "over p2p), ps (parameter server, p2p)")
      ->delimiter(',');
  commbench->add_option("--min-bytes", comm_min, "smallest size, e.g. 64KiB")
      ->capture_default_str();
  commbench->add_option("--max-bytes", comm_max, "largest size")->capture_default_str();
  commbench->add_option("--factor", comm_options.factor, "each size is this many times the last")
      ->capture_default_str();
  commbench
      ->add_option("--devices", comm_options.devices, "the group, e.g. 0,1 (default: every device)")
      ->delimiter(',');
  commbench->add_option("--dtype", comm_options.dtype, "bf16 | fp16 | fp32")->capture_default_str();
  commbench->add_option("--iterations", comm_options.iterations, "timed iterations per size")
      ->capture_default_str();
  commbench->add_option("--warmup", comm_options.warmup, "warm-up iterations per size")
      ->capture_default_str();
  commbench->add_flag("--no-verify", comm_no_verify, "skip the float64 verification");
  commbench->add_option("--json-out", comm_json, "also write the JSON report to this file");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? overlap::client::kExitOk : overlap::client::kExitUsage;
  }

  absl::StatusOr<std::unique_ptr<overlap::client::DaemonClient>> created =
      overlap::client::DaemonClient::Create(address, tls);
  if (!created.ok()) {
    std::cerr << "overlapctl: " << created.status().message() << "\n";
    return overlap::client::kExitUsage;
  }
  std::unique_ptr<overlap::client::DaemonClient> client = std::move(*created);
  Commands commands(*client, std::cout, std::cerr, isatty(STDERR_FILENO) == 1, json);
  int rc = overlap::client::kExitUsage;
  if (submit->parsed()) rc = commands.Submit(file, wait);
  if (get->parsed()) rc = commands.Get(id);
  if (list->parsed()) rc = commands.List(state, limit);
  if (cancel->parsed()) rc = commands.Cancel(id);
  if (watch->parsed()) rc = commands.Watch(id);
  if (node->parsed()) rc = commands.Node();
  if (stats->parsed()) rc = commands.Stats();
  if (health->parsed()) {
    rc = forget_xids_device >= 0 ? commands.ForgetXids(forget_xids_device) : commands.Health();
  }
  if (report->parsed()) rc = commands.Report(id);
  if (compare->parsed()) rc = commands.Compare(id, id_b);
  if (pin->parsed()) rc = commands.Pin(id, pin_out);
  if (timeline->parsed())
    rc = commands.Timeline(id, timeline_op, timeline_width, timeline_spans, timeline_out);
  if (check->parsed()) {
    check_options.links = !no_links;
    check_options.gemm_size_given = check->count("--gemm-size") > 0;
    check_options.link_mib_given = check->count("--link-mib") > 0;
    rc = overlap::client::RunCheck(*client, check_options, json, std::cout, std::cerr);
  }
  if (top->parsed()) {
    rc = overlap::client::RunTop(*client, top_options, json, std::cout, std::cerr);
  }
  if (commbench->parsed()) {
    comm_options.verify = !comm_no_verify;
    comm_options.max_bytes_given = commbench->count("--max-bytes") > 0;
    for (auto [text, flag, out] : {std::tuple{&comm_min, "--min-bytes", &comm_options.min_bytes},
                                   std::tuple{&comm_max, "--max-bytes", &comm_options.max_bytes}}) {
      absl::StatusOr<int64_t> bytes = overlap::ParseByteSize(*text);
      if (!bytes.ok()) {
        std::cerr << "overlapctl: " << flag << ": " << bytes.status().message() << "\n";
        return overlap::client::kExitUsage;
      }
      *out = *bytes;
    }
    rc = overlap::client::RunCommBench(*client, comm_options, comm_json, json,
                                       isatty(STDERR_FILENO) == 1, std::cout, std::cerr);
  }
  if (tuning->parsed()) {
    absl::StatusOr<overlap::v1::TuningFilter> filter =
        overlap::client::ParseTuningFilter(tuning_op, tuning_shape, tuning_stale);
    if (!filter.ok()) {
      std::cerr << "overlapctl: " << filter.status().message() << "\n";
      return overlap::client::kExitUsage;
    }
    rc = tuning_list->parsed()
             ? overlap::client::RunTuningList(*client, *filter, json, std::cout, std::cerr)
             : overlap::client::RunTuningForget(*client, *filter, tuning_all, json, std::cout,
                                                std::cerr);
  }
  if (graph->parsed()) {
    graph_options.sequence_parallel = !no_sp;
    rc = overlap::client::RunGraph(*client, graph_options, json, std::cout, std::cerr);
  }
  if (bench->parsed()) {
    bench_options.verify = !no_verify;
    bench_options.retune = !use_tuned;
    if (!bench_shapes.empty()) {
      auto shapes = overlap::client::ParseBenchShapes(bench_shapes);
      if (!shapes.ok()) {
        std::cerr << "overlapctl: " << shapes.status().message() << "\n";
        return overlap::client::kExitUsage;
      }
      bench_options.shapes = *shapes;
    }
    if (!bench_graph.empty()) {
      // --dtype and --devices, when given, win over the graph's.
      absl::StatusOr<std::string> text = overlap::client::ReadGraphFile(bench_graph);
      absl::StatusOr<overlap::client::GraphBench> from_graph =
          text.ok() ? overlap::client::BenchFromGraph(*text, bench_graph) : text.status();
      if (!from_graph.ok()) {
        std::cerr << "overlapctl: " << from_graph.status().message() << "\n";
        return overlap::client::kExitUsage;
      }
      bench_options.shapes = from_graph->shapes;
      if (dtype_option->count() == 0) bench_options.dtype = from_graph->dtype;
      if (devices_option->count() == 0) bench_options.devices = from_graph->devices;
    }
    // A long sweep: no per-call deadline beyond the client's default on unary calls.
    rc = overlap::client::RunBench(*client, bench_options, bench_json, json,
                                   isatty(STDERR_FILENO) == 1, std::cout, std::cerr);
  }
  std::cout.flush();
  return rc;
}
