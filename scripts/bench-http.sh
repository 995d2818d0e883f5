#!/usr/bin/env bash
# bench-http.sh - HTTP/REST vs gRPC in one run, on one server (issue 21; docs/performance.md).
#
# One sluice-server with identity and mlp; for each case (identity with 4 KiB FP32 = 1024 values,
# mlp with one 784-value row) and concurrency 1 and 16, sluice-loadtest in closed loop, --mode sync
# (one blocking connection per thread on both protocols), alternating gRPC, HTTP binary and HTTP
# JSON side by side, ROUNDS times. Prints each side's median throughput and p50 and the ratios
# to gRPC. The machine is shared: the alternation and medians are what make the ratios usable.
#
#   scripts/bench-http.sh [--build-dir build] [--rounds 3] [--warmup-ms 300] [--window-ms 1000]
#                         [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bench-lib.sh
bench_parse_args "$@"
bench_start_server --model-repository models --model-control-mode=explicit --load-model identity \
  --load-model mlp

common=(--warmup-ms "$WARMUP_MS" --window-ms "$WINDOW_MS" --max-windows 1 --stability-percent 1000
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
