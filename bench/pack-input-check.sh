#!/usr/bin/env bash
# Packs what bench/input_and_report_check.sh runs on the GPU machine into
# .devpack/device.tar.xz: overlapd, overlapctl and the GPU tests from build/
# (sm_90), the fuzz targets from build-fuzz/ (into .device/fuzz), and the
# libraries the GPU machine lacks. Build both first.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzz=(job_spec graph_sizes peer_message pinned_graph job_row daemon_config hf_config)
../shared/tools/device-bundle build/server/overlapd build/client/overlapctl build/tests/*_gpu_test \
  $(printf "build-fuzz/%s_fuzz " "${fuzz[@]}")
mkdir -p .device/fuzz
for t in "${fuzz[@]}"; do mv ".device/bin/${t}_fuzz" .device/fuzz/; done
strip .device/bin/* 2> /dev/null || true
grep -qx '/.devpack/' .git/info/exclude 2> /dev/null || echo '/.devpack/' >> .git/info/exclude
mkdir -p .devpack && rm -f .devpack/device.tar.xz && tar -cJf .devpack/device.tar.xz .device
du -sh .devpack/device.tar.xz
