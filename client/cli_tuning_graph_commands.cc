// `tuning list|forget` (the daemon's tuned schedules) and `graph` (a layer
// graph from a model's dimensions).
#include <string>

#include "absl/status/statusor.h"
#include "client/cli_commands.h"
#include "client/commands.h"
#include "client/jobs/graph_command.h"
#include "client/views/tuning.h"

namespace overlap::client {
namespace {

// list and forget share the filter flags; --all is forget's alone.
struct TuningOptions {
  std::string op;
  std::string shape;
  bool stale = false;
  bool all = false;
};

struct GraphCliOptions {
  GraphCommandOptions graph;
  bool no_sp = false;
};

void AddTuningOptions(CLI::App& app, TuningOptions& options) {
  app.require_subcommand(1);
  CLI::App* list = app.add_subcommand("list", "list the tuned schedules");
  CLI::App* forget = app.add_subcommand(
      "forget", "forget tuned schedules: the next job with such an op tunes it again");
  for (CLI::App* sub : {list, forget}) {
    sub->add_option("--op", options.op, "only this op type, e.g. gemm_rs");
    sub->add_option("--shape", options.shape, "only this global shape, MxKxN");
    sub->add_flag("--stale", options.stale,
                  "only those no job here can use (another build, GPU, driver, library)");
  }
  forget->add_flag("--all", options.all, "every one (needed when nothing else is named)");
}

int RunTuning(const TuningOptions& options, const CLI::App& app, const CliContext& context) {
  absl::StatusOr<v1::TuningFilter> filter =
      ParseTuningFilter(options.op, options.shape, options.stale);
  if (!filter.ok()) {
    context.err << "overlapctl: " << filter.status().message() << "\n";
    return kExitUsage;
  }
  if (app.got_subcommand("list")) {
    return RunTuningList(context.client, *filter, context.json, context.out, context.err);
  }
  return RunTuningForget(context.client, *filter, options.all, context.json, context.out,
                         context.err);
}

void AddGraphOptions(CLI::App& app, GraphCliOptions& options) {
  GraphCommandOptions& graph = options.graph;
  app.add_option("--model", graph.model,
                 "a known model (--list-models), e.g. llama3-70b; the flags below change it");
  app.add_flag("--list-models", graph.list_models, "list the known models");
  app.add_option("--config", graph.config,
                 "a Hugging Face config.json: the model's dimensions from it");
  app.add_option("--name", graph.name, "the model's name, which starts the graph's");
  app.add_option("--hidden", graph.dims.hidden, "hidden size");
  app.add_option("--ffn", graph.dims.ffn, "the MLP's intermediate size");
  app.add_option("--heads", graph.dims.heads, "query heads");
  app.add_option("--kv-heads", graph.dims.kv_heads,
                 "key/value heads (grouped-query attention; default: --heads)");
  app.add_option("--head-dim", graph.dims.head_dim, "head size (default: hidden/heads)");
  app.add_option("--mlp", graph.mlp,
                 "gated (SwiGLU: fc1 is 2 x ffn wide) | plain (default: the model's; gated)");
  app.add_option("--tp", graph.tp,
                 "tensor-parallel size (default: --devices, else every GPU the daemon has, "
                 "divided by --dp)");
  app.add_option("--dp", graph.dp,
                 "data-parallel replicas: above 1 the graph declares a tp x dp mesh and --grads "
                 "all-reduces each gradient across the replicas (group dp)")
      ->capture_default_str();
  app.add_option("--devices", graph.devices,
                 "the graph's devices, tp x dp of them, e.g. 0,1 (default at --dp 1: 0 to tp-1, "
                 "so the graph runs at its tp on any daemon; a mesh says its count itself)")
      ->delimiter(',');
  app.add_option("--seq", graph.seq, "sequence length")->capture_default_str();
  app.add_option("--micro-batch", graph.micro_batch, "sequences per micro-batch")
      ->capture_default_str();
  app.add_option("--layers", graph.layers,
                 "decoder layers, one after another (a layer's deferred gradient all-reduces "
                 "then run beside the next one's backward)")
      ->capture_default_str();
  app.add_flag("--no-sp", options.no_sp,
               "no sequence parallelism: column-parallel ops are plain GEMMs, row-parallel "
               "ones gemm_ar");
  app.add_option("--pass", graph.pass, "forward | backward | both")->capture_default_str();
  app.add_flag("--unfused", graph.unfused,
               "write each overlapped op as its plain collective and its GEMM (all_gather -> "
               "gemm, gemm -> reduce_scatter or all_reduce), as a framework's trace has them; "
               "the daemon's overlap pass fuses them back");
  app.add_flag("--grads", graph.grads,
               "backward: add each weight gradient's data-parallel all-reduce (deferred; "
               "across the --dp replicas, or with --dp 1 over the tp group as a stand-in)");
  app.add_option("--bucket-mib", graph.bucket_mib,
                 "layer step: merge deferred all-reduces into buckets of up to this many MiB "
                 "(0 = no buckets)")
      ->capture_default_str();
  app.add_option("--chunk-kib", graph.chunk_kib,
                 "layer step: cut gradient all-reduces larger than this into pieces of it, each "
                 "sent after one of the ops that follow (0 = whole)")
      ->capture_default_str();
  app.add_option("--defer-bound-ms", graph.defer_bound_ms,
                 "layer step: join a deferred all-reduce back before the first op that starts "
                 "this long after it was sent")
      ->capture_default_str();
  app.add_option("--scheduler", graph.scheduler,
                 "layer step: static (the deferred all-reduces planned before the step) or "
                 "dynamic (dispatched at run time on the deferred lane; needs --grads)")
      ->capture_default_str();
  app.add_option("--dtype", graph.dtype, "bf16 | fp16 | fp32 | fp8")->capture_default_str();
  app.add_option("-o,--output", graph.output, "write it to this file");
}

// Needs the daemon only to count its GPUs, when neither --tp nor --devices says.
int RunGraphCommand(const GraphCliOptions& options, const CLI::App&, const CliContext& context) {
  GraphCommandOptions graph = options.graph;
  graph.sequence_parallel = !options.no_sp;
  return RunGraph(context.client, graph, context.json, context.out, context.err);
}

}  // namespace

CliCommand TuningCommand() {
  return MakeCliCommand<TuningOptions>(
      "tuning", "the schedules autotune chose and kept: list them, or forget them to re-tune",
      AddTuningOptions, RunTuning);
}

CliCommand GraphCommand() {
  return MakeCliCommand<GraphCliOptions>(
      "graph", "write a layer graph from a model's dimensions (YAML for submit or bench --graph)",
      AddGraphOptions, RunGraphCommand);
}

}  // namespace overlap::client
