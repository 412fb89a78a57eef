#!/usr/bin/env bash
# A node server cut off on verbs: 4 node servers on rxe0, each on its own address/GID;
# once every rank is past a fence, the construct's root rank removes the address (and
# with it the GID) of the next node server from dummy0, so that server's queue pairs
# fail while its process and every other server run on. The fabric reports the failure
# to the launcher instead of acting on it; the launcher has both ends of the broken
# link ping every other server, and ends the one that reached none (or ends it because
# the others saw its connections close). The three others must agree on a group
# without its rank. Run inside a soft-RoCE guest
# (deploy/rxe/rxe-run.sh) as the last step: it changes the guest's addresses.
# Usage: cut-off-on-verbs.sh TARGET_DIR
set -euo pipefail
target=${1:?usage: cut-off-on-verbs.sh TARGET_DIR (e.g. target/debug)}
ulimit -l unlimited
# Removing the primary address of a subnet would remove every other one with it.
echo 1 >/proc/sys/net/ipv4/conf/all/promote_secondaries
echo 1 >/proc/sys/net/ipv4/conf/dummy0/promote_secondaries
addrs=192.168.78.1,192.168.78.2,192.168.78.3,192.168.78.4
set +e
out=$(COHORT_TEST_CUT_CMD='ip addr del $ADDR/24 dev dummy0' COHORT_TEST_NODE_ADDRS=$addrs \
    COHORT_FABRIC=verbs timeout 180 \
    "$target/cohort" run --nodes 4 --node-addrs "$addrs" -n 4 --enable-recovery \
    --heartbeat 0.5 --peer-timeout 5 "$target/examples/testprog" cut-off 2>&1)
status=$?
set -e
results=$(grep -c '^RESULT' <<<"$out" || true)
agree=$(grep '^RESULT' <<<"$out" | sort -u | wc -l || true)
killed=$(grep -c '; killed' <<<"$out" || true)
# Found by the survey (it reached nobody), or ended because the others saw its
# connections close and route around it, or, if slower, by its watcher (cut off).
why=$(grep '; killed' <<<"$out" | grep -c 'it reached 0 other node server(s)\|routes around it already\|(cut off); killed' || true)
echo "cut-off on verbs: status $status, $results survivors reported, $agree distinct result(s), $killed killed, $why as cut off"
if [[ $status -ne 137 || $results -ne 3 || $agree -ne 1 || $killed -ne 1 || $why -ne 1 ]]; then
    echo "$out" >&2
    exit 1
fi
