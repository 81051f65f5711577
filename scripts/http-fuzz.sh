#!/usr/bin/env bash
# HTTP fuzzing against a live strata-server on loopback: makes a tiny model, starts the
# server with short timeouts, runs http_storm (fuzz/http_storm.cpp) for
# HTTP_FUZZ_SECONDS (default 60), and fails when any answer is not well-formed HTTP,
# a connection hangs past the timeouts, /health stops answering or the process dies.
# Usage: scripts/http-fuzz.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/server.sh
build=${1:-build}
secs=${HTTP_FUZZ_SECONDS:-60}
start_tiny_server "$build" http-fuzz --parallel 2 --queue 4 -c 512 -t 1 --max-body 262144 \
    --head-timeout-ms 1000 --body-timeout-ms 2000 --idle-timeout-ms 1000 --grace-ms 1000
echo "http-fuzz: ${secs}s of hostile requests against port $port"
rc=0
"$build/bin/http_storm" --port "$port" --seconds "$secs" --threads 4 --seed "${HTTP_FUZZ_SEED:-$RANDOM}" \
    --timeout-ms 6000 || rc=$?
if ! kill -0 "$pid" 2>/dev/null; then
    echo "http-fuzz: the server DIED (log follows)"
    tail -n 40 "$tmp/server.log"
    rc=1
fi
if [ "$rc" -ne 0 ]; then
    echo "http-fuzz: FAILED (server log tail follows)"
    tail -n 30 "$tmp/server.log"
fi
exit "$rc"
