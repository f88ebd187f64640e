#!/usr/bin/env bash
# Start a Dask scheduler and N single-threaded workers on loopback; state in ${DPGM_CLUSTER_DIR:-.dpgm-cluster}.
set -euo pipefail
workers=${1:-2}
dir=${DPGM_CLUSTER_DIR:-.dpgm-cluster}
port=${DPGM_SCHEDULER_PORT:-8786}
mkdir -p "$dir"
export MALLOC_MMAP_THRESHOLD_=268435456 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
dask scheduler --host 127.0.0.1 --port "$port" --dashboard-address :0 \
  --scheduler-file "$dir/scheduler.json" > "$dir/scheduler.log" 2>&1 &
echo $! > "$dir/scheduler.pid"
for _ in $(seq 100); do [ -s "$dir/scheduler.json" ] && break; sleep 0.1; done
dask worker --scheduler-file "$dir/scheduler.json" --nworkers "$workers" --nthreads 1 \
  --local-directory "$dir" > "$dir/workers.log" 2>&1 &
echo $! > "$dir/workers.pid"
echo "scheduler: tcp://127.0.0.1:$port (scheduler file $dir/scheduler.json)"
