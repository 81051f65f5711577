#!/usr/bin/env bash
# One command: build Release, make the 1b llama presets at q8_0, q4_K, q6_K, q4_0, iq4_xs
# and iq3_xxs once (in ~/.cache/strata/models), run bench/decode on each with 2 threads,
# and write docs/benchmarks.md (tables, machine info from lscpu, the exact commands); then
# the integer paths narrower than this CPU's best, forced (scripts/bench-paths.sh: what an
# AVX2-only CPU gets from the same kernels; SKIP_PATHS=1 skips it); then
# decode as bench/decode, `strata run` and the server measure it on the q4_K file
# (scripts/bench-frontends.sh; SKIP_FRONTENDS=1 skips it); then the split and speculation
# comparison (scripts/bench-spec.sh: one device vs two stages, serial and overlap,
# speculation off / serial / pipelined at MTP acceptance 0.3, 0.6, 0.9, on the MoE preset
# and then on the dense hybrid at 0.98, 0.6, 0.3; SKIP_SPEC=1 skips them) and the plot
# docs/benchmarks.png; then layer streaming under a budget (scripts/bench-streaming.sh:
# depth 0 vs 1 against the copies alone and the compute alone; SKIP_STREAM=1 skips it),
# and structured output against free decoding at a 150k vocabulary
# (scripts/bench-constrained.sh; SKIP_CONSTRAINED=1 skips it); with the speculation runs,
# a verify window's MoE experts against a decode step's (bench/moe_window). Whatever
# follows the line "<!-- end of the generated part -->" in docs/benchmarks.md (notes
# written by hand) is kept.
#
# The machine should be quiet: the script prints the load average and the busiest
# processes before the runs (other compiles on the same cores halve the figures).
#
# Environment: BUILD_DIR (default build-bench), THREADS (2), PP (128), TG (64), REPS (3),
# TYPES (the weight types above, space-separated),
# MODELS_DIR (~/.cache/strata/models), LLAMA_BENCH (a llama-bench binary, optional;
# one on PATH is used too), SPEC_JSON. Run from anywhere; paths are relative to the
# repository.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build-bench}"
threads="${THREADS:-2}"
pp="${PP:-128}"
tg="${TG:-64}"
reps="${REPS:-3}"
types="${TYPES:-q8_0 q4_K q6_K q4_0 iq4_xs iq3_xxs}"
models="${MODELS_DIR:-$HOME/.cache/strata/models}"
out="$root/docs/benchmarks.md"
marker="<!-- end of the generated part -->"
tail_kept=""
if [[ -f "$out" ]] && grep -qF "$marker" "$out"; then
    tail_kept="$(sed -n "/$marker/,\$p" "$out" | tail -n +2)"
fi

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target strata strata-server decode moe_window

mkdir -p "$models"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
busy="$(ps -eo pcpu,comm --sort=-pcpu | awk 'NR > 1 && $1 > 5 { printf "%s (%s%%) ", $2, $1 }')"
echo "load average: $load_before; busy processes: ${busy:-none}" >&2
extra=()
if [[ -n "${LLAMA_BENCH:-}" ]]; then extra=(--llama-bench "$LLAMA_BENCH"); fi

results=()
for type in $types; do
    file="$models/llama-1b-${type,,}.gguf"
    if [[ ! -f "$file" ]]; then
        "$build/bin/strata" make-model --arch llama --preset 1b --type "$type" --seed 1 --out "$file"
    fi
    json="$build/bench-llama-1b-${type,,}.json"
    cmd=("$build/bin/decode" "$file" --pp "$pp" --tg "$tg" -r "$reps" -t "$threads" --json "$json" "${extra[@]}")
    echo "+ ${cmd[*]}" >&2
    text="$("${cmd[@]}")"
    echo "$text"
    results+=("### llama 1b ${type}"$'\n\n'"\`${cmd[*]/#$HOME/~}\`"$'\n\n'"$text"$'\n')
done

