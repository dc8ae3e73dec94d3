#include "server/runner/op_measurement.h"

#include <algorithm>

namespace overlap::runner {

OpFigures FiguresOf(const OpMeasurement& m) {
  OpFigures f;
  const bool collective_only = IsCollectiveOnly(m.op.type);
  const bool gemm_only = IsGemmOnly(m.op.type);
  const std::vector<double>& step_t = m.rounds.step;
  f.comm_nccl = m.comm.nccl;
  f.comm_p2p = m.comm.p2p;
  std::vector<double> comm_t = m.comm.fastest == Transport::kP2p ? f.comm_p2p : f.comm_nccl;
  if (collective_only) {
    comm_t = step_t;
    (m.choice.schedule.transport == Transport::kP2p ? f.comm_p2p : f.comm_nccl) = step_t;
  }
  f.step = Summarize(step_t);
  // A GEMM op's steps are its GEMM alone, unless it was also timed sustained.
  f.gemm_alone = Summarize(gemm_only && m.rounds.gemm.empty() ? step_t : m.rounds.gemm);
  f.comm_alone = Summarize(comm_t);
  f.exposed_comm_ms = std::max(0.0, f.step.median - f.gemm_alone.median);
  f.step_energy = m.rounds.step_energy;
  if (!collective_only && !gemm_only && m.tp > 1) {
    const EnergyWindow& comm =
        m.comm.fastest == Transport::kP2p ? m.comm.p2p_energy : m.comm.nccl_energy;
    f.serial_energy = BackToBack(m.rounds.gemm_energy, comm);
    f.serial_ms = f.gemm_alone.median + f.comm_alone.median;
  }
  return f;
}

}  // namespace overlap::runner
