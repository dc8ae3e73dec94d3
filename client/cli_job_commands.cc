// The commands about one job (or two, compare): their options, and the
// Commands method (commands.h) each one runs.
#include <string>
#include <vector>

#include "client/cli_commands.h"
#include "client/commands.h"

namespace overlap::client {
namespace {

// get, cancel, watch and report take a job id and nothing else.
struct JobIdOptions {
  std::string id;
  bool wait = false;  // cancel --wait
};

void AddJobId(CLI::App& app, JobIdOptions& options) {
  app.add_option("ID", options.id, "job id")->required();
}

struct SubmitOptions {
  std::string file;
  bool wait = false;
  std::vector<std::string> nodes;
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
};

struct CompareOptions {
  std::string a;
  std::string b;
  std::string html;
};

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
        app.add_option("--nodes", options.nodes,
                       "run the job over these daemons' peer addresses, e.g. "
                       "node1:7070,node2:7070 (this daemon among them coordinates; replaces the "
                       "graph's nodes)")
            ->delimiter(',');
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
          return CommandsFor(context).CompareFusion(options.file, options.nodes);
        }
        if (options.compare_scheduler) {
          return CommandsFor(context).CompareScheduler(options.file, options.nodes);
        }
        return CommandsFor(context).Submit(options.file, options.wait, options.nodes,
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
        app.add_option("--nodes", options.nodes,
                       "check it as a job over these daemons' peer addresses (as submit --nodes)")
            ->delimiter(',');
      },
      [](const SubmitOptions& options, const CLI::App&, const CliContext& context) {
        return CommandsFor(context).Validate(options.file, options.nodes);
      });
}

CliCommand GetCommand() {
  return MakeCliCommand<JobIdOptions>(
      "get", "show one job", AddJobId,
      [](const JobIdOptions& options, const CLI::App&, const CliContext& context) {
        return CommandsFor(context).Get(options.id);
      });
}

CliCommand ListCommand() {
  return MakeCliCommand<ListOptions>(
      "list", "list jobs, newest first",
      [](CLI::App& app, ListOptions& options) {
        app.add_option("--state", options.state, "only jobs in this state (queued, running, ...)");
        app.add_option("--limit", options.limit, "at most this many jobs (0 = all)");
      },
      [](const ListOptions& options, const CLI::App&, const CliContext& context) {
        return CommandsFor(context).List(options.state, options.limit);
      });
}

CliCommand CancelCommand() {
  return MakeCliCommand<JobIdOptions>(
      "cancel", "cancel a queued or running job",
      [](CLI::App& app, JobIdOptions& options) {
        AddJobId(app, options);
        app.add_flag("--wait", options.wait, "wait until the job has ended, and print its state");
      },
      [](const JobIdOptions& options, const CLI::App&, const CliContext& context) {
        return CommandsFor(context).Cancel(options.id, options.wait);
      });
}

CliCommand WatchCommand() {
  return MakeCliCommand<JobIdOptions>(
      "watch", "follow a job to its end, then print its report", AddJobId,
      [](const JobIdOptions& options, const CLI::App&, const CliContext& context) {
        return CommandsFor(context).Watch(options.id);
      });
}

CliCommand ReportCommand() {
  return MakeCliCommand<JobIdOptions>(
      "report", "print the report of a finished job", AddJobId,
      [](const JobIdOptions& options, const CLI::App&, const CliContext& context) {
        return CommandsFor(context).Report(options.id);
      });
}

CliCommand PinCommand() {
  return MakeCliCommand<PinOptions>(
      "pin", "a job's graph with every op set to the schedule it ran (YAML), to submit again",
      [](CLI::App& app, PinOptions& options) {
        app.add_option("ID", options.id, "job id")->required();
        app.add_option("-o,--output", options.output,
                       "write it to this file instead of standard output");
      },
      [](const PinOptions& options, const CLI::App&, const CliContext& context) {
        return CommandsFor(context).Pin(options.id, options.output);
      });
}

CliCommand TimelineCommand() {
  return MakeCliCommand<TimelineOptions>(
      "timeline",
      "where each op's traced iteration spent its time: GEMMs, transfers and waits per rank "
      "and stream",
      [](CLI::App& app, TimelineOptions& options) {
        app.add_option("ID", options.id, "job id")->required();
        app.add_option("--op", options.op, "this op only");
        app.add_option("--width", options.width, "chart width in characters")
            ->check(CLI::Range(10, 1000))
            ->capture_default_str();
        app.add_flag("--spans", options.spans,
                     "list every span, however many (by default up to 64 per timeline)");
        app.add_option(
            "-o,--output", options.output,
            "also write a Chrome trace (chrome://tracing, ui.perfetto.dev) to this file");
        app.add_option("--html", options.html,
                       "also draw each rank's streams in a self-contained HTML page");
      },
      [](const TimelineOptions& options, const CLI::App&, const CliContext& context) {
        return CommandsFor(context).Timeline(options.id, options.op, options.width, options.spans,
                                             options.output, options.html);
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
        return CommandsFor(context).Compare(options.a, options.b, options.html);
      });
}

}  // namespace overlap::client
