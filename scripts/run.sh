#!/usr/bin/env bash
# run.sh - the README's run command: install what is missing, build, and start sluice-server on
# the bundled model repository (gRPC on port 8001, HTTP/REST on 8000; the CPU backend where no GPU is usable).
# Extra arguments go to sluice-server (see `build/server/sluice-server --help`).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/build.sh >&2
BUILD_DIR=${SLUICE_BUILD_DIR:-build}
exec "$BUILD_DIR/server/sluice-server" --model-repository "$PWD/models" "$@"
