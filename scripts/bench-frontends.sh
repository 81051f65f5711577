#!/usr/bin/env bash
# Decode speed of one file as the ways in measure it, in the same minutes: bench/decode
# (the engine's step loop, no tokenizer or sampler), `strata run` (the CLI: tokenizer,
# sampler, text out) and strata-server answering /v1/completions (HTTP, the scheduler, its
# timings.predicted_per_second), whole and streamed (SSE, as chat clients ask; the
# timings from the usage chunk). Issue 17's row: run and server within 3% of
# bench/decode. Each round runs them one after another (ROUNDS rounds), so a drift of the
# host's bandwidth reaches all of them; the table gives every round's tok/s, the medians
# and the ratios of the medians.
#
# The client must not take the cores the server computes on: with every core a compute
# thread, a process started during the request (a `curl | python3` pipeline parsing the
# answer, say) stalls one compute thread and with it the other, at each op's barrier; a
# 9-token prompt and 256 tokens then read 10-15% slower than they are. So curl writes the
# answer to a file and it is parsed after the request.
#
# Usage: scripts/bench-frontends.sh [MODEL.gguf] — env BUILD_DIR (build-bench; built unless
# NO_BUILD=1), MODELS_DIR, TYPE (q4_K: the 1b llama preset of that type when no MODEL is
# given), THREADS (2), N_PREDICT (256), ROUNDS (3), CTX (1024), OUT_JSON (optional).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build-bench}"
models="${MODELS_DIR:-$HOME/.cache/strata/models}"
threads="${THREADS:-2}"
n="${N_PREDICT:-256}"
rounds="${ROUNDS:-3}"
ctx="${CTX:-1024}"
type="${TYPE:-q4_K}"
prompt="The quick brown fox"
if [[ "${NO_BUILD:-0}" != 1 ]]; then
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=OFF >/dev/null
    cmake --build "$build" -j"$(nproc)" --target strata strata-server decode >&2
fi
for exe in strata strata-server decode; do
    [[ -x "$build/bin/$exe" ]] || { echo "bench-frontends: no $build/bin/$exe (build it, or set BUILD_DIR)" >&2; exit 1; }
done
model="${1:-$models/llama-1b-${type,,}.gguf}"
if [[ ! -f "$model" ]]; then
    [[ $# -eq 0 ]] || { echo "bench-frontends: no file $model" >&2; exit 1; }
    mkdir -p "$models"
    "$build/bin/strata" make-model --arch llama --preset 1b --type "$type" --seed 1 --out "$model" >&2
fi

tmp="$(mktemp -d)"
pid=""
cleanup() {
    if [[ -n "$pid" ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$tmp"
}
trap cleanup EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$build/bin/strata-server" -m "$model" --port "$port" -c "$ctx" -t "$threads" --spec-draft 0 >"$tmp/server.log" 2>&1 &
pid=$!
for _ in $(seq 300); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.2; done
curl -sf "http://127.0.0.1:$port/health" >/dev/null || { echo "bench-frontends: the server did not start:" >&2; cat "$tmp/server.log" >&2; exit 1; }
body="{\"prompt\": \"$prompt\", \"max_tokens\": $n, \"temperature\": 0}"
# One short request first: the server's first request pays for what a process's first
# step pays (the run's is outside its decode timing as well).
curl -sf -o /dev/null "http://127.0.0.1:$port/v1/completions" -d "{\"prompt\": \"$prompt\", \"max_tokens\": 4}"

stream_body="{\"prompt\": \"$prompt\", \"max_tokens\": $n, \"temperature\": 0, \"stream\": true, \"stream_options\": {\"include_usage\": true}}"
dec=() run=() srv=() sse=()
for ((r = 1; r <= rounds; ++r)); do
    "$build/bin/decode" "$model" --pp 16 --tg "$n" -r 1 -t "$threads" --no-stream --json "$tmp/decode.json" >/dev/null
    dec+=("$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["decode_tok_s"]["median"])' "$tmp/decode.json")")
    "$build/bin/strata" run -m "$model" -p "$prompt" -n "$n" -t "$threads" -c "$ctx" --spec-draft 0 >"$tmp/run.out" 2>"$tmp/run.err"
    run+=("$(sed -n 's/^decode: .*(\([0-9.]*\) tok\/s).*/\1/p' "$tmp/run.err")")
    curl -sf -o "$tmp/answer.json" "http://127.0.0.1:$port/v1/completions" -d "$body"
    srv+=("$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["timings"]["predicted_per_second"])' "$tmp/answer.json")")
    curl -sf -o "$tmp/answer.sse" "http://127.0.0.1:$port/v1/completions" -d "$stream_body"
    sse+=("$(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("data: {") and "\"timings\"" in line:
        print(json.loads(line[6:])["timings"]["predicted_per_second"])
' "$tmp/answer.sse")")
    echo "round $r: decode ${dec[-1]}, run ${run[-1]}, server ${srv[-1]}, streamed ${sse[-1]} tok/s" >&2
done

python3 - "$model" "$threads" "$n" "${OUT_JSON:-}" "${dec[*]}" "${run[*]}" "${srv[*]}" "${sse[*]}" <<'EOF'
import json, statistics, sys
model, threads, n, out_json = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
series = {name: [float(v) for v in s.split()] for name, s in zip(("decode", "run", "server", "streamed"), sys.argv[5:9])}
med = {k: statistics.median(v) for k, v in series.items()}
print(f"{model.split('/')[-1]}, {threads} threads, {n} tokens after a short prompt, greedy:")
print()
print("| way in | " + " | ".join(f"round {i + 1}" for i in range(len(series["decode"]))) + " | median tok/s | / bench/decode |")
print("|---|" + "---|" * (len(series["decode"]) + 2))
names = {"decode": "bench/decode", "run": "`strata run`", "server": "strata-server `/v1/completions`",
         "streamed": "strata-server, streamed (SSE)"}
for k, v in series.items():
    print(f"| {names[k]} | " + " | ".join(f"{x:.1f}" for x in v) + f" | {med[k]:.1f} | {med[k] / med['decode']:.3f}x |")
if out_json:
    json.dump({"model": model, "threads": int(threads), "n_predict": int(n), "tok_s": series, "median": med,
               "ratio_to_decode": {k: med[k] / med["decode"] for k in med}}, open(out_json, "w"), indent=2)
EOF
