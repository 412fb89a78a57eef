#!/usr/bin/env bash
# deploy/rxe/ci.sh — the verbs CI job: builds the transport test binaries on the host,
# then boots one soft-RoCE guest (deploy/rxe/rxe-run.sh) and runs in it the verbs half of
# the fabric conformance suite and the backend-selection tests, on real RC queue pairs
# over rxe0, an ibv_devices / ib_send_lat smoke check, and group constructs and fences
# across 3 node servers on verbs. Exits non-zero if any fails.
#
#   deploy/rxe/ci.sh            (from anywhere; honours CARGO_TARGET_DIR and CARGO)
#
# Inside the guest COHORT_TEST_REQUIRE_VERBS=1, so a missing device fails the tests
# instead of skipping them.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
cargo=${CARGO:-cargo}
started=$(date +%s)

# Test binaries (the guest runs the host's build through its read-only view of /).
build_log=$(mktemp)
trap 'rm -f "$build_log"' EXIT
if ! "$cargo" test -p cohort-transport --tests --no-run >"$build_log" 2>&1; then
    cat "$build_log" >&2
    exit 1
fi
binary() { # test target name -> absolute path of its executable
    sed -n "s|^ *Executable tests/$1\.rs (\(.*\))\$|\1|p" "$build_log" | tail -1
}
conformance=$(binary conformance)
select=$(binary select)
[[ -n $conformance && -n $select ]] || { echo "ci.sh: test executables not found" >&2; cat "$build_log" >&2; exit 1; }
[[ $conformance == /* ]] || conformance=$repo/$conformance
[[ $select == /* ]] || select=$repo/$select
# The launcher, cohortd and the test rank program, for groups across node servers.
if ! "$cargo" build --bins --examples >"$build_log" 2>&1; then
    cat "$build_log" >&2
    exit 1
fi
target=${CARGO_TARGET_DIR:-$repo/target}/debug

job="set -e
export COHORT_TEST_REQUIRE_VERBS=1
echo '### verbs smoke: ibv_devices, ib_send_lat'
deploy/rxe/examples/verbs-smoke.sh 50
echo '### fabric conformance on verbs (rxe0)'
'$conformance' verbs:: --test-threads=1
echo '### backend selection on a host with an ACTIVE port'
'$select' --test-threads=1
echo '### group construct, add-members and fence across 3 node servers on verbs'
deploy/rxe/examples/groups-on-verbs.sh '$target'"
status=0
COHORT_RXE_TIMEOUT=${COHORT_RXE_TIMEOUT:-600} "$repo/deploy/rxe/rxe-run.sh" "$repo" "$job" || status=$?
echo "rxe CI job: status $status after $(($(date +%s) - started)) s"
exit $status
