#!/usr/bin/env bash
# Time to first token of a long conversation's next turn, with the prompt cache and
# without it (--no-prompt-cache), on strata-server. Turn 1 is a long user message; turn 2
# sends the whole history back (turn 1, the answer, a short new message), as a chat
# client does. The server's own timings (ttft_ms, prompt tokens, cached tokens) are
# printed for both, with their ratio: with the cache, turn 2 should cost about what its
# new tokens cost. A second pair of runs puts another conversation between the turns
# on the server's only slot, so turn 2 finds its history in host memory (--cache-ram)
# or nowhere (--cache-ram 0).
#
# Usage: scripts/bench-prompt-cache.sh [BUILD_DIR] — env ARCH (qwen3next), PRESET (small),
# TYPE (q8_0), WORDS (1500: turn 1's length in words), THREADS (2).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
arch="${ARCH:-qwen3next}" preset="${PRESET:-small}" type="${TYPE:-q8_0}" words="${WORDS:-1500}"
threads="${THREADS:-2}"
model="${MODELS_DIR:-$HOME/.cache/strata/models}/bench-cache-$arch-$preset-$type.gguf"
mkdir -p "$(dirname "$model")"
[ -f "$model" ] || "$build/bin/strata" make-model --arch "$arch" --preset "$preset" --type "$type" --seed 1 --out "$model" >/dev/null

run() {  # extra server flags...
    local port log pid
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    log=$(mktemp)
    "$build/bin/strata-server" -m "$model" --port "$port" -c 8192 -t "$threads" --spec-draft 0 "$@" >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.2; done
    python3 - "$port" "$words" "$between" <<'EOF'
import json, sys, urllib.request
port, words, between = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
def chat(messages):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", method="POST",
        data=json.dumps({"messages": messages, "max_tokens": 16, "temperature": 0}).encode(),
        headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=600))
history = [{"role": "user", "content": " ".join(f"word{i % 97}" for i in range(words))}]
r1 = chat(history)
if between:  # another conversation takes the slot meanwhile
    chat([{"role": "user", "content": " ".join(f"other{i % 89}" for i in range(words // 4))}])
history += [{"role": "assistant", "content": r1["choices"][0]["message"]["content"]},
            {"role": "user", "content": "And then?"}]
r2 = chat(history)
for name, r in (("turn 1", r1), ("turn 2", r2)):
    u, t = r["usage"], r["timings"]
    print(f"  {name}: {u['prompt_tokens']} prompt tokens, {u['prompt_tokens_details']['cached_tokens']} cached, "
          f"ttft {t['ttft_ms']:.1f} ms")
print(f"TTFT2={r2['timings']['ttft_ms']:.3f}")
EOF
    kill "$pid"; wait "$pid" 2>/dev/null || true; rm -f "$log"
}

echo "model: $arch $preset $type, turn 1 of $words words, $threads threads"
between=0
echo "with the prompt cache:"
with=$(run | tee /dev/stderr | sed -n 's/^TTFT2=//p')
echo "without (--no-prompt-cache):"
without=$(run --no-prompt-cache | tee /dev/stderr | sed -n 's/^TTFT2=//p')
python3 -c "print(f'turn 2 time to first token: {float($without) / float($with):.1f}x faster with the cache ({float($with):.1f} vs {float($without):.1f} ms)')"
between=1
echo "another conversation between the turns, one slot; host memory (--cache-ram 8192):"
ram=$(run --parallel 1 --cache-ram 8192 | tee /dev/stderr | sed -n 's/^TTFT2=//p')
echo "the same without host memory (--cache-ram 0):"
noram=$(run --parallel 1 --cache-ram 0 | tee /dev/stderr | sed -n 's/^TTFT2=//p')
python3 -c "print(f'turn 2 after another conversation: {float($noram) / float($ram):.1f}x faster from host memory ({float($ram):.1f} vs {float($noram):.1f} ms)')"
