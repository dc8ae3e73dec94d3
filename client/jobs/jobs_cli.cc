// The rows of the commands on jobs: one job (or two, compare), their options
// and the JobCommands method (job_commands.h) each one runs; and `graph`, a
// layer graph from a model's dimensions (graph_command.h).
#include "client/jobs/jobs_cli.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "client/core/command_io.h"
#include "client/jobs/graph_command.h"
#include "client/jobs/job_commands.h"

namespace overlap::client {
namespace {

JobCommands JobCommandsFor(const CliContext& context) {
  return JobCommands(context.client, context.out, context.err, context.err_is_tty, context.json);
}

// get, cancel, watch and report take a job id and nothing else.
struct JobIdOptions {
  std::string id;
  bool wait = false;              // cancel --wait
  bool ignore_not_found = false;  // cancel --ignore-not-found
};

// A job spanning daemons has one id on every node of it (docs/OPERATIONS.md, "Cluster").
constexpr char kJobIdHelp[] =
    "job id: job-NNNNNN on its node, or NODE/job-NNNNNN (a job spanning daemons, on any node "
    "of it)";

void AddJobId(CLI::App& app, JobIdOptions& options) {
  app.add_option("ID", options.id, kJobIdHelp)->required();
}

// A command that takes one job id and runs `method` on it.
CliCommand JobIdCommand(std::string name, std::string help,
                        int (JobCommands::*method)(const std::string& id)) {
  return MakeCliCommand<JobIdOptions>(
      std::move(name), std::move(help), AddJobId,
      [method](const JobIdOptions& options, const CLI::App&, const CliContext& context) {
        JobCommands commands = JobCommandsFor(context);
        return (commands.*method)(options.id);
      });
}

struct SubmitOptions {
  std::string file;
  bool wait = false;
  std::vector<std::string> peers;
  bool no_fuse = false;
  bool compare_fusion = false;
  std::string scheduler;
  bool compare_scheduler = false;
  bool detach = false;
};

struct ListOptions {
  std::string state;
  int limit = 0;
};

struct PinOptions {
  std::string id;
  std::string output;
};

struct TimelineOptions {
  std::string id;
  std::string op;
  int width = 100;
  bool spans = false;
  std::string output;
  std::string html;
  bool flight = false;
};

struct CompareOptions {
  std::string a;
  std::string b;
  std::string html;
};

struct GraphCliOptions {
  GraphCommandOptions graph;
  bool no_sp = false;
};

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
  app.add_option("--output-file", graph.output, "write it to this file");
}

// Needs the daemon only to count its GPUs, when neither --tp nor --devices says.
int RunGraphCommand(const GraphCliOptions& options, const CLI::App&, const CliContext& context) {
  GraphCommandOptions graph = options.graph;
  graph.sequence_parallel = !options.no_sp;
  return RunGraph(context.client, graph, context.json, context.out, context.err);
}

}  // namespace

CliCommand SubmitCommand() {
  return MakeCliCommand<SubmitOptions>(
      "submit", "submit a layer graph (YAML or JSON file)",
      [](CLI::App& app, SubmitOptions& options) {
        app.add_option("FILE", options.file, "graph file; - reads standard input")->required();
        app.add_flag("--wait", options.wait,
                     "follow the job and print its report; interrupted (Ctrl-C, SIGTERM from "
                     "scancel or a time limit) it cancels the job");
        app.add_flag("--detach", options.detach,
                     "with --wait: an interrupted wait leaves the job running");
        app.add_option("--peers", options.peers,
                       "run the job over these daemons' peer addresses, e.g. "
                       "node1:7070,node2:7070 (this daemon among them coordinates; replaces the "
                       "graph's nodes)")
            ->delimiter(',');
        AddPeersOnlyRefusal(app);
        CLI::Option* no_fuse = app.add_flag(
            "--no-fuse", options.no_fuse,
            "run the graph as written: no overlap pass fusing its plain collectives into the "
            "GEMMs beside them (sets the graph's fuse: false)");
        CLI::Option* compare_fusion =
            app.add_flag("--compare-fusion", options.compare_fusion,
                         "run the graph with the overlap pass, then without it, and show their "
                         "step times side by side (waits for both)")
                ->excludes(no_fuse);
        CLI::Option* scheduler =
            app.add_option("--scheduler", options.scheduler,
                           "how the layer step sends its deferred collectives: static (planned "
                           "before the step) or dynamic (dispatched at run time on the deferred "
                           "lane); sets the graph's scheduler")
                ->check(CLI::IsMember({"static", "dynamic"}));
        app.add_flag("--compare-scheduler", options.compare_scheduler,
                     "run the graph under scheduler static, then dynamic, and show how each "
                     "sent its deferred collectives side by side (waits for both)")
            ->excludes(scheduler)
            ->excludes(compare_fusion);
      },
      [](const SubmitOptions& options, const CLI::App&, const CliContext& context) {
        if (options.compare_fusion) {
          return JobCommandsFor(context).CompareFusion(options.file, options.peers);
        }
        if (options.compare_scheduler) {
          return JobCommandsFor(context).CompareScheduler(options.file, options.peers);
        }
        return JobCommandsFor(context).Submit(options.file, options.wait, options.peers,
                                              options.no_fuse, options.scheduler, options.detach);
      });
}

