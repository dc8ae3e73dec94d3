#!/usr/bin/env bash
# Packs overlapd and overlapctl (built here into build-gpu/, sm_90) with the
# libraries the GPU machine lacks into .devpack/device.tar.xz: the unpacked
# bundle (~66 MiB, OpenBLAS alone is 36) is over the device tool's 64 MiB limit.
# Then: run with carry [".devpack"] and `tar -xJf .devpack/device.tar.xz && bash bench/run_bench.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d build-gpu ] || cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90
cmake --build build-gpu -j"$(nproc)" --target overlapd overlapctl ${EXTRA_TARGETS:-}
extra=()
for t in ${EXTRA_TARGETS:-}; do  # test binaries and bench tools
  if [ -x "build-gpu/tests/$t" ]; then extra+=("build-gpu/tests/$t"); elif [ -x "build-gpu/bench/$t" ]; then extra+=("build-gpu/bench/$t"); else extra+=("build-gpu/bench/probes/$t"); fi
done
../shared/tools/device-bundle build-gpu/server/overlapd build-gpu/client/overlapctl "${extra[@]}"
strip .device/bin/*
grep -qx '/.devpack/' .git/info/exclude 2>/dev/null || echo '/.devpack/' >> .git/info/exclude
mkdir -p .devpack && rm -f .devpack/device.tar.xz && tar -cJf .devpack/device.tar.xz .device
du -sh .devpack/device.tar.xz
