#!/usr/bin/env bash
# deploy/ssh/ci.sh — `cohort run` starting its node servers over a real ssh: three
# network namespaces cohssh1..3 (10.79.0.1-3 on a bridge, this host 10.79.0.254), a
# real /usr/sbin/sshd in each with a private configuration (its own host key, a fresh
# client key authorized in a temporary file, nothing of /etc/ssh or ~/.ssh used or
# changed), and real jobs run with
#
#   cohort run --host 10.79.0.1,10.79.0.2,10.79.0.3 --launch-agent "ssh -F <temp config>" …
#
# Every job is checked for its output and exit status, and after each one nothing may
# be left: no cohortd, rank or sshd session in the namespaces, no ssh client of this
# run, no job directory.
#
#   deploy/ssh/ci.sh          (root; from anywhere; honours CARGO_TARGET_DIR and CARGO)
#   make test-ssh             (the same)
#
# Jobs: a group construct over 6 ranks on the 3 hosts (--launcher ssh, and --launcher
# auto); where the ranks ran, their environment, and the secrets kept off command lines
# and out of the output (with debug logs on); a hostfile with slots (block and
# round-robin) and too many ranks for them; bad hostfiles; an unreachable host, a host
# without cohortd, ssh refusing the key, an agent that does not exist (clear errors,
# bounded); SIGINT, SIGTERM and SIGKILL to cohort run mid-job; a node server killed
# from outside, one killed with --enable-recovery, and one frozen (the failure detector
# finds it; killed on its host over ssh); `cohort run --pmix` with an Open MPI program
# (cluster-tests/c/mpi_demo.c: MPI_Init, Allgather, Barrier, Finalize) and a PMIx one
# (pmix_demo.c) on the 3 hosts, which share this host's name (Open MPI then gets TCP on
# the hosts' network), with --prefix of an installed layout, and with the library
# missing there (skipped, loudly, without mpicc, cc or pmix.h: deploy/pmix-demos.sh).
# Installs Debian's openssh-server on first use (its service is not started). Every
# step is bounded by a timeout, the whole script by COHORT_SSH_CI_TIMEOUT (default
# 600 s). `make test` runs it; COHORT_SKIP_SSH=1 skips it on purpose, loudly.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
cargo=${CARGO:-cargo}
started=$(date +%s)

if [[ ${COHORT_SKIP_SSH:-0} == 1 ]]; then
    echo "################################################################" >&2
    echo "## ssh CI job SKIPPED (COHORT_SKIP_SSH=1): cohort run over ssh" >&2
    echo "## was NOT tested in this run." >&2
    echo "################################################################" >&2
    exit 0
fi

