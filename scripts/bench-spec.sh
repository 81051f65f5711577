#!/usr/bin/env bash
# Speculative decoding benchmark on predictable models (docs/spec.md, "Benchmark").
# For each agreement A in AGREES, makes the small preset of ARCH (qwen3next unless set; q8_0, --mtp,
# --mtp-agree A) once into MODELS_DIR, then runs `strata run` REPS times per mode and
# reports the median decode tok/s with the measured acceptance:
#   local        one device, THREADS threads, no speculation
#   local+spec   one device, --spec-draft K
#   local+default  one device, no --spec-draft: the default, whose K walks by its
#                measured rate (docs/spec.md, "K"); the row says where K ended
#   split        --devices cpu:0,cpu:1 --threads-per-device 1, no speculation (serial hand-off)
#   split+overlap  the same with STRATA_SPLIT_OVERLAP=1 (every stage launched up front)
#   split+spec   the same with --spec-draft K (serial windows)
#   split+spec+overlap  the same with STRATA_SPLIT_OVERLAP=1 (each window's stages launched up front)
#   split+pipe   the same with --spec-draft K --pipeline-windows 2 (skipped, with a
#                message, when this strata does not accept the flag)
#   split+default, split+pipe+default  split+spec and split+pipe without --spec-draft:
#                the default, whose K walks (pipelined windows by their own cost,
#                docs/spec.md "Which K"); the row says where K ended
#   local+spec/whole-head  only with VOCAB over 65536: local+spec with --spec-draft-vocab 0,
#                the whole LM head per draft step, against the default (auto: 32768 rows)
# Prints a markdown table and writes JSON (OUT_JSON). Greedy decoding: every mode must
# print the same text for one model; a difference is reported as an error.
#
# The model files are reused when present: delete them after changing
# engine/synth/predictable.cpp.
#
# Environment: BUILD_DIR (default build-bench; built unless NO_BUILD=1), MODELS_DIR
# (~/.cache/strata/models), AGREES ("0.3 0.6 0.9"), REPS (3), N_PREDICT (128),
# THREADS (2), K (3), CTX (512), PROMPT, OUT_JSON ($BUILD_DIR/bench-spec.json), VOCAB
# (make-model's --vocab-size; default its own, 32000: set 151936 for a model whose LM
# head is most of its bytes, where the draft vocabulary matters), LAYERS (make-model's
# --layers; default the preset's 8: 48 makes the MTP step and the LM head a small part of
# a step, as in the real models of this size class), ARCH (qwen3next, the MoE preset, by
# default; qwen35 for the dense hybrid, whose verify window reads each weight once where
# the MoE preset's reads the union of its tokens' experts; qwen35moe), MODES (a
# space-separated subset of the modes above, in their order; local must be first when
# ratios are wanted).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build-bench}"
models="${MODELS_DIR:-$HOME/.cache/strata/models}"
agrees="${AGREES:-0.3 0.6 0.9}"
reps="${REPS:-3}"
n_predict="${N_PREDICT:-128}"
threads="${THREADS:-2}"
k="${K:-3}"
ctx="${CTX:-512}"
prompt="${PROMPT:-The quick brown fox jumps over the lazy dog}"
out_json="${OUT_JSON:-$build/bench-spec.json}"
vocab="${VOCAB:-}"
layers="${LAYERS:-}"
arch="${ARCH:-qwen3next}"
case "$arch" in
    qwen3next | qwen35 | qwen35moe) ;;
    *) echo "bench-spec: ARCH must be qwen3next, qwen35 or qwen35moe (it is '$arch')" >&2; exit 2 ;;
esac

if [[ "${NO_BUILD:-0}" != 1 ]]; then
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=OFF >/dev/null
    cmake --build "$build" -j"$(nproc)" --target strata
fi
strata="$build/bin/strata"
[[ -x "$strata" ]] || { echo "bench-spec: no $strata (build it, or set BUILD_DIR)" >&2; exit 1; }
mkdir -p "$models" "$(dirname "$out_json")"

modes=(local local+spec local+default split split+overlap split+spec split+spec+overlap split+pipe split+default
    split+pipe+default)
