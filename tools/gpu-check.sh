#!/usr/bin/env bash
# The GPU checks, for a machine with an NVIDIA GPU (one prepared command, under 8 minutes):
# build the CUDA backend for this card, run the kernels' tests, the every-op harness on the
# GPU against the CPU reference, the whole-model GPU tests (logits against the CPU, bit
# identity across two stages on one GPU with the mapped hand-off, the determinism matrix of
# speculation, overlap and pipelined windows, the dropped hand-off), then decode tok/s of
# synthetic files on the GPU and on the CPU (Qwen3-Next-80B-A3B's shape, four layers, as a %
# of the card's read bandwidth by the weights each token reads; with and without CUDA graphs), layer streaming under a budget (depth 0 and 1)
# and experts in host memory with a cache on the card, speculation's windows against plain decoding (what a window
# costs in plain steps there), then each kernel's own time by ncu. Writes a markdown report (argument 1, default
# gpu-report.md) and prints it.
#
#   bash tools/gpu-check.sh [REPORT]      (CUDA_ARCH=90 by default; STRATA_JOBS=16)
#   STRATA_BUNDLE=.gpu-bundle bash tools/gpu-check.sh [REPORT]
#       with the binaries tools/gpu-bundle.sh built elsewhere (a lent machine without
#       Strata's libraries or a network cannot build): no build step here.
set -uo pipefail
cd "$(dirname "$0")/.."
report=${1:-gpu-report.md}
arch=${CUDA_ARCH:-90}
jobs=${STRATA_JOBS:-$(nproc)}
b=${STRATA_BUNDLE:-build-gpu}
: > "$report"
say() { printf '%s\n' "$*" | tee -a "$report"; }
logs=${report%.md}-logs
mkdir -p "$logs"
step() {  # name, command...: runs it, reports pass/fail and its last lines (every failure when it fails)
    local name=$1; shift
    local t0=$SECONDS out rc
    out=$("$@" 2>&1); rc=$?
    printf '%s\n' "$out" > "$logs/$(printf '%s' "$name" | tr -c 'a-zA-Z0-9' '_').log"
    say "### $name: $([ $rc = 0 ] && echo passed || echo FAILED) ($((SECONDS - t0)) s)"
    say '```'
    # A failed Catch2 run: each failure with its expansion and messages, not only the last.
    [ $rc = 0 ] || say "$(printf '%s\n' "$out" | grep -E -A10 'FAILED:|[[]error[]]|[[]warning[]]' | head -n 150)"
    say "$(printf '%s\n' "$out" | tail -n 12)"; say '```'
    return $rc
}

say "# GPU check, $(date -u +%F)"
say ""
say "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -2)"
if [ -n "${STRATA_BUNDLE:-}" ]; then
    export LD_LIBRARY_PATH="$b/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    say "binaries of tools/gpu-bundle.sh, commit $(tr '\n' ' ' <"$b/COMMIT" 2>/dev/null)"
    step "bundle runs" "$b/bin/strata" devices || exit 1
else
    command -v cmake >/dev/null || apt-get install -y -qq cmake g++ >/dev/null 2>&1
    step "configure + build (sm_$arch)" bash -c "cmake -S . -B $b -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=$arch >/dev/null &&
        cmake --build $b -j$jobs --target strata strata_tests strata_gpu_tests decode gpu_matmul gpu_handoff" || exit 1
fi
tmp=$(mktemp -d)
# Qwen3-Next-80B-A3B's own shapes (512 experts, top-10, 151936 rows of head), four of its
# 48 layers (three Gated DeltaNet, one attention: its 3:1 pattern): ~3.5 GB at q4_K. Its
# quantizer takes a minute or two of the CPUs: written while the GPU tests run.
t0=$SECONDS
$b/bin/strata make-model --arch qwen3next --preset 80b-a3b --layers 4 --type q4_K --seed 1 --threads "$jobs" \
    --out "$tmp/n80.gguf" >"$tmp/n80.log" 2>&1 &
n80_pid=$!
step "devices" $b/bin/strata devices --bandwidth
devs=$($b/bin/strata devices --bandwidth 2>/dev/null)
bw=$(printf '%s\n' "$devs" | sed -n 's/^cuda:0 .*read \([0-9.]*\) GB\/s.*/\1/p')
cbw=$(printf '%s\n' "$devs" | sed -n 's/^cuda:0 .*pinned host memory \([0-9.]*\) GB\/s.*/\1/p')
# The decode product alone (bench/gpu_matmul.cpp): per type and shape, against the read bandwidth.
if [ -x "$b/bin/gpu_matmul" ]; then
    say ""
    say "$($b/bin/gpu_matmul q4_K q8_0 q6_K 2>&1)"
    say ""
