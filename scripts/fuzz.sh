#!/usr/bin/env bash
# Builds the GGUF reader's libFuzzer target with clang-14 (ASan + UBSan) and runs it
# for a bounded time (FUZZ_SECONDS, default 60). Exits non-zero on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${FUZZ_SECONDS:-60}
bdir=build-fuzz
cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang-14 \
      -DCMAKE_CXX_COMPILER=clang++-14 -DSTRATA_FUZZ=ON -DSTRATA_BUILD_TESTS=OFF \
      -DSTRATA_CUDA=OFF >/dev/null
cmake --build "$bdir" -j2 --target fuzz_gguf fuzz_make_seeds
corpus="$bdir/corpus"
mkdir -p "$corpus" "$bdir/artifacts"
"$bdir/bin/fuzz_make_seeds" "$corpus"
echo "fuzz: running fuzz_gguf for ${secs}s"
"$bdir/bin/fuzz_gguf" -max_total_time="$secs" -max_len=4096 -rss_limit_mb=2048 -timeout=10 \
    -artifact_prefix="$bdir/artifacts/" -print_final_stats=1 "$corpus" 2>&1 | tail -n 25
echo "fuzz: no finding in ${secs}s"
