#!/usr/bin/env bash
# Start a Dask scheduler and N single-threaded workers on this machine, listening on
# 127.0.0.1 only (Dask workers run pickled code from anyone who can connect), on free
# ports unless DPGM_SCHEDULER_PORT is set. Returns once the N workers have joined.
#
#   deploy/local/start-cluster.sh [N]      # state in ${DPGM_CLUSTER_DIR:-.dpgm-cluster}
#   dpgm fit ... --scheduler-file .dpgm-cluster/scheduler.json
#   deploy/local/stop-cluster.sh
#
# Each process group started is recorded as "PID START_TIME" in DIR/*.pid, so
# stop-cluster.sh stops exactly these processes (never a reused pid). Starting again
# while they run fails (exit 1); exit 69 if the cluster does not come up.
set -euo pipefail
workers=${1:-2}
dir=${DPGM_CLUSTER_DIR:-.dpgm-cluster}
port=${DPGM_SCHEDULER_PORT:-0}
timeout=${DPGM_START_TIMEOUT:-60}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dir"

start_time() { awk '{print $22}' "/proc/$1/stat" 2>/dev/null; }
running() {  # the process recorded in pid file $1 still runs
    local pid started
    [ -f "$1" ] || return 1
    read -r pid started < "$1" || return 1
    [ -n "$pid" ] && [ "$(start_time "$pid")" = "$started" ]
}

for name in scheduler workers; do
    if running "$dir/$name.pid"; then
        echo "start-cluster.sh: a cluster started from $dir is already running ($name pid $(cut -d' ' -f1 "$dir/$name.pid")); stop it with deploy/local/stop-cluster.sh" >&2
        exit 1
    fi
done
rm -f "$dir/scheduler.pid" "$dir/workers.pid" "$dir/scheduler.json"

export MALLOC_MMAP_THRESHOLD_=268435456 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
launch() {  # launch NAME COMMAND...: in its own process group, recorded in DIR/NAME.pid
    local name=$1; shift
    setsid "$@" > "$dir/$name.log" 2>&1 < /dev/null &
    local pid=$!
    local started=""
    for _ in $(seq 50); do started=$(start_time "$pid") && [ -n "$started" ] && break; sleep 0.02; done
    echo "$pid $started" > "$dir/$name.pid"
}
fail() {
    echo "start-cluster.sh: $*" >&2
    "$here/stop-cluster.sh" >/dev/null 2>&1 || true
    exit 69
}

launch scheduler dask scheduler --host 127.0.0.1 --port "$port" --dashboard-address 127.0.0.1:0 \
    --preload dpgm.dashboard --scheduler-file "$dir/scheduler.json"
for _ in $(seq $((timeout * 10))); do
    [ -s "$dir/scheduler.json" ] && break
    running "$dir/scheduler.pid" || fail "the scheduler exited; see $dir/scheduler.log"
    sleep 0.1
done
[ -s "$dir/scheduler.json" ] || fail "no scheduler file after $timeout s; see $dir/scheduler.log"

launch workers dask worker --scheduler-file "$dir/scheduler.json" --nworkers "$workers" --nthreads 1 \
    --host 127.0.0.1 --dashboard-address 127.0.0.1:0 --local-directory "$dir"
python - "$dir/scheduler.json" "$workers" "$timeout" <<'EOF' || fail "the $workers workers did not join within $timeout s; see $dir/workers.log"
import sys
from distributed import Client
with Client(scheduler_file=sys.argv[1], timeout=float(sys.argv[3])) as client:
    client.wait_for_workers(int(sys.argv[2]), timeout=float(sys.argv[3]))
    print(f"scheduler: {client.scheduler.address} (scheduler file {sys.argv[1]}); dashboard: {client.dashboard_link}")
EOF