fi
# The hand-off's wake-up (bench/gpu_handoff.cpp): the ready word alone, and a whole stage
# boundary (publish, wait, payload copy) between two streams of the card.
if [ -x "$b/bin/gpu_handoff" ]; then
    say "$(timeout 120 $b/bin/gpu_handoff 2>&1)"
    say ""
fi
step "kernel tests (dequant, conversions)" $b/bin/strata_gpu_tests
step "every op on every backend" $b/bin/strata_tests "[ops]"
# The hand-off tests apart: a fault there poisons the process's GPU context, and every
# later test would then fall back to the CPU.
step "whole models on the GPU" $b/bin/strata_tests "[gpu]~[handoff]"
step "hand-off waits and drops on the GPU" $b/bin/strata_tests "[gpu][handoff]"

$b/bin/strata make-model --arch qwen3next --preset small --type q4_K --mtp --seed 1 --out "$tmp/qn.gguf" >/dev/null
$b/bin/strata make-model --arch llama --preset 1b --type q8_0 --seed 1 --out "$tmp/l1b.gguf" >/dev/null
wait "$n80_pid" || say "make-model 80b-a3b failed: $(tail -n 2 "$tmp/n80.log")"
say ""
say "(80b-a3b x 4 layers written, beside the tests, $((SECONDS - t0)) s after it started)"
say ""
# "cuda:0 no graphs": every kernel launched one by one (STRATA_GPU_GRAPHS=0), against the
# default, where a decode step replays as a CUDA graph (kernels/cuda/graph.cu).
say "| model | device | decode tok/s | weights read per token | % of cuda:0's read bandwidth (${bw:-?} GB/s) | greedy text same as CPU | graphs |"
say "|---|---|---|---|---|---|---|"
for m in n80 qn l1b; do
    for dev in cpu cuda:0 nographs; do
        flags=(); [ "$dev" = cpu ] || flags=(--devices cuda:0)
        STRATA_GPU_GRAPHS=$([ "$dev" = nographs ] && echo 0 || echo 1) \
            $b/bin/strata run -m "$tmp/$m.gguf" -p "hello world" -n 64 -c 512 "${flags[@]}" >"$tmp/$dev.txt" 2>"$tmp/$dev.err"
        rate=$(sed -n 's/^decode: .*(\(.*\) tok\/s)/\1/p' "$tmp/$dev.err")
        # strata run's own count: every layer, the routed experts' share, the head
        wmib=$(sed -n 's/^weights: \([0-9.]*\) MiB read per decode token.*/\1/p' "$tmp/$dev.err")
        gbs=$(sed -n 's/^weights: .*(\([0-9.]*\) GB\/s at this rate)/\1/p' "$tmp/$dev.err")
        same=""; [ "$dev" = cpu ] || same=$(cmp -s "$tmp/cpu.txt" "$tmp/$dev.txt" && echo yes || echo no)
        pct=""
        if [ "$dev" != cpu ] && [ -n "$bw" ] && [ -n "$gbs" ]; then
            pct=$(awk -v g="$gbs" -v w="$bw" 'BEGIN { printf "%.0f%%", 100 * g / w }')
        fi
        graphs=$(sed -n 's/^gpu graphs: //p' "$tmp/$dev.err")
        say "| $m | ${dev/nographs/cuda:0 no graphs} | $rate | ${wmib:+$wmib MiB} | $pct | $same | $graphs |"
    done
done

# Where a decode step's time goes (STRATA_GPU_PROFILE): the host's time in queue items and
# waits with graphs, then each kernel's time launched one by one.
for m in n80 qn; do
    for g in 1 0; do
        STRATA_GPU_PROFILE=1 STRATA_GPU_GRAPHS=$g $b/bin/strata run -m "$tmp/$m.gguf" -p "hello world" -n 64 -c 512 \
            --devices cuda:0 --spec-draft 0 >/dev/null 2>"$tmp/p.err"
        say ""
        say "$m on cuda:0, STRATA_GPU_PROFILE=1 STRATA_GPU_GRAPHS=$g, --spec-draft 0:"
        say '```'
        say "$(grep -E '^decode:' "$tmp/p.err")"
        say "$(sed -n '/^device profile:/,$p' "$tmp/p.err" | head -n 40)"
        say '```'
        # Launched one by one, the kernel count per queue item (a decode step; the prompt
        # is one item too) shows the launches per token that fused.cu removes.
        items=$(sed -n 's/^ *host: \([0-9]*\) queue items.*/\1/p' "$tmp/p.err" | head -n 1)
        kern=$(sed -n 's/^ *\([0-9]*\) kernels, .*/\1/p' "$tmp/p.err" | head -n 1)
        if [ "$g" = 0 ] && [ -n "$items" ] && [ -n "$kern" ] && [ "$items" -gt 0 ]; then
            say "kernels per queue item: $((kern / items)) ($kern kernels, $items items)"
        fi
    done
done

