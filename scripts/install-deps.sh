#!/usr/bin/env bash
# Installs Strata's build and test dependencies from Debian's packages. Idempotent:
# installs only what is missing, so a second run costs a few dpkg queries.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libcpp-httplib-dev nlohmann-json3-dev libspdlog-dev
      libfmt-dev catch2 clang-14 libclang-rt-14-dev)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "install-deps: installing ${missing[*]}"
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
    echo "install-deps: all dependencies present"
fi
