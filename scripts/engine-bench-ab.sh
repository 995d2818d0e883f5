#!/usr/bin/env bash
# engine-bench-ab.sh - two builds' sluice-engine-bench (the engine alone, no network) in one run,
# alternating A and B round after round so that the machine's drifting load hits both alike;
# prints, per (model, bucket, mode), the median over rounds of B's items/s divided by A's, the
# geometric mean of those medians, and the median over rounds of B's CPU time (user + sys) per
# item divided by A's (the steadier figure on a machine shared with other work). For "is this
# branch slower than main": A = main's build.
#
# Usage: scripts/engine-bench-ab.sh A_BUILD_DIR B_BUILD_DIR [ROUNDS] [extra bench arguments...]
#   e.g. scripts/engine-bench-ab.sh /tmp/main-bench build 5 --models=mlp,simple --seconds=0.3
# Each build dir must hold bench/sluice-engine-bench; both read this tree's models/.
set -euo pipefail
cd "$(dirname "$0")/.."
a_dir=${1:?A build dir}
b_dir=${2:?B build dir}
rounds=${3:-5}
shift $(($# < 3 ? $# : 3))
work=$(mktemp -d /tmp/engine-bench-ab.XXXXXX)
echo "engine-bench-ab: A=$a_dir B=$b_dir rounds=$rounds args=$* (results in $work)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= rounds; ++r)); do
  for side in a b; do
    dir=$a_dir
    [[ $side == b ]] && dir=$b_dir
    # CPU seconds (user + sys) of the run, next to its JSON: CPU time per item is much less
    # sensitive to other processes on a loaded machine than items per second.
    python3 - "$work/$side-$r.cpu" "$dir/bench/sluice-engine-bench" --device=cpu \
      --model-repository="$PWD/models" --json="$work/$side-$r.json" "$@" >"$work/$side-$r.log" \
      2>&1 <<'PY'
import resource, subprocess, sys
subprocess.run(sys.argv[2:], check=True)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write(f"{usage.ru_utime + usage.ru_stime}\n")
PY
  done
  echo "round $r done, load average $(cut -d' ' -f1-3 /proc/loadavg)"
done
python3 - "$work" "$rounds" <<'PY'
import json, math, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def load(side, r):
    data = json.load(open(f"{work}/{side}-{r}.json"))
    return {(p["model"], p["bucket"], p["mode"]): p["items_per_second"] for p in data["results"]}
ratios = {}
for r in range(1, rounds + 1):
    a, b = load("a", r), load("b", r)
    for key in a:
        if key in b and a[key] > 0:
            ratios.setdefault(key, []).append(b[key] / a[key])
print("| model | bucket | mode | median B/A | min | max |")
print("|---|---:|---|---:|---:|---:|")
medians = []
for key in sorted(ratios):
    values = ratios[key]
    median = statistics.median(values)
    medians.append(median)
    print(f"| {key[0]} | {key[1]} | {key[2]} | {median:.3f} | {min(values):.3f} | {max(values):.3f} |")
print(f"geometric mean of the medians (B/A items/s): "
      f"{math.exp(sum(math.log(m) for m in medians) / len(medians)):.3f} over {len(medians)} points")
# CPU seconds per million items, whole run (every point), per side and round.
def cpu_per_item(side, r):
    data = json.load(open(f"{work}/{side}-{r}.json"))
    items = sum(p["items_per_second"] * p["seconds"] for p in data["results"])
    return float(open(f"{work}/{side}-{r}.cpu").read()) / items * 1e6
cpu_ratios = [cpu_per_item("b", r) / cpu_per_item("a", r) for r in range(1, rounds + 1)]
print("CPU seconds per million items, A: " +
      " ".join(f"{cpu_per_item('a', r):.1f}" for r in range(1, rounds + 1)))
print("CPU seconds per million items, B: " +
      " ".join(f"{cpu_per_item('b', r):.1f}" for r in range(1, rounds + 1)))
print(f"median B/A CPU time per item: {statistics.median(cpu_ratios):.3f} "
      f"(min {min(cpu_ratios):.3f}, max {max(cpu_ratios):.3f}; < 1: B uses less CPU per item)")
PY
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
