#!/usr/bin/env bash
# test.sh - the README's test command: install what is missing, build, run every test.
# GPU tests (CTest label `gpu`) skip with their reason on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."

# The tests' Python references (tokenizers, tritonclient, ...) live in a pinned virtual environment.
test_python=$(scripts/python-env.sh)
scripts/build.sh -DSLUICE_TEST_PYTHON="$test_python"
BUILD_DIR=${SLUICE_BUILD_DIR:-build}
cd "$BUILD_DIR"
ctest --output-on-failure -j "${SLUICE_TEST_JOBS:-2}" --timeout 600
