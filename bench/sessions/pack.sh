#!/usr/bin/env bash
# Packs what bench/sessions/gpu_check.sh and bench/input_and_report_check.sh
# run on the GPU machine into .devpack/sessions.tar.xz (build build/ with CUDA
# and build-fuzz/ first).
set -euo pipefail
cd "$(dirname "$0")/../.."
fuzz=(job_spec graph_sizes peer_message pinned_graph job_row daemon_config hf_config)
../shared/tools/device-bundle build/server/overlapd build/client/overlapctl \
  build/client/session/overlapd-session-rank build/tests/*_gpu_test \
  $(printf "build-fuzz/%s_fuzz " "${fuzz[@]}")
mkdir -p .device/fuzz
for t in "${fuzz[@]}"; do mv ".device/bin/${t}_fuzz" .device/fuzz/; done
strip .device/bin/* 2> /dev/null || true
grep -qx '/.devpack/' .git/info/exclude 2> /dev/null || echo '/.devpack/' >> .git/info/exclude
mkdir -p .devpack && rm -f .devpack/sessions.tar.xz && tar -cJf .devpack/sessions.tar.xz .device
du -sh .devpack/sessions.tar.xz
