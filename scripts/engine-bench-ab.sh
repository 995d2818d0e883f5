#!/usr/bin/env bash
# engine-bench-ab.sh - two builds' sluice-engine-bench (the engine alone, no network) in one run,
# alternating A and B round after round so that the machine's drifting load hits both alike;
# prints, per (model, bucket, mode), the median over rounds of B's items/s divided by A's, and
# the geometric mean of those medians. For "is this branch slower than main": A = main's build.
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
    "$dir/bench/sluice-engine-bench" --device=cpu --model-repository="$PWD/models" \
      --json="$work/$side-$r.json" "$@" >"$work/$side-$r.log" 2>&1
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
PY
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
