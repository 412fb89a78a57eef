#!/usr/bin/env bash
# deploy/slurm/ci.sh — `cohort run` under a real Slurm: brings up a throw-away Slurm
# (slurmctld and 3 slurmd nodes n1..n3, each in a network namespace of its own with
# address 10.77.0.11-13; deploy/slurm/local/start-slurm.sh, which installs
# Debian's slurm-wlm and munge on first use), runs real jobs in allocations of it, and
# stops it again. Every job is checked for its output and exit status, and after each
# one nothing may be left: no job step in squeue, no cohortd or rank in the nodes'
# namespaces, no srun.
#
#   deploy/slurm/ci.sh        (root; from anywhere; honours CARGO_TARGET_DIR and CARGO)
#   make test-slurm           (the same)
#
# Jobs: a group construct over 6 ranks on 3 nodes (salloc), also over switch-aware
# trees (--topology); where the ranks ran, their environment and the secrets kept off
# command lines; an MPMD job; --nodes below and
# above the allocation's node count; a node server killed with --enable-recovery
# (testprog construct-after-loss), one frozen (the failure detector finds it), one
# killed from outside without recovery, and one that cannot start; SIGTERM and SIGKILL
# to cohort run inside a still running allocation; a batch job (sbatch); and
# `cohort run --pmix` with an Open MPI program (cluster-tests/c/mpi_demo.c: MPI_Init,
# Allgather, Barrier, Finalize) and a PMIx one (pmix_demo.c) over the 3 nodes, whose
# own host names leave Open MPI its defaults, and with cohort's library missing on the
# nodes (skipped, loudly, without mpicc, cc or pmix.h: deploy/pmix-demos.sh). Exits 0
# when all pass. Every step is bounded by a timeout, the whole script by
# COHORT_SLURM_CI_TIMEOUT (default 1500 s: the first run installs Slurm).
# SLURM_LOCAL_TOOLS names the directory of start-slurm.sh / stop-slurm.sh (default:
# deploy/slurm/local, this repository's copy of the team's shared/tools/slurm-local).
# `make test` runs it; COHORT_SKIP_SLURM=1 skips it on purpose, loudly.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
cargo=${CARGO:-cargo}
started=$(date +%s)

if [[ ${COHORT_SKIP_SLURM:-0} == 1 ]]; then
    echo "################################################################" >&2
    echo "## Slurm CI job SKIPPED (COHORT_SKIP_SLURM=1): cohort run under" >&2
    echo "## Slurm was NOT tested in this run." >&2
    echo "################################################################" >&2
    exit 0
fi
tools=${SLURM_LOCAL_TOOLS:-}
if [[ -z $tools ]]; then
    for d in "$repo/deploy/slurm/local" "$repo/../shared/tools/slurm-local" /work/shared/tools/slurm-local; do
        [[ -f $d/start-slurm.sh ]] && { tools=$d; break; }
    done
fi
if [[ -z $tools || ! -f $tools/start-slurm.sh ]]; then
    echo "slurm CI job: start-slurm.sh not found (set SLURM_LOCAL_TOOLS, or COHORT_SKIP_SLURM=1)" >&2
    exit 125
fi
export SLURM_LOCAL_TOOLS=$tools
stop_slurm() { bash "$tools/stop-slurm.sh" >/dev/null 2>&1 || true; }

if [[ ${COHORT_SLURM_CI_INNER:-0} != 1 ]]; then
    # The whole run under one timeout; the Slurm it started is stopped in any case.
    export COHORT_SLURM_CI_INNER=1
    status=0
    timeout --kill-after=20 "${COHORT_SLURM_CI_TIMEOUT:-1500}" bash "$0" "$@" || status=$?
    if ((status == 124 || status == 137)); then
        echo "slurm CI job: TIMED OUT after $(($(date +%s) - started)) s" >&2
        stop_slurm
    fi
    exit $status
fi

if [[ $(id -u) != 0 ]]; then
    echo "slurm CI job: needs root (network namespaces, slurmd)" >&2
    exit 125
fi

if ! { "$cargo" build --bins --examples && "$cargo" build -p cohort-pmix; } \
    >/tmp/cohort-slurm-ci-build.log 2>&1; then
    cat /tmp/cohort-slurm-ci-build.log >&2
    exit 1
