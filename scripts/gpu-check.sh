#!/usr/bin/env bash
# gpu-check.sh - the GPU checks of the CUDA engine, split in two because the GPU machine cannot
# build sluice (it has nvcc, CMake and the CUDA libraries, but no gRPC/Protobuf/Abseil/OpenBLAS
# packages and no network):
#
#   scripts/gpu-check.sh pack [ARCHIVE]   on the build machine: builds the gpu-labelled tests and
#                                         sluice-engine-bench (when this tree has it), and packs
#                                         them with every shared library they load except glibc
#                                         and the CUDA driver/runtime/cuBLAS into ARCHIVE
#                                         (default build/gpu-check.tar.gz, must stay < 64 MiB).
#   scripts/gpu-check.sh run ARCHIVE      on the GPU machine: unpacks, runs the GPU tests and the
#                                         engine benchmark against the machine's own CUDA 13
#                                         libraries, prints a short table. Under 8 minutes.
#
# Environment: BUILD_DIR (default build), CUDA_HOME (default /usr/local/cuda),
# SLUICE_BENCH_ARGS (extra arguments for sluice-engine-bench), GPU_CHECK_TIMEOUT_S (per binary,
# default 300).
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
build_dir="${BUILD_DIR:-$here/build}"
cuda_home="${CUDA_HOME:-/usr/local/cuda}"
bench_target=sluice-engine-bench

# Libraries the archive leaves to the target machine: glibc's, and CUDA's (driver, runtime,
# cuBLAS), which must come from the machine that has the GPU.
is_left_out() {
  case "$(basename "$1")" in
    libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | ld-linux* | libresolv.so* | \
      linux-vdso* | libcuda.so* | libcudart.so* | libcublas.so* | libcublasLt.so* | \
      libnvidia* | libnvrtc*) return 0 ;;
  esac
  return 1
}

