#!/usr/bin/env bash
# Prompt and decode speed of the integer paths this CPU runs, forced one after another
# (bench/decode --isa), on the 1b llama presets: what a CPU with only AVX2 (or AVX-VNNI)
# would get from the same kernels, measured on this one. Each type's paths run back to back,
# so a drift of the host's bandwidth reaches all of them; the decode column is also given
# as a share of the read figure measured around it (bench/decode's "% of read"), and the
# ratios are against the path this CPU would pick in the same run. A path the CPU lacks
# (AMX here, say) is left out.
#
# Usage: scripts/bench-paths.sh — env BUILD_DIR (build-bench; built unless NO_BUILD=1),
# MODELS_DIR, TYPES (q8_0 q4_K q6_K iq4_xs iq3_xxs: a grid type, whose 256-bit kernels differ
# most from the AVX-512 ones), PATHS (amx avx512-vnni avx-vnni avx2), THREADS (2),
# PP (64), TG (32), REPS (3).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build-bench}"
models="${MODELS_DIR:-$HOME/.cache/strata/models}"
types="${TYPES:-q8_0 q4_K q6_K iq4_xs iq3_xxs}"
paths="${PATHS:-amx avx512-vnni avx-vnni avx2}"
threads="${THREADS:-2}"
pp="${PP:-64}"
tg="${TG:-32}"
reps="${REPS:-3}"
if [[ "${NO_BUILD:-0}" != 1 ]]; then
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=OFF >/dev/null
    cmake --build "$build" -j"$(nproc)" --target strata decode >&2
fi
for exe in strata decode; do
    [[ -x "$build/bin/$exe" ]] || { echo "bench-paths: no $build/bin/$exe (build it, or set BUILD_DIR)" >&2; exit 1; }
done

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# The medians of bench/decode's --json file $1: prompt tok/s, decode tok/s, decode % of read.
medians() {
    python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
print("%.1f %.2f %.1f" % (d["prompt_tok_s"]["median"], d["decode_tok_s"]["median"], 100 * d["decode_fraction"]["median"]))' "$1"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }'; }

echo "| type | path | prompt tok/s (pp$pp) | decode tok/s (tg$tg) | decode % of read | prompt / best path | decode / best path |"
echo "|---|---|---:|---:|---:|---:|---:|"
for type in $types; do
    file="$models/llama-1b-${type,,}.gguf"
    if [[ ! -f "$file" ]]; then
        mkdir -p "$models"
        "$build/bin/strata" make-model --arch llama --preset 1b --type "$type" --seed 1 --out "$file" >&2
    fi
    best_pp="" best_tg=""
    for path in $paths; do
        cmd=("$build/bin/decode" "$file" --pp "$pp" --tg "$tg" -r "$reps" -t "$threads" --isa "$path" --json "$tmp/d.json")
        echo "+ ${cmd[*]}" >&2
        if ! "${cmd[@]}" >/dev/null 2>&1; then continue; fi  # not on this CPU
        read -r p d share <<<"$(medians "$tmp/d.json")"
        if [[ -z "$best_pp" ]]; then best_pp="$p" best_tg="$d"; fi
        echo "| $type | $path | $p | $d | $share% | $(ratio "$p" "$best_pp") | $(ratio "$d" "$best_tg") |"
    done
done