fi
target=${CARGO_TARGET_DIR:-$repo/target}/debug
cohort=$target/cohort
testprog=$target/examples/testprog
work=$(mktemp -d "${CARGO_TARGET_DIR:-$repo/target}/slurm-ci.XXXXXX")
chmod 755 "$work"

trap 'stop_slurm; rm -rf "$work"' EXIT

echo "### starting Slurm: 3 nodes in network namespaces ($tools/start-slurm.sh netns 3)"
t0=$(date +%s)
if ! timeout 1200 bash "$tools/start-slurm.sh" netns 3 >"$work/start.log" 2>&1; then
    tail -30 "$work/start.log" >&2
    echo "slurm CI job: Slurm did not start" >&2
    exit 1
fi
echo "    up in $(($(date +%s) - t0)) s"
# shellcheck disable=SC1091
source "${SLURM_LOCAL_DIR:-/tmp/slurm-local}/env.sh"
for _ in $(seq 50); do
    [[ $(sinfo -h -o %t 2>/dev/null | sort -u) == idle ]] && break
    sleep 0.2
done

passed=0
failed=0
failures=()
pass() { passed=$((passed + 1)); echo "    ok: $1"; }
fail() {
    failed=$((failed + 1))
    failures+=("$1")
    echo "    FAILED: $1" >&2
    if [[ -n ${2:-} && -f $2 ]]; then sed 's/^/      | /' "$2" | tail -40 >&2; fi
}

