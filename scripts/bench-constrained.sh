#!/usr/bin/env bash
# Decode speed of structured output against free decoding, end to end on strata-server,
# at a 150k-token vocabulary (a qwen3next small model made with --vocab-size 151936):
# the same chat request with and without response_format json_schema, greedy,
# ignore_eos, 128 tokens, alternating, REPS rounds. The random model does not know JSON,
# so the grammar refuses its picks often (the matcher's miss path: a token mask, cached
# per parse state). Prints a markdown table: median decode tok/s of each and their ratio.
#
# Usage: scripts/bench-constrained.sh [BUILD_DIR] — env REPS (3), THREADS (2), VOCAB (151936).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
reps="${REPS:-3}" threads="${THREADS:-2}" vocab="${VOCAB:-151936}"
model="${MODELS_DIR:-$HOME/.cache/strata/models}/bench-constrained-qwen3next-small-q8_0-v$vocab.gguf"
mkdir -p "$(dirname "$model")"
[ -f "$model" ] || "$build/bin/strata" make-model --arch qwen3next --preset small --type q8_0 --seed 1 \
    --vocab-size "$vocab" --out "$model" >/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$(mktemp)
"$build/bin/strata-server" -m "$model" --port "$port" -c 2048 -t "$threads" --spec-draft 0 >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 150); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.2; done
python3 - "$port" "$reps" "$vocab" <<'PY'
import json, statistics, sys, urllib.request
port, reps, vocab = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def chat(extra):
    body = {"messages": [{"role": "user", "content": "Describe a person as JSON."}], "max_tokens": 128,
            "temperature": 0, "ignore_eos": True, **extra}
    r = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", method="POST",
                               data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(r, timeout=600))
schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
          "tags": {"type": "array", "items": {"type": "string"}}},
          "required": ["name", "age", "tags"], "additionalProperties": False}
constrained = {"response_format": {"type": "json_schema", "json_schema": {"name": "person", "strict": True, "schema": schema}}}
chat(constrained)  # warm-up: the tokenizer's byte trie is built at the first grammar request
free, cons = [], []
for _ in range(reps):
    free.append(chat({})["timings"]["predicted_per_second"])
    cons.append(chat(constrained)["timings"]["predicted_per_second"])
f, c = statistics.median(free), statistics.median(cons)
print(f"| vocabulary | free decode tok/s | json_schema decode tok/s | constrained / free |")
print(f"|---|---|---|---|")
print(f"| {vocab} | {f:.1f} ({min(free):.1f}-{max(free):.1f}) | {c:.1f} ({min(cons):.1f}-{max(cons):.1f}) | {c / f:.3f} |")
PY
