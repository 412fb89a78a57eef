#!/usr/bin/env bash
# bench/mpi-phases/run.sh — the phases of an Open MPI job that spawns, under
# `cohort run --pmix` and under Open MPI 4.1's mpirun, alternated (the order flips every
# round): each launched rank's MPI_Init and MPI_Comm_spawn of 2 processes, and each
# spawned process's MPI_Init (with the connect to its parents). Where
# bench/mpi-startup.sh times whole jobs, this says which phase a difference is in.
#
#   bench/mpi-phases/run.sh [ROUNDS (10)] [RANKS (2)]     (or: make bench-mpi-phases)
#
# Prints, per launcher, the median over every process and round of each phase (ms).
# Installs openmpi-bin and libopenmpi-dev (apt) when missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-10}
n=${2:-2}

bench/mpi-prepare.sh bench-mpi-phases
mpicc -O2 -Wall -o target/mpi_phases bench/mpi-phases/mpi_phases.c

root=()
if [ "$(id -u)" -eq 0 ]; then root=(--allow-run-as-root); fi
cohort=(target/release/cohort run --pmix -n "$n")
mpirun=(mpirun "${root[@]}" --oversubscribe -n "$n")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One job under launcher $1 (cohort or mpirun); its PHASES lines go to $work/$1.
sample() {
    local name=$1
    shift
    if ! "$@" target/mpi_phases >"$work/out" 2>&1; then
        echo "bench-mpi-phases: $name failed:" >&2
        cat "$work/out" >&2
        exit 1
    fi
    local lines
    lines=$(grep -c '^PHASES ' "$work/out" || true)
    if [[ $lines -ne $((n + 2)) ]]; then
        echo "bench-mpi-phases: $name: $lines PHASES lines, not $((n + 2))" >&2
        cat "$work/out" >&2
        exit 1
    fi
    grep '^PHASES ' "$work/out" >>"$work/$name"
}

sample warm "${cohort[@]}"
sample warm "${mpirun[@]}"
for round in $(seq "$rounds"); do
    if ((round % 2)); then
        sample cohort "${cohort[@]}"
        sample mpirun "${mpirun[@]}"
    else
        sample mpirun "${mpirun[@]}"
        sample cohort "${cohort[@]}"
    fi
done

median() { sort -n | awk '{a[NR]=$1} END {if (NR) printf "%.1f", (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
ompi=$(mpirun --version 2>/dev/null | head -1 | awk '{print $NF}')
echo "# bench-mpi-phases: an Open MPI $ompi job of $n ranks that MPI_Comm_spawn's 2 more,"
echo "# $rounds alternating rounds, $(nproc) CPUs; medians over every process and round (ms)"
printf '%-26s %14s %16s %14s\n' "# Launcher" "parent init" "parent spawn" "child init"
for name in cohort mpirun; do
    label="cohort run --pmix"
    [[ $name == mpirun ]] && label="mpirun (Open MPI $ompi)"
    pi=$(awk '$2 == "parent" {print $5}' "$work/$name" | median)
    ps=$(awk '$2 == "parent" {print $7}' "$work/$name" | median)
    ci=$(awk '$2 == "child" {print $5}' "$work/$name" | median)
    printf '%-26s %14s %16s %14s\n' "$label" "$pi" "$ps" "$ci"
done
