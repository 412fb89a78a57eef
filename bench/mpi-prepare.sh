#!/usr/bin/env bash
# bench/mpi-prepare.sh NAME — what the Open MPI benchmarks (bench/mpi-startup.sh,
# bench/mpi-phases/run.sh) need before they run, from the repository's root: Open MPI
# (apt, when missing; NAME says who asks), cohort's launcher and node server, and
# libpmix.so.2 where `cohort run --pmix` finds it. The library is built, not only the
# binaries: cohort-pmix has none, and a stale libpmix.so.2 would speak an older protocol
# than the new node servers.
set -euo pipefail
scripts/apt-missing.sh "${1:?usage: mpi-prepare.sh NAME}" openmpi-bin libopenmpi-dev
cargo build -q --release --bins -p cohort-launcher -p cohort-server
cargo build -q --release --lib -p cohort-pmix
[ -e target/release/cohort-pmix/libpmix.so.2 ] || {
    mkdir -p target/release/cohort-pmix
    ln -sf ../libpmix.so target/release/cohort-pmix/libpmix.so.2
}
