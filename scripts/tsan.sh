#!/usr/bin/env bash
# Builds the hand-off and device-queue test and the pipelined-windows test with
# ThreadSanitizer and runs them; any data race or failure exits non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
bdir=build-tsan
cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_TSAN=ON -DSTRATA_BUILD_TESTS=OFF \
      -DSTRATA_CUDA=OFF >/dev/null
cmake --build "$bdir" -j2 --target tsan_handoff tsan_pipeline
TSAN_OPTIONS="halt_on_error=1 exitcode=66" "$bdir/bin/tsan_handoff"
TSAN_OPTIONS="halt_on_error=1 exitcode=66" "$bdir/bin/tsan_pipeline"
