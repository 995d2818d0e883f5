#!/usr/bin/env bash
# bench-shared-memory.sh - shared-memory tensors vs inline bytes in one run, on one server
# (issue 16; docs/performance.md, "Shared-memory tensors").
#
# One sluice-server; `identity` with a 4 MiB FP32 tensor (1,048,576 values) both ways, concurrency
# 4, gRPC (--mode async), sluice-loadtest in closed loop alternating inline bytes
# (raw_input_contents / raw_output_contents) and --shared-memory system (perf_analyzer's mode:
# inputs read from a registered POSIX region, outputs written into another), ROUNDS times. For
# each run it reads the server process's CPU time (/proc/<pid>/stat, user + system) before and
# after, so CPU per request is the server's alone (the load tester runs on the same cores and is
# not counted). Prints each side's median throughput, p50, server CPU ms per request, and the
# ratios. The machine is shared: alternation and medians are what make the ratios usable.
#
#   scripts/bench-shared-memory.sh [--build-dir build] [--rounds 3] [--warmup-ms 500]
#                                  [--window-ms 2000] [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bench-lib.sh
WARMUP_MS=500
WINDOW_MS=2000
bench_parse_args "$@"
VALUES=1048576  # 4 MiB of FP32

bench_start_server --model-repository models --model-control-mode=explicit --load-model identity

# user + system clock ticks of the server process.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$SERVER_PID/stat"; }

common=(-m identity --shape "INPUT0:$VALUES" --concurrency 4 --mode async --warmup-ms "$WARMUP_MS"
        --window-ms "$WINDOW_MS" --max-windows 1 --stability-percent 1000 --max-duration-s 60
        --no-progress -u "$GRPC")
declare -A sides=([inline]=""
                  [shm]="--shared-memory system --output-shared-memory-size $((VALUES * 4))")
for round in $(seq "$ROUNDS"); do
  for side in inline shm; do
    file="$OUT/$side-$round.json"
    # shellcheck disable=SC2086
    cmd=("$LOADTEST" "${common[@]}" ${sides[$side]} --json "$file")
    [[ $round == 1 ]] && echo "+ ${cmd[*]}"
    before=$(cpu_ticks)
    "${cmd[@]}" >/dev/null
    after=$(cpu_ticks)
    echo "$((after - before))" >"$OUT/$side-$round.ticks"
  done
done

python3 - "$OUT" "$ROUNDS" "$(getconf CLK_TCK)" <<'PY'
import json, statistics, sys
out, rounds, hz = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
med = {}
for side in ("inline", "shm"):
    rps, p50, cpu = [], [], []
    for r in range(1, rounds + 1):
        doc = json.load(open(f"{out}/{side}-{r}.json"))
        level = doc["levels"][0]
        ticks = int(open(f"{out}/{side}-{r}.ticks").read())
        rps.append(level["throughput_rps"])
        p50.append(level["latency_us"]["p50"])
        # Every request of the run (warm-up and probe included) against the CPU of the whole run.
        cpu.append(1000.0 * ticks / hz / doc["totals"]["succeeded"])
    med[side] = (statistics.median(rps), statistics.median(p50), statistics.median(cpu))
    print(f"{side:<8} runs: req/s {['%.1f' % x for x in rps]}, server CPU ms/request "
          f"{['%.2f' % x for x in cpu]}")
print(f"\nmedians of {rounds} alternating rounds (identity, 4 MiB FP32 both ways, concurrency 4)")
print(f"{'side':<22}{'req/s':>9}{'p50 ms':>9}{'server CPU ms/req':>19}")
for side, label in (("inline", "inline bytes"), ("shm", "system shared memory")):
    rps, p50, cpu = med[side]
    print(f"{label:<22}{rps:>9.1f}{p50 / 1000:>9.2f}{cpu:>19.2f}")
print(f"throughput ratio shm / inline: {med['shm'][0] / med['inline'][0]:.2f}x; "
      f"server CPU per request inline / shm: {med['inline'][2] / med['shm'][2]:.2f}x")
PY
