#!/usr/bin/env bash
# The server's end-to-end test with the official OpenAI client: makes a tiny model,
# starts strata-server on a free port, runs tests/e2e with node --test, stops the
# server. Exit status: the tests'. Skipped (exit 0, with a warning) without node or
# the client. Usage: scripts/e2e-server.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/server.sh
build=${1:-build}
npm_dir="${STRATA_NPM_DIR:-$HOME/.cache/strata/npm}"
if ! command -v node >/dev/null || [ ! -f "$npm_dir/node_modules/openai/package.json" ]; then
    echo "e2e: node or the openai client is missing (scripts/install-deps.sh installs it); skipped"
    exit 0
fi
start_tiny_server "$build" e2e --parallel 2 -c 1024 -t 2 --grace-ms 2000
rc=0
STRATA_E2E_BASE_URL="http://127.0.0.1:$port/v1" STRATA_NPM_DIR="$npm_dir" \
    timeout 60 node --test --test-timeout=20000 tests/e2e/ || rc=$?
if [ "$rc" -ne 0 ]; then
    echo "e2e: FAILED (server log follows)"
    tail -n 50 "$tmp/server.log"
fi
exit "$rc"
