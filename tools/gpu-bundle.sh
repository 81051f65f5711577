#!/usr/bin/env bash
# What tools/gpu-check.sh runs on a lent GPU machine, prepared here: that machine has
# nvcc and CMake but none of Strata's libraries and no network, so it cannot build.
# This builds the CUDA backend for CUDA_ARCH (default 90: the H100 / H200) in BUILD_DIR
# (build-gpu), then puts the binaries gpu-check.sh runs, stripped, and the shared
# libraries they take beyond the C and C++ runtimes (spdlog, fmt, PCRE2) into
# .gpu-bundle/ (ignored by git), with the commit it was built from. Name .gpu-bundle in
# the device call's carry and run there:
#     STRATA_BUNDLE=.gpu-bundle bash tools/gpu-check.sh "$OUT/gpu-report.md"
# Usage: tools/gpu-bundle.sh   (STRATA_JOBS: build jobs, default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${CUDA_ARCH:-90}
b=${BUILD_DIR:-build-gpu}
out=.gpu-bundle
bins=(strata strata_tests strata_gpu_tests decode gpu_matmul gpu_handoff)
cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" >/dev/null
cmake --build "$b" -j"${STRATA_JOBS:-2}" --target "${bins[@]}"
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for x in "${bins[@]}"; do
    strip -o "$out/bin/$x" "$b/bin/$x"
done
# The libraries a bare machine lacks: what ldd resolves outside the C / C++ / math runtimes
# and the loader (those come with any Linux that runs nvcc's programs).
ldd "$b/bin/strata" "$b/bin/strata_tests" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
    grep -Ev '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
    while read -r lib; do cp -L "$lib" "$out/lib/"; done
git rev-parse --short HEAD >"$out/COMMIT"
git diff --quiet HEAD || echo "(working tree not clean)" >>"$out/COMMIT"
echo "gpu-bundle: sm_$arch, commit $(tr '\n' ' ' <"$out/COMMIT")-> $out ($(du -sh "$out" | cut -f1)): $(ls "$out/lib" | tr '\n' ' ')"