if [[ -n "$vocab" && "$vocab" -gt 65536 ]]; then
    modes=(local local+spec local+default local+spec/whole-head split split+overlap split+spec split+spec+overlap split+pipe
        split+default split+pipe+default)
fi
if [[ -n "${MODES:-}" ]]; then
    read -r -a wanted <<<"$MODES"
    for m in "${wanted[@]}"; do
        case " ${modes[*]} " in
            *" $m "*) ;;
            *) echo "bench-spec: unknown mode '$m' in MODES (known: ${modes[*]})" >&2; exit 2 ;;
        esac
    done
    modes=("${wanted[@]}")
fi
split_flags=(--devices "cpu:0,cpu:1" --threads-per-device 1)
mode_flags() {  # the flags of one mode, one per line
    case "$1" in
        local) printf '%s\n' -t "$threads" --spec-draft 0 ;;
        local+spec) printf '%s\n' -t "$threads" --spec-draft "$k" ;;
        local+default) printf '%s\n' -t "$threads" ;;
        local+spec/whole-head) printf '%s\n' -t "$threads" --spec-draft "$k" --spec-draft-vocab 0 ;;
        split | split+overlap) printf '%s\n' "${split_flags[@]}" --spec-draft 0 ;;
        split+spec | split+spec+overlap) printf '%s\n' "${split_flags[@]}" --spec-draft "$k" ;;
        split+pipe) printf '%s\n' "${split_flags[@]}" --spec-draft "$k" --pipeline-windows 2 ;;
        split+default) printf '%s\n' "${split_flags[@]}" ;;
        split+pipe+default) printf '%s\n' "${split_flags[@]}" --pipeline-windows 2 ;;
    esac
}
pipe_ok=1
# (the help text is read whole first: grep -q quits at the match, and under pipefail the
# SIGPIPE that strata may then get would read as "no flag")
run_help="$("$strata" run --help 2>&1 || true)"
if ! grep -q -- '--pipeline-windows' <<<"$run_help"; then
    pipe_ok=0
    echo "bench-spec: skipping split+pipe: this strata run has no --pipeline-windows flag" >&2
