# Shared by scripts/real-model and scripts/mcp-http: a local server started in the
# background on a free 127.0.0.1 port, tracked by a PID file and a port file, stopped by PID.
# Expects NAME (for messages), PID_FILE and PORT_FILE to be set by the sourcing script.

say() { printf '%s: %s\n' "$NAME" "$*" >&2; }
fail() { say "FAILED at step '$1': $2"; exit 1; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

running() {
  [ -f "$PID_FILE" ] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null
}

# stop: kills the recorded PID (TERM, then KILL after 5 s) and removes the files.
stop() {
  if [ -f "$PID_FILE" ]; then
    local pid
    pid="$(cat "$PID_FILE")"
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
      kill -9 "$pid" 2>/dev/null || true
      say "stopped (pid $pid)"
    fi
  fi
  rm -f "$PID_FILE" "$PORT_FILE"
}

# wait_ready LOG TIMEOUT PROBE...: runs PROBE until it succeeds; fails naming the step
# 'ready' when the server exits or TIMEOUT seconds pass.
wait_ready() {
  local log="$1" timeout="$2"; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if ! running; then
      tail -20 "$log" >&2 || true
      rm -f "$PID_FILE" "$PORT_FILE"
      fail ready "the server exited before it was ready (see $log)"
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      tail -20 "$log" >&2 || true
      stop
      fail ready "not ready within ${timeout}s: $* (see $log)"
    fi
    sleep 0.5
  done
}
