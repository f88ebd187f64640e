#!/usr/bin/env bash
# Stop what start-cluster.sh started.
set -uo pipefail
dir=${DPGM_CLUSTER_DIR:-.dpgm-cluster}
for name in workers scheduler; do
  if [ -f "$dir/$name.pid" ]; then kill "$(cat "$dir/$name.pid")" 2>/dev/null; rm -f "$dir/$name.pid"; fi
done
wait 2>/dev/null
rm -f "$dir/scheduler.json"
