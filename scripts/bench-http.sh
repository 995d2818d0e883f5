#!/usr/bin/env bash
# bench-http.sh - HTTP/REST vs gRPC in one run, on one server (issue 21; docs/performance.md).
#
# One sluice-server with identity and mlp; for each case (identity with 4 KiB FP32 = 1024 values,
# mlp with one 784-value row) and concurrency 1 and 16, sluice-loadtest in closed loop, --mode sync
# (one blocking connection per thread on both protocols), alternating gRPC, HTTP binary and HTTP
# JSON side by side, ROUNDS times. Prints each side's median throughput and p50 and the ratios
# to gRPC. The machine is shared: the alternation and medians are what make the ratios usable.
#
#   scripts/bench-http.sh [--build-dir build] [--rounds 3] [--window-ms 1000] [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=build
ROUNDS=3
WINDOW_MS=1000
OUT=$(mktemp -d /tmp/sluice-bench-http.XXXX)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) BUILD=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --window-ms) WINDOW_MS=$2; shift 2 ;;
    --out) OUT=$2; mkdir -p "$OUT"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
SERVER=$BUILD/server/sluice-server
LOADTEST=$BUILD/loadtest/sluice-loadtest

server_flags=(--grpc-address 127.0.0.1 --grpc-port 0 --http-address 127.0.0.1 --http-port 0
              --metrics-address 127.0.0.1 --metrics-port 0 --model-repository models
              --model-control-mode=explicit --load-model identity --load-model mlp)
echo "+ $SERVER ${server_flags[*]}"
"$SERVER" "${server_flags[@]}" >"$OUT/server.log" 2>&1 &
server_pid=$!
trap 'kill $server_pid 2>/dev/null; wait $server_pid 2>/dev/null || true' EXIT
for _ in $(seq 300); do
  grep -q "server ready" "$OUT/server.log" && break
  sleep 0.1
done
GRPC=127.0.0.1:$(grep -o 'grpc_port=[0-9]*' "$OUT/server.log" | head -1 | cut -d= -f2)
HTTP=127.0.0.1:$(grep -o 'http_port=[0-9]*' "$OUT/server.log" | head -1 | cut -d= -f2)

common=(--warmup-ms 300 --window-ms "$WINDOW_MS" --max-windows 1 --stability-percent 1000
        --max-duration-s 60 --no-progress -u "$GRPC" --http-url "$HTTP")
# gRPC twice: with the same client shape as HTTP (a blocking call per thread) and with the
# callback API (the load tester's default, gRPC's best here); ratios are against the better one.
declare -A sides=([grpc]="--mode sync --protocol grpc" [grpcasync]="--mode async --protocol grpc"
                  [http]="--mode sync --protocol http" [json]="--mode sync --protocol http --http-json")
cases=("identity:-m identity --shape INPUT0:1024" "mlp:-m mlp")

for round in $(seq "$ROUNDS"); do
  for c in "${cases[@]}"; do
    name=${c%%:*}
    model_args=${c#*:}
    for concurrency in 1 16; do
      for side in grpc grpcasync http json; do
        file="$OUT/$name-c$concurrency-$side-$round.json"
        # shellcheck disable=SC2086
        cmd=("$LOADTEST" "${common[@]}" $model_args --concurrency "$concurrency" ${sides[$side]}
             --json "$file")
        [[ $round == 1 ]] && echo "+ ${cmd[*]}"
        "${cmd[@]}" >/dev/null
      done
    done
  done
done

python3 - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
print(f"\nmedians of {rounds} alternating rounds (throughput req/s, p50 us); x gRPC = side / the "
      "better gRPC side's throughput; p50 - gRPC against the better gRPC side's p50")
print(f"{'case':<16}{'side':<17}{'req/s':>9}{'p50 us':>9}{'x gRPC':>8}{'p50 - gRPC':>12}")
for name in ("identity", "mlp"):
    for c in (1, 16):
        med = {}
        for side in ("grpc", "grpcasync", "http", "json"):
            runs = [json.load(open(f"{out}/{name}-c{c}-{side}-{r}.json"))["levels"][0]
                    for r in range(1, rounds + 1)]
            med[side] = (statistics.median(l["throughput_rps"] for l in runs),
                         statistics.median(l["latency_us"]["p50"] for l in runs))
        best_rps = max(med["grpc"][0], med["grpcasync"][0])
        best_p50 = min(med["grpc"][1], med["grpcasync"][1])
        for side, label in (("grpc", "gRPC sync"), ("grpcasync", "gRPC async"),
                            ("http", "HTTP binary"), ("json", "HTTP JSON")):
            rps, p50 = med[side]
            print(f"{name + ' c' + str(c):<16}{label:<17}{rps:>9.0f}{p50:>9.0f}"
                  f"{rps / best_rps:>8.2f}{p50 - best_p50:>+12.0f}")
PY
