#!/usr/bin/env bash
# sanitize.sh [asan|tsan|all] - the unit and integration tests under sanitizers.
#
#   scripts/sanitize.sh asan   AddressSanitizer + UndefinedBehaviorSanitizer (LeakSanitizer at
#                              exit): every unit and integration test (CTest labels `unit`,
#                              `integration`), in build-asan/; the `reference` ones on smaller
#                              inputs (see below)
#   scripts/sanitize.sh tsan   ThreadSanitizer: every unit and integration test except those
#                              labelled `reference`, in build-tsan/, with the gRPC boundary's
#                              memory accesses unchecked (its atomics stay instrumented), and
#                              except the client's tests against its in-process gRPC server
#   scripts/sanitize.sh        both (all)
#
# `reference` (CTest label, beside `integration`): tests that compare token ids or numbers with
# Python's references one input or one request at a time: the tokenizer corpora through
# sluice-tokenize (text_reference_test, text_embedder_tokenizer_test, text_pipeline_*_test) and
# the encoder's bf16/int8 accuracy on sequential requests (encoder_precision_test). ASan + UBSan
# runs them, for memory errors and undefined behaviour in those code paths, on the smaller inputs
# the sanitizer configuration passes them (--quick, --sanitizer-build: every hand-picked case,
# fewer generated ones). TSan leaves them out: sluice-tokenize starts no thread, and the threads
# the precision test passes through (gRPC, batcher, the encoder's compute pool) are checked by the
# tests TSan keeps (Encoder*Test over 1-3 pool threads, encoder_reference_test's and
# encoder_modernbert_test's requests in flight together, the server and scheduler tests). Together
# they were ~500 of TSan's ~870 test seconds (docs/reliability.md#sanitizers).
#
# A failed test is run once more, alone: failing again fails the suite, passing is reported as
# FLAKY; the last lines name every suite's failed and flaky tests (docs/reliability.md#sanitizers).
#
# Builds with clang (SLUICE_SANITIZE: every target instrumented, CPU backend only; with
# -Wthread-safety -Werror=thread-safety, so clang checks the ABSL_GUARDED_BY annotations) at -O0
# with line tables only: reports keep file:line, links stay short, and clang -O0 compiles the
# gRPC-heavy files in half the time of -O1 (gcc is slower still; docs/reliability.md#sanitizers
# has the measurements), which outweighs the tests' few extra seconds.
#
# Every report is fatal: a test fails if its own process reports, and also if a child it starts
# does (sluice-server, sluice-loadtest, sluice-client inherit these options; the sanitizer exit
# code is 66, which no sluice program uses; tests/integration/server_process.cc also fails a test
# whose server logged a report).
#
# TSan and gRPC: Debian's gRPC, Protobuf and Abseil are not instrumented, so TSan sees none of the
# synchronisation inside them (gRPC hands messages and reactors between its threads with its own
# locks and atomics). Instrumented code on both sides of such a hand-off reads as a race: with
# everything instrumented, client_unit_test alone reported 2,009 races, the server of
# server_integration_test 171, all on gRPC/Protobuf objects. So under TSan the code at the gRPC
# boundary is compiled without memory-access checks (sluice_grpc_boundary in CMakeLists.txt: the
# generated protocol code, the RPC service and request conversion, the client library, the load
# tester's generators, the integration tests' own processes), and everything behind it (engine,
# queues, batcher, executors, stats, logger, metrics exporter, repository) is checked, in the unit
# tests and in the real sluice-server that the integration tests drive. A deliberate unguarded
# counter in ModelScheduler::Enqueue failed 5 of 7 integration tests with TSan's report.
# InferenceClientTest stays out: its test code and the client library share inline
# std::string/grpc::Status code with instrumented libraries in one binary, so the boundary leaks
# there. Checking gRPC's own side needs gRPC, Protobuf and Abseil built with -fsanitize=thread.
#
# Suppressions: tools/sanitizers/*.supp, each entry with its reason (one: a thread gRPC leaves
# unjoined at exit; no race report is suppressed).
# SLUICE_JOBS (default nproc) builds, SLUICE_TEST_JOBS (default 2) runs tests in parallel.
set -euo pipefail
cd "$(dirname "$0")/.."

which=${1:-all}
case "$which" in
  asan) kinds=(asan) ;;
  tsan) kinds=(tsan) ;;
  all) kinds=(asan tsan) ;;
  -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
  *) echo "sanitize.sh: unknown argument $which (asan, tsan or all)" >&2; exit 2 ;;
esac