CliCommand ValidateCommand() {
  return MakeCliCommand<SubmitOptions>(
      "validate",
      "check a layer graph as submit would against this daemon (shapes, memory, devices, your "
      "rights and quota, the nodes it spans) and run nothing",
      [](CLI::App& app, SubmitOptions& options) {
        app.add_option("FILE", options.file, "graph file; - reads standard input")->required();
        app.add_option("--peers", options.peers,
                       "check it as a job over these daemons' peer addresses (as submit --peers)")
            ->delimiter(',');
        AddPeersOnlyRefusal(app);
      },
      [](const SubmitOptions& options, const CLI::App&, const CliContext& context) {
        return JobCommandsFor(context).Validate(options.file, options.peers);
      });
}

CliCommand GetCommand() { return JobIdCommand("get", "show one job", &JobCommands::Get); }

CliCommand FlightCommand() {
  return JobIdCommand("flight",
                      "the flight recorder's rings of a job's collectives and its verdict on a "
                      "hang or abort",
                      &JobCommands::Flight);
}

CliCommand ListCommand() {
  return MakeCliCommand<ListOptions>(
      "list", "list jobs, newest first",
      [](CLI::App& app, ListOptions& options) {
        app.add_option("--state", options.state, "only jobs in this state (queued, running, ...)");
        app.add_option("--limit", options.limit, "at most this many jobs (0 = all)");
      },
      [](const ListOptions& options, const CLI::App&, const CliContext& context) {
        return JobCommandsFor(context).List(options.state, options.limit);
      });
}

CliCommand CancelCommand() {
  return MakeCliCommand<JobIdOptions>(
      "cancel", "cancel a queued or running job",
      [](CLI::App& app, JobIdOptions& options) {
        AddJobId(app, options);
        app.add_flag("--wait", options.wait, "wait until the job has ended, and print its state");
        app.add_flag("--ignore-not-found", options.ignore_not_found,
                     "exit 0 when the job does not exist or has already ended (and say which)");
      },
      [](const JobIdOptions& options, const CLI::App&, const CliContext& context) {
        return JobCommandsFor(context).Cancel(options.id, options.wait, options.ignore_not_found);
      });
}

CliCommand WatchCommand() {
  return JobIdCommand("watch", "follow a job to its end, then print its report",
                      &JobCommands::Watch);
}

CliCommand ReportCommand() {
  return JobIdCommand("report", "print the report of a finished job", &JobCommands::Report);
}

CliCommand PinCommand() {
  return MakeCliCommand<PinOptions>(
      "pin", "a job's graph with every op set to the schedule it ran (YAML), to submit again",
      [](CLI::App& app, PinOptions& options) {
        app.add_option("ID", options.id, kJobIdHelp)->required();
        app.add_option("--output-file", options.output,
                       "write it to this file instead of standard output");
      },
      [](const PinOptions& options, const CLI::App&, const CliContext& context) {
        return JobCommandsFor(context).Pin(options.id, options.output);
      });
}

CliCommand TimelineCommand() {
  return MakeCliCommand<TimelineOptions>(
      "timeline",
      "where each op's traced iteration spent its time: GEMMs, transfers and waits per rank "
      "and stream",
      [](CLI::App& app, TimelineOptions& options) {
        app.add_option("ID", options.id, kJobIdHelp)->required();
        app.add_option("--op", options.op, "this op only");
        app.add_option("--width", options.width, "chart width in characters")
            ->check(CLI::Range(10, 1000))
            ->capture_default_str();
        app.add_flag("--spans", options.spans,
                     "list every span, however many (by default up to 64 per timeline)");
        app.add_option(
            "--output-file", options.output,
            "also write a Chrome trace (chrome://tracing, ui.perfetto.dev) to this file");
        app.add_option("--html", options.html,
                       "also draw each rank's streams in a self-contained HTML page");
        app.add_flag("--flight", options.flight,
                     "put the flight recorder's rings in the Chrome trace, however many (by "
                     "default only when they are small), on a \"flight\" track per rank");
      },
      [](const TimelineOptions& options, const CLI::App&, const CliContext& context) {
        return JobCommandsFor(context).Timeline(options.id, options.op, options.width,
                                                options.spans, options.output, options.html,
                                                options.flight);
      });
}

CliCommand CompareCommand() {
  return MakeCliCommand<CompareOptions>(
      "compare", "two finished jobs op by op: schedules, steps and B's change against A",
      [](CLI::App& app, CompareOptions& options) {
        app.add_option("A", options.a, "job id")->required();
        app.add_option("B", options.b, "job id")->required();
        app.add_option("--html", options.html,
                       "also write the two jobs' ops side by side as a self-contained HTML page");
      },
      [](const CompareOptions& options, const CLI::App&, const CliContext& context) {
        return JobCommandsFor(context).Compare(options.a, options.b, options.html);
      });
}

CliCommand GraphCommand() {
  return MakeCliCommand<GraphCliOptions>(
      "graph", "write a layer graph from a model's dimensions (YAML for submit or bench --graph)",
      AddGraphOptions, RunGraphCommand);
}

}  // namespace overlap::client