paths_table=""
if [[ "${SKIP_PATHS:-0}" != 1 ]]; then
    paths_table="$(BUILD_DIR="$build" NO_BUILD=1 MODELS_DIR="$models" THREADS="$threads" REPS="$reps" \
        "$root/scripts/bench-paths.sh")"
    echo "$paths_table"
fi

frontends_table=""
if [[ "${SKIP_FRONTENDS:-0}" != 1 ]]; then
    frontends_table="$(BUILD_DIR="$build" NO_BUILD=1 MODELS_DIR="$models" THREADS="$threads" ROUNDS="$reps" \
        "$root/scripts/bench-frontends.sh")"
    echo "$frontends_table"
fi

spec_json="${SPEC_JSON:-$build/bench-spec.json}"
spec_table=""
if [[ "${SKIP_SPEC:-0}" != 1 ]]; then
    spec_table="$(BUILD_DIR="$build" NO_BUILD=1 REPS="$reps" OUT_JSON="$spec_json" "$root/scripts/bench-spec.sh")"
    echo "$spec_table"
fi
if [[ -f "$spec_json" && -n "$spec_table" ]]; then
    "$root/scripts/plot-bench.sh" "$root/docs/benchmarks.png" "$spec_json" "$build"/bench-llama-1b-*.json
fi

# The same modes on the dense hybrid (qwen35, 24 layers), where a verify window reads each
# weight once: the speculation rows of issue 17's table at ~98%, ~60% and ~30% agreement.
dense_table=""
if [[ "${SKIP_SPEC:-0}" != 1 ]]; then
    dense_table="$(BUILD_DIR="$build" NO_BUILD=1 REPS="$reps" ARCH=qwen35 LAYERS=24 AGREES="0.98 0.6 0.3" N_PREDICT=256 \
        MODES="local local+spec split split+spec split+pipe split+default split+pipe+default" OUT_JSON="$build/bench-spec-dense.json" "$root/scripts/bench-spec.sh")"
    echo "$dense_table"
fi

# A verify window's MoE experts against a decode step's and a plain read of the same bytes
# (issue 17's "each expert's weights read once per window"), on the MoE preset's shape.
moe_table=""
if [[ "${SKIP_SPEC:-0}" != 1 ]]; then
    moe_table="$("$build/bin/moe_window" -t "$threads")"
    echo "$moe_table"
fi

stream_table=""
if [[ "${SKIP_STREAM:-0}" != 1 ]]; then
    stream_table="$(REPS="$reps" "$root/scripts/bench-streaming.sh" "$build")"
    echo "$stream_table"
fi

constrained_table=""
if [[ "${SKIP_CONSTRAINED:-0}" != 1 ]]; then
    constrained_table="$(REPS="$reps" "$root/scripts/bench-constrained.sh" "$build")"
    echo "$constrained_table"
fi

