#!/usr/bin/env bash
# Layer streaming under a device budget (--max-vram, --stream-layers; docs/streaming.md):
# decode tok/s of a model whose layers all stream through the device (nothing resident),
# with the copies made at each layer's turn (--layer-prefetch-depth 0) and with the next
# layer's copy overlapping the current layer's compute (depth 1), against the compute
# alone (everything resident) and the copies alone (depth 0's time waiting for them).
# Depth 1 should approach max(copy, compute) per token, not their sum.
#
# On a CPU device the "copy queue" is a thread of its own: THREADS (default 1) compute
# threads leave a core for it on a two-core machine.
#
# Usage: scripts/bench-streaming.sh [BUILD_DIR] — env ARCH (llama), PRESET (small),
# TYPE (q8_0), TOKENS (64), THREADS (1), REPS (3: the best of REPS runs each).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
arch="${ARCH:-llama}" preset="${PRESET:-small}" type="${TYPE:-q8_0}" tokens="${TOKENS:-64}"
threads="${THREADS:-1}" reps="${REPS:-3}"
model="${MODELS_DIR:-$HOME/.cache/strata/models}/bench-stream-$arch-$preset-$type.gguf"
mkdir -p "$(dirname "$model")"
[ -f "$model" ] || "$build/bin/strata" make-model --arch "$arch" --preset "$preset" --type "$type" --seed 1 --out "$model" >/dev/null

run() {  # flags... -> "decode_tps wait_ms copies"
    "$build/bin/strata" run -m "$model" -p "Once upon a time" -n "$tokens" --temp 0 -t "$threads" -c 256 \
        --spec-draft 0 "$@" 2>&1 >/dev/null | awk '
        /^decode:/ { for (i = 1; i <= NF; i++) if ($i ~ /^\(/) { tps = substr($i, 2) } }
        /^streaming:/ { copies = $2; for (i = 1; i <= NF; i++) if ($i == "ms") wait = $(i - 1) }
        END { printf "%s %s %s\n", tps, (wait == "" ? 0 : wait), (copies == "" ? 0 : copies) }'
}
best() {  # flags... -> the run with the highest decode tok/s of REPS
    local out b=""
    for _ in $(seq "$reps"); do
        out=$(run "$@")
        if [ -z "$b" ] || awk -v a="${out%% *}" -v c="${b%% *}" 'BEGIN { exit !(a > c) }'; then b=$out; fi
    done
    echo "$b"
}

# The smallest budget that holds the model with every layer streamed through two slots:
# the planner's own minimum, read from its refusal of a budget of 1 MiB.
need=$("$build/bin/strata" run -m "$model" -p x -n 1 -t "$threads" -c 256 --spec-draft 0 --max-vram cpu:0=1MiB \
        --stream-layers 2>&1 | sed -n 's/.*needs at least \([0-9.]*\) MiB.*(\([0-9.]*\) MiB of head.* \([0-9.]*\) MiB for its largest.*/\1 \3/p' || true)
[ -n "$need" ] || { echo "could not read the planner's minimum" >&2; exit 1; }
min=${need% *} layer=${need#* }
budget=$(awk -v m="$min" -v l="$layer" 'BEGIN { printf "%.1f", m + l + 0.5 }')  # one slot more: depth 1 fits

compute=$(best --max-vram cpu:0=64GiB)
d0=$(best --max-vram "cpu:0=${budget}MiB" --stream-layers --layer-prefetch-depth 0)
d1=$(best --max-vram "cpu:0=${budget}MiB" --stream-layers --layer-prefetch-depth 1)
read -r c_tps _ _ <<<"$compute"
read -r d0_tps d0_wait d0_copies <<<"$d0"
read -r d1_tps d1_wait d1_copies <<<"$d1"
awk -v c="$c_tps" -v z="$d0_tps" -v zw="$d0_wait" -v o="$d1_tps" -v ow="$d1_wait" \
    -v n="$tokens" -v model="$(basename "$model")" -v b="$budget" -v t="$threads" 'BEGIN {
    # ms per token: compute alone (everything resident); copies alone: the host time of depth 0
    # waiting for its copies (nothing else runs meanwhile), over its windows (the prompt
    # window and one per decode token, n in all).
    comp = 1000 / c; z_ms = 1000 / z; o_ms = 1000 / o; copy = zw / n
    mx = (comp > copy ? comp : copy); sum = comp + copy
    printf "model %s, budget %s MiB (every layer streamed), %d decode tokens, %d compute thread(s)\n", model, b, n, t
    printf "| what | ms/token | tok/s | vs max(copy, compute) |\n|---|---|---|---|\n"
    printf "| compute alone (all resident) | %.2f | %.1f | |\n", comp, c
    printf "| copies alone (depth 0: time waiting for them) | %.2f | | |\n", copy
    printf "| depth 0: copy, then compute | %.2f | %.1f | %.2fx |\n", z_ms, z, z_ms / mx
    printf "| depth 1: next copy during compute (%.2f ms/token still waiting) | %.2f | %.1f | %.2fx |\n", ow / n, o_ms, o, o_ms / mx
    printf "depth 1 / depth 0 speed: %.2fx; copy + compute would be %.2f ms/token\n", o / z, sum
}'