# Pids of processes named $1 (comm) inside the nodes' network namespaces.
in_nodes() {
    local ns pid
    for ns in sl-n1 sl-n2 sl-n3; do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do
            [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$1" ]] && echo "$pid"
        done
    done
}

# Whether pid $1 is a rank guard (`cohortd --rank-guard NODE`). The guard names itself
# cohortd-guard only once it runs: between its exec and that, its comm is cohortd.
is_guard() { tr '\0' '\n' <"/proc/$1/cmdline" 2>/dev/null | sed -n 2p | grep -qx -- --rank-guard; }

# Nothing of the last job may be left: no step or job in squeue, no cohortd or rank
# program on any node, no srun here. Waits a little for processes on their way out.
nothing_left() {
    local what=$1 left=""
    for _ in $(seq 50); do
        left="$(squeue -h -s 2>/dev/null)$(squeue -h 2>/dev/null)"
        left+="$(in_nodes cohortd)$(in_nodes cohortd-guard)$(in_nodes testprog)$(in_nodes sleep)"
        left+="$(in_nodes mpi_demo)$(in_nodes pmix_demo)"
        left+="$(pgrep -x srun)"
        [[ -z $left ]] && { pass "$what: nothing left behind"; return; }
        sleep 0.2
    done
    fail "$what: left behind: squeue: $(squeue -h -s) $(squeue -h) cohortd: $(in_nodes cohortd) testprog: $(in_nodes testprog) sleep: $(in_nodes sleep) demos: $(in_nodes mpi_demo) $(in_nodes pmix_demo) srun: $(pgrep -x srun)"
    # Clean up for the next job.
    scancel --quiet --user=root 2>/dev/null || true
}

# Runs `salloc -N $1 ARGS...` bounded by 120 s; stdout in $work/out, stderr in
# $work/err, status in $rc.
alloc() {
    local n=$1
    shift
    rc=0
    timeout --kill-after=10 120 salloc -N "$n" "$@" >"$work/out" 2>"$work/err" || rc=$?
    cat "$work/out" "$work/err" >"$work/both"
}

# ---------------------------------------------------------------------------- jobs
echo "### 1. salloc -N 3 cohort run -n 6 testprog construct"
t0=$(date +%s)
alloc 3 "$cohort" run -n 6 "$testprog" construct
results=$(grep -c '^RESULT members=0,1,2,3,4,5 ctx=' "$work/out")
distinct=$(grep '^RESULT' "$work/out" | sort -u | wc -l)
if [[ $rc == 0 && $results == 6 && $distinct == 1 ]]; then
    pass "6 ranks constructed one group of all 6 ($(($(date +%s) - t0)) s)"
else
    fail "construct: status $rc, $results RESULT lines, $distinct distinct" "$work/both"
fi
if grep -v '^salloc: ' "$work/err" | grep -q .; then
    fail "construct: something on stderr besides salloc's own lines" "$work/err"
else
    pass "nothing on stderr but salloc's own lines"
fi
nothing_left construct

echo "### 1b. salloc -N 3 cohort run -n 2 testprog spawn: a job spawned by rank 0 joins its parents' group"
# Rank 0 spawns 3 processes of testprog (block-wise: one per node server); parents and
# children construct one group over both namespaces and read each other's data.
alloc 3 "$cohort" run -n 2 "$testprog" spawn
results=$(grep -c '^RESULT spawn ' "$work/out")
children=$(grep -c '^RESULT spawn child ' "$work/out")
distinct=$(sed -n 's/^RESULT spawn .* ctx //p' "$work/out" | sort -u | wc -l)
if [[ $rc == 0 && $results == 5 && $children == 3 && $distinct == 1 ]]; then
    pass "spawn: 2 parents and 3 spawned processes in one group, one context id"
else
    fail "spawn: status $rc, $results RESULT lines ($children children), $distinct context ids" "$work/both"
fi
nothing_left spawn

echo "### 1c. salloc -N 3 -n 5 cohort run testprog construct: without -n, the allocation's tasks"
# As mpirun: cohort run without -n starts SLURM_NTASKS ranks.
alloc 3 -n 5 "$cohort" run "$testprog" construct
results=$(grep -c '^RESULT members=0,1,2,3,4 ctx=' "$work/out")
if [[ $rc == 0 && $results == 5 ]]; then
    pass "without -n: 5 ranks, the allocation's task count"
else
    fail "without -n: status $rc, $results RESULT lines" "$work/both"
fi
nothing_left default-np
# The universe (PMIX_UNIV_SIZE, MPI_UNIVERSE_SIZE) is the allocation's tasks, as PRRTE's.
alloc 3 -n 5 "$cohort" run -n 2 "$testprog" universe
if [[ $rc == 0 ]] && grep -q '^RESULT universe 5$' "$work/out"; then
    pass "universe: the allocation's 5 tasks"
else
    fail "universe under -n 5: status $rc" "$work/both"
fi
nothing_left universe

# --display-allocation shows each node's tasks (its slots) as Slurm gave them
# (SLURM_TASKS_PER_NODE, such as 3,1(x2) for -N 3 -n 5), and the ranks run as srun
# would run the allocation's tasks: that many on each node.
alloc 3 -n 5 bash -c 'echo "TPN=$SLURM_TASKS_PER_NODE"
    exec "$0" run --display-allocation -n 5 sh -c "echo PLACED \$COHORT_NODE_NAME"' "$cohort"
tpn=$(sed -n 's/^TPN=//p' "$work/out")
want=""
node=1
for part in ${tpn//,/ }; do
    count=${part%%(*}
    times=1
    [[ $part == *"(x"* ]] && { times=${part#*(x}; times=${times%)}; }
    for ((k = 0; k < times; k++)); do
        want+="n$node: slots=$count"$'\n'
        node=$((node + 1))
    done
done
want=${want%$'\n'}
shown=$(grep -E '^  n[1-3]: ' "$work/out" | sed 's/^  //; s/ cpus=[0-9]*$//')
placed=$(sed -n 's/^PLACED //p' "$work/out" | sort | uniq -c | awk '{print $2": slots="$1}')
if [[ $rc == 0 && -n $tpn && $shown == "$want" && $placed == "$want" ]] &&
    grep -qE '^Slurm job [0-9]+ \(n\[1-3\], 5 tasks\): node servers on 3 of 3 node\(s\)$' "$work/out"; then
    pass "--display-allocation: n1-n3 with the allocation's tasks as slots ($tpn), and the 5 ranks placed so"
else
    fail "--display-allocation: status $rc, SLURM_TASKS_PER_NODE=$tpn, shown: $shown, placed: $placed" "$work/both"
fi
nothing_left display-allocation

# --rankfile: each rank on the node its line names (Slurm's node names, or +nK).
printf 'rank 0=n3 slot=0\nrank 1=n1\nrank 2=+n1\nrank 3=n3\n' >"$work/rankfile"
alloc 3 "$cohort" run --rankfile "$work/rankfile" sh -c 'echo "PLACED $COHORT_RANK $COHORT_NODE_NAME $(hostname) $COHORT_BINDING"'
got=$(sed -n 's/^PLACED //p' "$work/out" | sort)
want="0 n3 n3 0
1 n1 n1 none
2 n2 n2 none
3 n3 n3 none"
if [[ $rc == 0 && $got == "$want" ]]; then
    pass "--rankfile: ranks 0 and 3 on n3 (0 bound to core 0), 1 on n1, 2 on +n1 (n2)"
else
    fail "--rankfile: status $rc, got: $got" "$work/both"
fi
nothing_left rankfile

echo "### 1d. salloc -N 3 cohort run -N 2 testprog construct: 2 ranks per node server"
# As mpirun -N 2 (--npernode, --map-by ppr:2:node): without -n, 2 per node, 6 in all.
alloc 3 "$cohort" run -N 2 "$testprog" construct
results=$(grep -c '^RESULT members=0,1,2,3,4,5 ctx=' "$work/out")
if [[ $rc == 0 && $results == 6 ]]; then
    pass "-N 2 on 3 nodes: 6 ranks"
else
    fail "-N 2: status $rc, $results RESULT lines" "$work/both"
fi
nothing_left npernode

echo "### 2. the same construct with a switch map (--topology: n1 on one leaf switch, n2-n3 on another)"
# Every node server must build the same trees, so each must know every node's name.
printf 'SwitchName=s0 Nodes=n1\nSwitchName=s1 Nodes=n[2-3]\nSwitchName=top Switches=s[0-1]\n' \
    >"$work/topology.conf"
alloc 3 "$cohort" run -n 6 --timeout 60 --topology "$work/topology.conf" "$testprog" construct
results=$(grep -c '^RESULT members=0,1,2,3,4,5 ctx=' "$work/out")
if [[ $rc == 0 && $results == 6 ]]; then
    pass "6 ranks constructed one group over switch-aware trees"
else
    fail "construct with --topology: status $rc, $results RESULT lines" "$work/both"
fi
nothing_left topology

echo "### 3. where the ranks run, what they see, output forwarding, secrets"
# Each rank prints its rank, node name, host and address; rank 0 also checks that the
# job secret srun carries in its environment is on no command line of the machine.
cat >"$work/where.sh" <<'EOF'
#!/bin/bash
addr=$(ip -4 -o addr show dev eth0 2>/dev/null | awk '{print $4}' | cut -d/ -f1)
echo "WHERE rank=$COHORT_RANK node=$COHORT_NODE_NAME host=$(hostname) addr=$addr app=$COHORT_APPNUM procid=${SLURM_PROCID-unset} secret=${COHORT_JOB_SECRET-unset}"
echo "to stderr from rank $COHORT_RANK" >&2
if [[ $COHORT_RANK == 0 ]]; then
    srun_pid=$(pgrep -x srun | head -1)
    secret=$(tr '\0' '\n' <"/proc/$srun_pid/environ" | sed -n 's/^COHORT_JOB_SECRET=//p')
    # From a file: the secret must not be on grep's own command line either.
    pattern=$(mktemp)
    echo "$secret" >"$pattern"
    if [[ -z $secret ]]; then
        echo "SECRET not in srun's environment"
    elif cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' '\n' | grep -qF -f "$pattern"; then
        echo "SECRET on a command line"
    else
        echo "SECRET in srun's environment only"
    fi
    rm -f "$pattern"
fi
EOF
chmod 755 "$work/where.sh"
alloc 3 "$cohort" run -n 6 --tag-output "$work/where.sh"
want="rank=0 node=n1 host=n1 addr=10.77.0.11
rank=1 node=n1 host=n1 addr=10.77.0.11
rank=2 node=n2 host=n2 addr=10.77.0.12
rank=3 node=n2 host=n2 addr=10.77.0.12
rank=4 node=n3 host=n3 addr=10.77.0.13
rank=5 node=n3 host=n3 addr=10.77.0.13"
got=$(sed -n 's/.*<stdout>: WHERE \(rank=[0-9]* node=[^ ]* host=[^ ]* addr=[^ ]*\).*/\1/p' "$work/out" | sort)
if [[ $rc == 0 && $got == "$want" ]]; then
    pass "block mapping: ranks 0-1 on n1, 2-3 on n2, 4-5 on n3"
else
    fail "placement: status $rc, got: $got" "$work/both"
fi
if [[ $(grep -c '<stderr>: to stderr from rank' "$work/err") == 6 ]]; then
    pass "every rank's stderr forwarded (tagged)"
else
    fail "stderr forwarding" "$work/both"
fi
if grep -q 'WHERE' "$work/out" && ! grep 'WHERE' "$work/out" | grep -vq 'procid=unset secret=unset'; then
    pass "no SLURM_PROCID and no job secret in the ranks' environment"
else
    fail "rank environment" "$work/out"
fi
if grep -q 'SECRET in srun.s environment only' "$work/out"; then
    pass "the job secret travels in srun's environment, on no command line"
else
    fail "secret" "$work/both"
fi
if grep -qE '[0-9a-fA-F]{64}' "$work/both"; then
    fail "something like a secret (64 hex digits) in the job's output" "$work/both"
else
    pass "no secret in the job's output"
fi
nothing_left placement

echo "### 4. MPMD: -n 2 --pset ocean … : -n 4 --pset ice … (--map-by node)"
alloc 3 "$cohort" run --map-by node -n 2 --pset ocean "$testprog" construct : \
    -n 4 --pset ice "$testprog" construct
results=$(grep -c '^RESULT members=0,1,2,3,4,5 ctx=' "$work/out")
if [[ $rc == 0 && $results == 6 ]]; then
    pass "an MPMD job of 2 app contexts constructed one group of all 6"
else
    fail "MPMD construct: status $rc, $results RESULT lines" "$work/both"
fi
nothing_left mpmd-construct
alloc 3 "$cohort" run --map-by node -n 2 "$work/where.sh" : -n 4 "$work/where.sh"
got=$(sed -n 's/^WHERE \(rank=[0-9]* node=[^ ]*\) .*\(app=[0-9]\).*/\1 \2/p' "$work/out" | sort)
want="rank=0 node=n1 app=0
rank=1 node=n2 app=0
rank=2 node=n3 app=1
rank=3 node=n1 app=1
rank=4 node=n2 app=1
rank=5 node=n3 app=1"
if [[ $rc == 0 && $got == "$want" ]]; then
    pass "MPMD ranks dealt round-robin over n1-n3 with their app numbers"
else
    fail "MPMD placement: status $rc, got: $got" "$work/both"
fi
nothing_left mpmd

echo "### 5. --nodes below and above the allocation's node count"
alloc 3 "$cohort" run --nodes 2 -n 4 "$work/where.sh"
got=$(sed -n 's/^WHERE rank=[0-9]* node=\([^ ]*\) .*/\1/p' "$work/out" | sort -u | tr '\n' ' ')
if [[ $rc == 0 && $got == "n1 n2 " ]]; then
    pass "--nodes 2 in a 3-node allocation runs on n1 and n2"
else
    fail "--nodes 2: status $rc, nodes: $got" "$work/both"
fi
nothing_left nodes-2
alloc 2 "$cohort" run --nodes 3 -n 3 "$testprog" construct
if [[ $rc == 1 ]] && grep -q -- "--nodes 3: the Slurm allocation has only 2 node" "$work/err"; then
    pass "--nodes 3 in a 2-node allocation is refused clearly"
else
    fail "--nodes 3 of 2: status $rc" "$work/both"
fi
nothing_left nodes-3-of-2

echo "### 6. a node server killed by its own rank, --enable-recovery (testprog construct-after-loss)"
alloc 3 "$cohort" run -n 3 --enable-recovery "$testprog" construct-after-loss
results=$(grep -c '^RESULT lost=1 members=0,2 ctx=' "$work/out")
if [[ $rc == 137 && $results == 2 ]] &&
    grep -q "node server n2 .*control connection; its ranks 1 are lost; continuing" "$work/err"; then
    pass "the survivors constructed without the lost rank; exit 137 (the lost rank's)"
else
    fail "construct-after-loss: status $rc, $results RESULT lines" "$work/both"
fi
nothing_left construct-after-loss

echo "### 7. the failure detector: a frozen node server (SIGSTOP), --enable-recovery (testprog frozen-server)"
alloc 3 "$cohort" run -n 3 --enable-recovery --peer-timeout 3 --heartbeat 0.5 "$testprog" frozen-server
results=$(grep -c '^RESULT lost=2 members=0,1 ctx=' "$work/out")
if [[ $rc == 137 && $results == 2 ]] &&
    grep -q "node server n3 (pid [0-9]*) sent nothing for .*; killed; its ranks 2 are lost; continuing" "$work/err"; then
    pass "the frozen node server was found, killed on its node, and the survivors went on"
else
    fail "frozen-server: status $rc, $results RESULT lines" "$work/both"
fi
if grep -q "did not end within" "$work/err"; then
    fail "frozen-server: the step had to be cancelled (the frozen node server was not killed)" "$work/err"
fi
nothing_left frozen-server

echo "### 8. a node server killed from outside (SIGKILL to n2's cohortd), no recovery"
rc=0
# The ranks are sleep itself: a rank's own children outlive a SIGKILLed node server
# unless the cluster's proctrack plugin (cgroup) kills the step's leftovers; this
# one (linuxproc) does not.
timeout --kill-after=10 120 salloc -N 3 "$cohort" run -n 3 sleep 60 \
    >"$work/out" 2>"$work/err" &
job=$!
victim=""
for _ in $(seq 100); do
    for pid in $(in_nodes cohortd); do
        [[ $(ip netns identify "$pid" 2>/dev/null) == sl-n2 ]] && ! is_guard "$pid" && victim=$pid
    done
    [[ -n $victim && $(in_nodes sleep | wc -l) == 3 ]] && break
    sleep 0.2
done
if [[ -n $victim ]]; then
    kill -KILL "$victim"
    wait "$job" || rc=$?
    cat "$work/out" "$work/err" >"$work/both"
    if [[ $rc == 1 ]] && grep -q "node server n2 .*closed its control connection" "$work/err"; then
        pass "the job ended (status 1) when n2's node server was killed"
    else
        fail "killed node server: status $rc" "$work/both"
    fi
else
    kill -TERM "$job" 2>/dev/null
    wait "$job"
    fail "killed node server: n2's cohortd never ran" "$work/err"
fi
nothing_left killed-node-server

echo "### 9. a node server that cannot start (its --node-addrs address is not its node's)"
alloc 3 "$cohort" run -n 3 --node-addrs 10.77.0.11,10.77.0.99,10.77.0.13 "$testprog" construct
if [[ $rc == 1 ]] && grep -q "cannot start the node service (fabric on 10.77.0.99:0)" "$work/err" &&
    grep -q "could not start the job: node server n2 ended: Exited with exit code 1 (srun) during startup" "$work/err"; then
    pass "the job failed at once, naming n2 (srun's report of its task)"
else
    fail "node server that cannot start: status $rc" "$work/both"
fi
nothing_left cannot-start

# Inside an allocation that outlives cohort run (salloc would end every step when its
# command ends): start a job of sleeping ranks, send cohort run $1, and report whether
# its srun step and every cohortd and rank are gone while the allocation still runs.
cat >"$work/signal-inside.sh" <<'EOF'
#!/bin/bash
sig=$1 cohort=$2
"$cohort" run -n 3 sleep 62 &
launcher=$!
in_nodes() {
    for ns in sl-n1 sl-n2 sl-n3; do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do
            [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$1" ]] && echo "$pid"
        done
    done
}
for _ in $(seq 100); do
    [[ $(in_nodes sleep | wc -l) == 3 ]] && break
    sleep 0.2
done
echo "RUNNING sleeps=$(in_nodes sleep | wc -l) step=$(squeue -h -s -j "$SLURM_JOB_ID" -o %j | grep -c '^cohortd\.')"
kill "-$sig" "$launcher"
wait "$launcher"
echo "STATUS $?"
for _ in $(seq 50); do
    steps=$(squeue -h -s -j "$SLURM_JOB_ID" -o %j | grep -c '^cohortd\.')
    left="$(in_nodes cohortd)$(in_nodes sleep)$(pgrep -x srun)"
    [[ $steps == 0 && -z $left ]] && break
    sleep 0.2
done
echo "AFTER steps=$steps left=${left:-none} job=$(squeue -h -j "$SLURM_JOB_ID" -o %T)"
EOF
chmod 755 "$work/signal-inside.sh"

echo "### 10. SIGTERM to cohort run: the job stops, its srun step ends (allocation still up)"
alloc 3 "$work/signal-inside.sh" TERM "$cohort"
if grep -q '^RUNNING sleeps=3 step=1' "$work/out" && grep -q '^STATUS 143' "$work/out" &&
    grep -q '^AFTER steps=0 left=none job=RUNNING' "$work/out"; then
    pass "SIGTERM: exit 143, step and every cohortd and rank gone, allocation still running"
else
    fail "SIGTERM inside an allocation" "$work/both"
fi
nothing_left sigterm

echo "### 11. SIGKILL to cohort run: srun's parent-death signal cancels the step"
alloc 3 "$work/signal-inside.sh" KILL "$cohort"
if grep -q '^RUNNING sleeps=3 step=1' "$work/out" && grep -q '^STATUS 137' "$work/out" &&
    grep -q '^AFTER steps=0 left=none job=RUNNING' "$work/out"; then
    pass "SIGKILL: step and every cohortd and rank gone, allocation still running"
else
    fail "SIGKILL inside an allocation" "$work/both"
fi
nothing_left sigkill

echo "### 12. sbatch -N 3: cohort run -n 6 testprog construct in a batch job"
rc=0
timeout --kill-after=10 120 sbatch --wait -N 3 -o "$work/batch.out" \
    --wrap "$cohort run -n 6 $testprog construct" >"$work/err" 2>&1 || rc=$?
results=$(grep -c '^RESULT members=0,1,2,3,4,5 ctx=' "$work/batch.out" 2>/dev/null)
if [[ $rc == 0 && $results == 6 ]]; then
    pass "the batch job constructed one group of all 6"
else
    cat "$work/batch.out" >>"$work/err" 2>/dev/null
    fail "sbatch: status $rc, $results RESULT lines" "$work/err"
fi
nothing_left sbatch

echo "### 13. --pmix: Open MPI and PMIx programs on 3 Slurm nodes (like srun --mpi=pmix)"
# cohort's libpmix.so.2 under the name programs load (as `make pmix` makes it), at the
# same path on every node: the nodes share this file system.
pmixlib=$target/cohort-pmix
mkdir -p "$pmixlib" && ln -sf ../libpmix.so "$pmixlib/libpmix.so.2"
export COHORT_PMIX_LIBDIR=$pmixlib
demos_rc=0
bash "$repo/deploy/pmix-demos.sh" "$work/demos" "$pmixlib" 2>"$work/demos.err" || demos_rc=$?
if ((demos_rc == 125)); then
    echo "################################################################" >&2
    echo "## --pmix jobs SKIPPED: $(cat "$work/demos.err")" >&2
    echo "## Open MPI and PMIx programs under Slurm were NOT tested in this run." >&2
    echo "################################################################" >&2
elif ((demos_rc != 0)); then
    fail "building mpi_demo and pmix_demo" "$work/demos.err"
else
    # Each rank says what Open MPI gets from --pmix (deploy/pmix-demos.sh's
    # ompi-env.sh), then becomes the program.
    alloc 3 "$cohort" run --pmix -n 6 "$work/demos/ompi-env.sh" "$work/demos/mpi_demo"
    results=$(grep -c '^RESULT size=6 sum=6105$' "$work/out")
    if [[ $rc == 0 && $results == 6 ]] && ! grep -q 'FAIL rank' "$work/err"; then
        pass "mpi_demo: 6 Open MPI ranks on n1-n3 initialized, allgathered and finalized"
    else
        fail "mpi_demo: status $rc, $results RESULT lines" "$work/both"
    fi
    # n1-n3 have host names of their own: Open MPI keeps its defaults (shared memory
    # inside a node, its own choice of interface between them).
    got=$(sed -n 's/^OMPI rank=[0-9]* node=[^ ]* host=\([^ ]*\) \(.*\)/\1 \2/p' "$work/out" | sort | uniq -c |
        awk '{$1=$1; print}' | tr '\n' ';')
    want=""
    for n in n1 n2 n3; do
        want+="2 $n btl=unset if=unset schizo=^orte lib=$pmixlib;"
    done
    if [[ $got == "$want" ]]; then
        pass "distinct host names n1-n3: no transport chosen for Open MPI, cohort's library first"
    else
        fail "mpi_demo environment: got $got, want $want" "$work/out"
    fi
    if grep -v '^salloc: ' "$work/err" | grep -q .; then
        fail "mpi_demo: something on stderr besides salloc's own lines" "$work/err"
    else
        pass "mpi_demo: nothing on stderr but salloc's own lines"
    fi
    nothing_left pmix-mpi_demo
    # Open MPI's own account of its transports: shared memory to the other rank of the
    # same node, TCP to the other nodes.
    alloc 3 "$cohort" run --pmix -n 6 -x OMPI_MCA_btl_base_verbose=100 "$work/demos/mpi_demo"
    if [[ $rc == 0 ]] && grep -q 'Using vader btl for send to .* on node n1' "$work/err" &&
        grep -q 'Using tcp btl for send to .* on node n3' "$work/err"; then
        pass "Open MPI used shared memory inside a node and TCP between nodes"
    else
        fail "mpi_demo transports (btl_base_verbose): status $rc" "$work/both"
    fi
    if ls /dev/shm/vader_segment.n[123].* >/dev/null 2>&1; then
        fail "Open MPI's shared-memory segments of n1-n3 left in /dev/shm: $(ls /dev/shm/vader_segment.n[123].*)"
    else
        pass "no shared-memory segment of n1-n3 left in /dev/shm"
    fi
    nothing_left pmix-mpi_demo-verbose

    alloc 3 "$cohort" run --pmix -n 6 --pset evens=0,2,4 "$work/demos/pmix_demo"
    results=$(grep -c '^RESULT size=6 nodes=3 members=6 ctx=' "$work/out")
    distinct=$(grep '^RESULT' "$work/out" | sort -u | wc -l)
    if [[ $rc == 0 && $results == 6 && $distinct == 1 ]] && ! grep -q 'FAIL rank' "$work/err"; then
        pass "pmix_demo: 6 PMIx ranks on n1-n3 agreed (keys, fences, events, groups, connect)"
    else
        fail "pmix_demo: status $rc, $results RESULT lines, $distinct distinct" "$work/both"
    fi
    nothing_left pmix-pmix_demo

    echo "### 14. --pmix with cohort's library missing on the nodes"
    # A directory that holds the library here but not on the nodes: each slurmd's
    # mount namespace has a private directory of its own on TmpFS.
    tmpfs=${SLURM_LOCAL_DIR:-/tmp/slurm-local}/var/tmpfs
    mkdir -p "$tmpfs/cohort-ci-pmix"
    ln -sf "$target/libpmix.so" "$tmpfs/cohort-ci-pmix/libpmix.so.2"
    COHORT_PMIX_LIBDIR=$tmpfs/cohort-ci-pmix alloc 3 "$cohort" run --pmix -n 6 "$work/demos/mpi_demo"
    rm -rf "$tmpfs/cohort-ci-pmix"
    if [[ $rc == 1 ]] &&
        grep -q "n[123]: --pmix: cohort's libpmix.so.2 is not in $tmpfs/cohort-ci-pmix on this host (n[123]), so the ranks cannot load it" "$work/err" &&
        grep -q "could not start the job: node server n[123] ended" "$work/err" &&
        ! grep -q 'RESULT\|MPI_Init' "$work/both"; then
        pass "the job failed before any rank ran, naming the node without the library and what to do"
    else
        fail "library missing on the nodes: status $rc" "$work/both"
    fi
    nothing_left pmix-missing-library
fi
unset COHORT_PMIX_LIBDIR

echo "slurm CI job: $(($(date +%s) - started)) s"
for f in "${failures[@]}"; do echo "  failed: $f" >&2; done
echo "slurm-ci: $passed passed, $failed failed"
((failed == 0 && passed > 0))
