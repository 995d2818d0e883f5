#!/usr/bin/env bash
# check() evaluates its condition as a string: the variables it names look unused to shellcheck.
# shellcheck disable=SC2034
# gpu-check-dry-run.sh (`scripts/gpu-check.sh --dry-run [--skip-build]`): everything about a GPU
# run that can be checked on a machine without a GPU, before the GPU machine's few minutes.
#
#   1. plan: the steps in order with their caps; the caps add up to under 9 minutes.
#   2. pack (skipped by --skip-build; with --skip-build an existing build is still packed without
#      building): the archive plus the working tree that travels with it stay under 64 MiB, and
#      the probe step runs here on the real archive (every packed binary starts).
#   3. the real gpu-check.sh `run` over an archive of stub binaries (same names, canned output),
#      into a fake $OUT, three times: a run where a test binary fails and another hangs past its
#      cap; a run whose budget ends early; a run killed by SIGTERM half-way. Each time: at most 8
#      files land in $OUT (exactly 3), the summary file is the output's last lines, the figures
#      JSON parses and the logs archive holds every step's log.
#   4. the helpers on the CPU: gpu_torch_encoder.py --tiny --device cpu (when torch imports
#      here), and gpu-check-e2e.sh on the real archive with --device cpu and a tiny checkpoint
#      (with a real archive; under --skip-build only with GPU_CHECK_DRY_RUN_E2E=1).
# GPU_CHECK_ARCHIVE: where the pack goes (default $BUILD_DIR/gpu-check.tar.xz).
#
# Exit 0 only if every check passed. The ctest `gpu_check_dry_run` (label gpu-check) runs it with
# --skip-build.
set -uo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
script="$here/scripts/gpu-check.sh"
build_dir="${BUILD_DIR:-$here/build}"
skip_build=0
for arg in "$@"; do
  case "$arg" in
    --skip-build) skip_build=1 ;;
    *) echo "usage: gpu-check.sh --dry-run [--skip-build]" >&2; exit 2 ;;
  esac
done
tmp="$(mktemp -d /tmp/gpu-check-dry-run.XXXXXX)"
# gpu-check.sh's own temporary folders go under $tmp too.
export TMPDIR="$tmp"
trap '[[ -n ${KEEP:-} ]] || rm -rf "$tmp"' EXIT
failures=0
check() {
  if eval "$2"; then
    echo "  ok: $1"
  else
    echo "  FAILED: $1" >&2
    failures=$((failures + 1))
  fi
}

echo "== 1. plan"
"$script" plan
check "the caps add up to under 540 s" '"$script" plan >/dev/null'
plan_steps=$("$script" plan | awk 'NR > 1 && $1 != "sum" { print $1 }' | paste -sd' ')
check "steps ordered by value" \
  '[[ $plan_steps == "probe kernel-tests encoder-bench engine-bench e2e-server pytorch encoder-variants long-tests host-cpu" ]]'

echo "== 2. pack"
archive="${GPU_CHECK_ARCHIVE:-$build_dir/gpu-check.tar.xz}"
if ((skip_build)); then
  if [[ -n $(find "$build_dir" -type f -name sluice-server -perm -u+x 2>/dev/null | head -1) &&
    -f $build_dir/gpu-tests.txt ]] &&
    GPU_CHECK_XZ_LEVEL=1 GPU_CHECK_PACK_NO_BUILD=1 BUILD_DIR="$build_dir" "$script" pack "$archive" \
      >"$tmp/pack.log" 2>&1; then
    echo "  packed the existing build without building"
  else
    echo "  (no complete build in $build_dir: pack not checked; see $tmp/pack.log)"
    archive=""
  fi
else
  GPU_CHECK_XZ_LEVEL=1 BUILD_DIR="$build_dir" "$script" pack "$archive" ||
    { echo "  FAILED: pack" >&2; exit 1; }
