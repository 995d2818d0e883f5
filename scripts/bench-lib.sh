# shellcheck shell=bash disable=SC2034  # sourced; the variables it sets are for the caller
# bench-lib.sh - what the benchmark scripts share; sourced, not run. Two parts: the one-server
# scripts' (bench-http.sh, bench-shared-memory.sh, bench-ragged.sh: flags, a server on free ports),
# and, below, the side-by-side scripts' against infinity-emb (bench-embed.sh, bench-rerank.sh: its
# virtual environment, waiting for servers, idle checks, wrk's Lua). bench.sh keeps its own
# machinery (it also starts echo servers and baseline builds).
#
#   source scripts/bench-lib.sh
#   ROUNDS=3 WINDOW_MS=1000                  # the script's defaults, before parsing
#   bench_parse_args "$@"                    # --build-dir --rounds --warmup-ms --window-ms --out -h
#   bench_start_server --model-repository models --model-control-mode=explicit --load-model x
#   ... "$LOADTEST" -u "$GRPC" ...           # GRPC, HTTP, METRICS: 127.0.0.1:port of each listener
#
# The server binds 127.0.0.1 on free ports only; it is stopped when the script exits.

# The flags every script takes. Defaults: the variables' values when this is called (BUILD=build,
# ROUNDS=3, WARMUP_MS=300, WINDOW_MS=1000 if unset; OUT a fresh temporary folder).
bench_parse_args() {
  BUILD=${BUILD:-build}
  ROUNDS=${ROUNDS:-3}
  WARMUP_MS=${WARMUP_MS:-300}
  WINDOW_MS=${WINDOW_MS:-1000}
  OUT=${OUT:-}
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --build-dir) BUILD=$2; shift 2 ;;
      --rounds) ROUNDS=$2; shift 2 ;;
      --warmup-ms) WARMUP_MS=$2; shift 2 ;;
      --window-ms) WINDOW_MS=$2; shift 2 ;;
      --out) OUT=$2; shift 2 ;;
      -h|--help)
        # The calling script's header comment, up to its first non-comment line.
        awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
        exit 0 ;;
      *) echo "$(basename "$0"): unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
  done
  [[ -n $OUT ]] || OUT=$(mktemp -d "/tmp/sluice-$(basename "$0" .sh).XXXX")
  mkdir -p "$OUT"
  SERVER=$BUILD/server/sluice-server
  LOADTEST=$BUILD/loadtest/sluice-loadtest
  for binary in "$SERVER" "$LOADTEST"; do
    if [[ ! -x $binary ]]; then
      echo "$(basename "$0"): $binary not found; build first (scripts/build.sh)" >&2
      exit 1
    fi
  done
}

# bench_start_server SERVER_ARGS...: starts $SERVER on loopback with free ports (log in
# $OUT/server.log), waits until it is ready (at most 120 s), and sets SERVER_PID, GRPC, HTTP and
# METRICS (host:port). The server is stopped when the script exits.
bench_start_server() {
  local flags=(--grpc-address 127.0.0.1 --grpc-port 0 --http-address 127.0.0.1 --http-port 0
               --metrics-address 127.0.0.1 --metrics-port 0 "$@")
  echo "+ $SERVER ${flags[*]}"
  "$SERVER" "${flags[@]}" >"$OUT/server.log" 2>&1 &
  SERVER_PID=$!
  trap 'kill $SERVER_PID 2>/dev/null; wait $SERVER_PID 2>/dev/null || true' EXIT
  for _ in $(seq 1200); do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "$(basename "$0"): the server exited during start-up:" >&2
      cat "$OUT/server.log" >&2
      exit 1
    fi
    grep -q "server ready" "$OUT/server.log" && break
    sleep 0.1
  done
  if ! grep -q "server ready" "$OUT/server.log"; then
    echo "$(basename "$0"): the server was not ready in 120 s:" >&2
    cat "$OUT/server.log" >&2
    exit 1
  fi
  GRPC=127.0.0.1:$(_bench_logged_port grpc_port)
  HTTP=127.0.0.1:$(_bench_logged_port http_port)
  METRICS=127.0.0.1:$(_bench_logged_port metrics_port)
}

_bench_logged_port() { grep -o "$1=[0-9]*" "$OUT/server.log" | head -1 | cut -d= -f2; }

# "2.31 1.90 1.75": the load averages, for the report.
bench_loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# ---- Side by side with infinity-emb (bench-embed.sh, bench-rerank.sh) ----
# These take PY (scripts/python-env.sh's interpreter) and PIDS (the servers started, an array the
# caller appends to) from the calling script.

# Sets INFINITY_VENV ($SLUICE_INFINITY_VENV, else the cache's bench-infinity) and makes it once:
# infinity-emb 0.0.78 pins torch and sentence-transformers of its own, so it gets its own venv.
bench_infinity_venv() {
  INFINITY_VENV=${SLUICE_INFINITY_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice/bench-infinity}
  if [[ ! -f "$INFINITY_VENV/.complete" ]]; then
    python3 -m venv "$INFINITY_VENV"
    "$INFINITY_VENV/bin/pip" install -q --disable-pip-version-check \
      "infinity-emb[server,torch,optimum]==0.0.78" "click<8.2"
    touch "$INFINITY_VENV/.complete"
  fi
}

# Stops every process in PIDS (the EXIT trap's work).
bench_stop_pids() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}

# A free TCP port on 127.0.0.1.
bench_free_port() {
  "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# bench_wait_http URL TIMEOUT_S [POLL_S]: until URL answers 2xx, polled every POLL_S seconds (0.2
# by default); returns 1 after TIMEOUT_S seconds, saying so.
bench_wait_http() {
  local deadline=$((SECONDS + $2))
  until curl -sf -o /dev/null "$1"; do
    [[ $SECONDS -lt $deadline ]] || { echo "no answer from $1 after $2 s" >&2; return 1; }
    sleep "${3:-0.2}"
  done
}

# The servers' (PIDS') user + system clock ticks, together.
_bench_cpu_ticks() {
  local total=0 pid
  for pid in "${PIDS[@]}"; do
    [[ -r /proc/$pid/stat ]] || continue
    total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
  done
  echo "$total"
}

# Before each cell, every server must be idle: a server still computing requests queued by the
# previous cell's closed connections would slow the next cell's server (measured: infinity kept
# both cores busy for seconds after a 64-connection cell of 32-sentence requests). Waits until the
# servers use < 5% of a core over half a second, 120 s at most.
bench_wait_idle() {
  local deadline=$((SECONDS + 120)) before after
  while [[ $SECONDS -lt $deadline ]]; do
    before=$(_bench_cpu_ticks); sleep 0.5; after=$(_bench_cpu_ticks)
    [[ $((after - before)) -gt 2 ]] || return 0
  done
  echo "servers still busy after 120 s" >&2
}

# The end of a wrk Lua script: counts non-2xx answers (which void the figure) and prints
# "RESULT requests=... seconds=... p50_us=... p99_us=... non2xx=...", the line the scripts keep.
bench_wrk_result_lua() {
  cat <<'EOF'
local bad = 0
response = function(status, headers, body) if status < 200 or status > 299 then bad = bad + 1 end end
done = function(summary, latency, requests)
  io.write(string.format("RESULT requests=%d seconds=%.3f p50_us=%d p99_us=%d non2xx=%d\n",
    summary.requests, summary.duration / 1e6, latency:percentile(50), latency:percentile(99),
    summary.errors.status + bad))
end
EOF
}
