#!/usr/bin/env bash
# bench.sh - the sluice benchmark suite: three ratios, each measured in one run by alternating the
# two sides round after round (so that drifting machine load hits both alike), reported as the
# median of the per-round ratios.
#
#   (a) overhead: `identity` through sluice vs sluice-echo-server (no engine, queue or batcher: the
#       network-path ceiling), equal payload (4 KiB FP32) and concurrency (16); and (a') the same
#       at concurrency 1, where the p50 difference is sluice's own latency per request.
#   (b) batching: `mlp` with dynamic batching on (models/mlp as it is) vs off (a temporary copy of
#       models/mlp without its dynamic_batching block), concurrency 64: throughput and p99.
#   (c) pipeline: the CPU backend's asynchronous pipeline (--executor-slots 2, the default: the
#       executor runs the next batch while the completion thread answers the previous one) vs a
#       forced synchronisation per request (--executor-slots 1 and dynamic batching off: one
#       request at a time, and nothing new starts until the previous answer is out). Also
#       reported: slots 2 vs 1 with batching off on both sides (the pipelining alone). The
#       default server runs a one-instance CPU model on its batcher thread (no pipeline: see
#       --cpu-batcher-runs-batches); the batching-off and slots-1 servers use the executor's
#       threads, so that (c') still measures the pipeline.
#       On a GPU build this is the stand-in for "cudaStreamSynchronize after every request".
#   (d) synchronous clients (--mode sync: one blocking call per worker, perf_analyzer's default):
#       identity 4 KiB through sluice vs sluice-echo-server at concurrency 1 (d) and 16 (d').
#   (e) with --baseline-build DIR: `mlp` through this build's server vs DIR's (e.g. the previous
#       commit's build) serving --baseline-models (default: this checkout's models/; give the
#       previous commit's models/ to compare with its configs too), sync clients at concurrency
#       1 (e) and async at 64 (e'): throughput, p50, and the server's mean batch size.
#   (f) idle CPU: the server's user + system CPU time over 10 s with nothing sent (after start-up
#       and whatever the figures before it sent), as a share of one core.
#
# Every server binds 127.0.0.1 on a free port; every load run is bounded (--max-duration-s,
# --max-requests); the whole suite takes about 2.5 minutes with the defaults (9 rounds; each side
# of a round: 300 ms warm-up, one 1000 ms window: many short alternations make the median robust to
# bursts of other work on the machine).
#
# Usage: scripts/bench.sh [--build-dir DIR] [--baseline-build DIR [--baseline-models DIR]]
#                         [--rounds N] [--warmup-ms MS]
#                         [--window-ms MS] [--windows N] [--only a|b|c|d|e|f] [--out DIR]
# Needs sluice-server, sluice-loadtest and sluice-echo-server built in DIR (default: build):
#   cmake -S . -B build && make -C build sluice-server sluice-loadtest sluice-echo-server
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

BUILD_DIR=build
BASELINE_BUILD=""
BASELINE_MODELS=""
ROUNDS=9
WARMUP_MS=300
WINDOW_MS=1000
WINDOWS=1
ONLY=""
OUT_DIR=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) BUILD_DIR=$2; shift 2 ;;
    --baseline-build) BASELINE_BUILD=$2; shift 2 ;;
    --baseline-models) BASELINE_MODELS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --warmup-ms) WARMUP_MS=$2; shift 2 ;;
    --window-ms) WINDOW_MS=$2; shift 2 ;;
    --windows) WINDOWS=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --out) OUT_DIR=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

SERVER=$BUILD_DIR/server/sluice-server
LOADTEST=$BUILD_DIR/loadtest/sluice-loadtest
ECHO_SERVER=$BUILD_DIR/loadtest/sluice-echo-server
for binary in "$SERVER" "$LOADTEST" "$ECHO_SERVER"; do
  if [[ ! -x $binary ]]; then
    echo "bench.sh: $binary not found; build first:" >&2
    echo "  cmake -S . -B $BUILD_DIR && make -C $BUILD_DIR sluice-server sluice-loadtest sluice-echo-server" >&2
    exit 1
  fi
done
PYTHON=$(command -v python3)

WORK=$(mktemp -d /tmp/sluice-bench.XXXXXX)
[[ -n $OUT_DIR ]] || OUT_DIR=$WORK/results
mkdir -p "$OUT_DIR"
SERVER_PIDS=()
cleanup() {
  for pid in "${SERVER_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${SERVER_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK/repo-nobatch"
}
trap cleanup EXIT