fi
if [[ -n $archive && -f $archive ]]; then
  archive_bytes=$(stat -c %s "$archive")
  tree_bytes=$(cd "$here" && git ls-files -co --exclude-standard -z | xargs -0 stat -c %s 2>/dev/null |
    awk '{ s += $1 } END { print s + 0 }')
  total=$((archive_bytes + tree_bytes))
  printf '  archive %.1f MiB + working tree %.1f MiB = %.1f MiB (limit 64)\n' \
    "$(bc -l <<<"$archive_bytes / 1048576")" "$(bc -l <<<"$tree_bytes / 1048576")" \
    "$(bc -l <<<"$total / 1048576")"
  check "archive + working tree < 64 MiB" '((total < 64 * 1024 * 1024))'
  OUT="$tmp/probe-out" GPU_CHECK_SCRATCH="$tmp/probe-scratch" GPU_CHECK_ONLY=probe \
    "$script" run "$archive" >"$tmp/probe.log" 2>&1
  check "every packed binary starts here (the probe step)" \
    'grep -q "^probe .* ok .*every binary starts" "$tmp/probe-out/gpu-check-summary.txt"'
  grep '^probe' "$tmp/probe-out/gpu-check-summary.txt" | cut -c1-200 | sed 's/^/  /'
fi

echo "== 3. the run over stub binaries"
stubs="$tmp/stub/gpu-check"
mkdir -p "$stubs/bin" "$stubs/server" "$stubs/lib" "$stubs/scripts" "$stubs/models/embedder"
cat >"$stubs/bin/stub" <<'EOF'
#!/usr/bin/env bash
# A stand-in for every packed binary: canned output, behaviour from GC_FAKE_FAIL / GC_FAKE_HANG.
name=$(basename "$0")
json=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --json) json="${args[i + 1]}" ;;
    --json=*) json="${args[i]#--json=}" ;;
    --gtest_output=json:*) json="${args[i]#--gtest_output=json:}" ;;
    --out) mkdir -p "${args[i + 1]}" && echo '{}' >"${args[i + 1]}/config.json" ;;
    --help | --gtest_list_tests) echo "Stub."; exit 0 ;;
  esac
done
[[ " ${GC_FAKE_HANG:-} " == *" $name "* ]] && exec sleep 1000
if [[ " ${GC_FAKE_FAIL:-} " == *" $name "* ]]; then
  echo "stub.cc:1: Failure"
  echo "Expected: relative error <= 2e-4 (path: fused GELU epilogue), got 3e-4"
  echo "[  FAILED  ] 1 test, listed below:"
  echo "[  FAILED  ] Stub.Fails"
  exit 1