# Layer streaming on the card (docs/streaming.md): every layer of the 1B file streamed
# through cuda:0 under the smallest budget that holds two slots, copies on the copy
# stream at each layer's turn (depth 0) or during the layer before (depth 1), against
# the same file resident. Depth 1 should approach max(copy, compute), not their sum.
say ""
say "| l1b on cuda:0 | decode tok/s | streaming (from strata run) | greedy text same as resident |"
say "|---|---|---|---|"
$b/bin/strata run -m "$tmp/l1b.gguf" -p "hello world" -n 64 -c 512 --devices cuda:0 >"$tmp/res.txt" 2>"$tmp/res.err"
say "| resident | $(sed -n 's/^decode: .*(\(.*\) tok\/s)/\1/p' "$tmp/res.err") | | |"
need=$($b/bin/strata run -m "$tmp/l1b.gguf" -p x -n 1 -c 512 --devices cuda:0 --max-vram cuda:0=1MiB --stream-layers 2>&1 |
       sed -n 's/.*needs at least \([0-9.]*\) MiB.* \([0-9.]*\) MiB for its largest.*/\1 \2/p')
if [ -n "$need" ]; then
    # The minimum, a second slot for the prefetch, the 64 MiB reserve below and some
    # slack: a budget of minimum + one layer + 64 left the reserve eating the second slot,
    # so "depth 1" ran at depth 0 (the planner says "reduced to fit").
    budget=$(awk -v m="${need% *}" -v l="${need#* }" 'BEGIN { printf "%.0f", m + l + 64 + 16 }')
    for d in 0 1; do
        $b/bin/strata run -m "$tmp/l1b.gguf" -p "hello world" -n 64 -c 512 --devices cuda:0 --max-vram "cuda:0=${budget}MiB" \
            --vram-reserve-mib 64 --stream-layers --layer-prefetch-depth $d >"$tmp/s$d.txt" 2>"$tmp/s$d.err"
        rate=$(sed -n 's/^decode: .*(\(.*\) tok\/s)/\1/p' "$tmp/s$d.err")
        info="$(sed -n 's/^placement: [^;]*; //p' "$tmp/s$d.err" | head -n 1); $(sed -n 's/^streaming: //p' "$tmp/s$d.err" | cut -c1-150)"
        say "| depth $d, ${budget} MiB | $rate | $info | $(cmp -s "$tmp/res.txt" "$tmp/s$d.txt" && echo yes || echo no) |"
    done
    # The copies alone bound a streamed token: its MiB at the measured pinned copy rate.
    per=$(sed -n 's/.*, \([0-9.]*\) MiB per token).*/\1/p' "$tmp/s1.err")
    res=$(sed -n 's/^decode: .*(\(.*\) tok\/s)/\1/p' "$tmp/res.err")
    if [ -n "$per" ] && [ -n "$cbw" ] && [ -n "$res" ]; then
        say ""
        say "$(awk -v m="$per" -v c="$cbw" -v r="$res" 'BEGIN { cp = m * 1.048576 / c; cm = 1000 / r;
            printf "copies alone: %.1f MiB per token at %.1f GB/s (pinned, measured) = %.2f ms; compute alone (resident) %.2f ms; max %.1f tok/s, sum %.1f tok/s", m, c, cp, cm, 1000 / (cp > cm ? cp : cm), 1000 / (cp + cm) }')"
    fi
else
    say "streaming: could not read the planner's minimum: $(tail -n 2 "$tmp/res.err")"
fi

