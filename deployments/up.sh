#!/usr/bin/env bash
# Start a local Prefect server (SQLite in the workspace), an MLflow server (SQLite + local artifact root) and a serve
# process with the text2grad deployments. PIDs go to <workspace>/run/*.pid; `make down` (down.sh) stops exactly those.
# Ports: PREFECT_PORT (4200) and MLFLOW_PORT (5000), or the next free ones. PostgreSQL: see docs/operations.md.
set -euo pipefail

WS=$(realpath -m "${1:-t2g-workspace}")
BIN=${VENV_BIN:-$(pwd)/.venv/bin}
RUN="$WS/run"
mkdir -p "$RUN" "$WS/prefect" "$WS/mlartifacts" "$WS/inbox"

alive() { [[ -f "$RUN/$1.pid" ]] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null; }
if alive prefect-server || alive mlflow-server || alive serve; then
  echo "already running (see $RUN/servers.json); stop with: make down WORKSPACE=$WS"; cat "$RUN/servers.json" 2>/dev/null || true
  exit 0
fi

free_port() {  # the first free port at or above $1
  local p=$1
  while (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; do p=$((p + 1)); done
  echo "$p"
}
PREFECT_PORT=$(free_port "${PREFECT_PORT:-4200}")
MLFLOW_PORT=$(free_port "${MLFLOW_PORT:-5000}")
[[ "$MLFLOW_PORT" == "$PREFECT_PORT" ]] && MLFLOW_PORT=$(free_port $((PREFECT_PORT + 1)))

export DO_NOT_TRACK=1 PREFECT_SERVER_ANALYTICS_ENABLED=false PREFECT_SERVER_UI_SHOW_PROMOTIONAL_CONTENT=false
export MLFLOW_DISABLE_TELEMETRY=true HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
export PREFECT_HOME="$WS/prefect"
export PREFECT_SERVER_DATABASE_CONNECTION_URL="${PREFECT_SERVER_DATABASE_CONNECTION_URL:-sqlite+aiosqlite:///$WS/prefect/prefect.db}"
export PREFECT_RESULTS_LOCAL_STORAGE_PATH="$WS/prefect-results"
MLFLOW_BACKEND="${MLFLOW_BACKEND_STORE_URI:-sqlite:///$WS/mlflow.db}"
MLFLOW_ARTIFACTS="${MLFLOW_ARTIFACTS_DESTINATION:-$WS/mlartifacts}"

# Create and migrate the MLflow database once, before a server worker and clients touch it (first-creation race).
"$BIN/python" -c "import sys, mlflow; mlflow.MlflowClient(sys.argv[1]).search_experiments()" "$MLFLOW_BACKEND" >/dev/null 2>&1

start() {  # name, command...: own session (process group), so down.sh can stop it and its children
  local name=$1; shift
  setsid "$@" >"$RUN/$name.log" 2>&1 < /dev/null &
  echo $! >"$RUN/$name.pid"
}
start prefect-server "$BIN/prefect" server start --host 127.0.0.1 --port "$PREFECT_PORT" --analytics-off
start mlflow-server "$BIN/mlflow" server --backend-store-uri "$MLFLOW_BACKEND" --artifacts-destination "$MLFLOW_ARTIFACTS" \
  --host 127.0.0.1 --port "$MLFLOW_PORT" --workers 1

wait_health() {  # url, name, seconds
  for _ in $(seq 1 "$3"); do
    if curl -fsS "$1" >/dev/null 2>&1; then return 0; fi
    if ! alive "$2"; then echo "$2 exited; see $RUN/$2.log" >&2; tail -20 "$RUN/$2.log" >&2; return 1; fi
    sleep 1
  done
  echo "$2 not healthy after $3 s; see $RUN/$2.log" >&2; return 1
}
stop_all() { bash "$(dirname "$0")/down.sh" "$WS"; exit 1; }   # a failed start leaves nothing running
wait_health "http://127.0.0.1:$PREFECT_PORT/api/health" prefect-server 180 || stop_all
wait_health "http://127.0.0.1:$MLFLOW_PORT/health" mlflow-server 180 || stop_all

export PREFECT_API_URL="http://127.0.0.1:$PREFECT_PORT/api"
export MLFLOW_TRACKING_URI="http://127.0.0.1:$MLFLOW_PORT"
export PREFECT_RUNNER_POLL_FREQUENCY="${PREFECT_RUNNER_POLL_FREQUENCY:-5}"
start serve "$BIN/python" "$(cd "$(dirname "$0")" && pwd)/serve.py" --workspace "$WS" --sensor-interval "${SENSOR_INTERVAL:-60}" \
  --debounce "${DEBOUNCE_SECONDS:-30}" ${CRON:+--cron "$CRON"}

# ready when the serve process has registered its deployments
wait_health "$PREFECT_API_URL/deployments/name/reannotate/reannotate" serve 240 || stop_all

cat >"$RUN/servers.json" <<JSON
{"prefect_api": "$PREFECT_API_URL", "prefect_ui": "http://127.0.0.1:$PREFECT_PORT", "mlflow": "$MLFLOW_TRACKING_URI",
 "workspace": "$WS"}
JSON
echo "Prefect UI: http://127.0.0.1:$PREFECT_PORT   (deployments: text2grad, feedback-sensor, reannotate)"
echo "MLflow UI:  http://127.0.0.1:$MLFLOW_PORT"
echo "Inbox:      $WS/inbox   (drop feedback files here; re-annotation follows)"
echo "Logs/PIDs:  $RUN        stop with: make down WORKSPACE=$WS"
