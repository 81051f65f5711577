#!/usr/bin/env bash
# Repeats `strata run` with pipelined verify windows on a two-stage split, the command
# of a flaky run once reported (issue 14 item 12), varying the thread count, the length,
# the model (an MTP head that agrees ~90% and one that agrees ~30%), K (3, or every
# fourth run the default, whose K walks from window to window) and every
# STRATA_PIPELINE_* test variable; each run is bounded by a timeout, so a hang shows as
# exit 124. Every failing run's exit status and stderr are kept and printed; exits 1 if
# any run failed. Usage: scripts/stress-pipeline.sh [BUILD_DIR] [RUNS] (60 by default).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
runs=${2:-${STRESS_RUNS:-60}}
bin="$build/bin/strata"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" make-model --arch qwen3next --preset small --mtp-agree 0.9 --type q8_0 --seed 1 --out "$tmp/agree.gguf" >/dev/null
"$bin" make-model --arch qwen3next --preset small --mtp-agree 0.3 --type q4_K --seed 5 --out "$tmp/often.gguf" >/dev/null
vars=("" STRATA_PIPELINE_FORCE_MISS=1 STRATA_PIPELINE_FORCE_MISS=2 STRATA_PIPELINE_SNAP_OVERLAP=0
      STRATA_PIPELINE_PRESTAGE=0 STRATA_PIPELINE_DOOM_SKIP=0 STRATA_PIPELINE_THETA=0)
failed=0
for i in $(seq 1 "$runs"); do
    model="$tmp/agree.gguf"
    [ $((i % 3)) = 0 ] && model="$tmp/often.gguf"
    var=${vars[$((i % ${#vars[@]}))]}
    threads=$((i % 3))  # 0 = all cores
    n=$((16 + (i * 13) % 100))
    k=(--spec-draft 3)
    [ $((i % 4)) = 1 ] && k=()  # the default
    rc=0
    env $var timeout 120 "$bin" run -m "$model" -p "story number $i" -n "$n" -t "$threads" "${k[@]}" \
        --devices cpu:0,cpu:1 --split 0-3,4-7 --pipeline-windows 2 >"$tmp/out" 2>"$tmp/err" || rc=$?
    if [ "$rc" != 0 ]; then
        failed=$((failed + 1))
        echo "stress-pipeline: run $i failed with exit $rc ($(basename "$model") -t $threads -n $n ${k[*]:-default K} ${var:-no variable}):"
        cat "$tmp/err"
    fi
done
echo "stress-pipeline: $runs runs, $failed failed"
[ "$failed" = 0 ]