fi

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR] = $1} END {if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
status=0  # 1 when a mode printed different text (greedy output must not depend on the mode)
rows=()   # markdown rows
json=()   # JSON objects
for a in $agrees; do
    file="$models/$arch-small-q8_0-mtp-agree-$a${vocab:+-v$vocab}${layers:+-l$layers}.gguf"
    if [[ ! -f "$file" ]]; then
        "$strata" make-model --arch "$arch" --preset small --type q8_0 --seed 1 --mtp-agree "$a" \
            ${vocab:+--vocab-size "$vocab"} ${layers:+--layers "$layers"} --out "$file" >&2
    fi
    base_tps=""
    ref_md5=""
    for mode in "${modes[@]}"; do
        if [[ "$mode" == split+pipe* && $pipe_ok == 0 ]]; then
            rows+=("| $mode | $a | skipped: no --pipeline-windows | | | | |")
            json+=("$(printf '{"mode": "%s", "agree": %s, "skipped": "no --pipeline-windows"}' "$mode" "$a")")
            continue
        fi
        mapfile -t flags < <(mode_flags "$mode")
        overlap=0
        [[ "$mode" == split+overlap || "$mode" == split+spec+overlap ]] && overlap=1
        cmd=(env "STRATA_SPLIT_OVERLAP=$overlap" "$strata" run -m "$file" -p "$prompt" -n "$n_predict" -c "$ctx" "${flags[@]}")
        echo "+ ${cmd[*]}" >&2
        tps=() ; first="" ; all="" ; tpw="" ; failed="" ; k_end="" ; k_ends=()
        for ((r = 0; r < reps; ++r)); do
            if ! "${cmd[@]}" >"$tmp/out" 2>"$tmp/err"; then
                failed="$(grep -m1 -iE 'error|usage|unknown' "$tmp/err" || tail -n1 "$tmp/err")"
                break
            fi
            tps+=("$(sed -n 's/^decode: .*(\([0-9.]*\) tok\/s).*/\1/p' "$tmp/err")")
            # speculative: K=3, W windows, D drafted, A accepted (P%), per position [p1 p2 p3], T tokens/window, ...
            spec="$(grep -m1 '^speculative:' "$tmp/err" || true)"
            if [[ -n "$spec" ]]; then
                all="$(sed -n 's/.* accepted (\([0-9.]*\)%).*/\1/p' <<<"$spec")"
                all="$(awk -v p="$all" 'BEGIN {printf "%.3f", p / 100}')"
                first="$(sed -n 's/.*per position \[\([0-9.]*\).*/\1/p' <<<"$spec")"
                tpw="$(sed -n 's/.* \([0-9.]*\) tokens\/window.*/\1/p' <<<"$spec")"
                k_end="$(sed -n "s/.*the default's K ended at \([0-9]*\).*/\1/p" <<<"$spec")"
            fi
            [[ -n "$k_end" ]] && k_ends+=("$k_end")
            md5="$(md5sum <"$tmp/out" | cut -d' ' -f1)"
            if [[ -z "$ref_md5" ]]; then ref_md5="$md5"; elif [[ "$md5" != "$ref_md5" ]]; then
                echo "bench-spec: ERROR: $mode printed different text than local for A=$a" >&2
                failed="output differs from local"
                status=1
                break
            fi
        done
        if [[ -n "$failed" ]]; then
            # A mode this strata rejects (a usage error, exit 2) is skipped, not fatal.
            echo "bench-spec: skipping $mode for A=$a: $failed" >&2
            rows+=("| $mode | $a | skipped: ${failed//|//} | | | | |")
            json+=("$(printf '{"mode": "%s", "agree": %s, "skipped": "%s"}' "$mode" "$a" "${failed//[\\\"]/}")")
            continue
        fi
        med="$(echo "${tps[*]}" | median)"
        lo="$(printf '%s\n' "${tps[@]}" | sort -g | head -n1)"
        hi="$(printf '%s\n' "${tps[@]}" | sort -g | tail -n1)"
        [[ "$mode" == local ]] && base_tps="$med"
        ratio="$(awk -v m="$med" -v b="${base_tps:-0}" 'BEGIN {if (b > 0) printf "%.2fx", m / b; else print "-"}')"
        label="$mode"
        [[ ${#k_ends[@]} -gt 0 ]] && label="$mode (K ended at $(IFS=/; echo "${k_ends[*]}"))"
        rows+=("| $label | $a | $med ($lo-$hi) | $ratio | ${first:--} | ${all:--} | ${tpw:--} |")
        json+=("$(printf '{"mode": "%s", "agree": %s, "tok_s": %s, "tok_s_runs": [%s], "acceptance_first": %s, "acceptance": %s, "tokens_per_window": %s, "k_end": [%s]}' \
            "$mode" "$a" "$med" "$(IFS=,; echo "${tps[*]}")" "${first:-null}" "${all:-null}" "${tpw:-null}" "$(IFS=,; echo "${k_ends[*]}")")")
    done
done

{
    echo "Speculative decoding, $arch small q8_0 predictable models (make-model --mtp-agree A, seed 1${vocab:+, --vocab-size $vocab}${layers:+, --layers $layers}),"
    echo "$n_predict tokens, prompt \"$prompt\", K=$k, median (min-max) of $reps runs; local uses -t $threads,"
    echo "split uses ${split_flags[*]}. Load average before: $load_before."
    echo
    echo "| mode | A | decode tok/s | vs local | acceptance, 1st draft | acceptance, all drafts | tokens/window |"
    echo "|---|---|---|---|---|---|---|"
    printf '%s\n' "${rows[@]}"
}
{
    echo "{\"n_predict\": $n_predict, \"k\": $k, \"reps\": $reps, \"threads\": $threads, \"load_before\": \"$load_before\","
    echo " \"results\": ["
    for ((i = 0; i < ${#json[@]}; ++i)); do echo "  ${json[i]}$([[ $i -lt $((${#json[@]} - 1)) ]] && echo ,)"; done
    echo " ]}"
} >"$out_json"
echo "wrote $out_json" >&2
exit "$status"
