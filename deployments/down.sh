#!/usr/bin/env bash
# Stop exactly what up.sh started: the process groups whose leader PIDs are recorded in <workspace>/run/*.pid.
set -uo pipefail

WS=$(realpath -m "${1:-t2g-workspace}")
RUN="$WS/run"
declare -A EXPECT=([serve]="deployments/serve.py" [mlflow-server]="mlflow" [prefect-server]="prefect")

for name in serve mlflow-server prefect-server; do
  pidfile="$RUN/$name.pid"
  [[ -f "$pidfile" ]] || continue
  pid=$(cat "$pidfile")
  # a recycled PID belongs to someone else: only stop it if its command line is still ours
  if kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "${EXPECT[$name]}"; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid"
    for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid"; fi
    echo "stopped $name (pid $pid)"
  fi
  rm -f "$pidfile"
done
rm -f "$RUN/servers.json"
