#!/usr/bin/env bash
# gpu-check.sh - one GPU run that answers what matters (issue 35), inside one 10-minute device
# command. The GPU machine has nvcc, CMake, the CUDA libraries and PyTorch, but no gRPC, Protobuf,
# Abseil or OpenBLAS and no network, so this machine builds and packs, and the GPU machine runs:
#
#   scripts/gpu-check.sh pack [ARCHIVE]   here: builds the gpu-labelled tests, the benchmarks,
#                                         sluice-server, sluice-loadtest and sluice-make-encoder,
#                                         packs them with every shared library they load except
#                                         glibc's and CUDA's, the bundled models and the helper
#                                         scripts into ARCHIVE (default $BUILD_DIR/gpu-check.tar.xz;
#                                         with the working tree it travels with, < 64 MiB).
#   scripts/gpu-check.sh run ARCHIVE      on the GPU machine: the steps below, in order of value,
#                                         each under its cap, all under one budget.
#   scripts/gpu-check.sh probe ARCHIVE    on the GPU machine: the first step alone.
#   scripts/gpu-check.sh plan             the steps, their caps and what each produces.
#   scripts/gpu-check.sh --dry-run [--skip-build]
#                                         here, no GPU: the plan, the pack and its size, and a run
#                                         of the real script over stub binaries into a fake $OUT
#                                         that proves the file count and that the summary comes
#                                         last, also when steps fail, time out or the budget ends
#                                         (scripts/gpu-check-dry-run.sh).
#
# What comes back (the device tool returns at most 8 files of $OUT, and the last 12,000
# characters of the output): exactly three files, rewritten after every step so that a run killed
# at any point still leaves the figures of the steps that finished:
#   $OUT/gpu-check-summary.txt   the step table and the key figures (also the output's last lines)
#   $OUT/gpu-check-figures.json  every figure, small (scripts/gpu_check_report.py)
#   $OUT/gpu-check-logs.tar.gz   every log, gtest JSON and benchmark JSON of the run
#
# It cannot pass falsely: the tests run with SLUICE_GPU_TESTS_REQUIRED=1 (a GPU test without a
# usable GPU fails instead of skipping), a test binary that passed nothing is a failure, the
# benchmarks fail on non-finite outputs and on a model that did not run on the GPU.
#
# Environment: BUILD_DIR (default build), CUDA_HOME (default /usr/local/cuda), GPU_CHECK_BUDGET_S
# (the whole run, default 560: under the device tool's 600 s command limit), OUT (where the three
# files go; a temporary folder when unset), GPU_CHECK_ONLY (comma-separated step names: run only
# those), GPU_CHECK_SCRATCH (large files: checkpoints; default a temporary folder),
# GPU_CHECK_XZ_LEVEL (pack's xz level, default 6).
set -uo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
build_dir="${BUILD_DIR:-$here/build}"
cuda_home="${CUDA_HOME:-/usr/local/cuda}"

# The steps, in order of value: name, cap in seconds, what it answers. The caps add up to less
# than 9 minutes (`plan` and the dry run check it), so that a whole run fits in one 10-minute
# device command with room for unpacking and the report.
readonly -a kSteps=(
  "probe|20|versions (driver, GPU, CUDA, cuBLASLt); every packed binary starts"
  "kernel-tests|60|gpu_cuda_kernels_test: every kernel against its CPU definition"
  "encoder-bench|90|sluice-cuda-encoder-bench FP16 seq 128, graphs on and off: latency, seq/s, TFLOP/s, GEMMs alone, CPU per request"
  "engine-bench|40|sluice-engine-bench mlp + simple on cuda:0, graphs on and off; mlp against its HBM roofline"
  "e2e-server|75|sluice-server on cuda:0 over gRPC: embedder and BERT-base, 1/16/64 clients, ragged: seq/s, tokens/s, p50/p99, server CPU/request"
  "pytorch|75|PyTorch FP16 SDPA on the same checkpoint and batches (torch.compile if quick): sluice/PyTorch ratio"
  "encoder-variants|60|sluice-cuda-encoder-bench BF16 seq 128, FP16 seq 512, TF32 seq 128 (graphs on)"
  "long-tests|90|gpu_cuda_encoder_test, gpu_cuda_executor_test, gpu_cuda_shared_memory_test, gpu_cuda_encoder_server_test, in parallel"
  "host-cpu|25|the GPU host's CPU (AMX where it has it): the AMX kernels' tests, sluice-encoder-bench GEMMs alone and BERT-base fp32/bf16/int8, batch 32 x 128"
)
readonly kCapSumLimitS=540
# Seconds kept back from the budget for the report after the last step.
readonly kReserveS=10
readonly kKernelTests="gpu_cuda_kernels_test"
readonly kLongTests="gpu_cuda_encoder_test gpu_cuda_executor_test gpu_cuda_shared_memory_test gpu_cuda_encoder_server_test"
readonly kTools="sluice-engine-bench sluice-cuda-encoder-bench sluice-loadtest sluice-make-encoder sluice-encoder-bench engine_encoder_gemm_amx_test"

