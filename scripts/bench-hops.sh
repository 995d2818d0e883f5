#!/usr/bin/env bash
# bench-hops.sh - the server's own cost per request, for thread-hop work on the request path:
# `identity` 4 KiB FP32 through two sluice servers (A and B: two builds, or one build with two
# sets of flags) and sluice-echo-server, alternated round after round (A, B, echo; then echo, B,
# A), each side one bounded load run. Per side, medians of the rounds: requests/s, p50, the
# server process's CPU time (user + system, /proc/PID/stat) per request and its context switches
# (voluntary + involuntary, every thread, /proc/PID/task/*/status) per request, and the mean
# batch size; then the per-round ratios B/A and each side / echo. With --syscalls, also the server's
# system calls per request that carry hand-offs between threads (futex, the eventfd write gRPC
# uses to kick a poller, sendmsg, recvmsg, epoll_wait), counted by `perf stat` on its
# syscalls:sys_enter_* tracepoints (needs perf, and perf_event_paranoid <= 1 or root). CPU per
# request is the steadier
# figure on a loaded machine: the load tester runs on the same cores, so requests/s moves with
# whatever else runs, the work per request much less.
#
# Usage: scripts/bench-hops.sh [--a-build DIR] [--b-build DIR] [--a-flags "FLAGS"]
#                              [--b-flags "FLAGS"] [--rounds N] [--window-ms MS]
#                              [--concurrency N] [--mode sync|async] [--syscalls] [--out DIR]
# Defaults: both builds build/, no extra flags, 7 rounds, 2000 ms windows after a 300 ms warm-up,
# concurrency 16, sync (perf_analyzer's default). The echo server and the load tester are A's.
# Example (the batcher running a one-instance CPU model's batches, against the executor threads):
#   scripts/bench-hops.sh --a-flags --cpu-batcher-runs-batches=false
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

A_BUILD=build
B_BUILD=build
A_FLAGS=""
B_FLAGS=""
ROUNDS=7
WINDOW_MS=2000
CONCURRENCY=16
MODE=sync
SYSCALLS=0
SYSCALL_NAMES=(futex write sendmsg recvmsg epoll_wait)
OUT=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --a-build) A_BUILD=$2; shift 2 ;;
    --b-build) B_BUILD=$2; shift 2 ;;
    --a-flags) A_FLAGS=$2; shift 2 ;;
    --b-flags) B_FLAGS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --window-ms) WINDOW_MS=$2; shift 2 ;;
    --concurrency) CONCURRENCY=$2; shift 2 ;;
    --mode) MODE=$2; shift 2 ;;
    --syscalls) SYSCALLS=1; shift ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "bench-hops.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
LOADTEST=$A_BUILD/loadtest/sluice-loadtest
ECHO_SERVER=$A_BUILD/loadtest/sluice-echo-server
for binary in "$A_BUILD/server/sluice-server" "$B_BUILD/server/sluice-server" "$LOADTEST" \
              "$ECHO_SERVER"; do
  [[ -x $binary ]] || { echo "bench-hops.sh: $binary not found; build first" >&2; exit 1; }
done
if (( SYSCALLS )); then
  command -v perf >/dev/null ||
    { echo "bench-hops.sh: --syscalls needs perf (Debian: linux-perf)" >&2; exit 1; }
  perf stat -e syscalls:sys_enter_futex -- true >/dev/null 2>&1 ||
    { echo "bench-hops.sh: --syscalls: perf cannot read the syscall tracepoints here" \
           "(run as root, or lower /proc/sys/kernel/perf_event_paranoid)" >&2; exit 1; }
fi
[[ -n $OUT ]] || OUT=$(mktemp -d /tmp/sluice-bench-hops.XXXXXX)
mkdir -p "$OUT"

PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

# start NAME READY_TEXT COMMAND...: starts COMMAND (log in $OUT/NAME.log), waits for READY_TEXT
# and its gRPC port; sets PID and PORT.
start() {
  local name=$1 ready=$2
  shift 2
  "$@" >"$OUT/$name.log" 2>&1 &
  PID=$!
  PIDS+=("$PID")
  for _ in $(seq 600); do
    kill -0 "$PID" 2>/dev/null || { echo "bench-hops.sh: $name exited:" >&2; cat "$OUT/$name.log" >&2; exit 1; }
    if grep -q "$ready" "$OUT/$name.log" && grep -q 'grpc_port=' "$OUT/$name.log"; then
      PORT=$(grep -o 'grpc_port=[0-9]*' "$OUT/$name.log" | head -1 | cut -d= -f2)
      return 0
    fi
    sleep 0.1
  done
  echo "bench-hops.sh: $name did not get ready in 60 s" >&2; exit 1
}
SERVER_FLAGS=(--grpc-address 127.0.0.1 --grpc-port 0 --http-address 127.0.0.1 --http-port 0
              --metrics-address 127.0.0.1 --metrics-port 0 --model-repository "$ROOT/models"
              --model-control-mode=explicit --load-model identity)
