#!/usr/bin/env bash
# run.sh - the README's run command: install what is missing, build what serving needs, and start
# sluice-server on the bundled model repository (gRPC on port 8001, HTTP/REST on 8000; the CPU
# backend where no GPU is usable: the server then says "no GPU found" in one line).
# Extra arguments go to sluice-server (see `build/server/sluice-server --help`).
#
# Only the serving targets are built (the server, the client, the load tester and the model
# tools), not the tests, fuzzers or benchmarks: scripts/test.sh builds everything. The compiler's
# output goes to a log file whose path is printed; the terminal shows one progress line, and the
# log's tail when the build fails. Where no GPU is usable the CUDA backend is left out too.
#
#   scripts/run.sh --print-targets   print the CMake targets it builds, one a line, and exit
set -euo pipefail
cd "$(dirname "$0")/.."

# What serving needs. Keep in step with the executables in server/, client/, loadtest/, tools/,
# text/ (tests/deploy/run_script_test.sh checks that no test or benchmark slips in).
SERVE_TARGETS=(sluice-server sluice-client sluice-loadtest sluice-make-mlp sluice-make-encoder
               sluice-tokenize)

if [[ ${1:-} == --print-targets ]]; then
  printf '%s\n' "${SERVE_TARGETS[@]}"
  exit 0
fi

BUILD_DIR=${SLUICE_BUILD_DIR:-build}
mkdir -p "$BUILD_DIR"
log=$PWD/$BUILD_DIR/run-build.log
echo "building ${SERVE_TARGETS[*]} (full log: $log)" >&2

# One progress line from the build's "[ 42%]" (make) or "[12/345]" (ninja) markers: rewritten in
# place on a terminal, one line every 15 s otherwise (a CI log stays short).
show_progress() {
  local line last_print=0 progress percent=0
  while IFS= read -r line; do
    if [[ $line =~ ^\[\ *([0-9]+)%\] ]]; then
      # make counts each named target's own steps: keep the line from going backwards.
      ((BASH_REMATCH[1] > percent)) && percent=${BASH_REMATCH[1]}
      progress="$percent%"
    elif [[ $line =~ ^\[([0-9]+/[0-9]+)\] ]]; then
      progress=${BASH_REMATCH[1]}
    else
      continue
    fi
    if [[ -t 2 ]]; then
      printf '\rbuilding: %s ' "$progress" >&2
    elif ((SECONDS - last_print >= 15)); then
      echo "building: $progress" >&2
      last_print=$SECONDS
    fi
  done
}
# Without a usable GPU (no NVIDIA device node, no working nvidia-smi) the CUDA backend is not
# built: the server could not use it, and its compile is a tenth of the wait. scripts/test.sh
# builds it wherever nvcc is. SLUICE_ENABLE_CUDA=ON|OFF decides instead.
if [[ -z ${SLUICE_ENABLE_CUDA:-} ]] && [[ ! -e /dev/nvidiactl ]] &&
  ! nvidia-smi -L >/dev/null 2>&1; then
  export SLUICE_ENABLE_CUDA=OFF
  echo "no GPU here: building the CPU backend only (the server serves on the CPU)" >&2
fi
# A foreground pipeline, so that Ctrl-C stops the build too.
set +e
SLUICE_BUILD_TARGETS="${SERVE_TARGETS[*]}" scripts/build.sh 2>&1 | tee "$log" | show_progress
build_status=${PIPESTATUS[0]}
set -e
[[ -t 2 ]] && echo >&2
if ((build_status != 0)); then
  echo "build failed (exit $build_status); the last 40 lines of $log:" >&2
  tail -n 40 "$log" >&2
  exit 1
fi
echo "built in $SECONDS s" >&2

exec "$BUILD_DIR/server/sluice-server" --model-repository "$PWD/models" "$@"
