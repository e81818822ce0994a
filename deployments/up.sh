#!/usr/bin/env bash
# Start a local Prefect server (SQLite in the workspace), an MLflow server (SQLite + local artifact root) and a serve
# process with the text2grad deployments. PIDs go to <workspace>/run/*.pid; `make down` (down.sh) stops exactly those.
# Ports: PREFECT_PORT (4200) and MLFLOW_PORT (5000), or the next free ones. PostgreSQL: see docs/operations.md.
# The Prefect API asks for an auth string (PREFECT_AUTH_STRING, "user:password", else a random one kept in
# <workspace>/run/prefect-auth, mode 0600; the UI asks for it once) and answers cross-origin requests only from its
# own UI. Runs may use only the endpoints in T2G_ALLOWED_ENDPOINTS and the key variables in T2G_ALLOWED_KEY_ENVS.
# The MLflow server asks for HTTP Basic credentials (its basic-auth app): user t2g and a random password kept in
# <workspace>/run/mlflow-auth ("user:password", mode 0600); the serve process and `t2g run` read them from there.
set -euo pipefail
umask 077  # all it and its servers write is private to this user; the inbox has its own mode (docs/operations.md)

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

AUTH_FILE="$RUN/prefect-auth"
if [[ -n "${PREFECT_AUTH_STRING:-}" ]]; then AUTH=$PREFECT_AUTH_STRING
elif [[ -s "$AUTH_FILE" ]]; then AUTH=$(cat "$AUTH_FILE")
else AUTH="t2g:$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"; fi
[[ "$AUTH" == *:* ]] || { echo "PREFECT_AUTH_STRING must look like user:password" >&2; exit 1; }
(printf '%s' "$AUTH" >"$AUTH_FILE.$$" && mv "$AUTH_FILE.$$" "$AUTH_FILE" &&
  printf 'user = "%s"\n' "$AUTH" >"$RUN/curl-auth")  # curl reads it from a file: never on a command line

export DO_NOT_TRACK=1 PREFECT_SERVER_ANALYTICS_ENABLED=false PREFECT_SERVER_UI_SHOW_PROMOTIONAL_CONTENT=false
export MLFLOW_DISABLE_TELEMETRY=true HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
export PREFECT_HOME="$WS/prefect"
OWN_DB=""  # a new SQLite database of ours starts as the copy of this Prefect version's last migration (kept_databases)
[[ -z "${PREFECT_SERVER_DATABASE_CONNECTION_URL:-}" && ! -e "$WS/prefect/prefect.db" ]] && OWN_DB="$WS/prefect/prefect.db"
export PREFECT_SERVER_DATABASE_CONNECTION_URL="${PREFECT_SERVER_DATABASE_CONNECTION_URL:-sqlite+aiosqlite:///$WS/prefect/prefect.db}"
export PREFECT_RESULTS_LOCAL_STORAGE_PATH="$WS/prefect-results"
MLFLOW_BACKEND="${MLFLOW_BACKEND_STORE_URI:-sqlite:///$WS/mlflow.db}"
MLFLOW_ARTIFACTS="${MLFLOW_ARTIFACTS_DESTINATION:-$WS/mlartifacts}"

MLFLOW_AUTH_FILE="$RUN/mlflow-auth"  # created once, kept: the admin user is created with it on the first start
[[ -s "$MLFLOW_AUTH_FILE" ]] || (printf 't2g:%s' "$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')" \
  >"$MLFLOW_AUTH_FILE.$$" && mv "$MLFLOW_AUTH_FILE.$$" "$MLFLOW_AUTH_FILE")
MLFLOW_AUTH=$(cat "$MLFLOW_AUTH_FILE")
cat >"$RUN/mlflow-auth.ini" <<INI
[mlflow]
default_permission = NO_PERMISSIONS
database_uri = sqlite:///$WS/mlflow-auth.db
admin_username = ${MLFLOW_AUTH%%:*}
authorization_function = mlflow.server.auth:authenticate_request_basic_auth
auth_cache_ttl_seconds = 300
INI
# ^ a credential check is a scrypt hash, about 0.1 CPU-s, on every request unless cached (MLflow's default); one
#   worker holds the cache, so a password changed through MLflow's API applies at once, one changed out of band in 5 min
# Create and migrate the MLflow database once, before a server worker and clients touch it (first-creation race); a
# new SQLite file starts as the kept copy, as Prefect's below.
"$BIN/python" -c "import sys; from t2g_mlflow.experiment import create_store as c; c(sys.argv[1])" "$MLFLOW_BACKEND" \
  >/dev/null 2>&1
[[ -n "$OWN_DB" ]] && "$BIN/python" -m t2g_env.kept_databases place prefect "$OWN_DB"