# shellcheck disable=SC2086  # the flags are meant to split
start a "server ready" "$A_BUILD/server/sluice-server" "${SERVER_FLAGS[@]}" $A_FLAGS
A_PID=$PID A_PORT=$PORT
# shellcheck disable=SC2086
start b "server ready" "$B_BUILD/server/sluice-server" "${SERVER_FLAGS[@]}" $B_FLAGS
B_PID=$PID B_PORT=$PORT
start e "echo server ready" "$ECHO_SERVER" --grpc-address 127.0.0.1 --grpc-port 0
E_PID=$PID E_PORT=$PORT

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
switches() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/ctxt_switches/ { s += $2 } END { print s }'; }
# measure SIDE PID PORT ROUND: one bounded load run; records the server's CPU ticks and context
# switches before and after it.
measure() {
  local side=$1 pid=$2 port=$3 round=$4
  local before_cpu before_cs
  before_cpu=$(cpu_ticks "$pid")
  before_cs=$(switches "$pid")
  local perf_pid=""
  if (( SYSCALLS )); then
    local events
    events=$(printf 'syscalls:sys_enter_%s,' "${SYSCALL_NAMES[@]}")
    perf stat -x, -e "${events%,}" -p "$pid" -o "$OUT/$side-$round.syscalls" &
    perf_pid=$!
  fi
  "$LOADTEST" -u "127.0.0.1:$port" --warmup-ms 300 --window-ms "$WINDOW_MS" --max-windows 1 \
    --stability-percent 1000 --max-duration-s 60 --max-requests 2000000 --no-progress \
    --json "$OUT/$side-$round.json" -m identity --shape INPUT0:1024 \
    --concurrency "$CONCURRENCY" --mode "$MODE" >"$OUT/$side-$round.txt" 2>&1 ||
    { echo "bench-hops.sh: load run failed:" >&2; cat "$OUT/$side-$round.txt" >&2; exit 1; }
  echo "$before_cpu $(cpu_ticks "$pid") $before_cs $(switches "$pid")" >"$OUT/$side-$round.cpu"
  if [[ -n $perf_pid ]]; then
    kill -INT "$perf_pid"
    wait "$perf_pid" || true
  fi
}

echo "bench-hops.sh: A $A_BUILD $A_FLAGS | B $B_BUILD $B_FLAGS | echo; identity 4 KiB," \
     "concurrency $CONCURRENCY $MODE, $ROUNDS rounds of $WINDOW_MS ms; results in $OUT"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$ROUNDS"); do
  if (( round % 2 == 1 )); then order=(a b e); else order=(e b a); fi
  for side in "${order[@]}"; do
    case $side in
      a) measure a "$A_PID" "$A_PORT" "$round" ;;
      b) measure b "$B_PID" "$B_PORT" "$round" ;;
      e) measure e "$E_PID" "$E_PORT" "$round" ;;
    esac
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$OUT" "$ROUNDS" "$(getconf CLK_TCK)" "$SYSCALLS" "${SYSCALL_NAMES[@]}" <<'EOF'
import json, statistics, sys
out, rounds, hz, syscalls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
syscall_names = sys.argv[5:]
med = statistics.median
def load(side, r):
    d = json.load(open(f"{out}/{side}-{r}.json"))
    level, n = d["levels"][0], d["totals"]["succeeded"] + d["totals"]["failed"]
    c0, c1, s0, s1 = map(int, open(f"{out}/{side}-{r}.cpu").read().split())
    return {"rps": level["throughput_rps"], "p50": level["latency_us"]["p50"],
            "cpu": (c1 - c0) / hz * 1e6 / n, "cs": (s1 - s0) / n, "failed": d["totals"]["failed"],
            "batch": (level.get("server") or {}).get("avg_batch_size", 0),
            "sys": syscalls_per_request(side, r, n) if syscalls else {}}
def syscalls_per_request(side, r, n):
    # perf stat -x, lines: count,unit,event,...; the window starts a little before the load run
    # and ends a little after it, when the server is idle (and makes no calls).
    counts = {}
    for line in open(f"{out}/{side}-{r}.syscalls"):
        fields = line.strip().split(",")
        if len(fields) > 2 and fields[2].startswith("syscalls:sys_enter_"):
            counts[fields[2].removeprefix("syscalls:sys_enter_")] = float(fields[0]) / n
    return counts
rows = {s: [load(s, r) for r in range(1, rounds + 1)] for s in "abe"}
names = {"a": "A", "b": "B", "e": "echo"}
for s in "abe":
    v = rows[s]
    print(f"  {names[s]:4s}: {med(x['rps'] for x in v):8.0f} req/s, p50 {med(x['p50'] for x in v):6.0f} us, "
          f"server CPU {med(x['cpu'] for x in v):5.1f} us/request, "
          f"{med(x['cs'] for x in v):4.2f} context switches/request"
          + (f", batch {med(x['batch'] for x in v):.2f}" if s != "e" else "")
          + (f"  ({sum(x['failed'] for x in v)} FAILED)" if any(x['failed'] for x in v) else ""))
    if syscalls:
        print("        system calls/request: " + ", ".join(
            f"{name} {med(x['sys'].get(name, 0) for x in v):.3f}" for name in syscall_names))
def ratio(x, y, key):
    values = [a[key] / b[key] for a, b in zip(rows[x], rows[y])]
    return f"{med(values):.3f} ({min(values):.2f}-{max(values):.2f})"
print(f"  B/A: throughput {ratio('b', 'a', 'rps')}, CPU per request {ratio('b', 'a', 'cpu')}")
print(f"  A/echo: throughput {ratio('a', 'e', 'rps')};  B/echo: throughput {ratio('b', 'e', 'rps')}")
EOF
