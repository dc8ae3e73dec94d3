#!/usr/bin/env bash
# The test suite: install the build and test dependencies (install-deps.sh
# --test), build everything (Release) into build/, check the lock annotations
# with clang, run every test except the GPU ones (the fuzz targets' kept inputs
# among them), test the Python client, then fuzz briefly.
#
# Tests that need a GPU carry the ctest label `gpu` and are excluded here (-LE
# gpu): on a CPU-only machine they could only skip. On a GPU node run them with
#   ctest --test-dir build --output-on-failure -L gpu
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh --test
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
# Clang's thread-safety analysis of the annotated locks (syntax only, ~30 s).
bash scripts/check-thread-safety.sh
ctest --test-dir build --output-on-failure -LE gpu -j2
# The Python client, built from proto/ into a venv and tested against a real daemon.
bash scripts/test-python-client.sh
# Every fuzz target for 20 s on its corpus (tests/fuzz/; clang, ASan and UBSan
# into build-fuzz/: about 4 minutes to build and 3 to run on 2 cores). A crash,
# a sanitizer report, a timeout or running out of memory fails the run.
bash scripts/run-sanitizers.sh fuzz-brief
