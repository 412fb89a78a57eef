#!/usr/bin/env bash
# scripts/apt-missing.sh TAG PKG... — installs (apt) those of the Debian/Ubuntu packages
# PKG… that are not installed yet, saying so on stderr as "TAG: installing …"; does
# nothing when all are present. Used by scripts/setup.sh and bench/reference/run.sh.
set -euo pipefail
tag=$1
shift
need=()
for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if ((${#need[@]})); then
    echo "$tag: installing ${need[*]}" >&2
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
