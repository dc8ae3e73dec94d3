#!/usr/bin/env bash
# Packs what the GPU check scripts run on the GPU machine into
# .devpack/sessions.tar.xz: overlapd, overlapctl, overlapd-session-rank and the
# GPU tests from build/ (sm_90), the fuzz targets from build-fuzz/ (into
# .device/fuzz), and the libraries the GPU machine lacks. One bundle serves
#   bench/sessions/gpu_check.sh      (sessions on one GPU)
#   bench/sessions/two_gpu.sh        (a tp 2 session over two GPUs)
#   bench/input_and_report_check.sh  (GPU tests, layer reports, refusals, fuzzing)
#   bench/one_gpu_check.sh           (issues 57 and 58 on one GPU; FUZZ=0 is enough)
#   gemm_algos, enqueue_cost (probes) (cuBLASLt candidates cold and hot; host cost per enqueue)
# Build build/ with CUDA and build-fuzz/ (scripts/run-sanitizers.sh fuzz 0)
# first. FUZZ=0 packs without the fuzz targets (the sessions' checks do not
# need them). There, with carry [".devpack"]:
#   tar -xJf .devpack/sessions.tar.xz && bash <one of the scripts above>
set -euo pipefail
cd "$(dirname "$0")/.."
fuzz=(job_spec graph_sizes peer_message pinned_graph job_row daemon_config hf_config)
[[ "${FUZZ:-1}" == 0 ]] && fuzz=()
fuzz_bins=()
for t in "${fuzz[@]}"; do fuzz_bins+=("build-fuzz/${t}_fuzz"); done
# overlapd's GEMM as a library for gemm_vs_torch.py (bench/one_gpu_check.sh), where built;
# it loads from .device/lib.
shim=build/bench/gemm_vs_torch/liboverlapd_gemm_shim.so
[ -x "$shim" ] || shim=
../shared/tools/device-bundle build/server/overlapd build/client/overlapctl \
  build/client/session/overlapd-session-rank build/tests/*_gpu_test build/bench/activation_bandwidth build/bench/probes/gemm_algos build/bench/probes/enqueue_cost \
  ${shim:+"$shim"} "${fuzz_bins[@]}"
[ -z "$shim" ] || mv .device/bin/liboverlapd_gemm_shim.so .device/lib/
mkdir -p .device/fuzz
for t in "${fuzz[@]}"; do mv ".device/bin/${t}_fuzz" .device/fuzz/; done
strip .device/bin/* 2> /dev/null || true
grep -qx '/.devpack/' .git/info/exclude 2> /dev/null || echo '/.devpack/' >> .git/info/exclude
mkdir -p .devpack && rm -f .devpack/sessions.tar.xz && tar -cJf .devpack/sessions.tar.xz .device
du -sh .devpack/sessions.tar.xz
