#!/usr/bin/env bash
# A/B of the integer kernels (kernels/cpu/matmul_q_simd*.inc) in one process: BASE's
# (default HEAD) against the working tree's, for each TYPE (bench/kernel_ab/main.cpp says
# why one process). Needs a built tree (BUILD_DIR, default build) for the other code.
# Usage: scripts/kernel-ab.sh [--base REV] [--isa avx512|avx2|avxvnni] TYPE...
set -euo pipefail
cd "$(dirname "$0")/.."
base=HEAD isa=avx512
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --base) base=$2; shift 2 ;;
    --isa) isa=$2; shift 2 ;;
    *) echo "kernel-ab: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ $# -gt 0 ]] || { echo "usage: scripts/kernel-ab.sh [--base REV] [--isa avx512|avx2|avxvnni] TYPE..." >&2; exit 2; }
b=${BUILD_DIR:-build}
case $isa in avx512) name=avx512-vnni ;; avx2) name=avx2 ;; avxvnni) name=avx-vnni ;; *) echo "kernel-ab: isa $isa?" >&2; exit 2 ;; esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for v in old new; do
  mkdir -p "$tmp/$v/kernels/cpu"
  for f in kernels/cpu/matmul_q_simd*.inc; do
    if [[ $v == old ]]; then git show "$base:$f" > "$tmp/$v/$f"; else cp "$f" "$tmp/$v/$f"; fi
  done
  # The ISA's translation unit up to its kernels, in a namespace of its own.
  sed -n '1,/#pragma GCC pop_options/p' "kernels/cpu/matmul_q_$isa.cpp" |
    sed "s/^#define KQ_NS .*/#define KQ_NS ab_$v/" > "$tmp/$v.cpp"
done
flags=(-O3 -DNDEBUG -std=c++20)
# Each side's .inc copies come before the tree's own (-I order decides "kernels/cpu/...").
g++ "${flags[@]}" -I"$tmp/old" -I. -c "$tmp/old.cpp" -o "$tmp/old.o" &
g++ "${flags[@]}" -I"$tmp/new" -I. -c "$tmp/new.cpp" -o "$tmp/new.o"
wait
g++ "${flags[@]}" -I. -DAB_OLD=ab_old -DAB_NEW=ab_new -DAB_ISA="\"$name\"" bench/kernel_ab/main.cpp "$tmp/old.o" "$tmp/new.o" \
  "$b/libstrata_kernels.a" "$b/libstrata_quant.a" "$b/libstrata_core.a" -lfmt -lpthread -o "$tmp/kernel_ab"
for t in "$@"; do "$tmp/kernel_ab" "$t"; done
