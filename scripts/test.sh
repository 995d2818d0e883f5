#!/usr/bin/env bash
# test.sh - the README's test command: install what is missing, build, run every test.
# GPU tests (CTest label `gpu`) skip with their reason on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."

# The tests' Python references (tokenizers, tritonclient, ...) live in a pinned virtual environment.
test_python=$(scripts/python-env.sh)
scripts/build.sh -DSLUICE_TEST_PYTHON="$test_python"
BUILD_DIR=${SLUICE_BUILD_DIR:-build}
root=$PWD
cd "$BUILD_DIR"
# CTest says only "Skipped"; the summary after it quotes each skipped test's reason
# (scripts/ctest-skips.py reads CTest's JUnit report).
junit=$PWD/Testing/ctest-junit.xml
rm -f "$junit"
status=0
ctest --output-on-failure -j "${SLUICE_TEST_JOBS:-2}" --timeout 600 --output-junit "$junit" || status=$?
if [[ -f $junit ]]; then
  python3 "$root/scripts/ctest-skips.py" "$junit" || true
fi
exit "$status"
