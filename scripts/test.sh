#!/usr/bin/env bash
# test.sh - the README's test command: install what is missing, build, run every test.
# GPU tests (CTest label `gpu`) skip with their reason on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/build.sh
BUILD_DIR=${SLUICE_BUILD_DIR:-build}
cd "$BUILD_DIR"
ctest --output-on-failure -j "${SLUICE_TEST_JOBS:-2}" --timeout 600
