// `overlapctl export`: the choices `auto` made in a job (--job ID, with each
// one's margins from its candidates' timings), or the tuning cache's choices
// for a graph's ops (--graph FILE), as TransformerEngine, Megatron-LM or
// torchtitan configuration (client/export/framework_export.h).
#pragma once

#include <ostream>
#include <string>

#include "client/core/daemon_client.h"

namespace overlap::client {

struct ExportOptions {
  std::string format;  // te | megatron | torchtitan
  std::string job;
  std::string graph;
  int tp = 0;          // --graph: the degree its ops ran at (default: the graph's own)
  std::string output;  // -o: write here instead of standard output
  // torchtitan: PyTorch's async TP as measured (bench --torch-peers --json-out,
  // or torch_tp.py's JSON); without it the export says it was not measured.
  std::string bench;
};

int RunExport(DaemonClient& client, const ExportOptions& options, std::ostream& out,
              std::ostream& err);

}  // namespace overlap::client
