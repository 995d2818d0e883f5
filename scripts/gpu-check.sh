#!/usr/bin/env bash
# gpu-check.sh - the GPU checks of the CUDA engine, split in two because the GPU machine cannot
# build sluice (it has nvcc, CMake and the CUDA libraries, but no gRPC/Protobuf/Abseil/OpenBLAS
# packages and no network):
#
#   scripts/gpu-check.sh pack [ARCHIVE]   on the build machine: builds the gpu-labelled tests,
#                                         sluice-server (for the tests that drive one, with the
#                                         bundled models), sluice-engine-bench and
#                                         sluice-cuda-encoder-bench (when this tree has them),
#                                         and packs
#                                         them with every shared library they load except glibc
#                                         and the CUDA driver/runtime/cuBLAS into ARCHIVE
#                                         (default build/gpu-check.tar.gz, must stay < 64 MiB).
#   scripts/gpu-check.sh probe ARCHIVE    on the GPU machine, first (one short device call):
#                                         unpacks, prints the driver, GPU, CUDA and cuBLASLt
#                                         versions, and checks that every packed binary starts.
#   scripts/gpu-check.sh run ARCHIVE      on the GPU machine: probe, then the GPU tests, the
#                                         engine benchmark and the encoder benchmark against the
#                                         machine's own CUDA 13 libraries, and a short table.
#                                         Within GPU_CHECK_BUDGET_S.
#
# It cannot pass falsely: the tests run with SLUICE_GPU_TESTS_REQUIRED=1 (a GPU test without a
# usable GPU fails instead of skipping), and a test binary that passed nothing is a failure.
#
# Environment: BUILD_DIR (default build), CUDA_HOME (default /usr/local/cuda),
# SLUICE_BENCH_ARGS (extra arguments for sluice-engine-bench), GPU_CHECK_BUDGET_S (the whole
# run, default 480, under one 10-minute device call), GPU_CHECK_TIMEOUT_S (per binary, default
# 150, cut to what is left of the budget), OUT (logs go to $OUT/gpu-check-logs when set).
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
build_dir="${BUILD_DIR:-$here/build}"
cuda_home="${CUDA_HOME:-/usr/local/cuda}"
bench_target=sluice-engine-bench
# The encoder on the GPU (issue 14): BERT-base shape, generated on the GPU machine at run time.
encoder_bench_target=sluice-cuda-encoder-bench

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
  local have_encoder_bench=0
  if grep -q "\b$encoder_bench_target\b" <<<"$target_list"; then
    have_encoder_bench=1
    targets+=("$encoder_bench_target")
  fi
  # The GPU tests that drive a server process (tests/gpu/cuda_shared_memory_test.cc) run the
  # packed sluice-server on the bundled models (SLUICE_TEST_SERVER_BINARY and
  # SLUICE_TEST_MODEL_REPOSITORY, set by `run`).
  targets+=(sluice-server)
  echo "gpu-check: building ${targets[*]}"
  nice -n 5 cmake --build "$build_dir" -j2 --target "${targets[@]}"

  local stage
  stage="$(mktemp -d)"
  trap 'rm -rf "$stage"' RETURN
  mkdir -p "$stage/gpu-check/bin" "$stage/gpu-check/lib" "$stage/gpu-check/server"
  for exe in "${tests[@]}"; do cp "$exe" "$stage/gpu-check/bin/"; done
  cp "$(find "$build_dir" -type f -name sluice-server -perm -u+x | head -1)" \
    "$stage/gpu-check/server/"
  cp -r "$here/models" "$stage/gpu-check/models"
  if [[ $have_bench == 1 ]]; then
    cp "$(find "$build_dir" -type f -name "$bench_target" -perm -u+x | head -1)" \
      "$stage/gpu-check/bin/"
    # The benchmark reads model repositories: the bundled one (packed above) and bench/models.
    [[ -d "$here/bench/models" ]] && cp -r "$here/bench/models" "$stage/gpu-check/bench-models"
  fi
  if [[ $have_encoder_bench == 1 ]]; then
    cp "$(find "$build_dir" -type f -name "$encoder_bench_target" -perm -u+x | head -1)" \
      "$stage/gpu-check/bin/"
  fi
  printf '%s\n' "${tests[@]}" | xargs -n1 basename >"$stage/gpu-check/tests.txt"
  # Every shared library the binaries load, resolved here, minus those the GPU machine provides.
  local lib
  while read -r lib; do
    is_left_out "$lib" || cp -L "$lib" "$stage/gpu-check/lib/"
  done < <(for exe in "$stage"/gpu-check/bin/* "$stage"/gpu-check/server/*; do
    ldd "$exe" | awk '/=> \// { print $3 }'
  done | sort -u)
  strip --strip-debug "$stage"/gpu-check/bin/* "$stage"/gpu-check/server/* \
    "$stage"/gpu-check/lib/* 2>/dev/null || true
  cp "$0" "$stage/gpu-check/gpu-check.sh"
  {
    echo "nvcc: $("$cuda_home/bin/nvcc" --version 2>/dev/null | grep -o 'release [0-9.]*' || echo unknown)"
    echo "git: $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  } >"$stage/gpu-check/BUILD-INFO"
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

# Seconds left of the whole run's budget (GPU_CHECK_BUDGET_S, default 480: one device call is
# at most 10 minutes, and a rerun must still fit in the session's device time).
budget_left() {
  echo $((deadline - $(date +%s)))
}

# Runs one binary with a time limit (GPU_CHECK_TIMEOUT_S, default 150, never past the budget);
# prints its table row and returns its status. A gtest binary that passed nothing fails: with
# SLUICE_GPU_TESTS_REQUIRED=1 its GPU tests fail instead of skipping, and a binary whose tests
# all skipped for another reason must not read as a pass either.
run_one() {
  local name="$1" kind="$2"
  shift 2
  local log="$logs/$name.log"
  local start end rc=0 limit
  limit=$(budget_left)
  ((limit > ${GPU_CHECK_TIMEOUT_S:-150})) && limit=${GPU_CHECK_TIMEOUT_S:-150}
  if ((limit < 5)); then
    printf '%-28s %6s %7s %6s %8s  %s\n' "$name" - - - - "not run: budget spent"
    return 1
  fi
  start=$(date +%s.%N)
  timeout -k 5 "$limit" "$@" >"$log" 2>&1 || rc=$?
  end=$(date +%s.%N)
  local passed skipped failed
  passed=$(grep -oP '^\[  PASSED  \] \K[0-9]+' "$log" | tail -1 || true)
  skipped=$(grep -oP '^\[  SKIPPED \] \K[0-9]+(?= test)' "$log" | tail -1 || true)
  failed=$(grep -oP '^\[  FAILED  \] \K[0-9]+(?= test)' "$log" | tail -1 || true)
  local result="ok"
  if ((rc == 124 || rc == 137)); then
    result="timeout after ${limit} s"
  elif ((rc != 0)); then
    result="exit $rc"
  elif [[ $kind == gtest ]] && ((${passed:-0} == 0)); then
    result="nothing passed"
    rc=1
  fi
  printf '%-28s %6s %7s %6s %8.1f  %s\n' "$name" "${passed:-0}" "${skipped:-0}" "${failed:-0}" \
    "$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')" "$result"
  return $rc
}

# The directory holding libcublasLt.so.13 (it is dlopened, so ldd does not list it): CUDA_HOME's
# lib64, the loader cache, or a Python wheel's site-packages/nvidia/*/lib (pip's nvidia-cublas).
find_cublaslt() {
  local candidate
  for candidate in "$cuda_home"/lib64/libcublasLt.so.13*; do
    [[ -e $candidate ]] && { dirname "$candidate"; return 0; }
  done
  candidate=$(ldconfig -p 2>/dev/null | awk '/libcublasLt\.so\.13/ { print $NF; exit }')
  [[ -n $candidate ]] && { dirname "$candidate"; return 0; }
  local site
  for site in $(python3 -c 'import site; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null) \
    /usr/local/lib/python3*/dist-packages /usr/lib/python3/dist-packages; do
    for candidate in "$site"/nvidia/*/lib/libcublasLt.so.13*; do
      [[ -e $candidate ]] && { dirname "$candidate"; return 0; }
    done
  done
  return 1
}

# Unpacks the archive, sets up the library path, prints what the machine is (driver, GPU, CUDA
# and cuBLASLt versions) and checks that every packed binary starts here. Sets root.
probe() {
  local archive="${1:?usage: gpu-check.sh probe|run ARCHIVE}"
  local unpack
  unpack="$(mktemp -d)"
  tar -C "$unpack" -xzf "$archive"
  root="$unpack/gpu-check"
  export LD_LIBRARY_PATH="$root/lib:$cuda_home/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "gpu-check: unpacked in $root; logs in $logs"
  echo "--- versions"
  [[ -f $root/BUILD-INFO ]] && sed 's/^/built with: /' "$root/BUILD-INFO"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap --format=csv,noheader ||
      true
    nvidia-smi | grep -m1 'CUDA Version' || true
  else
    echo "no nvidia-smi on this machine"
  fi
  local cublaslt_dir
  if cublaslt_dir=$(find_cublaslt); then
    export LD_LIBRARY_PATH="$cublaslt_dir:$LD_LIBRARY_PATH"
    echo "cuBLASLt: $(readlink -f "$(ls "$cublaslt_dir"/libcublasLt.so.13* | head -1)")"
  else
    echo "gpu-check: no libcublasLt.so.13 in $cuda_home/lib64, the loader cache or a Python" \
      "wheel (site-packages/nvidia/*/lib); the mlp GPU tests will fail to load it" >&2
  fi
  echo "glibc: $(getconf GNU_LIBC_VERSION)"
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
  missing=$(for exe in "$root"/bin/* "$root"/server/*; do
    ldd "$exe" 2>&1 | grep 'not found' || true
  done | sort -u)
  if [[ -n "$missing" ]]; then
    echo "gpu-check: libraries or symbol versions not found:" >&2
    echo "$missing" >&2
    return 1
  fi
  # Every binary must start here (a loader or ABI problem shows now, not as a test failure).
  local exe status=0
  for exe in "$root"/bin/*; do
    local start_log="$logs/start-$(basename "$exe").log"
    if [[ $(basename "$exe") == "$bench_target" || $(basename "$exe") == "$encoder_bench_target" ]]; then
      timeout 30 "$exe" --help >"$start_log" 2>&1 || { echo "does not start: $exe" >&2; status=1; }
    else
      timeout 30 "$exe" --gtest_list_tests >"$start_log" 2>&1 ||
        { echo "does not start: $exe (see $start_log)" >&2; status=1; }
    fi
  done
  if [[ -x $root/server/sluice-server ]]; then
    timeout 30 "$root/server/sluice-server" --help >"$logs/start-sluice-server.log" 2>&1 ||
      { echo "does not start: $root/server/sluice-server" >&2; status=1; }
  fi
  ((status == 0)) && echo "every packed binary starts here"
  return $status
}

run() {
  local archive="${1:?usage: gpu-check.sh run ARCHIVE}"
  probe "$archive" || return 1
  # GPU tests fail instead of skipping when no GPU is usable (tests/gpu/gpu_required.h).
  export SLUICE_GPU_TESTS_REQUIRED=1
  # The tests that start a server run the packed one (tests/integration/server_process.cc).
  export SLUICE_TEST_SERVER_BINARY="$root/server/sluice-server"
  export SLUICE_TEST_MODEL_REPOSITORY="$root/models"
  local status=0
  printf '\n%-28s %6s %7s %6s %8s  %s\n' binary passed skipped failed seconds result
  while read -r test; do
    run_one "$test" gtest "$root/bin/$test" || status=1
  done <"$root/tests.txt"
  if [[ -x "$root/bin/$bench_target" ]]; then
    # The engine benchmark (bench/engine_bench.cc), graphs on and off: pipeline vs sync per batch
    # bucket in each. Its tables are printed below, its JSON kept next to the logs.
    # SLUICE_BENCH_ARGS is a list of arguments: split on purpose.
    local graphs
    for graphs in on off; do
      # shellcheck disable=SC2086
      run_one "$bench_target-graphs-$graphs" bench "$root/bin/$bench_target" \
        --model-repository="$root/models" --device=cuda:0 --graphs="$graphs" --seconds=1 \
        --json="$logs/engine-bench-graphs-$graphs.json" ${SLUICE_BENCH_ARGS:-} || status=1
    done
    for graphs in on off; do
      echo
      echo "--- $bench_target --graphs=$graphs"
      grep '^|' "$logs/$bench_target-graphs-$graphs.log" ||
        tail -20 "$logs/$bench_target-graphs-$graphs.log"
    done
  else
    echo "(no $bench_target in this archive)"
  fi
  if [[ -x "$root/bin/$encoder_bench_target" ]]; then
    # The encoder on the GPU (bench/cuda_encoder_bench.cc): BERT-base shape, FP16, graphs on and
    # off in one run (well under a minute: the checkpoint is written here, 2 s; two loads; 10
    # points of 20 sync batches and 0.5 s of pipeline each).
    run_one "$encoder_bench_target" bench "$root/bin/$encoder_bench_target" --seconds=0.5 \
      --json="$logs/cuda-encoder-bench.json" || status=1
    echo
    echo "--- $encoder_bench_target"
    grep '^|\|^device counters\|^loaded\|^checkpoint' "$logs/$encoder_bench_target.log" ||
      tail -20 "$logs/$encoder_bench_target.log"
  else
    echo "(no $encoder_bench_target in this archive)"
  fi
  for log in "$logs"/*.log; do
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
  echo "gpu-check: logs in $logs; $(budget_left) s of the ${GPU_CHECK_BUDGET_S:-480} s budget left"
  return $status
}

# Logs go under $OUT when it is set (the device runner returns what is there, even after a
# timeout), else next to the unpacked archive.
root=""
deadline=$(($(date +%s) + ${GPU_CHECK_BUDGET_S:-480}))
if [[ ${1:-} == probe || ${1:-} == run ]]; then
  logs="${OUT:+$OUT/gpu-check-logs}"
  [[ -n $logs ]] || logs="$(mktemp -d)"
  mkdir -p "$logs"
fi

case "${1:-}" in
  pack) pack "${2:-}" ;;
  probe) probe "${2:-}" ;;
  run) run "${2:-}" ;;
  *)
    echo "usage: $0 pack [ARCHIVE] | probe ARCHIVE | run ARCHIVE" >&2
    exit 2
    ;;
esac