step_field() { cut -d'|' -f"$2" <<<"$1"; }

plan() {
  local total=0 step name cap what
  printf '%-17s %5s  %s\n' step cap_s "what it answers"
  for step in "${kSteps[@]}"; do
    name=$(step_field "$step" 1)
    cap=$(step_field "$step" 2)
    what=$(step_field "$step" 3)
    total=$((total + cap))
    printf '%-17s %5d  %s\n' "$name" "$cap" "$what"
  done
  printf '%-17s %5d  (limit %d: one device command is 600 s; budget %d s)\n' "sum of caps" \
    "$total" "$kCapSumLimitS" "${GPU_CHECK_BUDGET_S:-560}"
  ((total < kCapSumLimitS)) || {
    echo "gpu-check: the caps add up to $total s, not under $kCapSumLimitS s" >&2
    return 1
  }
}

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
  local archive="${1:-$build_dir/gpu-check.tar.xz}"
  set -e
  [[ -f "$build_dir/CMakeCache.txt" ]] || {
    echo "gpu-check: no build in $build_dir (run cmake first)" >&2
    exit 1
  }
  grep -q '^SLUICE_ENABLE_CUDA:BOOL=ON' "$build_dir/CMakeCache.txt" || {
    echo "gpu-check: $build_dir is not a CUDA build (SLUICE_ENABLE_CUDA=OFF)" >&2
    exit 1
  }
  # gpu-tests.txt is written at configure time (not when packing an existing build as it is).
  [[ ${GPU_CHECK_PACK_NO_BUILD:-0} == 1 ]] || cmake "$build_dir" >/dev/null
  local -a tests targets=()
  mapfile -t tests <"$build_dir/gpu-tests.txt"
  local exe
  for exe in "${tests[@]}"; do targets+=("$(basename "$exe")"); done
  # shellcheck disable=SC2206
  targets+=($kTools sluice-server)
  if [[ ${GPU_CHECK_PACK_NO_BUILD:-0} != 1 ]]; then
    echo "gpu-check: building ${targets[*]}"
    nice -n 5 cmake --build "$build_dir" -j2 --target "${targets[@]}"
  fi
  local stage
  stage="$(mktemp -d)"
  trap 'rm -rf "$stage"' RETURN
  local g="$stage/gpu-check"
  mkdir -p "$g/bin" "$g/lib" "$g/server" "$g/scripts"
  for exe in "${tests[@]}"; do cp "$exe" "$g/bin/"; done
  local tool path
  for tool in $kTools; do
    path="$(find "$build_dir" -type f -name "$tool" -perm -u+x | head -1)"
    [[ -n $path ]] || { echo "gpu-check: $tool was not built" >&2; exit 1; }
    cp "$path" "$g/bin/"
  done
  cp "$(find "$build_dir" -type f -name sluice-server -perm -u+x | head -1)" "$g/server/"
  cp -r "$here/models" "$g/models"
  [[ -d "$here/bench/models" ]] && cp -r "$here/bench/models" "$g/bench-models"
  cp "$self" "$here/scripts/gpu-check-e2e.sh" "$here/scripts/gpu_check_report.py" \
    "$here/bench/gpu_torch_encoder.py" "$g/scripts/"
  printf '%s\n' "${tests[@]}" | xargs -n1 basename >"$g/tests.txt"
  # Every shared library the binaries load, resolved here, minus those the GPU machine provides.
  local lib
  while read -r lib; do
    is_left_out "$lib" || cp -L "$lib" "$g/lib/"
  done < <(for exe in "$g"/bin/* "$g"/server/*; do
    ldd "$exe" | awk '/=> \// { print $3 }'
  done | sort -u)
  strip --strip-debug "$g"/bin/* "$g"/server/* "$g"/lib/* 2>/dev/null || true
  {
    echo "nvcc: $("$cuda_home/bin/nvcc" --version 2>/dev/null | grep -o 'release [0-9.]*' || echo unknown)"
    echo "git: $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "packed: $(date -u +%FT%TZ)"
  } >"$g/BUILD-INFO"
  # xz, not gzip: 34 MiB instead of 55 (the archive and the working tree share the device tool's
  # 64 MiB; OpenBLAS and ICU's data are most of it), for ~30 s of packing on 2 cores. The dry run
  # packs at level 1 (45 MiB in 5 s): a larger archive than the real one, so its size check holds
  # for both.
  tar -C "$stage" -cf - gpu-check | xz -T2 "-${GPU_CHECK_XZ_LEVEL:-6}" >"$archive"
  local bytes
  bytes=$(stat -c %s "$archive")
  echo "gpu-check: wrote $archive ($((bytes / 1024)) KiB; $(find "$g/bin" -type f | wc -l)" \
    "binaries, $(find "$g/lib" -type f | wc -l) libraries)"
  if ((bytes >= 56 * 1024 * 1024)); then
    echo "gpu-check: the archive is over 56 MiB: with the working tree it would not fit 64 MiB" >&2
    exit 1
  fi
  set +e
}

# The directory holding libcublasLt.so.13 (it is dlopened, so ldd does not list it): CUDA_HOME's
# lib64, the loader cache, or a Python wheel's site-packages/nvidia/*/lib (pip's nvidia-cublas).
find_cublaslt() {
  local candidate site
  for candidate in "$cuda_home"/lib64/libcublasLt.so.13*; do
    [[ -e $candidate ]] && { dirname "$candidate"; return 0; }
  done
  candidate=$(ldconfig -p 2>/dev/null | awk '/libcublasLt\.so\.13/ { print $NF; exit }')
  [[ -n $candidate ]] && { dirname "$candidate"; return 0; }
  for site in $(python3 -c 'import site; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null) \
    /usr/local/lib/python3*/dist-packages /usr/lib/python3/dist-packages; do
    for candidate in "$site"/nvidia/*/lib/libcublasLt.so.13* "$site"/nvidia/cu13/lib/libcublasLt.so.13*; do
      [[ -e $candidate ]] && { dirname "$candidate"; return 0; }
    done
  done
  return 1
}

# Unpacks ARCHIVE and sets the environment every step inherits (GC_*; the library path).
setup() {
  local archive="${1:?usage: gpu-check.sh run|probe ARCHIVE}"
  GC_WORK="$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-logs.XXXXXX")"
  GC_SCRATCH="${GPU_CHECK_SCRATCH:-$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-scratch.XXXXXX")}"
  mkdir -p "$GC_WORK/status" "$GC_WORK/figures" "$GC_SCRATCH"
  local unpack="$GC_SCRATCH/unpacked"
  mkdir -p "$unpack"
  # tar detects the compression; where the machine lacks the xz program, Python's tarfile (lzma is
  # in its standard library) unpacks it instead.
  tar -C "$unpack" -xf "$archive" 2>/dev/null ||
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$archive" "$unpack" ||
    { echo "gpu-check: cannot unpack $archive" >&2; return 1; }
  GC_ROOT="$unpack/gpu-check"
  export GC_ROOT GC_WORK GC_SCRATCH
  export LD_LIBRARY_PATH="$GC_ROOT/lib:$cuda_home/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local cublaslt_dir
  if cublaslt_dir=$(find_cublaslt); then
    export LD_LIBRARY_PATH="$cublaslt_dir:$LD_LIBRARY_PATH"
    GC_CUBLASLT="$(readlink -f "$(ls "$cublaslt_dir"/libcublasLt.so.13* | head -1)")"
    export GC_CUBLASLT
  fi
  # The packed libstdc++ and libgcc_s come from Debian 12 and need glibc 2.36; on an older glibc
  # use the machine's own (the binaries themselves need glibc 2.34 and GCC 12's libstdc++).
  local glibc
  glibc="$(getconf GNU_LIBC_VERSION | awk '{ print $2 }')"
  if [[ "$(printf '%s\n' "$glibc" 2.36 | sort -V | head -1)" != 2.36 ]]; then
    mkdir -p "$GC_ROOT/lib-unused"
    mv "$GC_ROOT"/lib/libstdc++.so.* "$GC_ROOT"/lib/libgcc_s.so.* "$GC_ROOT/lib-unused/" 2>/dev/null
  fi
  # GPU tests fail instead of skipping when no GPU is usable (tests/gpu/gpu_required.h); the
  # tests that start a server run the packed one on the packed models.
  export SLUICE_GPU_TESTS_REQUIRED=1
  export SLUICE_TEST_SERVER_BINARY="$GC_ROOT/server/sluice-server"
  export SLUICE_TEST_MODEL_REPOSITORY="$GC_ROOT/models"
  export PYTHONUNBUFFERED=1
  OUT_DIR="${OUT:-$GC_WORK/out}"
  mkdir -p "$OUT_DIR"
}

# ---- steps: each runs in its own process under `timeout` (its cap), writes its log to stdout,
# its figures under $GC_WORK/figures, and one line "result|detail" to $GC_WORK/status/<step>.

status_line() { printf '%s|%s\n' "$2" "$3" >"$GC_WORK/status/$1"; }

# Runs gtest binary $1 with limit $2 s; its log goes to $GC_WORK/$1.log. Prints "ok|..." or
# "fail|..." (a binary that passed nothing fails: with SLUICE_GPU_TESTS_REQUIRED=1 a missing GPU
# fails every test instead of skipping it).
run_gtest() {
  local name="$1" limit="$2" log="$GC_WORK/$1.log" rc=0
  timeout -k 5 "$limit" "$GC_ROOT/bin/$name" --gtest_output="json:$GC_WORK/figures/$name.json" \
    >"$log" 2>&1 || rc=$?
  local passed failed skipped
  passed=$(grep -oP '^\[  PASSED  \] \K[0-9]+' "$log" | tail -1)
  failed=$(grep -oP '^\[  FAILED  \] \K[0-9]+(?= test)' "$log" | tail -1)
  skipped=$(grep -oP '^\[  SKIPPED \] \K[0-9]+(?= test)' "$log" | tail -1)
  local counts="${passed:-0} passed, ${failed:-0} failed, ${skipped:-0} skipped"
  if ((rc == 124 || rc == 137)); then
    echo "fail|$name: timeout after $limit s ($counts)"
  elif ((rc != 0)); then
    local first
    first=$(grep -oP '^\[  FAILED  \] \K[A-Za-z][A-Za-z0-9_./]*' "$log" | head -3 | paste -sd' ')
    echo "fail|$name: exit $rc ($counts${first:+; first: $first})"
  elif ((${passed:-0} == 0)); then
    echo "fail|$name: nothing passed ($counts)"
  else
    echo "ok|$name: $counts"
  fi
}

step_probe() {
  echo "--- versions"
  [[ -f $GC_ROOT/BUILD-INFO ]] && sed 's/^/built with: /' "$GC_ROOT/BUILD-INFO"
  local gpu="no nvidia-smi"
  if command -v nvidia-smi >/dev/null; then
    gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.sm \
      --format=csv,noheader 2>&1 | head -1)
    nvidia-smi 2>&1 | grep -m1 'CUDA Version'
  fi
  echo "gpu: $gpu"
  echo "cuBLASLt: ${GC_CUBLASLT:-NOT FOUND (the GEMMs will fail to load it)}"
  echo "glibc: $(getconf GNU_LIBC_VERSION)"
  # (torch's version: in the pytorch step's JSON; importing it here would take most of the cap.)
  local missing
  missing=$(for exe in "$GC_ROOT"/bin/* "$GC_ROOT"/server/*; do
    ldd "$exe" 2>&1 | grep 'not found'
  done | sort -u)
  local exe bad=""
  for exe in "$GC_ROOT"/bin/* "$GC_ROOT"/server/*; do
    case "$(basename "$exe")" in
      gpu_*) timeout 15 "$exe" --gtest_list_tests >/dev/null 2>&1 || bad+=" $(basename "$exe")" ;;
      *) timeout 15 "$exe" --help >/dev/null 2>&1 || bad+=" $(basename "$exe")" ;;
    esac
  done
  [[ -n $missing ]] && echo "libraries not found: $missing"
  if [[ -n $missing || -n $bad ]]; then
    status_line probe fail "does not start:${bad:- (libraries missing)}; gpu: $gpu"
  elif [[ -z ${GC_CUBLASLT:-} ]]; then
    status_line probe fail "no libcublasLt.so.13; gpu: $gpu"
  else
    status_line probe ok "every binary starts; gpu: $gpu; cuBLASLt $(basename "$GC_CUBLASLT")"
  fi
}

step_kernel_tests() {
  local line
  line=$(run_gtest $kKernelTests "$1")
  status_line kernel-tests "${line%%|*}" "${line#*|}"
}

# The BERT-base-shape checkpoint every encoder step shares (FP16, 220 MB; seconds to write):
# the encoder benchmark, the server's bert_base model and PyTorch read the same weights.
checkpoint() {
  local folder="$GC_SCRATCH/repo/bert_base/1"
  # The marker lies outside the model repository (nothing there but the model's own files).
  if [[ ! -f $GC_SCRATCH/bert_base.complete ]]; then
    "$GC_ROOT/bin/sluice-make-encoder" --vocab 30522 --hidden 768 --layers 12 --heads 12 \
      --intermediate 3072 --positions 512 --dtype F16 --out "$folder" >&2 || return 1
    touch "$GC_SCRATCH/bert_base.complete"
  fi
  echo "$folder"
}

# One encoder benchmark run: $1 limit, $2 label, then the benchmark's own arguments.
encoder_bench() {
  local limit="$1" label="$2"
  shift 2
  local folder
  folder=$(checkpoint) || { echo "fail|$label: no checkpoint"; return; }
  local rc=0
  timeout -k 5 "$limit" "$GC_ROOT/bin/sluice-cuda-encoder-bench" --checkpoint "$folder" \
    --json "$GC_WORK/figures/encoder-$label.json" "$@" >"$GC_WORK/encoder-$label.log" 2>&1 || rc=$?
  if ((rc == 124 || rc == 137)); then
    echo "fail|$label: timeout after $limit s"
  elif ((rc != 0)); then
    echo "fail|$label: exit $rc: $(grep -v '^|' "$GC_WORK/encoder-$label.log" | tail -1 | cut -c1-160)"
  else
    echo "ok|$label"
  fi
}

step_encoder_bench() {
  local line
  line=$(encoder_bench "$1" fp16-s128 --compute fp16 --seq 128 --graphs both --seconds 0.5)
  grep '^|\|^loaded\|^device counters\|^checkpoint' "$GC_WORK/encoder-fp16-s128.log"
  status_line encoder-bench "${line%%|*}" "${line#*|}"
}

step_engine_bench() {
  local limit="$1" result=ok detail="" graphs rc
  for graphs in on off; do
    rc=0
    timeout -k 5 $((limit / 2)) "$GC_ROOT/bin/sluice-engine-bench" \
      --model-repository "$GC_ROOT/models" --models mlp,simple --device cuda:0 \
      --require-device cuda --graphs "$graphs" --seconds 0.25 \
      --json "$GC_WORK/figures/engine-graphs-$graphs.json" >"$GC_WORK/engine-graphs-$graphs.log" 2>&1 ||
      rc=$?
    grep '^|\|^model\|^sluice-engine-bench' "$GC_WORK/engine-graphs-$graphs.log"
    if ((rc != 0)); then
      result=fail
      detail+="graphs $graphs: exit $rc: $(tail -1 "$GC_WORK/engine-graphs-$graphs.log" | cut -c1-120); "
    else
      detail+="graphs $graphs ok; "
    fi
  done
  status_line engine-bench "$result" "${detail%; }"
}

step_e2e_server() {
  local folder
  folder=$(checkpoint) || { status_line e2e-server fail "no checkpoint"; return; }
  "$GC_ROOT/scripts/gpu-check-e2e.sh" --root "$GC_ROOT" --work "$GC_WORK" \
    --repository "$GC_SCRATCH/repo" --device cuda:0 --limit "$1"
}

step_pytorch() {
  local limit="$1" start=$SECONDS folder rc=0
  folder=$(checkpoint) || { status_line pytorch fail "no checkpoint"; return; }
  timeout -k 5 $((limit - 5)) python3 "$GC_ROOT/scripts/gpu_torch_encoder.py" --checkpoint "$folder" \
    --device cuda --dtype fp16 --seq 128 --json "$GC_WORK/figures/pytorch-fp16-s128.json" || rc=$?
  if ((rc != 0)); then
    status_line pytorch fail "eager: exit $rc"
    return
  fi
  # torch.compile only if quick: what is left of the cap, in its own process (a compile cannot
  # be interrupted cleanly inside one).
  local left=$((limit - (SECONDS - start) - 5))
  if ((left >= 30)); then
    rc=0
    timeout -k 3 "$left" python3 "$GC_ROOT/scripts/gpu_torch_encoder.py" --checkpoint "$folder" \
      --device cuda --dtype fp16 --seq 128 --compile --workloads b32x128 \
      --json "$GC_WORK/figures/pytorch-fp16-s128-compile.json" || rc=$?
    ((rc == 0)) && status_line pytorch ok "eager ok; torch.compile ok" ||
      status_line pytorch ok "eager ok; torch.compile not quick (exit $rc within $left s)"
  else
    status_line pytorch ok "eager ok; torch.compile not tried ($left s left)"
  fi
}

step_encoder_variants() {
  local limit="$1" start=$SECONDS result=ok detail="" spec line left n=3
  for spec in "bf16-s128|--compute bf16 --seq 128" "fp16-s512|--compute fp16 --seq 512" \
    "tf32-s128|--compute fp32 --tf32 --seq 128"; do
    left=$(((limit - (SECONDS - start) - 3) / n))
    n=$((n - 1))
    if ((left < 10)); then
      result=fail
      detail+="${spec%%|*}: no time; "
      continue
    fi
    # shellcheck disable=SC2086
    line=$(encoder_bench "$left" "${spec%%|*}" ${spec#*|} --graphs on --seconds 0.3 --sync-batches 10)
    grep '^|' "$GC_WORK/encoder-${spec%%|*}.log"
    [[ ${line%%|*} == ok ]] || result=fail
    detail+="${line#*|}; "
  done
  status_line encoder-variants "$result" "${detail%; }"
}

step_long_tests() {
  local limit="$1" name
  local -a pids=()
  # In parallel: correctness tests, not timings; one H200 and 16 cores hold the four at once.
  for name in $kLongTests; do
    run_gtest "$name" $((limit - 5)) >"$GC_WORK/status/long-$name" &
    pids+=($!)
  done
  wait "${pids[@]}"
  local result=ok detail=""
  for name in $kLongTests; do
    local line
    line=$(cat "$GC_WORK/status/long-$name")
    [[ ${line%%|*} == ok ]] || result=fail
    detail+="${line#*|}; "
    rm -f "$GC_WORK/status/long-$name"
  done
  status_line long-tests "$result" "${detail%; }"
}

# The CPU encoder on the GPU machine's host CPU: the only server-class CPU this project is lent,
# and the one likely to have AMX (issue 36's BF16 and INT8 goals are set on AMX; the development
# VMs expose none). Its CPU and matrix flags; engine_encoder_gemm_amx_test (the AMX kernels against
# the AVX-512 ones on the tile hardware, where it has AMX: they have never run on any before; on
# the emulator elsewhere); the GEMMs alone (one thread, every packed format the
# bench knows: FP32, BF16, INT8, and AMX's where present); then the BERT-base checkpoint at batch
# 32 x 128 in each precision, on up to 8 threads. Figures: host-cpu.json and host-cpu-*.jsonl
# (the bench's own JSON lines). A precision the CPU refuses (int8 without VNNI) is reported, not
# failed; fp32 or the GEMMs failing fails the step.
step_host_cpu() {
  local limit="$1" start=$SECONDS folder
  folder=$(checkpoint) || { status_line host-cpu fail "no checkpoint"; return; }
  local cpu flags threads
  cpu=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo | tr -d '"\\')
  flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
    grep -xE 'avx2|avx512f|avx512_bf16|avx512_vnni|amx_tile|amx_bf16|amx_int8' | paste -sd' ')
  threads=$(($(nproc) / 2))
  ((threads < 1)) && threads=1
  ((threads > 8)) && threads=8
  printf '{"cpu": "%s", "flags": "%s", "cores": %d, "threads": %d}\n' "${cpu:-unknown}" "$flags" \
    "$(nproc)" "$threads" >"$GC_WORK/figures/host-cpu.json"
  echo "host CPU: ${cpu:-unknown}; $(nproc) cores; flags: ${flags:-none of interest}"
  local bench="$GC_ROOT/bin/sluice-encoder-bench" rc=0 result=ok detail="" p left log line
  line=$(run_gtest engine_encoder_gemm_amx_test $((limit / 5)))
  [[ ${line%%|*} == ok ]] || result=fail
  detail+="${line#*|}; "
  echo "gemm 128 0.1" | timeout -k 3 $((limit / 3)) "$bench" --model-dir "$folder" \
    >"$GC_WORK/figures/host-cpu-gemm.jsonl" 2>"$GC_WORK/host-cpu-gemm.log" || rc=$?
  if ((rc != 0)); then
    result=fail
    detail+="gemm: exit $rc; "
  fi
  for p in fp32 bf16 int8; do
    left=$((limit - (SECONDS - start) - 2))
    if ((left < 3)); then
      [[ $p == fp32 ]] && result=fail
      detail+="$p: no time; "
      continue
    fi
    rc=0
    log="$GC_WORK/host-cpu-$p.log"
    printf '32 128 1\n' | timeout -k 2 "$left" "$bench" --model-dir "$folder" --threads "$threads" \
      --precision "$p" >"$GC_WORK/figures/host-cpu-$p.jsonl" 2>"$log" || rc=$?
    if ((rc == 0)); then
      detail+="$p $(grep -o '"sequences_per_s":[0-9.]*' "$GC_WORK/figures/host-cpu-$p.jsonl" |
        tail -1 | cut -d: -f2 | cut -c1-6) seq/s; "
    else
      [[ $p == fp32 ]] && result=fail
      detail+="$p: exit $rc ($(tail -1 "$log" | cut -c1-90)); "
    fi
  done
  status_line host-cpu "$result" "$threads threads: ${detail%; }"
}

# ---- the run: steps in order, the report after each.

declare -a rows=()
not_run=""
final_printed=0

# Writes the three files of $OUT: the summary (steps table + key figures), the figures JSON and
# the logs archive. After every step, so that a kill at any point loses only the step in flight.
report() {
  local table="$GC_WORK/steps.tsv"
  printf '%s\n' "${rows[@]}" >"$table"
  if ! python3 "$GC_ROOT/scripts/gpu_check_report.py" --work "$GC_WORK" --steps "$table" \
    --budget "$budget" --not-run "$not_run" --json "$OUT_DIR/gpu-check-figures.json" \
    --summary "$GC_WORK/summary.txt" 2>"$GC_WORK/report.err"; then
    # No python (or a bug in the report): the step table alone, still last.
    {
      echo "gpu-check summary (no figures: gpu_check_report.py failed, see report.err)"
      printf '%-17s %5s %7s  %-7s %s\n' step cap_s took_s result detail
      local row
      for row in "${rows[@]}"; do
        IFS=$'\t' read -r n c t r d <<<"$row"
        printf '%-17s %5s %7s  %-7s %s\n' "$n" "$c" "$t" "$r" "$d"
      done
      [[ -n $not_run ]] && echo "not run for lack of time: $not_run"
    } >"$GC_WORK/summary.txt"
  fi
  cp "$GC_WORK/summary.txt" "$OUT_DIR/gpu-check-summary.txt"
  tar -C "$GC_WORK" -czf "$OUT_DIR/gpu-check-logs.tar.gz.tmp" --exclude=out . 2>/dev/null &&
    mv "$OUT_DIR/gpu-check-logs.tar.gz.tmp" "$OUT_DIR/gpu-check-logs.tar.gz"
}

# The failures, bounded (so that they never push the summary out of the output's tail), then the
# summary as the very last lines.
final_output() {
  ((final_printed)) && return
  final_printed=1
  report
  local log shown=0
  for log in "$GC_WORK"/*.log; do
    [[ -f $log ]] || continue
    if grep -q 'Failure$\|^\[  FAILED  \]' "$log" && ((shown < 3)); then
      echo
      echo "--- $(basename "$log" .log): first failures"
      grep -A4 'Failure$' "$log" | head -15 | cut -c1-200
      shown=$((shown + 1))
    fi
  done
  echo
  echo "=== gpu-check: $OUT_DIR/gpu-check-{summary.txt,figures.json,logs.tar.gz}"
  cat "$GC_WORK/summary.txt"
}

# Ends whatever is left of the session that step $1 (its leader's pid) started.
end_session() {
  [[ -n $setsid ]] || return 0
  pkill -TERM -s "$1" 2>/dev/null || return 0
  sleep 0.5
  pkill -KILL -s "$1" 2>/dev/null
  return 0
}

on_signal() {
  echo "gpu-check: $1 received; stopping the step in flight" >&2
  if [[ -n ${step_pid:-} ]]; then
    kill -TERM "$step_pid" 2>/dev/null
    end_session "$step_pid"
  fi
  [[ -n ${current:-} ]] && rows+=("$current"$'\t'"${current_cap:-0}"$'\t'"$((SECONDS - ${current_start:-SECONDS}))"$'\t'"killed"$'\t'"$1 received")
  current=""
  final_output
  exit 130
}

run() {
  setup "${1:-}" || exit 1
  budget=${GPU_CHECK_BUDGET_S:-560}
  setsid=""
  command -v setsid >/dev/null && command -v pkill >/dev/null && setsid=setsid
  local deadline=$((SECONDS + budget))
  trap 'on_signal TERM' TERM
  trap 'on_signal INT' INT
  trap 'final_output' EXIT
  echo "gpu-check: logs in $GC_WORK, scratch in $GC_SCRATCH, results in $OUT_DIR; budget $budget s"
  local step name cap limit left rc took result detail
  for step in "${kSteps[@]}"; do
    name=$(step_field "$step" 1)
    cap=$(step_field "$step" 2)
    # Test-only (the dry run): GPU_CHECK_TEST_CAPS="step=seconds,..." shortens caps.
    if [[ ,${GPU_CHECK_TEST_CAPS:-}, =~ ,$name=([0-9]+), ]]; then cap=${BASH_REMATCH[1]}; fi
    if [[ -n ${GPU_CHECK_ONLY:-} && ",$GPU_CHECK_ONLY," != *",$name,"* ]]; then
      rows+=("$name"$'\t'"$cap"$'\t'"-"$'\t'"skipped"$'\t'"not in GPU_CHECK_ONLY")
      continue
    fi
    left=$((deadline - SECONDS - kReserveS))
    limit=$cap
    ((left < limit)) && limit=$left
    # A step that cannot have half its cap would report nothing useful: later, cheaper steps may
    # still fit.
    if ((limit < (cap + 1) / 2)); then
      rows+=("$name"$'\t'"$cap"$'\t'"-"$'\t'"not run"$'\t'"budget: $left s left, cap $cap s")
      not_run+="${not_run:+ }$name"
      echo "gpu-check: $name not run: $left s left of the budget, cap $cap s"
      continue
    fi
    echo "gpu-check: $name (cap $limit s) ..."
    current="$name" current_cap="$cap" current_start=$SECONDS
    rm -f "$GC_WORK/status/$name"
    # A session of its own: the step's processes (a server, tests under their own `timeout`,
    # which makes its own process group) are all ended by session id when it returns.
    $setsid timeout -k 5 "$limit" "$BASH" "$self" __step "$name" "$limit" \
      >"$GC_WORK/$name.step.log" 2>&1 &
    step_pid=$!
    rc=0
    wait "$step_pid" || rc=$?
    end_session "$step_pid"
    step_pid=""
    current=""
    took=$((SECONDS - current_start))
    if [[ -f $GC_WORK/status/$name ]]; then
      IFS='|' read -r result detail <"$GC_WORK/status/$name"
      ((rc == 124 || rc == 137)) && result=fail detail="timeout after $limit s; $detail"
    elif ((rc == 124 || rc == 137)); then
      result=fail detail="timeout after $limit s"
    else
      result=fail detail="exit $rc, no status: $(tail -1 "$GC_WORK/$name.step.log" | cut -c1-120)"
    fi
    rows+=("$name"$'\t'"$cap"$'\t'"$took"$'\t'"$result"$'\t'"$detail")
    echo "gpu-check: $name: $result ($took s): ${detail:0:200}"
    report
  done
  trap - EXIT
  final_output
  local row
  for row in "${rows[@]}"; do
    [[ $(cut -f4 <<<"$row") == ok || $(cut -f4 <<<"$row") == skipped ]] || return 1
  done
  return 0
}

case "${1:-}" in
  pack) pack "${2:-}" ;;
  plan) plan ;;
  run) run "${2:-}" ;;
  probe) GPU_CHECK_ONLY=probe run "${2:-}" ;;
  __step)
    # Inside run's `timeout`: one step, its arguments after the name.
    fn="step_${2//-/_}"
    "$fn" "$3"
    ;;
  --dry-run) shift; exec "$here/scripts/gpu-check-dry-run.sh" "$@" ;;
  *)
    echo "usage: $0 pack [ARCHIVE] | run ARCHIVE | probe ARCHIVE | plan | --dry-run [--skip-build]" >&2
    exit 2
    ;;
esac
