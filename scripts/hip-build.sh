#!/usr/bin/env bash
# The HIP backend for AMD GPUs, compiled (CI has no AMD GPU, so nothing of it runs here):
# Debian's hipcc (ROCm 5.2, clang 15) builds the kernels of kernels/cuda for
# STRATA_HIP_ARCHITECTURES (default gfx1030) and the backend's layer around them. The
# same kernel sources build with nvcc in the main build and run on the CPU with HIP-CPU
# (STRATA_HIP_CPU_DIR); this catches what only hip-clang refuses. About a minute; skipped
# with STRATA_SKIP_HIP=1. Usage: scripts/hip-build.sh [BUILD_DIR (build-hip)]
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-hip}"
source scripts/lib/apt.sh
apt_install_missing hip-build hipcc libamdhip64-dev
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSTRATA_HIP=ON -DSTRATA_BUILD_TESTS=OFF \
    -DSTRATA_HIP_ARCHITECTURES="${STRATA_HIP_ARCHITECTURES:-gfx1030}" >/dev/null
# hipcc asks rocm_agent_enumerator for the machine's GPUs, which prints a Python traceback
# where there is no /sys/class/kfd; the targets are given, so that noise is dropped.
log="$build/hip-build.log"
status=0
cmake --build "$build" -j"${STRATA_JOBS:-2}" --target strata_kernels strata_backend >"$log" 2>&1 || status=$?
awk '/^Traceback \(most recent call last\)/ { skip = 1 } !skip { print } /^FileNotFoundError/ { skip = 0 }' "$log"
if [ "$status" -ne 0 ]; then
    echo "hip-build: FAILED (exit $status)" >&2
    exit "$status"
fi
echo "hip-build: the HIP backend compiled for ${STRATA_HIP_ARCHITECTURES:-gfx1030}"
