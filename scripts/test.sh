#!/usr/bin/env bash
# The README's test command: installs what is missing, builds Release, runs every
# test through ctest, runs the server end to end with the OpenAI client, then fuzzes
# the GGUF reader for a bounded time.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
jobs=${STRATA_JOBS:-2}
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$jobs"
(cd build && ctest --output-on-failure -j"$jobs")
# strata-server with the official OpenAI client (Node's test runner).
bash scripts/e2e-server.sh build
if [ "${STRATA_SKIP_FUZZ:-0}" != 1 ]; then
    FUZZ_SECONDS=${FUZZ_SECONDS:-60} bash scripts/fuzz.sh
fi
