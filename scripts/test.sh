#!/usr/bin/env bash
# The README's test command: installs what is missing, builds Release (and the HIP
# backend's kernels with hipcc), runs the server
# end to end with the OpenAI client, a bounded HTTP fuzzing run against a live server,
# the ThreadSanitizer test of the hand-off code, a bounded stress loop of pipelined runs
# and bounded libFuzzer runs of the GGUF reader and the request parser, then every test
# through ctest (last, so its summary closes the output).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step's wall time, so that CI's budget (under 30 minutes) can be watched step by step.
step() {
    local name=$1 t0=$SECONDS
    shift
    "$@"
    echo "test.sh: step '$name' took $((SECONDS - t0)) s (total $SECONDS s)"
}
step deps bash scripts/install-deps.sh
jobs=${STRATA_JOBS:-2}
step configure cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
step build cmake --build build -j"$jobs"
# The HIP backend for AMD GPUs compiles with hipcc (nothing of it runs without one).
if [ "${STRATA_SKIP_HIP:-0}" != 1 ]; then
    step hip-build bash scripts/hip-build.sh build-hip
fi
# strata-server with the official OpenAI client (Node's test runner).
step e2e bash scripts/e2e-server.sh build
# The documented nginx front end, on loopback.
step nginx bash scripts/nginx-front.sh build
# Hostile HTTP against a live server for a bounded time (fuzz/http_storm.cpp).
if [ "${STRATA_SKIP_FUZZ:-0}" != 1 ]; then
    HTTP_FUZZ_SECONDS=${FUZZ_SECONDS:-60} step http-fuzz bash scripts/http-fuzz.sh build
fi
if [ "${STRATA_SKIP_TSAN:-0}" != 1 ]; then
    step tsan bash scripts/tsan.sh
fi
# Pipelined windows on a two-stage split, repeated (STRESS_RUNS, default 60).
step stress bash scripts/stress-pipeline.sh build
if [ "${STRATA_SKIP_FUZZ:-0}" != 1 ]; then
    FUZZ_SECONDS=${FUZZ_SECONDS:-60} step libfuzzer bash scripts/fuzz.sh
fi
step ctest ctest --test-dir build --output-on-failure -j"$jobs"
