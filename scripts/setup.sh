#!/usr/bin/env bash
# Installs what building and testing cohort needs on a fresh Debian/Ubuntu machine:
# a C toolchain, pkg-config and the hwloc/udev headers topology discovery links
# against, cmake and libclang for the verbs backend's small C shim (sideway's
# rdma-mummy-sys; libibverbs itself is loaded at run time, not needed to build) (apt),
# and a Rust toolchain (rustup) when cargo is missing. Idempotent:
# does nothing when everything is present.
set -euo pipefail

"$(dirname "$0")/apt-missing.sh" setup build-essential pkg-config cmake libclang-dev libhwloc-dev \
    libudev-dev ca-certificates curl iproute2 procps

if ! command -v cargo >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
    echo "setup: installing the Rust toolchain with rustup" >&2
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal -c rustfmt,clippy
fi
