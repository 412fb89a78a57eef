#!/usr/bin/env bash
# bench/mpi-startup.sh — how long an Open MPI job takes from launch to exit under
# `cohort run --pmix` (cohort's node server and libpmix.so.2) and under Open MPI 4.1's
# own mpirun (ORTE and its PMIx server), on this host, in the same run.
#
# The program is cluster-tests/c/mpi_demo.c built with Debian's mpicc: MPI_Init, an
# MPI_Allgather of one int, MPI_Barrier, MPI_Finalize. Each sample is the wall time of
# the whole job (launcher start to launcher exit: node servers or daemons, the ranks'
# wire-up in MPI_Init, the collectives, the teardown). A second program,
# cluster-tests/c/mpi_accept.c, adds MPI_Publish_name / MPI_Lookup_name and
# MPI_Comm_accept / MPI_Comm_connect between the job's two halves (publish/lookup on
# cohort's data store; on ORTE's data server under mpirun). A third,
# cluster-tests/c/mpi_spawn.c, MPI_Comm_spawn's 2 more processes (cohort's spawn; ORTE's
# under mpirun), which reduce and exchange messages with their parents over the
# intercommunicator and disconnect. The launchers alternate, and
# the order flips every round, so a slow or fast moment of the machine moves both.
#
#   bench/mpi-startup.sh [ROUNDS (10)]          (or: make bench-mpi-startup)
#
# Prints one line per launcher and size: median, min and max in ms, then mpirun's
# median over cohort's; and the same for a job of `true` (no MPI: the launch and
# teardown alone). Installs openmpi-bin and libopenmpi-dev (apt) when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-10}
sizes=(2 4)

bench/mpi-prepare.sh bench-mpi-startup
mpicc -O2 -Wall -o target/mpi_startup cluster-tests/c/mpi_demo.c
mpicc -O2 -Wall -o target/mpi_accept cluster-tests/c/mpi_accept.c
mpicc -O2 -Wall -o target/mpi_spawn cluster-tests/c/mpi_spawn.c

root=()
if [ "$(id -u)" -eq 0 ]; then root=(--allow-run-as-root); fi
cohort=(target/release/cohort run --pmix)
mpirun=(mpirun "${root[@]}" --oversubscribe)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Runs one job of $prog; appends its wall time (ms) to $work/<name>.<prog>.<n>.
sample() {
    local name=$1 n=$2
    shift 2
    local t0 t1
    t0=$(date +%s%N)
    if ! "$@" -n "$n" "$prog" >"$work/out" 2>&1; then
        echo "bench-mpi-startup: $name -n $n $prog failed:" >&2
        cat "$work/out" >&2
        exit 1
    fi
    t1=$(date +%s%N)
    # Every rank prints one RESULT line (mpi_spawn's 2 spawned processes too).
    local lines=$n
    [[ $prog == *mpi_spawn ]] && lines=$((n + 2))
    [[ $prog == true ]] || grep -c '^RESULT ' "$work/out" | grep -qx "$lines" || {
        echo "bench-mpi-startup: $name -n $n: not $lines RESULT lines" >&2
        cat "$work/out" >&2
        exit 1
    }
    echo $(((t1 - t0) / 1000000)) >>"$work/$name.${prog##*/}.$n"
}

progs=(target/mpi_startup target/mpi_accept target/mpi_spawn true)
# One warm-up of each (page cache, first-run set-up), not counted.
for prog in "${progs[@]}"; do
    for n in "${sizes[@]}"; do
        sample warm "$n" "${cohort[@]}"
        sample warm "$n" "${mpirun[@]}"
    done
done
for round in $(seq "$rounds"); do
    for prog in "${progs[@]}"; do
        for n in "${sizes[@]}"; do
            if ((round % 2)); then
                sample cohort "$n" "${cohort[@]}"
                sample mpirun "$n" "${mpirun[@]}"
            else
                sample mpirun "$n" "${mpirun[@]}"
                sample cohort "$n" "${cohort[@]}"
            fi
        done
    done
done

median() { sort -n "$1" | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : int((a[NR/2]+a[NR/2+1])/2))}'; }
ompi=$(mpirun --version 2>/dev/null | head -1 | awk '{print $NF}')
for prog in mpi_startup mpi_accept mpi_spawn true; do
    if [[ $prog == true ]]; then
        echo "# bench-mpi-startup: wall time of a job of \`true\` (launch and teardown, no MPI),"
    elif [[ $prog == mpi_accept ]]; then
        echo "# bench-mpi-startup: wall time of an Open MPI $ompi job whose halves meet by a"
        echo "# published name (MPI_Publish_name, MPI_Lookup_name, MPI_Comm_accept/connect,"
        echo "# MPI_Allreduce over the intercommunicator),"
    elif [[ $prog == mpi_spawn ]]; then
        echo "# bench-mpi-startup: wall time of an Open MPI $ompi job that MPI_Comm_spawn's 2"
        echo "# more processes (MPI_Allreduce and messages over the intercommunicator,"
        echo "# MPI_Comm_disconnect), the 2 spawned processes not counted in Ranks,"
    else
        echo "# bench-mpi-startup: wall time of an Open MPI $ompi job (MPI_Init, MPI_Allgather,"
        echo "# MPI_Barrier, MPI_Finalize),"
    fi
    echo "# $rounds alternating rounds, $(nproc) CPUs"
    printf '%-28s %6s %12s %9s %9s\n' "# Launcher" "Ranks" "Median(ms)" "Min(ms)" "Max(ms)"
    for n in "${sizes[@]}"; do
        for name in cohort mpirun; do
            label="cohort run --pmix"
            [[ $name == mpirun ]] && label="mpirun (Open MPI $ompi)"
            f=$work/$name.$prog.$n
            printf '%-28s %6s %12s %9s %9s\n' "$label" "$n" "$(median "$f")" \
                "$(sort -n "$f" | head -1)" "$(sort -n "$f" | tail -1)"
        done
        c=$(median "$work/cohort.$prog.$n")
        m=$(median "$work/mpirun.$prog.$n")
        echo "# n=$n: mpirun's median / cohort's = $(awk -v m="$m" -v c="$c" 'BEGIN {printf "%.2f", m / c}')"
    done
done
