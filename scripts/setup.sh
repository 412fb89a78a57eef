#!/usr/bin/env bash
# Installs what building and testing cohort needs on a fresh Debian/Ubuntu machine:
# a C toolchain, pkg-config and the hwloc/udev headers topology discovery links
# against, cmake and libclang for the verbs backend's small C shim (sideway's
# rdma-mummy-sys; libibverbs itself is loaded at run time, not needed to build) (apt),
# and a Rust toolchain (rustup) when cargo is missing. Idempotent:
# does nothing when everything is present.
set -euo pipefail

need=()
for pkg in build-essential pkg-config cmake libclang-dev libhwloc-dev libudev-dev ca-certificates curl iproute2 procps; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if ((${#need[@]})); then
    echo "setup: installing ${need[*]}" >&2
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
    echo "setup: installing the Rust toolchain with rustup" >&2
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal -c rustfmt,clippy
fi
