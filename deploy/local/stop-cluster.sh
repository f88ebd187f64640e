#!/usr/bin/env bash
# Stop what start-cluster.sh started from ${DPGM_CLUSTER_DIR:-.dpgm-cluster}: exactly the
# process groups recorded in its pid files (pid and start time must both match), and
# wait until every process of them has exited (SIGKILL after DPGM_STOP_TIMEOUT s).
set -uo pipefail
dir=${DPGM_CLUSTER_DIR:-.dpgm-cluster}
timeout=${DPGM_STOP_TIMEOUT:-30}

start_time() { awk '{print $22}' "/proc/$1/stat" 2>/dev/null; }
alive() { [ -n "$(pgrep -g "$1" 2>/dev/null)" ]; }  # any process left in group $1

stopped=0
for name in workers scheduler; do
    file=$dir/$name.pid
    [ -f "$file" ] || continue
    read -r pid started < "$file"
    if [ -n "${pid:-}" ] && [ "$(start_time "$pid")" = "${started:-}" ]; then
        kill -TERM -- "-$pid" 2>/dev/null
        for _ in $(seq $((timeout * 10))); do alive "$pid" || break; sleep 0.1; done
        if alive "$pid"; then
            echo "stop-cluster.sh: $name (group $pid) still running after $timeout s: SIGKILL" >&2
            kill -KILL -- "-$pid" 2>/dev/null
            for _ in $(seq 50); do alive "$pid" || break; sleep 0.1; done
        fi
        stopped=$((stopped + 1))
    elif [ -n "${pid:-}" ] && alive "$pid"; then
        echo "stop-cluster.sh: pid $pid in $file is another process now; not touched" >&2
    fi
    rm -f "$file"
done
rm -f "$dir/scheduler.json"
[ "$stopped" -gt 0 ] || echo "stop-cluster.sh: nothing started from $dir was running" >&2
exit 0
