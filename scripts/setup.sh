#!/usr/bin/env bash
# Installs what building and testing cohort needs on a fresh Debian/Ubuntu machine:
# a C toolchain, pkg-config and the hwloc/udev headers topology discovery links
# against, cmake and libclang for the verbs backend's small C shim (sideway's
# rdma-mummy-sys; libibverbs itself is loaded at run time, not needed to build), the
# PMIx headers and Open MPI for the PMIx library's tests (apt), and a Rust toolchain
# (rustup) when cargo is missing; gdb, which prints a hung job's stacks
# (`cohort run --timeout S --get-stack-traces`). Idempotent: does nothing when everything is present.
set -euo pipefail

"$(dirname "$0")/apt-missing.sh" setup build-essential pkg-config cmake libclang-dev libhwloc-dev \
    libudev-dev ca-certificates curl iproute2 procps gdb

# OpenPMIx's headers (cohort's libpmix.so.2 is checked against them, and PMIx programs
# are compiled with them) and Open MPI 4.1 (mpicc, and the ext3x PMIx component that
# loads libpmix.so.2), for the PMIx tests (cluster-tests/tests/pmix.rs).
"$(dirname "$0")/apt-missing.sh" setup libpmix-dev libopenmpi-dev openmpi-bin

if ! command -v cargo >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
    echo "setup: installing the Rust toolchain with rustup" >&2
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal -c rustfmt,clippy
fi
