// bench --torch-peers: PyTorch's serial NCCL + cuBLAS and async TP
// (bench/peers/torch_tp.py under torchrun) at the sweep's shapes on the same
// GPUs, after the sweep, beside overlapd's figures: what `export --format
// torchtitan --bench` answers enable_async_tensor_parallel from.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "client/measure/bench.h"
#include "nlohmann/json.hpp"

namespace overlap::client {

struct TorchPeerFigures {
  double serial_ms = 0, async_tp_ms = 0;  // 0: not measured (async TP has no gemm_ar)
};

// Runs torchrun over `tp` GPUs for `shapes`; one entry per shape, or the
// reason nothing was measured (no torchrun on PATH, no script, the run
// failed), in which case the vector is empty. Progress goes to `err`.
struct TorchPeersRun {
  std::vector<TorchPeerFigures> figures;  // in `shapes` order
  std::string not_measured;               // why, when figures is empty
};
TorchPeersRun RunTorchPeers(const std::vector<BenchShape>& shapes, int tp, const std::string& dtype,
                            std::ostream& err);

// Adds torch_serial_ms / torch_async_tp_ms to each row of `bench_json`, or
// "torch_peers_not_measured" with the reason.
void AddTorchPeersJson(const TorchPeersRun& run, nlohmann::json& bench_json);
// The table: shape, overlapd's step, PyTorch serial, async TP, ours against
// the better of them; or the line saying why nothing was measured.
std::string FormatTorchPeers(const std::vector<BenchRow>& rows, const TorchPeersRun& run);

}  // namespace overlap::client