start() {  # name, command...: own session (process group), so down.sh can stop it and its children
  local name=$1; shift
  setsid "$@" >"$RUN/$name.log" 2>&1 < /dev/null &
  echo $! >"$RUN/$name.pid"
}
UI_ORIGINS="http://127.0.0.1:$PREFECT_PORT,http://localhost:$PREFECT_PORT"
PREFECT_SERVER_API_AUTH_STRING="$AUTH" PREFECT_SERVER_API_CORS_ALLOWED_ORIGINS="$UI_ORIGINS" \
  start prefect-server "$BIN/prefect" server start --host 127.0.0.1 --port "$PREFECT_PORT" --analytics-off
MLFLOW_AUTH_CONFIG_PATH="$RUN/mlflow-auth.ini" MLFLOW_AUTH_ADMIN_PASSWORD="${MLFLOW_AUTH#*:}" \
  MLFLOW_FLASK_SERVER_SECRET_KEY="$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')" \
  start mlflow-server "$BIN/mlflow" server --app-name basic-auth --backend-store-uri "$MLFLOW_BACKEND" \
  --artifacts-destination "$MLFLOW_ARTIFACTS" --host 127.0.0.1 --port "$MLFLOW_PORT" --workers 1

wait_health() {  # url, name, seconds, curl options...
  local url=$1 name=$2 seconds=$3; shift 3
  for _ in $(seq 1 "$seconds"); do
    if curl -fsS "$@" "$url" >/dev/null 2>&1; then return 0; fi
    if ! alive "$name"; then echo "$name exited; see $RUN/$name.log" >&2; tail -20 "$RUN/$name.log" >&2; return 1; fi
    sleep 1
  done
  echo "$name not healthy after $seconds s; see $RUN/$name.log" >&2; return 1
}
stop_all() { bash "$(dirname "$0")/down.sh" "$WS"; exit 1; }   # a failed start leaves nothing running
wait_health "http://127.0.0.1:$PREFECT_PORT/api/health" prefect-server 180 || stop_all
[[ -n "$OWN_DB" ]] && "$BIN/python" -m t2g_env.kept_databases keep prefect "$OWN_DB"  # when none was kept
wait_health "http://127.0.0.1:$MLFLOW_PORT/health" mlflow-server 180 || stop_all
# MLflow stores the admin's password under scrypt, which costs the server 0.2 s of CPU on every request it answers
# (the tracking client sends one per logged batch). The generated password is 24 random bytes: key stretching adds
# nothing to a secret of that strength, so its stored hash becomes a salted one-round PBKDF2. A password a user wrote
# into the file (shorter than 32 characters) keeps scrypt.
MLFLOW_AUTH_PASSWORD="${MLFLOW_AUTH#*:}" "$BIN/python" - "$WS/mlflow-auth.db" "${MLFLOW_AUTH%%:*}" <<'PY' || stop_all
import os, sqlite3, sys
from werkzeug.security import generate_password_hash
password = os.environ["MLFLOW_AUTH_PASSWORD"]
if len(password) >= 32:
    with sqlite3.connect(sys.argv[1]) as db:
        fast = generate_password_hash(password, "pbkdf2:sha256:1")
        db.execute("UPDATE users SET password_hash = ? WHERE username = ? AND password_hash LIKE 'scrypt:%'",
                   (fast, sys.argv[2]))
PY

export PREFECT_API_URL="http://127.0.0.1:$PREFECT_PORT/api"
export MLFLOW_TRACKING_URI="http://127.0.0.1:$MLFLOW_PORT"
export MLFLOW_TRACKING_USERNAME="${MLFLOW_AUTH%%:*}" MLFLOW_TRACKING_PASSWORD="${MLFLOW_AUTH#*:}"
export PREFECT_API_AUTH_STRING="$AUTH"
export PREFECT_RUNNER_POLL_FREQUENCY="${PREFECT_RUNNER_POLL_FREQUENCY:-5}"
start serve "$BIN/python" "$(cd "$(dirname "$0")" && pwd)/serve.py" --workspace "$WS" --sensor-interval "${SENSOR_INTERVAL:-60}" \
  --debounce "${DEBOUNCE_SECONDS:-30}" ${CRON:+--cron "$CRON"}

# ready when the serve process has registered its deployments
wait_health "$PREFECT_API_URL/deployments/name/reannotate/reannotate" serve 240 --config "$RUN/curl-auth" || stop_all

cat >"$RUN/servers.json" <<JSON
{"prefect_api": "$PREFECT_API_URL", "prefect_ui": "http://127.0.0.1:$PREFECT_PORT", "mlflow": "$MLFLOW_TRACKING_URI",
 "workspace": "$WS", "prefect_auth_file": "$AUTH_FILE", "mlflow_auth_file": "$MLFLOW_AUTH_FILE"}
JSON
echo "Prefect UI: http://127.0.0.1:$PREFECT_PORT   (deployments: text2grad, feedback-sensor, reannotate)"
echo "            it asks for the auth string in $AUTH_FILE"
echo "MLflow UI:  http://127.0.0.1:$MLFLOW_PORT   (user and password: $MLFLOW_AUTH_FILE)"
echo "Inbox:      $WS/inbox   (drop feedback files here; re-annotation follows)"
echo "Logs/PIDs:  $RUN        stop with: make down WORKSPACE=$WS"
