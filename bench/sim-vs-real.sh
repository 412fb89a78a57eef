#!/usr/bin/env bash
# bench/sim-vs-real.sh — real collectives on this machine beside what cohort-sim predicts
# for them from this machine's measured parameters (issue 4's second target).
#
#   bench/sim-vs-real.sh [ITERATIONS]      (default 300 timed iterations per row)
#
# 1. `cohort-sim calibrate` measures α (TCP ping-pong), β (TCP stream), α_c (Unix
#    ping-pong) and o (engine + codec per message) here.
# 2. For 1, 2 and 3 emulated nodes (one rank each), `cohort run --nodes M -n M
#    cohort-bench fence|group` measures the fence with 1 KiB per rank and the group
#    construct with a context id (medians).
# 3. `cohort-sim run` simulates the same collectives on a host with $(nproc) cores
#    (`--host-cores`: emulated nodes share the cores, hops are CPU work), twice: with
#    the microbenchmarked α/α_c ("sim-raw"), and with α/α_c fitted to the empty fence on
#    1 and 2 nodes ("sim-job"; the 3-node rows are then out-of-sample predictions).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
iters=${1:-300}
cargo build --release --bins -q
bin=${CARGO_TARGET_DIR:-$repo/target}/release
cores=$(nproc)
params=$("$bin/cohort-sim" calibrate --args)
echo "# cohort-sim calibrate: $params (host with $cores cores)"
median_of() { # ROW-LABEL: the Median(us) column of that row of an OSU-style table
    awk -v row="$1" '$1 == row { print $5; exit }'
}
# Job-calibrated hop costs: the empty fence on 1 node is two rank ⇄ server hops plus
# the server's work on two requests (2·α_c + 2·o); on 2 nodes it adds two server ⇄
# server hops (2·α + 2·o). The 3-node rows are then predictions out of sample.
o=$(echo "$params" | awk '{ for (i = 1; i < NF; i++) if ($i == "--overhead-us") print $(i + 1) }')
fence0() { "$bin/cohort" run --nodes "$1" -n "$1" "$bin/cohort-bench" -i "$iters" fence | median_of 0; }
t1=$(fence0 1)
t2=$(fence0 2)
job_ac=$(awk -v t="$t1" -v o="$o" 'BEGIN { printf "%.3f", (t - 2 * o) / 2 }')
job_a=$(awk -v t1="$t1" -v t2="$t2" -v o="$o" 'BEGIN { printf "%.3f", (t2 - t1 - 2 * o) / 2 }')
echo "# empty fence: ${t1} us on 1 node, ${t2} us on 2 nodes => job-calibrated α_c = ${job_ac} us, α = ${job_a} us"
job_params=$(echo "$params" | awk -v a="$job_a" -v c="$job_ac" '{
    for (i = 1; i <= NF; i++) { if ($i == "--alpha-us") $(i + 1) = a; if ($i == "--client-alpha-us") $(i + 1) = c }
    print }')
sim() { # NODES OP BYTES PARAMS...
    local nodes=$1 op=$2 bytes=$3
    shift 3
    "$bin/cohort-sim" run --nodes "$nodes" --op "$op" --bytes "$bytes" --host-cores "$cores" "$@" |
        awk '/^completion/ { print $2 }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
printf '# %-10s %5s %10s %12s %8s %12s %8s\n' "collective" "nodes" "real(us)" "sim-raw(us)" "real/sim" "sim-job(us)" "real/sim"
for nodes in 1 2 3; do
    real_fence=$("$bin/cohort" run --nodes "$nodes" -n "$nodes" "$bin/cohort-bench" -i "$iters" fence 2>/dev/null | median_of 1024)
    real_group=$("$bin/cohort" run --nodes "$nodes" -n "$nodes" "$bin/cohort-bench" -i "$iters" group 2>/dev/null | median_of construct)
    # shellcheck disable=SC2086
    for row in "fence-1KiB fence 1024 $real_fence" "construct construct 64 $real_group"; do
        set -- $row
        raw=$(sim "$nodes" "$2" "$3" $params)
        job=$(sim "$nodes" "$2" "$3" $job_params)
        printf '  %-10s %5s %10.2f %12.2f %8s %12.2f %8s\n' "$1" "$nodes" "$4" "$raw" "$(ratio "$4" "$raw")" "$job" "$(ratio "$4" "$job")"
    done
done
