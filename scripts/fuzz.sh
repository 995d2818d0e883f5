#!/usr/bin/env bash
# fuzz.sh - libFuzzer campaigns on the fuzz/ targets, under AddressSanitizer + UBSan.
#
#   scripts/fuzz.sh                      10,000,000 runs of each target (the recorded campaign)
#   scripts/fuzz.sh --runs=100000        fewer
#   scripts/fuzz.sh --seconds=60         time-bounded instead
#   scripts/fuzz.sh --targets=safetensors,model_config
#
# Builds with clang in build-fuzz/ (SLUICE_FUZZ=ON: every library instrumented), copies the seed
# corpus (fuzz/corpus/<target>) to build-fuzz/corpus/<target>, where libFuzzer adds what it
# finds, and writes crash inputs to build-fuzz/findings/<target>/. Exit status 1 if any target
# found anything. A finding replays in the ordinary build with:
#   build/fuzz/fuzz_<target> build-fuzz/findings/<target>/crash-...
set -euo pipefail
cd "$(dirname "$0")/.."

runs=10000000
seconds=""
targets="infer_request,safetensors,model_config"
for arg in "$@"; do
  case "$arg" in
    --runs=*) runs=${arg#--runs=} ;;
    --seconds=*) seconds=${arg#--seconds=} ;;
    --targets=*) targets=${arg#--targets=} ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "fuzz.sh: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ is needed (apt install clang libclang-rt-14-dev)" >&2; exit 2; }

BUILD=build-fuzz
CC=clang CXX=clang++ cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_FUZZ=ON \
  -DSLUICE_BUILD_TESTS=OFF -DSLUICE_ENABLE_CUDA=OFF >/dev/null
IFS=, read -r -a list <<<"$targets"
cmake --build "$BUILD" -j"$(nproc)" --target "${list[@]/#/fuzz_}"

status=0
printf '\n| target | runs | seconds | corpus after | findings |\n|---|---|---|---|---|\n' >"$BUILD/fuzz-summary.md"
for target in "${list[@]}"; do
  corpus="$BUILD/corpus/$target"
  findings="$BUILD/findings/$target"
  mkdir -p "$corpus" "$findings"
  cp -n fuzz/corpus/"$target"/* "$corpus"/ 2>/dev/null || true
  limit=(-runs="$runs")
  [[ -n "$seconds" ]] && limit=(-max_total_time="$seconds")
  start=$(date +%s)
  marker="$BUILD/.fuzz-start-$target"
  touch "$marker"
  log="$BUILD/fuzz-$target.log"
  echo "[fuzz] $target: ${limit[*]}"
  if ! "$BUILD/fuzz/fuzz_$target" "${limit[@]}" -artifact_prefix="$findings/" -print_final_stats=1 \
      "$corpus" >"$log" 2>&1; then
    status=1
  fi
  elapsed=$(( $(date +%s) - start ))
  done_runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  # This run's findings only (earlier runs' stay in the folder until looked at).
  found=$(find "$findings" -type f -newer "$marker" | wc -l)
  printf '| %s | %s | %s | %s | %s |\n' "$target" "$done_runs" "$elapsed" \
    "$(ls "$corpus" | wc -l)" "$found" | tee -a "$BUILD/fuzz-summary.md"
  [[ "$found" -eq 0 ]] || status=1
done
cat "$BUILD/fuzz-summary.md"
exit $status
