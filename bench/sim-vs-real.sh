#!/usr/bin/env bash
# bench/sim-vs-real.sh — real collectives on this machine beside what cohort-sim predicts
# for them from this machine's measured parameters (issue 4's second target).
#
#   bench/sim-vs-real.sh [REPEATS] [ITERATIONS]    (defaults 3 and 300)
#   ALLGATHER=dissemination bench/sim-vs-real.sh    (both sides; default tree, as
#                                                     `cohort run` uses)
#
# 1. `cohort-sim calibrate` measures α (TCP ping-pong), β (TCP stream), α_c (Unix
#    ping-pong), o (engine + codec per message) and γ (per byte taken in) here; median of
#    REPEATS runs.
# 2. For 1, 2 and 3 emulated nodes (one rank each), `cohort run --no-shm-fence --nodes M
#    -n M cohort-bench fence|group` measures the fence with 1 KiB per rank (through the
#    node servers, as simulated) and the group construct with a context id; median over
#    REPEATS jobs of each job's median.
# 3. `cohort-sim run` simulates the same collectives on a host with $(nproc) cores
#    (`--host-cores`: emulated nodes share the cores, hops are CPU work), twice: with
#    the microbenchmarked α/α_c ("sim-raw"), and with α_c and α fitted to the 1 KiB
#    fence on 1 and 2 nodes ("sim-job": T1 = 2·α_c + 2·o, T2 − T1 = 2·α + 2·o), for which
#    the 3-node rows are out-of-sample predictions.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
reps=${1:-3}
iters=${2:-300}
allgather=${ALLGATHER:-tree}
cargo build --release --bins -q
bin=${CARGO_TARGET_DIR:-$repo/target}/release
cores=$(nproc)

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
row_median() { awk -v row="$1" '$1 == row { print $5; exit }'; } # the Median(us) column
flag() { awk -v f="$1" '{ for (i = 1; i < NF; i++) if ($i == f) print $(i + 1) }'; }

cal=()
for _ in $(seq "$reps"); do cal+=("$("$bin/cohort-sim" calibrate --args)"); done
params=""
for f in --alpha-us --gbps --overhead-us --overhead-ns-per-byte --client-alpha-us; do
    v=$(printf '%s\n' "${cal[@]}" | flag "$f" | median)
    params="$params $f $v"
done
echo "# cohort-sim calibrate (median of $reps):$params (host with $cores cores); --allgather $allgather"

declare -A real
for nodes in 1 2 3; do
    for what in fence group; do
        row=1024
        [[ $what == group ]] && row=construct
        real[$what$nodes]=$(for _ in $(seq "$reps"); do
            # --no-shm-fence: one-node fences otherwise meet in shared memory, which the
            # simulator (the node servers' state machines) does not model.
            "$bin/cohort" run --no-shm-fence --allgather "$allgather" --nodes "$nodes" -n "$nodes" \
                "$bin/cohort-bench" -i "$iters" "$what" 2>/dev/null | row_median "$row"
        done | median)
    done
done
o=$(echo "$params" | flag --overhead-us)
job_ac=$(awk -v t="${real[fence1]}" -v o="$o" 'BEGIN { printf "%.3f", (t - 2 * o) / 2 }')
job_a=$(awk -v t1="${real[fence1]}" -v t2="${real[fence2]}" -v o="$o" 'BEGIN { printf "%.3f", (t2 - t1 - 2 * o) / 2 }')
echo "# fence 1 KiB: ${real[fence1]} us on 1 node, ${real[fence2]} us on 2 nodes => job-fitted α_c = ${job_ac} us, α = ${job_a} us"
job_params=$(echo "$params" | awk -v a="$job_a" -v c="$job_ac" '{
    for (i = 1; i <= NF; i++) { if ($i == "--alpha-us") $(i + 1) = a; if ($i == "--client-alpha-us") $(i + 1) = c }
    print }')
sim() { # NODES OP BYTES PARAMS...
    local nodes=$1 op=$2 bytes=$3
    shift 3
    # The same algorithm as the real runs (`cohort run` defaults to the tree).
    "$bin/cohort-sim" run --nodes "$nodes" --op "$op" --bytes "$bytes" --host-cores "$cores" \
        --allgather "$allgather" "$@" |
        awk '/^completion/ { print $2 }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
printf '# %-10s %5s %10s %12s %8s %12s %8s\n' "collective" "nodes" "real(us)" "sim-raw(us)" "real/sim" "sim-job(us)" "real/sim"
for nodes in 1 2 3; do
    # shellcheck disable=SC2086
    for row in "fence-1KiB fence 1024 ${real[fence$nodes]}" "construct construct 64 ${real[group$nodes]}"; do
        set -- $row
        raw=$(sim "$nodes" "$2" "$3" $params)
        job=$(sim "$nodes" "$2" "$3" $job_params)
        printf '  %-10s %5s %10.2f %12.2f %8s %12.2f %8s\n' "$1" "$nodes" "$4" "$raw" "$(ratio "$4" "$raw")" "$job" "$(ratio "$4" "$job")"
    done
done