pack() {
  local archive="${1:-$build_dir/gpu-check.tar.gz}"
  [[ -f "$build_dir/CMakeCache.txt" ]] || {
    echo "gpu-check: no build in $build_dir (run cmake first)" >&2
    exit 1
  }
  grep -q '^SLUICE_ENABLE_CUDA:BOOL=ON' "$build_dir/CMakeCache.txt" || {
    echo "gpu-check: $build_dir is not a CUDA build (SLUICE_ENABLE_CUDA=OFF)" >&2
    exit 1
  }
  # The gpu-labelled test binaries (written by CMake at configure time).
  cmake "$build_dir" >/dev/null
  local -a tests
  mapfile -t tests <"$build_dir/gpu-tests.txt"
  local -a targets=()
  for exe in "${tests[@]}"; do targets+=("$(basename "$exe")"); done
  local have_bench=0
  # (The target list is read whole first: `grep -q` closing the pipe early would fail it under
  # pipefail.)
  local target_list
  target_list="$(cmake --build "$build_dir" --target help)"
  if grep -q "\b$bench_target\b" <<<"$target_list"; then
    have_bench=1
    targets+=("$bench_target")
  else
    echo "gpu-check: this tree has no $bench_target target; packing the tests only" >&2
  fi
  echo "gpu-check: building ${targets[*]}"
  nice -n 5 cmake --build "$build_dir" -j2 --target "${targets[@]}"

  local stage
  stage="$(mktemp -d)"
  trap 'rm -rf "$stage"' RETURN
  mkdir -p "$stage/gpu-check/bin" "$stage/gpu-check/lib"
  for exe in "${tests[@]}"; do cp "$exe" "$stage/gpu-check/bin/"; done
  if [[ $have_bench == 1 ]]; then
    cp "$(find "$build_dir" -type f -name "$bench_target" -perm -u+x | head -1)" \
      "$stage/gpu-check/bin/"
    # The benchmark reads model repositories: the bundled one and bench/models.
    cp -r "$here/models" "$stage/gpu-check/models"
    [[ -d "$here/bench/models" ]] && cp -r "$here/bench/models" "$stage/gpu-check/bench-models"
  fi
  printf '%s\n' "${tests[@]}" | xargs -n1 basename >"$stage/gpu-check/tests.txt"
  # Every shared library the binaries load, resolved here, minus those the GPU machine provides.
  local lib
  while read -r lib; do
    is_left_out "$lib" || cp -L "$lib" "$stage/gpu-check/lib/"
  done < <(for exe in "$stage"/gpu-check/bin/*; do
    ldd "$exe" | awk '/=> \// { print $3 }'
  done | sort -u)
  strip --strip-debug "$stage"/gpu-check/bin/* "$stage"/gpu-check/lib/* 2>/dev/null || true
  cp "$0" "$stage/gpu-check/gpu-check.sh"
  tar -C "$stage" -czf "$archive" gpu-check
  local bytes
  bytes=$(stat -c %s "$archive")
  echo "gpu-check: wrote $archive ($((bytes / 1024)) KiB; $(find "$stage/gpu-check/bin" -type f | wc -l)" \
    "binaries, $(find "$stage/gpu-check/lib" -type f | wc -l) libraries)"
  if ((bytes >= 64 * 1024 * 1024)); then
    echo "gpu-check: the archive is over 64 MiB" >&2
    exit 1
  fi
}

# Runs one binary with a time limit; prints its table row and returns its status.
run_one() {
  local name="$1"
  shift
  local log="$work/$name.log"
  local start end rc=0
  start=$(date +%s.%N)
  timeout "${GPU_CHECK_TIMEOUT_S:-300}" "$@" >"$log" 2>&1 || rc=$?
  end=$(date +%s.%N)
  local passed skipped failed
  passed=$(grep -oP '^\[  PASSED  \] \K[0-9]+' "$log" | tail -1 || true)
  skipped=$(grep -oP '^\[  SKIPPED \] \K[0-9]+(?= test)' "$log" | tail -1 || true)
  failed=$(grep -oP '^\[  FAILED  \] \K[0-9]+(?= test)' "$log" | tail -1 || true)
  printf '%-28s %6s %7s %6s %8.1f  %s\n' "$name" "${passed:-0}" "${skipped:-0}" "${failed:-0}" \
    "$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')" "$([[ $rc == 0 ]] && echo ok || echo "exit $rc")"
  return $rc
}

run() {
  local archive="${1:?usage: gpu-check.sh run ARCHIVE}"
  work="$(mktemp -d)"
  tar -C "$work" -xzf "$archive"
  local root="$work/gpu-check"
  export LD_LIBRARY_PATH="$root/lib:$cuda_home/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "gpu-check: unpacked in $root"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader || true
  else
    echo "gpu-check: no nvidia-smi on this machine"
  fi
  # The packed libstdc++ and libgcc_s come from Debian 12 and need glibc 2.36; on an older glibc
  # use the machine's own (the binaries themselves need glibc 2.34 and GCC 12's libstdc++).
  local glibc
  glibc="$(getconf GNU_LIBC_VERSION | awk '{ print $2 }')"
  if [[ "$(printf '%s\n' "$glibc" 2.36 | sort -V | head -1)" != 2.36 ]]; then
    echo "gpu-check: glibc $glibc < 2.36: using this machine's libstdc++ and libgcc_s"
    mkdir -p "$root/lib-unused"
    mv "$root"/lib/libstdc++.so.* "$root"/lib/libgcc_s.so.* "$root/lib-unused/" 2>/dev/null || true
  fi
  local missing
  missing=$(for exe in "$root"/bin/*; do ldd "$exe" 2>&1 | grep 'not found' || true; done | sort -u)
  if [[ -n "$missing" ]]; then
    echo "gpu-check: libraries or symbol versions not found:" >&2
    echo "$missing" >&2
    exit 1
  fi
  # cuBLASLt is loaded with dlopen by the mlp backend, so ldd does not list it: look for it.
  if ! ls "$cuda_home"/lib64/libcublasLt.so.13* >/dev/null 2>&1 &&
    ! ldconfig -p 2>/dev/null | grep -q 'libcublasLt.so.13'; then
    echo "gpu-check: warning: no libcublasLt.so.13 in $cuda_home/lib64 or the loader cache;" \
      "the mlp GPU tests will fail to load it" >&2
  fi
  local status=0
  printf '\n%-28s %6s %7s %6s %8s  %s\n' binary passed skipped failed seconds result
  while read -r test; do
    run_one "$test" "$root/bin/$test" || status=1
  done <"$root/tests.txt"
  if [[ -x "$root/bin/$bench_target" ]]; then
    # The engine benchmark (bench/engine_bench.cc), graphs on and off: pipeline vs sync per batch
    # bucket in each. Its tables are printed below, its JSON kept next to the logs.
    # SLUICE_BENCH_ARGS is a list of arguments: split on purpose.
    local graphs
    for graphs in on off; do
      # shellcheck disable=SC2086
      run_one "$bench_target-graphs-$graphs" "$root/bin/$bench_target" \
        --model-repository="$root/models" --device=cuda:0 --graphs="$graphs" --seconds=1 \
        --json="$work/engine-bench-graphs-$graphs.json" ${SLUICE_BENCH_ARGS:-} || status=1
    done
    for graphs in on off; do
      echo
      echo "--- $bench_target --graphs=$graphs"
      grep '^|' "$work/$bench_target-graphs-$graphs.log" || tail -20 "$work/$bench_target-graphs-$graphs.log"
    done
  else
    echo "(no $bench_target in this archive)"
  fi
  for log in "$work"/*.log; do
    local name
    name="$(basename "$log" .log)"
    if grep -q 'Failure$\|^\[  FAILED  \]' "$log"; then
      echo
      echo "--- $name: failures"
      grep -A6 'Failure$' "$log" | head -60 || true
    fi
    if grep -q ': Skipped$' "$log"; then
      echo
      echo "--- $name: skipped tests and why"
      grep '^\[  SKIPPED \] [A-Za-z]' "$log" | sed 's/ ([0-9]* ms)$//' | sort -u || true
      grep -A1 ': Skipped$' "$log" | grep -v ': Skipped$\|^--$' | sort -u | sed 's/^/    /' || true
    fi
  done
  if [[ -f "$work/$bench_target.log" ]]; then
    echo
    echo "--- $bench_target"
    cat "$work/$bench_target.log"
  fi
  echo "gpu-check: logs in $work"
  return $status
}

case "${1:-}" in
  pack) pack "${2:-}" ;;
  run) run "${2:-}" ;;
  *)
    echo "usage: $0 pack [ARCHIVE] | run ARCHIVE" >&2
    exit 2
    ;;
esac