# Experts in host memory: the small qwen3next file with every layer's experts on the
# CPU, then with a cache of hot experts on the card re-ranked every 8 windows.
say ""
say "| qn on cuda:0 | decode tok/s | host experts (from strata run) | greedy text same as all on the GPU |"
say "|---|---|---|---|"
$b/bin/strata run -m "$tmp/qn.gguf" -p "hello world" -n 64 -c 512 --devices cuda:0 >"$tmp/q.txt" 2>"$tmp/q.err"
say "| all on the GPU | $(sed -n 's/^decode: .*(\(.*\) tok\/s)/\1/p' "$tmp/q.err") | | |"
for flags in "--cpu-moe" "--cpu-moe --moe-cache-mib 256 --adapt-every 8"; do
    # shellcheck disable=SC2086
    $b/bin/strata run -m "$tmp/qn.gguf" -p "hello world" -n 64 -c 512 --devices cuda:0 $flags >"$tmp/h.txt" 2>"$tmp/h.err"
    say "| $flags | $(sed -n 's/^decode: .*(\(.*\) tok\/s)/\1/p' "$tmp/h.err") | $(sed -n 's/^host experts: //p' "$tmp/h.err") | $(cmp -s "$tmp/q.txt" "$tmp/h.txt" && echo yes || echo "no (the host's rows round differently)") |"
done
# Speculation on the card (issue 17): what a verify window costs there in plain steps, the
# number the default's rules were tuned around on CPUs (1.4-1.5 for K = 1) and expect to be
# about one on a GPU. The small qwen3next preset with MTP heads that agree ~98% and ~60%:
# plain decoding, K = 1, K = 3 and the default (whose K walks). A K = 1 window's cost in
# plain steps is its tokens per window x plain tok/s / K = 1's tok/s.
spec_row() {  # file, label, flags...: one strata run on cuda:0, its row
    local f=$1 label=$2; shift 2
    $b/bin/strata run -m "$f" -p "The quick brown fox jumps over the lazy dog" -n 256 -c 512 --devices cuda:0 "$@" \
        >"$tmp/s.txt" 2>"$tmp/s.err"
    local rate tpw kend same
    rate=$(sed -n 's/^decode: .*(\(.*\) tok\/s)/\1/p' "$tmp/s.err")
    tpw=$(sed -n 's/^speculative: .* \([0-9.]*\) tokens\/window.*/\1/p' "$tmp/s.err")
    kend=$(sed -n "s/.*the default's K ended at \([0-9]*\).*/\1/p" "$tmp/s.err")
    same=$(cmp -s "$tmp/s.txt" "$tmp/s0.txt" && echo yes || echo no)
    printf '%s %s %s %s %s\n' "$label" "${rate:-?}" "${tpw:--}" "${kend:--}" "$same"
}
say ""
say "| qn q8_0, MTP agreeing A, cuda:0, 256 tokens | A | decode tok/s | vs plain | tokens/window | K at the end | text same as plain |"
say "|---|---|---|---|---|---|---|"
for a in 0.98 0.6; do
    f="$tmp/qa$a.gguf"
    $b/bin/strata make-model --arch qwen3next --preset small --type q8_0 --seed 1 --mtp-agree "$a" --out "$f" >/dev/null 2>&1
    $b/bin/strata run -m "$f" -p "The quick brown fox jumps over the lazy dog" -n 256 -c 512 --devices cuda:0 \
        --spec-draft 0 >"$tmp/s0.txt" 2>"$tmp/s.err"
    plain=$(sed -n 's/^decode: .*(\(.*\) tok\/s)/\1/p' "$tmp/s.err")
    say "| plain | $a | ${plain:-?} | 1.00x | | | |"
    k1_cost=""
    for sd in 1 3 default; do
        flags=(--spec-draft "$sd"); [ "$sd" = default ] && flags=()
        read -r label rate tpw kend same < <(spec_row "$f" "$sd" "${flags[@]}")
        ratio=$(awk -v r="$rate" -v p="$plain" 'BEGIN { if (p > 0 && r > 0) printf "%.2fx", r / p; else print "?" }')
        [ "$sd" = 1 ] && k1_cost=$(awk -v t="$tpw" -v r="$rate" -v p="$plain" 'BEGIN { if (r > 0 && t > 0) printf "%.2f", t * p / r }')
        say "| K = $label | $a | $rate | $ratio | $tpw | $kend | $same |"
    done
    say "| (a K = 1 window costs ${k1_cost:-?} plain steps at A = $a) | | | | | | |"
done

# Each kernel's own duration in a qn decode step (Nsight Compute, where the card's machine
# has it): the event profile above counts a kernel's launch wait in its time; this does
# not (its clocks are locked at base, so durations read somewhat high).
ncu_bin=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
if [ -x "$ncu_bin" ]; then
    STRATA_GPU_GRAPHS=0 timeout 120 "$ncu_bin" --section SpeedOfLight --launch-skip 300 --launch-count 130 \
        $b/bin/strata run -m "$tmp/qn.gguf" -p "hello world" -n 4 -c 512 --devices cuda:0 --spec-draft 0 \
        >"$tmp/ncu.txt" 2>&1
    say ""
    say "qn decode kernels by ncu (us on average, calls, kernel [grid]; launches 300-429 of the run):"
    say '```'
    say "$(grep -E '^  [a-zA-Z_ ]*[a-z_]+.*\(.*\)x\(|Duration' "$tmp/ncu.txt" |
        sed -E 's/\([^()]*\) \(/ (/; s/, Context.*//; s/void //; s/unnamed>:://; s/\(([0-9]+), ([0-9]+), ([0-9]+)\)x\(([0-9]+), 1, 1\)/[\1x\2x\3]/' |
        paste - - | awk '{ d = $NF; $0 = substr($0, 1, index($0, "Duration") - 1); gsub(/[ \t]+$/, ""); print d "\t" $0 }' |
        awk -F'\t' '{ n[$2]++; s[$2] += $1 } END { for (k in n) printf "%8.2f %4d  %s\n", s[k] / n[k], n[k], k }' |
        sort -rn | head -n 30)"
    say '```'
fi
rm -rf "$tmp"