# start_server NAME READY_TEXT COMMAND...: starts COMMAND in the background (log in $WORK/NAME.log),
# waits until it logged READY_TEXT and its port, and sets PORT.
start_server() {
  local name=$1 ready=$2
  shift 2
  echo "server $name: $*"
  "$@" >"$WORK/$name.log" 2>&1 &
  SERVER_PIDS+=($!)
  local pid=$!
  for _ in $(seq 600); do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "bench.sh: $name exited during start-up:" >&2; cat "$WORK/$name.log" >&2; exit 1
    fi
    if grep -q "$ready" "$WORK/$name.log" && grep -q 'grpc_port=' "$WORK/$name.log"; then
      PORT=$(grep -o 'grpc_port=[0-9]*' "$WORK/$name.log" | head -1 | cut -d= -f2)
      return 0
    fi
    sleep 0.1
  done
  echo "bench.sh: $name did not get ready in 60 s:" >&2; cat "$WORK/$name.log" >&2; exit 1
}

# A copy of models/MODEL without its dynamic_batching block (the weights are linked, not copied).
make_nobatch_repo() {
  local repo=$WORK/repo-nobatch
  mkdir -p "$repo"
  for model in "$@"; do
    mkdir -p "$repo/$model"
    for entry in "$ROOT/models/$model"/*; do
      [[ $(basename "$entry") == config.pbtxt ]] || ln -s "$entry" "$repo/$model/"
    done
    "$PYTHON" - "$ROOT/models/$model/config.pbtxt" "$repo/$model/config.pbtxt" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
match = re.search(r'^\s*dynamic_batching\s*\{', text, re.M)
if match:
    depth, end = 0, match.end() - 1
    for end in range(match.end() - 1, len(text)):
        depth += {'{': 1, '}': -1}.get(text[end], 0)
        if depth == 0:
            break
    text = text[:match.start()] + '\n# (bench.sh: dynamic_batching removed)' + text[end + 1:]
open(sys.argv[2], 'w').write(text)
EOF
  done
  echo "$repo"
}

# The flags of every load run: fixed windows (the stability rule is switched off with a 1000%
# tolerance: the suite's robustness comes from alternation and medians), and hard bounds.
LOADTEST_FIXED=(--warmup-ms "$WARMUP_MS" --window-ms "$WINDOW_MS" --max-windows "$WINDOWS"
                --stability-percent 1000 --max-duration-s 60 --max-requests 2000000 --no-progress)

# measure OUT_JSON URL ARGS...: one bounded load run; prints nothing, fails loudly.
measure() {
  local json=$1 url=$2
  shift 2
  local cmd=("$LOADTEST" -u "$url" "${LOADTEST_FIXED[@]}" --json "$json" "$@")
  if ! "${cmd[@]}" >"$json.txt" 2>&1; then
    echo "bench.sh: load run failed: ${cmd[*]}" >&2; cat "$json.txt" >&2; exit 1
  fi
  echo "${cmd[*]}" >"$json.cmd"
}

# compare TITLE ROUNDS_PREFIX NAME_A URL_A NAME_B URL_B -- LOADTEST ARGS: alternates A and B for
# $ROUNDS rounds (A first in odd rounds, B first in even ones) and prints the per-round figures and
# the medians of the ratios A/B.
compare() {
  local title=$1 prefix=$2 name_a=$3 url_a=$4 name_b=$5 url_b=$6
  shift 7  # the 7th argument is "--"
  echo
  echo "$title"
  echo "  command: $LOADTEST -u {$name_a|$name_b} ${LOADTEST_FIXED[*]} --json FILE $*"
  for round in $(seq "$ROUNDS"); do
    if (( round % 2 == 1 )); then
      measure "$OUT_DIR/$prefix-$round-a.json" "$url_a" "$@"
      measure "$OUT_DIR/$prefix-$round-b.json" "$url_b" "$@"
    else
      measure "$OUT_DIR/$prefix-$round-b.json" "$url_b" "$@"
      measure "$OUT_DIR/$prefix-$round-a.json" "$url_a" "$@"
    fi
  done
  "$PYTHON" - "$OUT_DIR" "$prefix" "$ROUNDS" "$name_a" "$name_b" <<'EOF'
import json, statistics, sys
out, prefix, rounds, name_a, name_b = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
med = statistics.median
def load(side, r):
    d = json.load(open(f"{out}/{prefix}-{r}-{side}.json"))
    level = d["levels"][0]
    server = level["server"] or {}
    return {"rps": level["throughput_rps"], "p50": level["latency_us"]["p50"],
            "p99": level["latency_us"]["p99"], "failed": d["totals"]["failed"],
            "batch": server.get("avg_batch_size", 0)}
rows = [(load("a", r), load("b", r)) for r in range(1, rounds + 1)]
def ratio(key):
    return [a[key] / b[key] if b[key] else float("nan") for a, b in rows]
for r, (a, b) in enumerate(rows, 1):
    failed = a["failed"] + b["failed"]
    print(f"  round {r}: {name_a} {a['rps']:8.1f} req/s p50 {a['p50']/1e3:7.3f} p99 {a['p99']/1e3:7.3f} ms"
          f" | {name_b} {b['rps']:8.1f} req/s p50 {b['p50']/1e3:7.3f} p99 {b['p99']/1e3:7.3f} ms"
          f" | throughput x{a['rps']/b['rps']:.3f}" + (f"  ({failed} FAILED)" if failed else ""))
def side(i, name):
    values = [row[i] for row in rows]
    batch = med(v["batch"] for v in values)
    return (f"{name} {med(v['rps'] for v in values):.1f} req/s, p50 {med(v['p50'] for v in values)/1e3:.3f} ms, "
            f"p99 {med(v['p99'] for v in values)/1e3:.3f} ms" + (f", server batch {batch:.2f}" if batch else ""))
print(f"  medians: {side(0, name_a)}; {side(1, name_b)}")
thr = ratio("rps")
p50_delta = med(a["p50"] - b["p50"] for a, b in rows)
print(f"  RATIO {prefix}: {name_a}/{name_b} throughput = {med(thr):.3f} (range {min(thr):.3f}..{max(thr):.3f}), "
      f"p50 = {med(ratio('p50')):.3f}, p99 = {med(ratio('p99')):.3f}; "
      f"p50 difference {p50_delta:+.0f} us  (medians of {rounds} rounds)")
EOF
}

want() { [[ -z $ONLY || $ONLY == *"$1"* ]]; }

HAVE_MLP=0
[[ -f models/mlp/config.pbtxt ]] && HAVE_MLP=1
SUITE_START=$(date +%s)
echo "sluice bench: $ROUNDS rounds per figure; each side per round: ${WARMUP_MS} ms warm-up + $WINDOWS x ${WINDOW_MS} ms windows, sides alternated"
echo "machine: nproc=$(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(uname -sr)"
echo "build: $BUILD_DIR; results: $OUT_DIR; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

BATCH_MODELS=(identity)
(( HAVE_MLP )) && BATCH_MODELS+=(mlp)
LOAD_MODELS=(--model-control-mode=explicit)
for model in "${BATCH_MODELS[@]}"; do LOAD_MODELS+=(--load-model "$model"); done
NOBATCH_REPO=$(make_nobatch_repo "${BATCH_MODELS[@]}")
# (Info-level logging stays on: start_server waits for the "server ready" line.)
SERVER_FLAGS=(--grpc-address 127.0.0.1 --grpc-port 0 --http-address 127.0.0.1 --http-port 0)
# Several servers run side by side: their metrics endpoints (where the build has them) also take
# a free loopback port.
if "$SERVER" --help 2>/dev/null | grep -- '--metrics-port' >/dev/null; then
  SERVER_FLAGS+=(--metrics-address 127.0.0.1 --metrics-port 0)
fi
start_server sluice-default "server ready" "$SERVER" "${SERVER_FLAGS[@]}" \
  --model-repository "$ROOT/models" "${LOAD_MODELS[@]}"
URL_DEFAULT=127.0.0.1:$PORT

if want a; then
  start_server echo "echo server ready" "$ECHO_SERVER" --grpc-address 127.0.0.1 --grpc-port 0
  URL_ECHO=127.0.0.1:$PORT
  compare "(a) server overhead: identity through sluice vs sluice-echo-server (4 KiB FP32, concurrency 16, async)" \
    a_overhead sluice "$URL_DEFAULT" echo "$URL_ECHO" -- \
    -m identity --shape INPUT0:1024 --concurrency 16 --mode async
  compare "(a') per-request overhead: the same at concurrency 1 (latency: the p50 difference is sluice's own cost per request)" \
    a_latency sluice "$URL_DEFAULT" echo "$URL_ECHO" -- \
    -m identity --shape INPUT0:1024 --concurrency 1 --mode async
fi

# The servers of (b)'s "off" side and (c) run one-instance CPU models on the executor's own
# threads (issue + completion, --executor-slots batches in flight), which is what (c) measures;
# the default server runs them on the batcher thread (--cpu-batcher-runs-batches, on by default
# where the build has it).
NOBATCH_SERVER_FLAGS=()
if "$SERVER" --help 2>/dev/null | grep -- '--cpu-batcher-runs-batches' >/dev/null; then
  NOBATCH_SERVER_FLAGS=(--cpu-batcher-runs-batches=false)
fi
# The batching-off repository links the models' weights (make_nobatch_repo), which a server that
# refuses symlinks out of its repository must be told to accept.
if "$SERVER" --help 2>/dev/null | grep -- '--allow-symlinks-out-of-repository' >/dev/null; then
  NOBATCH_SERVER_FLAGS+=(--allow-symlinks-out-of-repository=true)
fi
if want b || want c; then
  start_server sluice-nobatch "server ready" "$SERVER" "${SERVER_FLAGS[@]}" "${NOBATCH_SERVER_FLAGS[@]}" \
    --model-repository "$NOBATCH_REPO" "${LOAD_MODELS[@]}"
  URL_NOBATCH=127.0.0.1:$PORT
fi

if want b; then
  if (( HAVE_MLP )); then
    compare "(b) dynamic batching: mlp with dynamic_batching (max_queue_delay as configured) vs without, concurrency 64, async" \
      b_batching batching_on "$URL_DEFAULT" batching_off "$URL_NOBATCH" -- \
      -m mlp --concurrency 64 --mode async
  else
    echo
    echo "(b) dynamic batching: skipped: models/mlp missing"
  fi
fi

if want c; then
  C_MODEL=identity
  C_ARGS=(-m identity --shape INPUT0:1024)
  if (( HAVE_MLP )); then
    C_MODEL=mlp
    C_ARGS=(-m mlp)
  fi
  start_server sluice-sync "server ready" "$SERVER" "${SERVER_FLAGS[@]}" "${NOBATCH_SERVER_FLAGS[@]}" --executor-slots 1 \
    --model-repository "$NOBATCH_REPO" "${LOAD_MODELS[@]}"
  URL_SYNC=127.0.0.1:$PORT
  compare "(c) pipeline: $C_MODEL, default server (executor slots 2, dynamic batching on) vs forced sync per request (slots 1, batching off), concurrency 16, async" \
    c_pipeline pipelined "$URL_DEFAULT" sync_per_request "$URL_SYNC" -- \
    "${C_ARGS[@]}" --concurrency 16 --mode async
  compare "(c') pipelining alone: $C_MODEL with batching off on both sides, executor slots 2 vs 1, concurrency 16, async" \
    c_slots slots2 "$URL_NOBATCH" slots1 "$URL_SYNC" -- \
    "${C_ARGS[@]}" --concurrency 16 --mode async
fi

if want d; then
  [[ -n ${URL_ECHO:-} ]] || { start_server echo "echo server ready" "$ECHO_SERVER" --grpc-address 127.0.0.1 --grpc-port 0; URL_ECHO=127.0.0.1:$PORT; }
  compare "(d) per-request overhead, synchronous clients: identity through sluice vs sluice-echo-server (4 KiB FP32, concurrency 1, sync)" \
    d_sync1 sluice "$URL_DEFAULT" echo "$URL_ECHO" -- \
    -m identity --shape INPUT0:1024 --concurrency 1 --mode sync
  compare "(d') the same at concurrency 16, sync" \
    d_sync16 sluice "$URL_DEFAULT" echo "$URL_ECHO" -- \
    -m identity --shape INPUT0:1024 --concurrency 16 --mode sync
fi

if want e && [[ -n $BASELINE_BUILD ]]; then
  BASELINE_SERVER=$BASELINE_BUILD/server/sluice-server
  [[ -x $BASELINE_SERVER ]] || { echo "bench.sh: $BASELINE_SERVER not found" >&2; exit 1; }
  start_server sluice-baseline "server ready" "$BASELINE_SERVER" "${SERVER_FLAGS[@]}" \
    --model-repository "${BASELINE_MODELS:-$ROOT/models}" "${LOAD_MODELS[@]}"
  URL_BASELINE=127.0.0.1:$PORT
  compare "(e) mlp, this build vs the baseline build ($BASELINE_BUILD), concurrency 1, sync" \
    e_mlp1 this "$URL_DEFAULT" baseline "$URL_BASELINE" -- -m mlp --concurrency 1 --mode sync
  compare "(e') mlp, this build vs the baseline build, concurrency 64, async" \
    e_mlp64 this "$URL_DEFAULT" baseline "$URL_BASELINE" -- -m mlp --concurrency 64 --mode async
fi

if want f; then
  echo
  echo "(f) idle CPU: the default server, nothing sent for 10 s"
  SERVER_PID=${SERVER_PIDS[0]}
  cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
  sleep 2
  before=$(cpu_ticks "$SERVER_PID")
  sleep 10
  after=$(cpu_ticks "$SERVER_PID")
  ticks=$(getconf CLK_TCK)
  "$PYTHON" -c "import sys; t=(int(sys.argv[2])-int(sys.argv[1]))/int(sys.argv[3]); print(f'  IDLE CPU: {t*1000:.0f} ms of CPU in 10 s = {t/10*100:.2f}% of one core')" \
    "$before" "$after" "$ticks"
fi

echo
echo "suite done in $(( $(date +%s) - SUITE_START )) s (load average now: $(cut -d' ' -f1-3 /proc/loadavg)); per-run JSON, console output and commands in $OUT_DIR"