scripts/bootstrap.sh --sanitizers
if ! command -v clang++ >/dev/null ||
  ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.tsan-x86_64.a >/dev/null 2>&1; then
  echo "sanitize.sh: clang and its sanitizer runtimes are needed" \
    "(apt install clang libclang-rt-14-dev)" >&2
  exit 2
fi

supp=$PWD/tools/sanitizers
test_python=$(scripts/python-env.sh)
jobs=${SLUICE_JOBS:-$(nproc)}
status=0
failed_kinds=()
summary=$(mktemp)  # each suite's failed and flaky tests, printed again at the end
trap 'rm -f "$summary"' EXIT
for kind in "${kinds[@]}"; do
  build=build-$kind
  case "$kind" in
    asan) sanitize=address,undefined targets=(all) exclude='^$' exclude_labels=() ;;
    tsan) sanitize=thread targets=(all) exclude='^InferenceClientTest\.'
      exclude_labels=(-LE '^reference$') ;;
  esac
  echo "[sanitize] $(date -u +%T) $kind: configure and build $build"
  launcher=()
  if command -v ccache >/dev/null 2>&1; then  # as in build.sh
    export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  fi
  CC=clang CXX=clang++ cmake -S . -B "$build" -DSLUICE_SANITIZE="$sanitize" "${launcher[@]}" \
    -DSLUICE_ENABLE_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug -DSLUICE_TEST_PYTHON="$test_python" \
    -DCMAKE_CXX_FLAGS_DEBUG="-O0 -gline-tables-only" \
    -DCMAKE_C_FLAGS_DEBUG="-O0 -gline-tables-only" >/dev/null
  cmake --build "$build" -j "$jobs" --target "${targets[@]}"

  echo "[sanitize] $(date -u +%T) $kind: tests"
  (
    # exitcode=66 everywhere (TSan's default): a sanitizer's exit is never mistaken for one of
    # sluice's own exit codes (0-3, 128+signal) by a test that expects a failure.
    export ASAN_OPTIONS="detect_leaks=1:exitcode=66:check_initialization_order=1"
    ASAN_OPTIONS+=":strict_init_order=1:detect_stack_use_after_return=1"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=66"
    export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
    # ignore_noninstrumented_modules: memcpy/malloc/free called from inside the uninstrumented
    # Debian libraries are not checked (their synchronisation is invisible, see above); calls
    # from sluice's own code still are.
    export TSAN_OPTIONS="halt_on_error=1:exitcode=66:second_deadlock_stack=1:history_size=4"
    TSAN_OPTIONS+=":ignore_noninstrumented_modules=1"
    TSAN_OPTIONS+=":suppressions=$supp/tsan.supp:print_suppressions=0"
    cd "$build"
    ctest_args=(--output-on-failure --timeout 900 -L '^(unit|integration)$' -E "$exclude"
      "${exclude_labels[@]}")
    if ctest -j "${SLUICE_TEST_JOBS:-2}" "${ctest_args[@]}"; then exit 0; fi
    # A test that fails is run once more, alone, so that a timing failure under the sanitizer's
    # 2-20x slowdown (with another test on the other core) is told apart from a defect: one that
    # fails again fails the suite; one that passes alone is named as flaky in the summary below
    # (CI shows only the tail of the log) so that it gets fixed, not forgotten. A sanitizer
    # report is never retried: it fails the suite at once.
    failed_log=Testing/Temporary/LastTestsFailed.log
    failed=$(cut -d: -f2- "$failed_log" 2>/dev/null | paste -sd' ' -)
    if grep -l -E '(==ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer|SUMMARY: (Address|Thread|UndefinedBehavior|Leak)Sanitizer)' \
        Testing/Temporary/LastTest.log >/dev/null; then
      echo "[sanitize] $kind: FAILED with a sanitizer report: $failed" | tee -a "$summary"
      exit 1
    fi
    if ctest --rerun-failed -j 1 "${ctest_args[@]}"; then
      echo "[sanitize] $kind: FLAKY (failed, then passed alone): $failed" | tee -a "$summary"
      exit 0
    fi
    echo "[sanitize] $kind: FAILED twice: $(cut -d: -f2- "$failed_log" | paste -sd' ' -)" |
      tee -a "$summary"
    exit 1
  ) || { status=1; failed_kinds+=("$kind"); }
done
# The verdict last, where CI's tail shows it.
cat "$summary"
echo "[sanitize] $(date -u +%T) done: exit $status${failed_kinds[*]:+ (failed: ${failed_kinds[*]})}"
exit $status
