#!/usr/bin/env bash
# bench-rerank.sh - rerank throughput and latency, sluice against infinity-emb (issue 39), side by
# side on this machine: the same cross-encoder folder (ms-marco-MiniLM-L-6 shape: BERT, hidden
# 384, 6 layers, one label, the real all-MiniLM-L6-v2 WordPiece tokenizer; random weights, which
# cost what trained ones cost), the same seeded request (1 query x 32 documents of 100-300 tokens)
# posted by one neutral load generator (wrk, Debian) to the same Cohere-shaped route both servers
# answer (POST /rerank on infinity, POST /v1/rerank on sluice, one body), 1 / 8 / 32 connections,
# alternating rounds. Before timing, both servers' scores are checked against
# sentence-transformers' CrossEncoder on the same pairs. Non-2xx answers are fatal.
#
#   scripts/bench-rerank.sh [--rounds N] [--seconds S] [--connections "1 8 32"] [--engines "torch optimum"]
#                           [--precision fp32|bf16|int8]
#
# sluice runs as the README configures a model (a three-line config.pbtxt, max_batch_size 32),
# nothing tuned. --precision (default fp32) adds the model's `precision` parameter for sluice and
# gives infinity the same weights dtype (--dtype float32/bfloat16/int8); below fp32 the scores are
# allowed to drift from CrossEncoder's FP32 ones (each server's drift and order are printed). infinity-emb 0.0.78 (torch and optimum/ONNX Runtime engines) lives in a virtual
# environment of its own, made here once (it pins torch and sentence-transformers of its own).
# Prints one table: pairs/s, p50, p99 per server and connection count, and sluice / best infinity.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bench-lib.sh

ROUNDS=2
SECONDS_PER_CELL=20
CONNECTIONS="1 8 32"
ENGINES="torch optimum"
PRECISION=fp32
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --seconds) SECONDS_PER_CELL=$2; shift 2 ;;
    --connections) CONNECTIONS=$2; shift 2 ;;
    --engines) ENGINES=$2; shift 2 ;;
    --precision) PRECISION=$2; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

command -v wrk >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq wrk; }
BUILD_DIR=${SLUICE_BUILD_DIR:-build}
[[ -x "$BUILD_DIR/server/sluice-server" ]] || scripts/build.sh
PY=$(scripts/python-env.sh)
bench_infinity_venv

WORK=$(mktemp -d /tmp/sluice-bench-rerank.XXXXXX)
PIDS=()
trap bench_stop_pids EXIT
# Offline, and no telemetry: infinity-emb reports usage to a third party unless told not to.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 DO_NOT_TRACK=1 INFINITY_ANONYMOUS_USAGE_STATS=0

case "$PRECISION" in
  fp32) INFINITY_DTYPE=float32 ;;
  bf16) INFINITY_DTYPE=bfloat16 ;;
  int8) INFINITY_DTYPE=int8 ;;
  *) echo "--precision: fp32, bf16 or int8, not $PRECISION" >&2; exit 2 ;;
esac

# The checkpoint, the request body and the reference scores.
"$PY" bench/rerank_bench.py prepare --work "$WORK" --precision "$PRECISION"
FOLDER="$WORK/models/reranker/1"
# infinity's optimum engine reads an ONNX export from the folder (it downloads one otherwise): the
# same checkpoint exported by optimum, in a copy of the folder that sluice does not read.
INFINITY_FOLDER="$WORK/infinity-model"
cp -r "$FOLDER" "$INFINITY_FOLDER"
if [[ " $ENGINES " == *" optimum "* ]]; then
  # One .onnx file, at the top: infinity takes the folder's only one.
  "$INFINITY_VENV/bin/optimum-cli" export onnx --model "$FOLDER" --task text-classification \
    "$WORK/onnx-export" >"$WORK/onnx-export.log" 2>&1
  cp "$WORK/onnx-export/model.onnx" "$INFINITY_FOLDER/model.onnx"
fi

declare -A URL
SLUICE_PORT=$(bench_free_port)
"$BUILD_DIR/server/sluice-server" --model-repository="$WORK/models" --http-address=127.0.0.1 \
  --http-port="$SLUICE_PORT" --grpc-address=127.0.0.1 --grpc-port=0 --metrics-port=0 \
  >"$WORK/sluice.log" 2>&1 &
PIDS+=($!)
bench_wait_http "http://127.0.0.1:$SLUICE_PORT/health" 120 1
URL[sluice]="http://127.0.0.1:$SLUICE_PORT/v1/rerank"
SERVERS="sluice"
for engine in $ENGINES; do
  port=$(bench_free_port)
  # From inside the folder, as "." : infinity 0.0.78 hands optimum the ONNX file's path as it
  # globbed it, which optimum only finds when it is relative to the model folder.
  (cd "$INFINITY_FOLDER" && exec "$INFINITY_VENV/bin/infinity_emb" v2 --model-id . \
    --served-model-name reranker --engine "$engine" --port "$port" --url-prefix "" \
    --batch-size 32 --no-bettertransformer --dtype "$INFINITY_DTYPE") >"$WORK/infinity-$engine.log" 2>&1 &
  PIDS+=($!)
  if bench_wait_http "http://127.0.0.1:$port/health" 300 1; then
    URL[infinity-$engine]="http://127.0.0.1:$port/rerank"
    SERVERS="$SERVERS infinity-$engine"
  else
    echo "infinity ($engine) did not start; its log:" >&2; tail -20 "$WORK/infinity-$engine.log" >&2
  fi
done

# Correctness first: every server's scores against CrossEncoder's.
for server in $SERVERS; do
  "$PY" bench/rerank_bench.py check --work "$WORK" --url "${URL[$server]}" --name "$server" \
    --precision "$PRECISION"
done

# wrk posts the one body; the Lua script counts non-2xx answers, which void the figure.
{
  cat <<EOF
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("$WORK/body.json", "r"); wrk.body = f:read("*a"); f:close()
EOF
  bench_wrk_result_lua
} >"$WORK/post.lua"
: >"$WORK/results.txt"
for round in $(seq 1 "$ROUNDS"); do
  for connections in $CONNECTIONS; do
    for server in $SERVERS; do
      bench_wait_idle
      line=$(wrk -t1 -c"$connections" -d"${SECONDS_PER_CELL}s" --timeout 120s -s "$WORK/post.lua" \
               "${URL[$server]}" | grep '^RESULT')
      echo "round=$round server=$server connections=$connections $line" | tee -a "$WORK/results.txt"
    done
  done
done
"$PY" bench/rerank_bench.py report --work "$WORK"
echo "(logs and raw results in $WORK)"
trap - EXIT
bench_stop_pids
