# shellcheck shell=bash disable=SC2034  # sourced; the variables it sets are for the caller
# bench-lib.sh - what the one-server benchmark scripts (bench-http.sh, bench-shared-memory.sh,
# bench-ragged.sh) share; sourced, not run. bench.sh keeps its own machinery (it also starts
# echo servers and baseline builds).
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
