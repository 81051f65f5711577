# Sourced by the scripts that install Debian packages (install-deps.sh, hip-build.sh).
# apt_install_missing NAME PKG...: installs the packages not installed yet (one dpkg query
# each when all are there), as root or through sudo.
apt_install_missing() {
    local name="$1" p
    shift
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if ((${#missing[@]})); then
        echo "$name: installing ${missing[*]}"
        local sudo=""
        [ "$(id -u)" -ne 0 ] && sudo="sudo"
        export DEBIAN_FRONTEND=noninteractive
        $sudo apt-get update -qq
        $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
    else
        echo "$name: all dependencies present"
    fi
}