# The tree's state, leaving out the two files this script writes (the redirection below
# has already emptied the first when its commands run).
tree="with local changes"
if git -C "$root" diff --quiet HEAD -- . ':!docs/benchmarks.md' ':!docs/benchmarks.png' 2>/dev/null; then tree=clean; fi
{
    echo "# Benchmarks"
    echo
    echo "Written by \`scripts/bench.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC') at commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo "(working tree $tree)."
    echo "Synthetic models (\`strata make-model --arch llama --preset 1b --seed 1\`), single sequence,"
    echo "$threads threads; prompt: one window of $pp tokens; decode: $tg steps of one token;"
    echo "median and range over $reps repetitions after one warm-up. Decode GB/s counts the"
    echo "bytes of all layer weights plus the output head per token (the file's bytes; the"
    echo "packed copies the CPU kernels read have the same size, IQ3_XXS's 4% more, which is"
    echo "not counted). Bandwidth is measured in the"
    echo "same run, on the same kind of memory as the packed weights (2 MiB pages where the"
    echo "system gives them): **decode is compared with the read figure**, the best of several"
    echo "read-only loops (one or four streams per thread, SSE2 or AVX-512, with and without"
    echo "prefetch), since decode only reads weights; copy and triad are STREAM's figures,"
    echo "for reference (bench/decode.cpp explains all of them). The host's bandwidth drifts"
    echo "within minutes, so each repetition's decode is compared with the read loops run right"
    echo "before and after it (\"read GB/s around each decode\"); the first table is the"
    echo "bandwidth measured before the model loads."
    echo
    for r in "${results[@]}"; do echo "$r"; done
    if [[ -n "$paths_table" ]]; then
        echo "### The narrower integer paths on this CPU"
        echo
        echo "\`BUILD_DIR=${build/#$root\//} NO_BUILD=1 REPS=$reps scripts/bench-paths.sh\` (each path forced with bench/decode --isa: what a CPU with only AVX2 or AVX-VNNI gets from the same kernels; the ratios are against the path this CPU picks, in the same run)."
        echo
        echo "$paths_table"
        echo
    fi
    if [[ -n "$frontends_table" ]]; then
        echo "### Decode through \`strata run\` and the server"
        echo
        echo "\`BUILD_DIR=${build/#$root\//} NO_BUILD=1 ROUNDS=$reps scripts/bench-frontends.sh\` (the same file, the three ways in alternated; the client writes the answer to a file, so it takes no core during the request)."
        echo
        echo "$frontends_table"
        echo
    fi
    if [[ -n "$spec_table" ]]; then
        echo "### Split and speculative decoding"
        echo
        echo "\`BUILD_DIR=${build/#$root\//} NO_BUILD=1 REPS=$reps scripts/bench-spec.sh\` (docs/spec.md explains the modes and the models)."
        echo
        echo "$spec_table"
        echo
    fi
    if [[ -n "$dense_table" ]]; then
        echo "### Speculation on a dense hybrid (qwen35)"
        echo
        echo "\`BUILD_DIR=${build/#$root\//} NO_BUILD=1 REPS=$reps ARCH=qwen35 LAYERS=24 AGREES=\"0.98 0.6 0.3\" N_PREDICT=256 MODES=\"local local+spec split split+spec split+pipe split+default split+pipe+default\" scripts/bench-spec.sh\`"
        echo
        echo "$dense_table"
        echo
    fi
    if [[ -n "$moe_table" ]]; then
        echo "### A verify window's MoE experts"
        echo
        echo "\`${build/#$root\//}/bin/moe_window -t $threads\` (bench/moe_window.cpp: the small qwen3next preset's expert shape, 160 layers of experts so that they come from memory, random top-4 routing per layer; CpuOps::moe_experts runs a window's experts one task per expert, moe_ffn)."
        echo
        echo "$moe_table"
        echo
    fi
    if [[ -n "$stream_table" ]]; then
        echo "### Layer streaming under a device budget"
        echo
        echo "\`REPS=$reps scripts/bench-streaming.sh ${build/#$root\//}\` (docs/streaming.md)."
        echo
        echo "$stream_table"
        echo
    fi
    if [[ -n "$constrained_table" ]]; then
        echo "### Structured output against free decoding"
        echo
        echo "\`REPS=$reps scripts/bench-constrained.sh ${build/#$root\//}\` (docs/server.md, structured output)."
        echo
        echo "$constrained_table"
        echo
    fi
    if [[ -f "$root/docs/benchmarks.png" && -n "$spec_table" ]]; then
        echo "![tok/s by mode](benchmarks.png)"
        echo
    fi
    echo "## Machine"
    echo
    echo '```'
    lscpu | grep -E 'Model name|^CPU\(s\)|Thread|Core|Socket|MHz|L1d|L2|L3|NUMA node\(s\)|Hypervisor' || true
    echo "SIMD flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|f16c|avx512f|avx512bw|avx512vl|avx512_vnni|avx_vnni|avx512_bf16|amx_tile|amx_int8|amx_bf16)$' | tr '\n' ' ')"
    free -g | head -2
    echo "load average before the runs: $load_before (other processes share the cores when it is above 0)"
    echo "busy processes before the runs: ${busy:-none}"
    echo '```'
    echo
    echo "$marker"
    if [[ -n "$tail_kept" ]]; then echo "$tail_kept"; fi
} >"$out"
echo "wrote $out" >&2

