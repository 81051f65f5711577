#!/usr/bin/env bash
# Draws the benchmark results as one PNG (for people who would rather look than read):
# left, decode tok/s of each execution mode at each MTP acceptance A (bench-spec.sh's
# JSON); right, single-sequence decode tok/s and the share of the measured memory
# bandwidth for each model bench/decode measured (its --json files).
#
# usage: scripts/plot-bench.sh OUT.png SPEC_JSON [DECODE_JSON ...]
# Needs gnuplot (installs gnuplot-nox with apt when missing) and node (for the JSON).
set -euo pipefail
if [[ $# -lt 2 ]]; then
    echo "usage: $0 OUT.png SPEC_JSON [DECODE_JSON ...]" >&2
    exit 2
fi
out="$1"
spec="$2"
shift 2
if ! command -v gnuplot >/dev/null; then
    echo "plot-bench: installing gnuplot-nox" >&2
    sudo_cmd=()
    [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get install -y --no-install-recommends gnuplot-nox >/dev/null
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# JSON -> whitespace tables for gnuplot: spec.dat (one row per mode, one column per A)
# and decode.dat (one row per model).
node - "$spec" "$tmp" "$@" <<'EOF'
const fs = require("fs");
const [spec, dir, ...decodes] = process.argv.slice(2);
const s = JSON.parse(fs.readFileSync(spec, "utf8"));
const rows = s.results.filter((r) => typeof r.tok_s === "number");
const agrees = [...new Set(rows.map((r) => r.agree))].sort((a, b) => a - b);
const modes = [...new Set(rows.map((r) => r.mode))];
let t = "mode " + agrees.map((a) => `A=${a}`).join(" ") + "\n";
for (const m of modes)
    t += `"${m}" ` + agrees.map((a) => (rows.find((r) => r.mode === m && r.agree === a) || {tok_s: "NaN"}).tok_s).join(" ") + "\n";
fs.writeFileSync(`${dir}/spec.dat`, t);
fs.writeFileSync(`${dir}/spec.cols`, String(agrees.length));
let d = "";  // model, tok/s, % of bandwidth
for (const f of decodes) {
    const j = JSON.parse(fs.readFileSync(f, "utf8"));
    const name = j.model.split("/").pop().replace(/\.gguf$/, "");
    const frac = j.decode_fraction ? 100 * j.decode_fraction.median : NaN;
    d += `"${name}" ${j.decode_tok_s.median} ${frac}\n`;
}
fs.writeFileSync(`${dir}/decode.dat`, d);
EOF

ncols="$(cat "$tmp/spec.cols")"
ndecode=$(wc -l <"$tmp/decode.dat")
{
    echo "set terminal pngcairo size 1400,560 font 'sans,10'"
    echo "set output '$out'"
    if [[ $ndecode -gt 0 ]]; then echo "set multiplot layout 1,2 columnsfirst"; fi
    echo "set style data histograms; set style histogram clustered gap 1; set style fill solid 0.85 border -1"
    echo "set grid ytics; set key top right; set yrange [0:*]; set ylabel 'decode tok/s'"
    echo "set xtics rotate by -25 noenhanced"
    echo "set title 'Speculative decoding by mode (qwen3next small q8_0, MTP agreement A)' noenhanced"
    echo "plot for [c=2:$((ncols + 1))] '$tmp/spec.dat' using c:xtic(1) title columnheader"
    if [[ $ndecode -gt 0 ]]; then
        echo "set title 'Single-sequence decode (bars) and % of measured memory bandwidth (labels)' noenhanced"
        echo "set key off; set offsets 0,0,graph 0.1,0; set style data boxes; set boxwidth 0.5; set xrange [-0.6:$ndecode - 0.4]"
        echo "plot '$tmp/decode.dat' using 0:2:xtic(1) with boxes lc rgb '#4477aa', \\"
        echo "     '' using 0:2:(sprintf('%.0f%%', \$3)) with labels offset 0,0.8"
        echo "unset multiplot"
    fi
} >"$tmp/plot.gp"
gnuplot "$tmp/plot.gp"
echo "plot-bench: wrote $out" >&2