fi
case "$name" in
  gpu_* | engine_*)
    echo "[  PASSED  ] 3 tests."
    echo '{"tests": 3, "failures": 0, "time": "1s", "testsuites": [{"name": "Stub", "testsuite": [{"name": "Passes", "result": "COMPLETED"}]}]}' >"$json"
    ;;
  sluice-cuda-encoder-bench)
    # As many points and GEMMs as the real one writes, so that the summary has its real size.
    echo "| b1x128 | on | 1 | 128 | 0.4 |"
    point='{"workload": "b32x128", "graphs": true, "tokens": 4096, "tokens_computed": 4096, "sync_ms_p50": 2.0, "compute_ms": 1.5, "sequences_per_s": 20000, "tokens_per_s": 2560000, "tflops_present": 450, "tflops_computed": 450, "peak_share_present": 0.57, "cpu_us_per_sequence": 3.0}'
    points="$point" gemms=""
    for _ in $(seq 1 9); do points+=",$point"; done
    for tokens in 128 1024 4096 16384; do
      for gemm in qkv attention_output intermediate output; do
        gemms+="${gemms:+,}{\"name\": \"$gemm\", \"tokens\": $tokens, \"tflops\": 600}"
      done
    done
    echo "{\"executor\": \"encoder on cuda:0: FP16 activations, TF32 GEMMs, buckets 1x128,8x1024,32x4096,128x16384, 48 of 48 GEMM epilogues fused (the others: plain GEMM + our kernel), intermediate tanh GELU in cuBLASLt's epilogue, 0 head GEMMs on our own kernel (cuBLASLt offered none), weights 210 MiB, scratch 480 MiB (stub)\", \"points\": [$points], \"gemms\": [$gemms]}" >"$json"
    ;;
  sluice-engine-bench)
    echo "| 64 | 1000000 | 20000 | 50 |"
    echo '{"executors": {"mlp": "cuda:0", "simple": "cuda:0"}, "results": [{"model": "mlp", "bucket": 64, "mode": "pipeline", "items_per_second": 1000000, "compute_infer_us_per_batch": 20.0}]}' >"$json"
    ;;
  sluice-encoder-bench)
    # The CPU encoder bench: a load line, then a GEMM line (stdin "gemm ...") or a round's line.
    precision=fp32
    for ((i = 0; i < ${#args[@]}; i++)); do
      [[ ${args[i]} == --precision ]] && precision="${args[i + 1]}"
    done
    echo "{\"load_s\": 0.4, \"precision\": \"CPU precision $precision (from its config; stub)\"}"
    if grep -q '^gemm' -; then
      shapes=""
      for gemm in qkv attention_out intermediate output; do
        shapes+="${shapes:+,}{\"gemm\": \"$gemm\", \"m\": 128, \"packed_gflops\": 150, \"packed_cold_gflops\": 140, \"packed_bf16_gflops\": 85, \"packed_int8_gops\": 600}"
      done
      echo "{\"packed\": \"avx512f\", \"packed_int8\": \"avx512-vnni\", \"shapes\": [$shapes]}"
    else
      echo '{"batch": 32, "seq": 128, "sequences_per_s": 45.0, "gflops": 1000, "cpu_sequences_per_s": 6.0}'
    fi
    ;;
  sluice-loadtest)
    echo '{"levels": [{"throughput_rps": 5000, "tokens_per_s": 660000, "failed": 0, "latency_us": {"p50": 3000, "p99": 9000}}], "totals": {"succeeded": 20000}}' >"$json"
    ;;
esac
exit 0
EOF
chmod +x "$stubs/bin/stub"
for name in gpu_cuda_kernels_test gpu_cuda_encoder_test gpu_cuda_executor_test \
  gpu_cuda_shared_memory_test gpu_cuda_encoder_server_test sluice-engine-bench \
  sluice-cuda-encoder-bench sluice-loadtest sluice-make-encoder sluice-encoder-bench \
  engine_encoder_gemm_amx_test; do
  cp "$stubs/bin/stub" "$stubs/bin/$name"
done
rm "$stubs/bin/stub"
cat >"$stubs/server/sluice-server" <<'EOF'
#!/usr/bin/env bash
[[ " $* " == *" --help "* ]] && exit 0
echo "gRPC listening on 127.0.0.1:40001 (insecure) grpc_port=40001"
echo "model 'embedder' instance 0: encoder on cuda:0: FP32 activations (stub)"
echo "model 'bert_base' instance 0: encoder on cuda:0: FP16 activations (stub)"
echo "server ready: repository (stub)"
trap 'exit 0' TERM
while :; do sleep 0.1; done
EOF
chmod +x "$stubs/server/sluice-server"
echo 'name: "embedder"
instance_group [ { count: 1 kind: KIND_CPU } ]' >"$stubs/models/embedder/config.pbtxt"
cp "$script" "$here/scripts/gpu-check-e2e.sh" "$here/scripts/gpu_check_report.py" "$stubs/scripts/"
cat >"$stubs/scripts/gpu_torch_encoder.py" <<'EOF'
import json, sys
path = sys.argv[sys.argv.index("--json") + 1]
json.dump({"points": [{"workload": "b32x128", "sequences_per_s": 10000, "ms_p50": 3.0}]}, open(path, "w"))
EOF
printf '%s\n' gpu_cuda_kernels_test gpu_cuda_encoder_test gpu_cuda_executor_test \
  gpu_cuda_shared_memory_test gpu_cuda_encoder_server_test >"$stubs/tests.txt"
tar -C "$tmp/stub" -czf "$tmp/stub.tar.gz" gpu-check

# Checks what one run left: $1 its OUT, $2 its whole output.
check_out() {
  local out="$1" log="$2"
  local files
  files=$(find "$out" -type f | wc -l)
  check "$files files in \$OUT (at most 8)" '((files <= 8 && files == 3))'
  local lines
  lines=$(wc -l <"$out/gpu-check-summary.txt")
  check "the summary is the output's last $lines lines" \
    'diff <(tail -n "$lines" "$log") "$out/gpu-check-summary.txt" >/dev/null'
  check "the figures JSON parses" 'python3 -m json.tool "$out/gpu-check-figures.json" >/dev/null'
  check "the logs archive holds the step logs" \
    '[[ $(tar -tzf "$out/gpu-check-logs.tar.gz") == *probe.step.log* ]]'
  local chars
  chars=$(wc -c <"$out/gpu-check-summary.txt")
  check "the summary is $chars characters (at most 9,000: it must fit the 12,000-character tail)" \
    '((chars <= 9000)) && grep -q "^step .*cap_s" "$out/gpu-check-summary.txt"'
  check "the output tail (12,000 characters) holds the whole summary" \
    '(( $(tail -c 12000 "$log" | grep -c "gpu-check: \(PASS\|FAIL\)") == 1 ))'
}

echo "-- a: a test binary fails, another hangs past its cap"
rc=0
OUT="$tmp/out-a" GPU_CHECK_SCRATCH="$tmp/scratch-a" GC_FAKE_FAIL="gpu_cuda_kernels_test" \
  GC_FAKE_HANG="gpu_cuda_executor_test" GPU_CHECK_TEST_CAPS="long-tests=12" \
  "$script" run "$tmp/stub.tar.gz" >"$tmp/run-a.log" 2>&1 || rc=$?
check "exit status is a failure ($rc)" '((rc != 0))'
check_out "$tmp/out-a" "$tmp/run-a.log"
check "the failing binary is named with its failure" \
  'grep -q "^kernel-tests .*fail .*gpu_cuda_kernels_test: exit 1" "$tmp/out-a/gpu-check-summary.txt"'
check "the hang is a timeout of its binary" \
  'grep -q "^long-tests .*gpu_cuda_executor_test: timeout" "$tmp/out-a/gpu-check-summary.txt"'
check "every other step ran" \
  '(( $(grep -cE "^(probe|encoder-bench|engine-bench|e2e-server|pytorch|encoder-variants|host-cpu) .* ok " "$tmp/out-a/gpu-check-summary.txt") == 7 ))'
check "the report has the figures of every step" \
  'grep -q "sluice / PyTorch" "$tmp/out-a/gpu-check-summary.txt" && grep -q "end to end" "$tmp/out-a/gpu-check-summary.txt" && grep -q "^engine" "$tmp/out-a/gpu-check-summary.txt" && grep -q "int8: 45.0 seq/s" "$tmp/out-a/gpu-check-summary.txt"'
echo "   last lines:"
tail -n 12 "$tmp/run-a.log" | cut -c1-150 | sed 's/^/   | /'

echo "-- b: the budget ends early"
rc=0
OUT="$tmp/out-b" GPU_CHECK_SCRATCH="$tmp/scratch-b" GPU_CHECK_BUDGET_S=38 \
  "$script" run "$tmp/stub.tar.gz" >"$tmp/run-b.log" 2>&1 || rc=$?
check_out "$tmp/out-b" "$tmp/run-b.log"
check "the steps that did not fit are listed" \
  'grep -q "^not run for lack of time: kernel-tests encoder-bench" "$tmp/out-b/gpu-check-summary.txt"'
check "a step that fits still ran" 'grep -q "^probe .* ok " "$tmp/out-b/gpu-check-summary.txt"'

echo "-- c: SIGTERM half-way"
OUT="$tmp/out-c" GPU_CHECK_SCRATCH="$tmp/scratch-c" GC_FAKE_HANG="gpu_cuda_kernels_test" \
  "$script" run "$tmp/stub.tar.gz" >"$tmp/run-c.log" 2>&1 &
run_pid=$!
for _ in $(seq 1 100); do
  grep -q "kernel-tests (cap" "$tmp/run-c.log" 2>/dev/null && break
  sleep 0.1
done
sleep 0.5
kill -TERM "$run_pid"
wait "$run_pid"
check_out "$tmp/out-c" "$tmp/run-c.log"
check "the step in flight is reported killed" \
  'grep -q "^kernel-tests .* killed " "$tmp/out-c/gpu-check-summary.txt"'
sleep 0.5
check "no stub process is left" '! pgrep -f "$tmp/scratch-c" >/dev/null'

echo "== 4. the helpers on the CPU"
# A python with torch and transformers: the system's, or the tests' environment
# (scripts/python-env.sh) when it exists (never created here: that takes minutes).
torch_python=""
for candidate in python3 "${SLUICE_VENV:-/nonexistent}/bin/python" "$HOME"/.cache/sluice/venv-*/bin/python; do
  if "$candidate" -c 'import torch, transformers' 2>/dev/null; then
    torch_python="$candidate"
    break
  fi
done
if [[ -n $torch_python ]]; then
  check "gpu_torch_encoder.py --tiny --device cpu ($torch_python)" \
    '"$torch_python" "$here/bench/gpu_torch_encoder.py" --tiny --device cpu --dtype fp32 --seq 16 --workloads b1x16,b8x16,ragged32x8..256 --seconds 0.02 --sync-batches 2 --json "$tmp/torch.json" >"$tmp/torch.log" 2>&1 && python3 -m json.tool "$tmp/torch.json" >/dev/null'
else
  check "gpu_torch_encoder.py parses its arguments (torch does not import here)" \
    'python3 "$here/bench/gpu_torch_encoder.py" --help >/dev/null'
fi
if [[ -n $archive && -f $archive && ($skip_build == 0 || ${GPU_CHECK_DRY_RUN_E2E:-0} == 1) ]]; then
  mkdir -p "$tmp/e2e/unpacked" "$tmp/e2e/logs" "$tmp/e2e/repo/bert_base"
  tar -C "$tmp/e2e/unpacked" -xf "$archive"
  e2e_root="$tmp/e2e/unpacked/gpu-check"
  LD_LIBRARY_PATH="$e2e_root/lib" "$e2e_root/bin/sluice-make-encoder" --vocab 1000 --hidden 64 \
    --layers 2 --heads 4 --intermediate 128 --positions 512 --dtype F32 \
    --out "$tmp/e2e/repo/bert_base/1" >/dev/null
  LD_LIBRARY_PATH="$e2e_root/lib" "$here/scripts/gpu-check-e2e.sh" --root "$e2e_root" \
    --work "$tmp/e2e/logs" --repository "$tmp/e2e/repo" --device cpu --limit 60 --levels "1 4" \
    --window-ms 300 --max-windows 2 >"$tmp/e2e.log" 2>&1
  check "gpu-check-e2e.sh --device cpu on the real binaries" \
    'grep -q "^ok|" "$tmp/e2e/logs/status/e2e-server"'
  if [[ -n $torch_python ]]; then
    check "gpu_torch_encoder.py reads sluice-make-encoder's checkpoint (every weight)" \
      '"$torch_python" "$here/bench/gpu_torch_encoder.py" --checkpoint "$tmp/e2e/repo/bert_base/1" --device cpu --dtype fp32 --seq 16 --workloads b1x16 --seconds 0.02 --sync-batches 1 >"$tmp/torch-checkpoint.log" 2>&1'
  fi
  python3 "$here/scripts/gpu_check_report.py" --work "$tmp/e2e/logs" --json "$tmp/e2e.json" \
    --summary "$tmp/e2e-summary.txt"
  grep -A6 '^end to end' "$tmp/e2e-summary.txt" | sed 's/^/  /'
else
  echo "  (gpu-check-e2e.sh on real binaries: needs the full dry run, without --skip-build)"
fi

if ((failures)); then
  echo "gpu-check dry run: $failures checks FAILED"
  exit 1
fi
echo "gpu-check dry run: every check passed"
