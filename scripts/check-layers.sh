#!/usr/bin/env bash
# The layers of docs/architecture.md, enforced: a source file may include headers of its
# own layer and of the layers below it, never above. Run by the build (target
# check_layers, part of ALL) and by ctest; exits 1 naming each upward include.
set -euo pipefail
cd "$(dirname "$0")/.."

# Bottom to top. engine/*.{h,cpp} directly in engine/ (generate, engine, options) is
# the "engine" layer.
layers=(engine/core engine/quant engine/gguf kernels/cpu kernels/cuda engine/state engine/backend engine/model
        engine/text engine/sample engine/synth engine/run engine/split engine/speculative engine/serve
        engine server tools bench)
declare -A rank
for i in "${!layers[@]}"; do rank[${layers[$i]}]=$i; done

layer_of() {  # path -> its layer, or "" for paths outside the layered tree
    local d
    d=$(dirname "$1")
    while [ "$d" != . ] && [ -z "${rank[$d]+x}" ]; do d=$(dirname "$d"); done
    [ "$d" = . ] && return 0
    printf '%s' "$d"
}

bad=0
while IFS= read -r f; do
    own=$(layer_of "$f")
    [ -n "$own" ] || continue
    while IFS= read -r inc; do
        dep=$(layer_of "$inc")
        [ -n "$dep" ] || continue
        if [ "${rank[$dep]}" -gt "${rank[$own]}" ]; then
            echo "layering: $f ($own) includes $inc ($dep), a layer above it"
            bad=1
        fi
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done < <(git ls-files -co --exclude-standard 'engine/*' 'kernels/*' 'server/*' 'tools/*' 'bench/*' 2>/dev/null ||
         find engine kernels server tools bench -type f)
# The model describes, the device executes: above the kernels, only the backend runs them
# (kernels/ includes) or knows a thread pool.
while IFS= read -r f; do
    case "$f" in engine/backend/*|engine/core/*|engine/quant/*|engine/gguf/*|engine/state/*) continue ;; esac
    if grep -qE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"(kernels/|engine/core/thread_pool\.h)' "$f"; then
        echo "layering: $f reaches past the op interface (kernels/ or the thread pool); only engine/backend may"
        bad=1
    fi
done < <(git ls-files -co --exclude-standard 'engine/*' 'server/*' 'tools/*' 2>/dev/null || find engine server tools -type f)
if [ "$bad" = 0 ]; then echo "layering: no upward includes (${#layers[@]} layers), nothing past the op interface"; fi
exit "$bad"