if [[ ${COHORT_SSH_CI_INNER:-0} != 1 ]]; then
    # The whole run under one timeout; the inner script's trap cleans up, and on a
    # timeout the namespaces are removed here as well.
    export COHORT_SSH_CI_INNER=1
    status=0
    timeout --kill-after=20 "${COHORT_SSH_CI_TIMEOUT:-600}" bash "$0" "$@" || status=$?
    if ((status == 124 || status == 137)); then
        echo "ssh CI job: TIMED OUT after $(($(date +%s) - started)) s" >&2
        for i in 1 2 3; do
            for pid in $(ip netns pids "cohssh$i" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
            ip netns del "cohssh$i" 2>/dev/null
        done
        ip link del cohsshbr 2>/dev/null
    fi
    exit $status
fi

if [[ $(id -u) != 0 ]]; then
    echo "ssh CI job: needs root (network namespaces, sshd)" >&2
    exit 125
fi

# ------------------------------------------------------------------------- install
if [[ ! -x /usr/sbin/sshd || ! -x /usr/bin/ssh || ! -x /usr/bin/ssh-keygen ]]; then
    echo "### installing openssh-server (its service is not started)"
    # No service start during the install: a policy-rc.d of our own, if there is none.
    policy=""
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        policy=/usr/sbin/policy-rc.d
    fi
    ok=0
    for _ in 1 2; do
        if DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssh-server openssh-client \
            >/tmp/cohort-ssh-ci-apt.log 2>&1; then
            ok=1
            break
        fi
        DEBIAN_FRONTEND=noninteractive apt-get update -q >>/tmp/cohort-ssh-ci-apt.log 2>&1
    done
    [[ -n $policy ]] && rm -f "$policy"
    if ((ok == 0)); then
        tail -20 /tmp/cohort-ssh-ci-apt.log >&2
        echo "ssh CI job: cannot install openssh-server" >&2
        exit 1
    fi
fi

if ! { "$cargo" build -p cohort-launcher -p cohort-server -p cohort --bins --example testprog &&
    "$cargo" build -p cohort-pmix; } >/tmp/cohort-ssh-ci-build.log 2>&1; then
    cat /tmp/cohort-ssh-ci-build.log >&2
    exit 1
fi
target=${CARGO_TARGET_DIR:-$repo/target}/debug
cohort=$target/cohort
testprog=$target/examples/testprog
work=$(mktemp -d "${CARGO_TARGET_DIR:-$repo/target}/ssh-ci.XXXXXX")
chmod 755 "$work"
# The launcher's job directories go here: checked empty after every job.
export TMPDIR=$work/tmp
mkdir -m 700 "$TMPDIR"
# Outside any Slurm allocation, whatever the caller's environment.
unset SLURM_JOB_ID SLURM_JOBID SLURM_JOB_NODELIST SLURM_NODELIST COHORT_LAUNCH_AGENT COHORT_PREFIX

net=10.79.0
made_run_sshd=0
cleanup() {
    local i pid
    for i in 1 2 3; do
        # Only the sshd we started (our child), then whatever is left in our namespaces.
        pid=$(cat "$work/sshd$i.fgpid" 2>/dev/null) && kill -TERM "$pid" 2>/dev/null &&
            timeout 5 tail --pid="$pid" -f /dev/null
        for pid in $(ip netns pids "cohssh$i" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
        ip netns del "cohssh$i" 2>/dev/null
    done
    ip link del cohsshbr 2>/dev/null
    ((made_run_sshd)) && rmdir /run/sshd 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

# -------------------------------------------------------------- namespaces, sshd
echo "### 3 network namespaces cohssh1..3 ($net.1-3), sshd in each"
for i in 1 2 3; do
    if ip netns list | grep -qw "cohssh$i"; then
        echo "ssh CI job: namespace cohssh$i exists already (another run?)" >&2
        exit 1
    fi
done
ip link add cohsshbr type bridge || exit 1
ip addr add "$net.254/24" dev cohsshbr
ip link set cohsshbr up
for i in 1 2 3; do
    ip netns add "cohssh$i"
    ip link add "cohssh$i-h" type veth peer name eth0 netns "cohssh$i"
    ip link set "cohssh$i-h" master cohsshbr up
    ip -n "cohssh$i" addr add "$net.$i/24" dev eth0
    ip -n "cohssh$i" link set eth0 up
    ip -n "cohssh$i" link set lo up
done

if [[ ! -d /run/sshd ]]; then
    mkdir -m 755 /run/sshd && made_run_sshd=1
fi
ssh-keygen -q -t ed25519 -N '' -C cohort-ssh-ci-host -f "$work/host_key" || exit 1
ssh-keygen -q -t ed25519 -N '' -C cohort-ssh-ci-user -f "$work/user_key" || exit 1
cp "$work/user_key.pub" "$work/authorized_keys"
cat >"$work/sshd_config" <<EOF
HostKey $work/host_key
AuthorizedKeysFile $work/authorized_keys
UsePAM no
StrictModes no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
PrintMotd no
PrintLastLog no
X11Forwarding no
AllowTcpForwarding no
MaxStartups 100
LogLevel ERROR
EOF
echo "$net.1,$net.2,$net.3 $(cat "$work/host_key.pub")" >"$work/known_hosts"
cat >"$work/ssh_config" <<EOF
Host *
    User root
    IdentityFile $work/user_key
    IdentitiesOnly yes
    UserKnownHostsFile $work/known_hosts
    GlobalKnownHostsFile /dev/null
    StrictHostKeyChecking yes
    ControlMaster no
    LogLevel ERROR
EOF
agent="ssh -F $work/ssh_config"
for i in 1 2 3; do
    # nsenter keeps this host's /sys (`ip netns exec` remounts it): cohortd's topology
    # discovery reads it.
    # In the foreground (-D), as our child: we stop it and reap it.
    nsenter --net="/run/netns/cohssh$i" /usr/sbin/sshd -D -f "$work/sshd_config" \
        -o "ListenAddress=$net.$i" -o "PidFile=$work/sshd$i.pid" -E "$work/sshd$i.log" \
        </dev/null &
    echo $! >"$work/sshd$i.fgpid"
done
for i in 1 2 3; do
    up=0
    for _ in $(seq 50); do
        if timeout 10 $agent -o BatchMode=yes "$net.$i" true 2>"$work/probe.err"; then
            up=1
            break
        fi
        sleep 0.1
    done
    if ((up == 0)); then
        cat "$work/probe.err" "$work/sshd$i.log" >&2 2>/dev/null
        echo "ssh CI job: sshd in cohssh$i does not answer" >&2
        exit 1
    fi
done
echo "    sshd up on $net.1-3 ($(($(date +%s) - started)) s so far)"
t_jobs=$(date +%s)

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

# Pids of processes named $1 (comm) inside the namespaces.
in_hosts() {
    local i pid
    for i in 1 2 3; do
        for pid in $(ip netns pids "cohssh$i" 2>/dev/null); do
            [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$1" ]] && echo "$pid"
        done
    done
}
# Whether pid $1 is a rank guard (`cohortd --rank-guard NODE`). The guard names itself
# cohortd-guard only once it runs: between its exec and that, its comm is cohortd.
is_guard() { tr '\0' '\n' <"/proc/$1/cmdline" 2>/dev/null | sed -n 2p | grep -qx -- --rank-guard; }
# sshd processes in the namespaces besides the three listeners (sessions).
sessions() {
    local pid listeners
    listeners=" $(cat "$work"/sshd?.fgpid 2>/dev/null | tr '\n' ' ') "
    for pid in $(in_hosts sshd); do
        [[ $listeners == *" $pid "* ]] || echo "$pid"
    done
}
# ssh clients of this run (their command line names our client configuration).
clients() { pgrep -f -- "-F $work/ssh_config" 2>/dev/null; }

# Nothing of the last job may be left. Waits a little for processes on their way out.
nothing_left() {
    local what=$1 left=""
    for _ in $(seq 75); do
        left="$(in_hosts cohortd)$(in_hosts cohortd-guard)$(in_hosts testprog)$(in_hosts sleep)$(sessions)$(clients)"
        left+="$(in_hosts mpi_demo)$(in_hosts pmix_demo)"
        left+="$(ls -A "$TMPDIR")"
        [[ -z $left ]] && { pass "$what: nothing left behind"; return; }
        sleep 0.2
    done
    fail "$what: left behind: cohortd: $(in_hosts cohortd) testprog: $(in_hosts testprog) sleep: $(in_hosts sleep) demos: $(in_hosts mpi_demo) $(in_hosts pmix_demo) sessions: $(sessions) ssh: $(clients) files: $(ls -A "$TMPDIR")"
    for pid in $(in_hosts cohortd) $(in_hosts testprog) $(in_hosts sleep) $(in_hosts mpi_demo) $(in_hosts pmix_demo) $(sessions); do
        kill -KILL "$pid" 2>/dev/null
    done
    rm -rf "${TMPDIR:?}"/*
}

hosts=$net.1,$net.2,$net.3
# Runs `cohort run ARGS...` bounded by $limit (default 60) s; stdout in $work/out,
# stderr in $work/err, status in $rc, seconds taken in $took.
run() {
    local t0
    t0=$(date +%s)
    rc=0
    timeout --kill-after=5 "${limit:-60}" "$cohort" run "$@" >"$work/out" 2>"$work/err" || rc=$?
    took=$(($(date +%s) - t0))
    cat "$work/out" "$work/err" >"$work/both"
}

# ---------------------------------------------------------------------------- jobs
echo "### 1. cohort run --launcher ssh --host $hosts -n 6 testprog construct"
run --launcher ssh --host "$hosts" --launch-agent "$agent" -n 6 "$testprog" construct
results=$(grep -c '^RESULT members=0,1,2,3,4,5 ctx=' "$work/out")
distinct=$(grep '^RESULT' "$work/out" | sort -u | wc -l)
if [[ $rc == 0 && $results == 6 && $distinct == 1 ]]; then
    pass "6 ranks on 3 hosts constructed one group of all 6 (${took} s)"
else
    fail "construct: status $rc, $results RESULT lines, $distinct distinct" "$work/both"
fi
if [[ -s $work/err ]]; then
    fail "construct: something on stderr" "$work/err"
else
    pass "nothing on stderr"
fi
nothing_left construct

echo "### 1b. cohort run --host $hosts -n 2 testprog spawn: a job spawned by rank 0 joins its parents' group"
# Rank 0 spawns 3 processes of testprog (block-wise: one per node server); parents and
# children construct one group over both namespaces and read each other's data.
run --host "$hosts" --launch-agent "$agent" -n 2 "$testprog" spawn
results=$(grep -c '^RESULT spawn ' "$work/out")
children=$(grep -c '^RESULT spawn child ' "$work/out")
distinct=$(sed -n 's/^RESULT spawn .* ctx //p' "$work/out" | sort -u | wc -l)
if [[ $rc == 0 && $results == 5 && $children == 3 && $distinct == 1 ]]; then
    pass "spawn: 2 parents and 3 spawned processes in one group, one context id"
else
    fail "spawn: status $rc, $results RESULT lines ($children children), $distinct context ids" "$work/both"
fi
nothing_left spawn

echo "### 2. where the ranks run, what they see, output forwarding, secrets (--launcher auto, debug logs)"
# Each rank prints its rank, node name and namespace address; rank 0 also looks for
# the client token (it travels with the job secret) on every command line of the
# machine, and for the secret variables in the environment of every cohortd, ssh and
# sshd.
cat >"$work/where.sh" <<'EOF'
#!/bin/bash
addr=$(ip -4 -o addr show dev eth0 2>/dev/null | awk '{print $4}' | cut -d/ -f1)
echo "WHERE rank=$COHORT_RANK node=$COHORT_NODE_NAME addr=$addr secret=${COHORT_JOB_SECRET-unset}"
echo "to stderr from rank $COHORT_RANK" >&2
if [[ $COHORT_RANK == 0 ]]; then
    # The client token travels with the job secret (one line on ssh's stdin); from a
    # file, so that it is not on grep's own command line.
    pattern=$(mktemp)
    echo "$COHORT_TOKEN" >"$pattern"
    found=""
    [[ ${#COHORT_TOKEN} == 64 ]] || found+=" no-token"
    for f in /proc/[0-9]*/cmdline; do
        tr '\0' ' ' <"$f" 2>/dev/null | grep -qF -f "$pattern" && found+=" cmdline:$f"
    done
    # This job's processes only (other jobs on the machine, e.g. a local cohort run,
    # hand their node servers the secret in the environment): ssh-mode node servers,
    # and the ssh clients and sshd processes that carry an ssh_config or this job.
    for p in $(pgrep -x cohortd) $(pgrep -x ssh) $(pgrep -x sshd); do
        tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qE -- '--ssh|ssh_config|sshd' || continue
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qE '^COHORT_(JOB_SECRET|TOKEN)=' &&
            found+=" environ:$p"
    done
    rm -f "$pattern"
    echo "SECRETS ${found:-none}"
fi
EOF
chmod 755 "$work/where.sh"
COHORT_LOG=debug run --host "$hosts" --launch-agent "$agent" -n 6 --tag-output "$work/where.sh"
want="rank=0 node=$net.1 addr=$net.1
rank=1 node=$net.1 addr=$net.1
rank=2 node=$net.2 addr=$net.2
rank=3 node=$net.2 addr=$net.2
rank=4 node=$net.3 addr=$net.3
rank=5 node=$net.3 addr=$net.3"
got=$(sed -n 's/.*<stdout>: WHERE \(rank=[0-9]* node=[^ ]* addr=[^ ]*\).*/\1/p' "$work/out" | sort)
if [[ $rc == 0 && $got == "$want" ]]; then
    pass "auto picks ssh for --host; block mapping: ranks 0-1 on $net.1, 2-3 on .2, 4-5 on .3, named by host"
else
    fail "placement: status $rc, got: $got" "$work/both"
fi
if [[ $(grep -c '<stderr>: to stderr from rank' "$work/err") == 6 ]]; then
    pass "every rank's stderr forwarded over ssh (tagged)"
else
    fail "stderr forwarding" "$work/both"
fi
if grep -q 'WHERE' "$work/out" && ! grep 'WHERE' "$work/out" | grep -vq 'secret=unset'; then
    pass "no job secret in the ranks' environment"
else
    fail "rank environment" "$work/out"
fi
if grep -q 'SECRETS none' "$work/out"; then
    pass "no secret on any command line, nor in any cohortd's, ssh's or sshd's environment"
else
    fail "secrets: $(grep SECRETS "$work/out")" "$work/out"
fi
if grep -q 'starting a node server over the launch agent' "$work/err" &&
    ! grep -qE '[0-9a-fA-F]{64}' "$work/both"; then
    pass "no secret in the job's output and debug logs"
else
    fail "something like a secret (64 hex digits) in the output, or no debug log" "$work/both"
fi
nothing_left placement

echo "### 3. a hostfile with slots"
cat >"$work/hostfile" <<EOF
# three hosts, Open MPI format
$net.1 slots=1

root@$net.2 slots=3   # the big one
$net.3   slots=2
EOF
run --hostfile "$work/hostfile" --launch-agent "$agent" -n 6 "$work/where.sh"
got=$(sed -n 's/^WHERE \(rank=[0-9]*\) node=\([^ ]*\) .*/\1@\2/p' "$work/out" | sort | tr '\n' ' ')
if [[ $rc == 0 && $got == "rank=0@$net.1 rank=1@$net.2 rank=2@$net.2 rank=3@$net.2 rank=4@$net.3 rank=5@$net.3 " ]]; then
    pass "slots 1,3,2 hold ranks 0 | 1-3 | 4-5 (block)"
else
    fail "hostfile block: status $rc, got: $got" "$work/both"
fi
nothing_left hostfile
# Without -n, as mpirun: one rank per slot.
run --hostfile "$work/hostfile" --launch-agent "$agent" "$work/where.sh"
got=$(sed -n 's/^WHERE \(rank=[0-9]*\) node=\([^ ]*\) .*/\1@\2/p' "$work/out" | sort | tr '\n' ' ')
if [[ $rc == 0 && $got == "rank=0@$net.1 rank=1@$net.2 rank=2@$net.2 rank=3@$net.2 rank=4@$net.3 rank=5@$net.3 " ]]; then
    pass "without -n: one rank per slot (6)"
else
    fail "hostfile without -n: status $rc, got: $got" "$work/both"
fi
nothing_left hostfile-default-np
# The universe (PMIX_UNIV_SIZE, MPI_UNIVERSE_SIZE) is the hosts' slots, as PRRTE's.
run --hostfile "$work/hostfile" --launch-agent "$agent" -n 2 "$testprog" universe
if [[ $rc == 0 ]] && grep -q '^RESULT universe 6$' "$work/out"; then
    pass "universe: the hosts' 6 slots"
else
    fail "universe with slots 1,3,2: status $rc" "$work/both"
fi
nothing_left hostfile-universe
run --host "$hosts" --launch-agent "$agent" "$work/where.sh"
if [[ $rc == 1 ]] && grep -q 'has no slots: give -n N' "$work/err"; then
    pass "without -n and without slots: refused, naming the host"
else
    fail "no -n, no slots: status $rc" "$work/both"
fi
run --hostfile "$work/hostfile" --launch-agent "$agent" --map-by node -n 6 "$work/where.sh"
got=$(sed -n 's/^WHERE \(rank=[0-9]*\) node=\([^ ]*\) .*/\1@\2/p' "$work/out" | sort | tr '\n' ' ')
if [[ $rc == 0 && $got == "rank=0@$net.1 rank=1@$net.2 rank=2@$net.3 rank=3@$net.2 rank=4@$net.3 rank=5@$net.2 " ]]; then
    pass "--map-by node deals round-robin over the hosts with room left"
else
    fail "hostfile round-robin: status $rc, got: $got" "$work/both"
fi
nothing_left hostfile-by-node
# -N 2 (mpirun's --npernode): 2 ranks per host in turn, within each host's slots.
run --host "$hosts" --launch-agent "$agent" -N 2 "$work/where.sh"
got=$(sed -n 's/^WHERE \(rank=[0-9]*\) node=\([^ ]*\) .*/\1@\2/p' "$work/out" | sort | tr '\n' ' ')
if [[ $rc == 0 && $got == "rank=0@$net.1 rank=1@$net.1 rank=2@$net.2 rank=3@$net.2 rank=4@$net.3 rank=5@$net.3 " ]]; then
    pass "-N 2: ranks 0-1 | 2-3 | 4-5"
else
    fail "-N 2: status $rc, got: $got" "$work/both"
fi
nothing_left npernode
run --hostfile "$work/hostfile" --launch-agent "$agent" -N 2 "$work/where.sh"
if [[ $rc == 1 ]] && grep -q "host $net.1 has 1 slot(s), fewer than the 2 rank(s)" "$work/err"; then
    pass "-N 2 on a host with 1 slot: refused, naming the host"
else
    fail "-N 2 over a 1-slot host: status $rc" "$work/both"
fi
run --hostfile "$work/hostfile" --launch-agent "$agent" -n 7 "$testprog" construct
if [[ $rc == 1 ]] && grep -q '7 ranks, but the hosts have only 6 slot(s)' "$work/err"; then
    pass "7 ranks for 6 slots refused before anything starts"
else
    fail "too many ranks: status $rc" "$work/both"
fi
# mpirun's --oversubscribe (in its single-dash spellings, with --allow-run-as-root as
# CI scripts write it): the slots 1,3,2 filled, the 3 ranks left over one per host.
run -hostfile "$work/hostfile" -launch-agent "$agent" -oversubscribe --allow-run-as-root -np 9 "$work/where.sh"
got=$(sed -n 's/^WHERE \(rank=[0-9]*\) node=\([^ ]*\) .*/\1@\2/p' "$work/out" | sort -t= -k2 -n | tr '\n' ' ')
want="rank=0@$net.1 rank=1@$net.1 rank=2@$net.2 rank=3@$net.2 rank=4@$net.2 rank=5@$net.2 rank=6@$net.3 rank=7@$net.3 rank=8@$net.3 "
if [[ $rc == 0 && $got == "$want" ]]; then
    pass "--oversubscribe: 9 ranks on slots 1,3,2 as 0-1 | 2-5 | 6-8"
else
    fail "--oversubscribe: status $rc, got: $got" "$work/both"
fi
nothing_left oversubscribe
run --hostfile "$work/hostfile" --launch-agent "$agent" --oversubscribe -N 2 "$work/where.sh"
if [[ $rc == 0 ]] && [[ $(grep -c '^WHERE ' "$work/out") == 6 ]]; then
    pass "-N 2 over a 1-slot host with --oversubscribe: 6 ranks"
else
    fail "-N 2 --oversubscribe: status $rc" "$work/both"
fi
nothing_left oversubscribe-npernode
# A hung job over ssh: --timeout names the ranks still running by host, and
# --get-stack-traces has each host's node server print its ranks' stacks (gdb) first.
run --host "$hosts" --launch-agent "$agent" -n 3 --timeout 3 --get-stack-traces \
    sh -c 'if [ "$COHORT_RANK" = 0 ]; then exit 0; fi; exec sleep 60'
if [[ $rc == 124 ]] && grep -q "still running: rank 1 on $net.2, rank 2 on $net.3;" "$work/err" \
    && grep -q "stack of rank 1 on $net.2 (pid" "$work/err" \
    && grep -q "stack of rank 2 on $net.3 (pid" "$work/err" \
    && [[ $(grep -c 'nanosleep' "$work/err") -ge 2 ]]; then
    pass "--timeout --get-stack-traces: ranks 1-2 named with their stacks from their hosts"
else
    fail "--get-stack-traces over ssh: status $rc" "$work/both"
fi
nothing_left stack-traces
printf '%s slots=2\n%s slots=two\n' "$net.1" "$net.2" >"$work/bad-hostfile"
run --hostfile "$work/bad-hostfile" -n 2 "$testprog" construct
if [[ $rc == 1 ]] && grep -q "hostfile $work/bad-hostfile:2: slots \"two\" is not a whole number" "$work/err"; then
    pass "a bad hostfile line is reported with its line number"
else
    fail "bad hostfile: status $rc" "$work/both"
fi
printf '%s cpus=2\n' "$net.1" >"$work/bad-hostfile"
run --hostfile "$work/bad-hostfile" -n 2 "$testprog" construct
if [[ $rc == 1 ]] && grep -q "bad-hostfile:1: unknown attribute \"cpus=2\"" "$work/err"; then
    pass "an unknown hostfile attribute is refused"
else
    fail "bad hostfile attribute: status $rc" "$work/both"
fi
nothing_left bad-hostfiles

echo "### 4. an unreachable host, a host without cohortd, ssh refusing, no agent"
limit=40 run --host "$net.1,$net.9" --launch-agent "$agent" -n 2 "$testprog" construct
if [[ $rc == 1 && $took -lt 35 ]] &&
    grep -q "could not start the job: node server $net.9 (ssh, pid [0-9]*) exited with status 255 unexpectedly \[its stderr: ssh: connect to host $net.9 port 22: .*\] during startup" "$work/err"; then
    pass "unreachable host: failed in ${took} s naming $net.9 and what ssh said"
else
    fail "unreachable host: status $rc in ${took} s" "$work/both"
fi
nothing_left unreachable
run --host "$hosts" --launch-agent "$agent" --prefix /nonexistent -n 3 "$testprog" construct
if [[ $rc == 1 ]] && grep -q "could not start the job: node server $net.[123] (ssh, pid [0-9]*) exited with status 127 unexpectedly \[its stderr: .*/nonexistent/bin/cohortd.*\]" "$work/err"; then
    pass "cohortd missing on the hosts: failed in ${took} s naming the host and the path"
else
    fail "missing cohortd: status $rc" "$work/both"
fi
nothing_left missing-cohortd
# A key sshd does not know: ssh refuses (Permission denied).
ssh-keygen -q -t ed25519 -N '' -C cohort-ssh-ci-stranger -f "$work/stranger_key"
sed "s|IdentityFile .*|IdentityFile $work/stranger_key|" "$work/ssh_config" >"$work/ssh_config_stranger"
run --host "$hosts" --launch-agent "ssh -F $work/ssh_config_stranger" -n 3 "$testprog" construct
if [[ $rc == 1 && $took -lt 30 ]] &&
    grep -q "could not start the job: node server $net.[123] (ssh, pid [0-9]*) exited with status 255 unexpectedly \[its stderr: .*Permission denied" "$work/err"; then
    pass "ssh refusing (unknown key): failed in ${took} s naming the host and what ssh said"
else
    fail "ssh refusing: status $rc in ${took} s" "$work/both"
fi
nothing_left ssh-refusing
run --host "$hosts" --launch-agent "/nonexistent/ssh" -n 3 "$testprog" construct
if [[ $rc == 1 ]] && grep -q "cannot start the launch agent /nonexistent/ssh for host $net.1" "$work/err"; then
    pass "a launch agent that does not exist is named"
else
    fail "missing agent: status $rc" "$work/both"
fi
nothing_left missing-agent

# Starts `cohort run -n 3 sleep 60` in the background (pid in $job) and waits for its
# 3 ranks.
# Each rank is a shell waiting for its own child `sleep 60`: a node server killed
# from outside takes its rank with it, and its rank guard the child.
start_sleepers() {
    "$cohort" run --host "$hosts" --launch-agent "$agent" -n 3 "$@" sh -c 'sleep 60 & wait' \
        >"$work/out" 2>"$work/err" &
    job=$!
    for _ in $(seq 100); do
        [[ $(in_hosts sleep | wc -l) == 3 ]] && return 0
        sleep 0.1
    done
    return 1
}

for sig in INT TERM KILL; do
    echo "### 5. SIG$sig to cohort run mid-job"
    if start_sleepers; then
        kill "-$sig" "$job"
        rc=0
        # (Braces: no "Killed" report from bash.)
        { wait "$job"; } 2>/dev/null || rc=$?
        want=$((128 + $(kill -l "$sig")))
        if [[ $rc == "$want" ]]; then
            pass "SIG$sig: cohort run exited $rc"
        else
            cat "$work/out" "$work/err" >"$work/both"
            fail "SIG$sig: status $rc" "$work/both"
        fi
    else
        kill -KILL "$job" 2>/dev/null
        wait "$job"
        fail "SIG$sig: the ranks never ran" "$work/err"
    fi
    nothing_left "SIG$sig"
done

echo "### 6. a node server killed from outside (SIGKILL to $net.2's cohortd), no recovery"
if start_sleepers; then
    victim=""
    for pid in $(ip netns pids cohssh2); do
        [[ $(cat "/proc/$pid/comm" 2>/dev/null) == cohortd ]] && ! is_guard "$pid" && victim=$pid
    done
    kill -KILL "$victim"
    rc=0
    wait "$job" || rc=$?
    cat "$work/out" "$work/err" >"$work/both"
    if [[ $rc == 1 ]] && grep -q "node server $net.2 .*closed its control connection" "$work/err" &&
        grep -q "$net.2: cohortd died, so its rank guard killed 1 process group(s) its ranks left" "$work/err"; then
        pass "the job ended (status 1) when $net.2's node server was killed; its guard killed the rank's child"
    else
        fail "killed node server: status $rc" "$work/both"
    fi
else
    kill -KILL "$job" 2>/dev/null
    wait "$job"
    fail "killed node server: the ranks never ran" "$work/err"
fi
nothing_left killed-node-server

echo "### 7. a node server killed by its own rank, --enable-recovery (testprog construct-after-loss)"
run --host "$hosts" --launch-agent "$agent" -n 3 --enable-recovery "$testprog" construct-after-loss
results=$(grep -c '^RESULT lost=1 members=0,2 ctx=' "$work/out")
if [[ $rc == 137 && $results == 2 ]] &&
    grep -q "node server $net.2 .*; its ranks 1 are lost; continuing" "$work/err"; then
    pass "the survivors constructed without the lost rank; exit 137 (the lost rank's)"
else
    fail "construct-after-loss: status $rc, $results RESULT lines" "$work/both"
fi
nothing_left construct-after-loss

echo "### 8. the failure detector: a frozen node server (SIGSTOP), killed over ssh, --enable-recovery"
run --host "$hosts" --launch-agent "$agent" -n 3 --enable-recovery --peer-timeout 3 --heartbeat 0.5 \
    "$testprog" frozen-server
results=$(grep -c '^RESULT lost=2 members=0,1 ctx=' "$work/out")
if [[ $rc == 137 && $results == 2 ]] &&
    grep -q "node server $net.3 (pid [0-9]*) sent nothing for .*; killed; its ranks 2 are lost; continuing" "$work/err"; then
    pass "the frozen node server was found, killed on its host, and the survivors went on"
else
    fail "frozen-server: status $rc, $results RESULT lines" "$work/both"
fi
nothing_left frozen-server

echo "### 9. --pmix over ssh: Open MPI and PMIx programs on the 3 hosts"
# cohort's libpmix.so.2 under the name programs load (as `make pmix` makes it), at the
# same path on every host: the hosts share this file system.
pmixlib=$target/cohort-pmix
mkdir -p "$pmixlib" && ln -sf ../libpmix.so "$pmixlib/libpmix.so.2"
export COHORT_PMIX_LIBDIR=$pmixlib
demos_rc=0
bash "$repo/deploy/pmix-demos.sh" "$work/demos" "$pmixlib" 2>"$work/demos.err" || demos_rc=$?
if ((demos_rc == 125)); then
    echo "################################################################" >&2
    echo "## --pmix jobs SKIPPED: $(cat "$work/demos.err")" >&2
    echo "## Open MPI and PMIx programs over ssh were NOT tested in this run." >&2
    echo "################################################################" >&2
elif ((demos_rc != 0)); then
    fail "building mpi_demo and pmix_demo" "$work/demos.err"
else
    # Each rank says what Open MPI gets from --pmix (deploy/pmix-demos.sh's
    # ompi-env.sh), then becomes the program.
    # The rank's view: node, host name and Open MPI's settings, counted per node.
    ompi_env() {
        sed -n 's/^OMPI rank=[0-9]* \(.*\)/\1/p' "$work/out" | sort | uniq -c |
            awk '{$1=$1; print}' | tr '\n' ';'
    }
    run --host "$hosts" --launch-agent "$agent" --pmix -n 6 "$work/demos/ompi-env.sh" "$work/demos/mpi_demo"
    results=$(grep -c '^RESULT size=6 sum=6105$' "$work/out")
    if [[ $rc == 0 && $results == 6 ]] && ! grep -q 'FAIL rank' "$work/err"; then
        pass "mpi_demo: 6 Open MPI ranks on 3 hosts initialized, allgathered and finalized (${took} s)"
    else
        fail "mpi_demo: status $rc, $results RESULT lines" "$work/both"
    fi
    # The namespaces keep this host's name (no UTS namespace): Open MPI's shared-memory
    # segment names would collide, so TCP, on the network of 10.79.0.1-3 (not lo).
    host=$(hostname)
    want=""
    for i in 1 2 3; do
        want+="2 node=$net.$i host=$host btl=self,tcp if=$net.0/30 schizo=^orte lib=$pmixlib;"
    done
    got=$(ompi_env)
    if [[ $got == "$want" ]]; then
        pass "one host name for 3 hosts: Open MPI over TCP on $net.0/30, cohort's library first"
    else
        fail "mpi_demo environment: got $got, want $want" "$work/out"
    fi
    if [[ -s $work/err ]]; then
        fail "mpi_demo: something on stderr" "$work/err"
    else
        pass "mpi_demo: nothing on stderr"
    fi
    nothing_left pmix-mpi_demo
    # Open MPI's own account: TCP to every other rank, shared memory to none.
    run --host "$hosts" --launch-agent "$agent" --pmix -n 6 -x OMPI_MCA_btl_base_verbose=100 \
        "$work/demos/mpi_demo"
    if [[ $rc == 0 ]] && grep -q "Using tcp btl for send to .* on node $net.1" "$work/err" &&
        ! grep -q 'Using vader btl' "$work/err" && grep -q "path from $net.1 to $net.2" "$work/err"; then
        pass "Open MPI used TCP between all ranks, over $net.x, and no shared memory"
    else
        fail "mpi_demo transports (btl_base_verbose): status $rc" "$work/both"
    fi
    nothing_left pmix-mpi_demo-verbose

    run --host "$hosts" --launch-agent "$agent" --pmix -n 6 --pset evens=0,2,4 "$work/demos/pmix_demo"
    results=$(grep -c '^RESULT size=6 nodes=3 members=6 ctx=' "$work/out")
    distinct=$(grep '^RESULT' "$work/out" | sort -u | wc -l)
    if [[ $rc == 0 && $results == 6 && $distinct == 1 ]] && ! grep -q 'FAIL rank' "$work/err"; then
        pass "pmix_demo: 6 PMIx ranks on 3 hosts agreed (keys, fences, events, groups, connect)"
    else
        fail "pmix_demo: status $rc, $results RESULT lines, $distinct distinct" "$work/both"
    fi
    nothing_left pmix-pmix_demo

    echo "### 10. --pmix with --prefix: the hosts' library from the installed layout"
    # An installed cohort as `make install` lays it out: PREFIX/bin/cohortd and
    # PREFIX/lib/cohort/pmix/libpmix.so.2. The launcher needs no library of its own.
    mkdir -p "$work/prefix/bin" "$work/prefix/lib/cohort/pmix" "$work/prefix-nolib/bin"
    ln -s "$target/cohortd" "$work/prefix/bin/cohortd"
    ln -s "$target/libpmix.so" "$work/prefix/lib/cohort/pmix/libpmix.so.2"
    ln -s "$target/cohortd" "$work/prefix-nolib/bin/cohortd"
    COHORT_PMIX_LIBDIR=/nonexistent run --host "$hosts" --launch-agent "$agent" \
        --prefix "$work/prefix" --pmix -n 6 "$work/demos/ompi-env.sh" "$work/demos/mpi_demo"
    results=$(grep -c '^RESULT size=6 sum=6105$' "$work/out")
    if [[ $rc == 0 && $results == 6 ]] &&
        [[ $(grep -c "^OMPI .* lib=$work/prefix/lib/cohort/pmix$" "$work/out") == 6 ]]; then
        pass "--prefix: the ranks loaded PREFIX/lib/cohort/pmix/libpmix.so.2"
    else
        fail "--prefix with the library: status $rc, $results RESULT lines" "$work/both"
    fi
    nothing_left pmix-prefix
    run --host "$hosts" --launch-agent "$agent" --prefix "$work/prefix-nolib" --pmix -n 3 \
        "$work/demos/mpi_demo"
    if [[ $rc == 1 ]] &&
        grep -q "$net.[123]: --pmix: cohort's libpmix.so.2 is not in $work/prefix-nolib/lib/cohort/pmix on this host ($host), so the ranks cannot load it" "$work/err" &&
        grep -q "could not start the job: node server $net.[123] (ssh, pid [0-9]*) exited with status 1" "$work/err" &&
        ! grep -q 'RESULT\|MPI_Init' "$work/both"; then
        pass "--prefix without the library: failed before any rank ran, naming the host and what to do"
    else
        fail "--prefix without the library: status $rc" "$work/both"
    fi
    nothing_left pmix-prefix-nolib
fi
unset COHORT_PMIX_LIBDIR

echo "ssh CI job: $(($(date +%s) - started)) s ($(($(date +%s) - t_jobs)) s of jobs)"
for f in "${failures[@]}"; do echo "  failed: $f" >&2; done
echo "ssh-ci: $passed passed, $failed failed"
((failed == 0 && passed > 0))
