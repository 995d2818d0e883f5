#!/usr/bin/env bash
# build.sh - configure and build sluice into build/ (or $SLUICE_BUILD_DIR).
# Installs missing Debian packages first (scripts/bootstrap.sh). CUDA code is built when the CUDA
# toolkit is present (/usr/local/cuda or nvcc on PATH); otherwise the CPU backend alone.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/bootstrap.sh

BUILD_DIR=${SLUICE_BUILD_DIR:-build}
JOBS=${SLUICE_JOBS:-$(nproc)}
cmake_args=(-S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${SLUICE_BUILD_TYPE:-RelWithDebInfo})
if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  cmake_args+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi
cmake "${cmake_args[@]}" "$@"
cmake --build "$BUILD_DIR" -j "$JOBS"
