#!/usr/bin/env bash
# build.sh - configure and build sluice into build/ (or $SLUICE_BUILD_DIR); all targets, or those
# named in $SLUICE_BUILD_TARGETS.
# Installs missing Debian packages first (scripts/bootstrap.sh). CUDA code is built when the CUDA
# toolkit is present (/usr/local/cuda or nvcc on PATH); otherwise the CPU backend alone.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/bootstrap.sh

BUILD_DIR=${SLUICE_BUILD_DIR:-build}
JOBS=${SLUICE_JOBS:-$(nproc)}
cmake_args=(-S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${SLUICE_BUILD_TYPE:-RelWithDebInfo})
# ccache (bootstrap installs it) makes a rebuild, or a second clone on the same machine, cost
# only what changed: paths are hashed relative to the checkout, so clones in other folders share
# the cache. Objects are the compiler's either way.
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
  cmake_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache
               -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  cmake_args+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi
# CUDA code is built wherever nvcc is, GPU or not, so that it keeps compiling and linking; the
# caller may say otherwise (scripts/run.sh: SLUICE_ENABLE_CUDA=OFF where no GPU is usable).
if [[ -n ${SLUICE_ENABLE_CUDA:-} ]]; then
  cmake_args+=(-DSLUICE_ENABLE_CUDA="$SLUICE_ENABLE_CUDA")
elif command -v nvcc >/dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  cmake_args+=(-DSLUICE_ENABLE_CUDA=ON)
fi
cmake "${cmake_args[@]}" "$@"
# SLUICE_BUILD_TARGETS (space-separated CMake targets; scripts/run.sh sets the serving ones): build
# only those. Unset: every target, tests included.
targets=()
for target in ${SLUICE_BUILD_TARGETS:-}; do targets+=(--target "$target"); done
cmake --build "$BUILD_DIR" -j "$JOBS" "${targets[@]}"
