#!/usr/bin/env bash
# The README's first command: installs what is missing, builds strata-server, starts
# it on the built-in demo model (random weights: the answer is gibberish), sends one
# chat completion with curl, prints the answer and the server's speed, and stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/server.sh
bash scripts/install-deps.sh
jobs=${STRATA_JOBS:-2}
build=${STRATA_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target strata-server -j"$jobs"

log=$(mktemp -t strata-demo.XXXXXX.log)
# Port 0: the server picks a free port and logs it.
"$build/bin/strata-server" --demo --port 0 --ctx-size 4096 >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -f "$log"' EXIT

port=$(wait_for_server "$pid" "$log" 600 demo)  # the first run generates the demo model: a few seconds
grep -E "load:|ready" "$log" | sed 's/^/  server: /'

echo
echo "$ curl http://127.0.0.1:$port/v1/chat/completions -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a story.\"}],\"max_tokens\":64}'"
reply=$(curl -sS --max-time 120 "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"messages":[{"role":"user","content":"Tell me a story."}],"max_tokens":64,"temperature":0}')
echo
echo "answer (random weights, so gibberish):"
echo "$reply" | jq -r '.choices[0].message | (if .reasoning_content then "[reasoning] " + .reasoning_content + "\n" else "" end) + (if .content == "" then "(empty: the random model picked only tokens that print as nothing)" else .content end)'
echo
echo "$reply" | jq -r '"finish: \(.choices[0].finish_reason); tokens: \(.usage.prompt_tokens) prompt, \(.usage.completion_tokens) generated"'
echo "$reply" | jq -r '"server speed: \(.timings.predicted_per_second * 100 | round / 100) tok/s decode, first token after \(.timings.ttft_ms | round) ms"'
