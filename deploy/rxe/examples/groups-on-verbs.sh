#!/usr/bin/env bash
# Group construct, add-members and a data fence across 3 node servers talking verbs
# (RC queue pairs on rxe0), each node server on its own rxe address/GID, gathering by
# the tree and then by the dissemination allgather: testprog's `groups` scenario (its
# `construct`, `addmembers` and `fence` in one job, since under emulation a job's
# start takes longer than all three). Run inside a soft-RoCE guest
# (deploy/rxe/rxe-run.sh); then a frozen node server found by the failure detector.
# Usage: groups-on-verbs.sh TARGET_DIR
set -euo pipefail
target=${1:?usage: groups-on-verbs.sh TARGET_DIR (e.g. target/debug)}
ulimit -l unlimited
addrs=192.168.78.1,192.168.78.2,192.168.78.3
for allgather in tree dissemination; do
    began=$SECONDS
    out=$(COHORT_FABRIC=verbs COHORT_LOG=cohort_transport=info timeout 180 \
        "$target/cohort" run --nodes 3 --node-addrs "$addrs" -n 3 --allgather "$allgather" \
        "$target/examples/testprog" groups 2>&1) || {
        echo "$out" >&2
        echo "groups-on-verbs: groups ($allgather) failed" >&2
        exit 1
    }
    chosen=$(grep -c 'fabric backend selected: verbs' <<<"$out" || true)
    # Every rank reports the construct's group, the add-members' group (another
    # context id) and the fence: three results, each the same on all three ranks.
    results=$(grep -c '^RESULT' <<<"$out" || true)
    agree=$(grep '^RESULT' <<<"$out" | sort -u | wc -l)
    fenced=$(grep -c '^RESULT fence-ok$' <<<"$out" || true)
    echo "construct, add-members, fence ($allgather): $chosen node servers on verbs, $results results reported, $agree distinct, $fenced fences, $((SECONDS - began)) s"
    if [[ $chosen -ne 3 || $results -ne 9 || $agree -ne 3 || $fenced -ne 3 ]]; then
        echo "$out" >&2
        exit 1
    fi
done
# A node server frozen (SIGSTOP) on verbs: its queue pairs stay up, so only the
# failure detector's heartbeats (over the same queue pairs) can find it; the two others
# must agree on a group without its rank, and the job ends with its rank's status.
# The peer timeout is long for an emulated guest: with 5 s, a node server starved of
# CPU while it set up its queue pairs (the host busy with other work) was once
# declared lost before anything was frozen.
set +e
began=$SECONDS
out=$(COHORT_FABRIC=verbs COHORT_LOG=cohort_transport=info timeout 180 \
    "$target/cohort" run --nodes 3 --node-addrs "$addrs" -n 3 --enable-recovery \
    --heartbeat 0.5 --peer-timeout 15 "$target/examples/testprog" frozen-server 2>&1)
status=$?
set -e
results=$(grep -c '^RESULT' <<<"$out" || true)
agree=$(grep '^RESULT' <<<"$out" | sort -u | wc -l || true)
declared=$(grep -c 'declared it lost and it did not answer' <<<"$out" || true)
echo "frozen-server: status $status, $results survivors reported, $agree distinct result(s), $declared declared lost, $((SECONDS - began)) s"
if [[ $status -ne 137 || $results -ne 2 || $agree -ne 1 || $declared -ne 1 ]]; then
    echo "$out" >&2
    exit 1
fi
