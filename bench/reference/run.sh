#!/usr/bin/env bash
# bench/reference/run.sh — a same-day reference for issue 2's one-node fence target:
# Open MPI's mpirun (its own PMIx server) running pmix_fence.c, alternated with
# `cohort-bench fence` in the same shape (one node, N ranks, 1 KiB per rank), so a
# slow or fast day of the machine moves both. Installs openmpi-bin and libpmix-dev
# (apt) when missing. `make bench-reference` runs it after building cohort.
#
#   bench/reference/run.sh [N ranks (4)] [rounds (3)] [iterations (1000)]
#
# Open MPI 4.1's mpirun does not implement PMIx groups (PMIx_Group_construct returns
# NOT-SUPPORTED), so only the fence is compared here; under PRRTE's prterun,
# `pmix_fence ITER BYTES group` times a group construct with a context id.
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-4}
rounds=${2:-3}
iters=${3:-1000}

scripts/apt-missing.sh bench-reference openmpi-bin libpmix-dev pkg-config

mkdir -p target
# shellcheck disable=SC2046
cc -O2 -Wall -o target/pmix_fence bench/reference/pmix_fence.c $(pkg-config --cflags --libs pmix)
mpi=(mpirun --oversubscribe -n "$n")
if [ "$(id -u)" -eq 0 ]; then mpi+=(--allow-run-as-root); fi

echo "# fence, 1 KiB per rank, $n ranks on one node, $iters iterations per run; median us per run"
echo "# round  mpirun+PMIx  cohort  speed-up"
for r in $(seq "$rounds"); do
    ref=$("${mpi[@]}" target/pmix_fence "$iters" 1024 | sed -n 's/.*median \([0-9.]*\) us.*/\1/p')
    ours=$(target/release/cohort run -n "$n" target/release/cohort-bench fence --min-size 1024 \
        --max-size 1024 -i "$iters" 2>/dev/null | awk '$1 == "1024" { print $5 }')
    awk -v r="$r" -v a="$ref" -v b="$ours" 'BEGIN { printf "%-6s %12.2f %7.2f %8.1fx\n", r, a, b, a / b }'
done
echo "# mpirun: $(mpirun --version 2>/dev/null | head -1); PMIx $(pkg-config --modversion pmix)"
