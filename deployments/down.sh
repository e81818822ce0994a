#!/usr/bin/env bash
# Stop exactly what up.sh started: the process groups whose leader PIDs are recorded in <workspace>/run/*.pid.
# The serve process first (it talks to both servers as it stops), then the two servers together.
set -uo pipefail

WS=$(realpath -m "${1:-t2g-workspace}")
RUN="$WS/run"
declare -A EXPECT=([serve]="deployments/serve.py" [mlflow-server]="mlflow" [prefect-server]="prefect")

stop() {  # stop NAME...: TERM each one's group, wait up to 10 s for all of them, then KILL what is left
  local name pid pidfile stopping=()
  for name in "$@"; do
    pidfile="$RUN/$name.pid"
    [[ -f "$pidfile" ]] || continue
    pid=$(cat "$pidfile")
    # a recycled PID belongs to someone else: only stop it if its command line is still ours
    if kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "${EXPECT[$name]}"; then
      kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid"
      stopping+=("$name:$pid")
    fi
    rm -f "$pidfile"
  done
  for entry in "${stopping[@]}"; do
    name=${entry%%:*} pid=${entry##*:}
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid"; fi
    echo "stopped $name (pid $pid)"
  done
}

stop serve
stop mlflow-server prefect-server
rm -f "$RUN/servers.json"
