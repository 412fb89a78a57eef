#!/usr/bin/env bash
# Runs inside the rxe guest: is there a verbs device, and do two processes on it talk
# over a real RC queue pair? (perftest's ib_send_lat, server on GID 1, client on GID 2.)
# Usage: deploy/rxe/rxe-run.sh . deploy/rxe/examples/verbs-smoke.sh [ITERATIONS]
set -u
iters=${1:-100}
ibv_devices
ibv_devinfo -d rxe0 | grep -E 'hca_id|state|active_mtu|link_layer'
listening() { for _ in $(seq 300); do ss -ltn | grep -q ":18515 " && return 0; sleep 0.1; done; return 1; }
timeout 120 ib_send_lat -d rxe0 -x 1 -n "$iters" >/tmp/server.out 2>&1 &
server=$!
listening || echo "ib_send_lat server did not start listening"
timeout 120 ib_send_lat -d rxe0 -x 2 -n "$iters" 192.168.78.1
client_rc=$?
wait $server
server_rc=$?
echo "ib_send_lat: client rc=$client_rc, server rc=$server_rc"
exit $((client_rc | server_rc))
