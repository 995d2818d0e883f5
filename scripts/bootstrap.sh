#!/usr/bin/env bash
# bootstrap.sh - install exactly the Debian 12 packages that building and testing sluice needs.
#
# Idempotent: a package that is already installed is not touched, and when everything is present
# the script installs nothing and asks no registry. Needs root (or sudo) only when something is
# missing. The CUDA toolkit is not a Debian package here: CMake finds /usr/local/cuda when it is
# present and builds the CPU backend alone when it is not.
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake pkg-config git clang-format
  # RPC and protocol
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  # command lines, JSON input files of the client
  libcli11-dev nlohmann-json3-dev
  # tests
  libgtest-dev libgmock-dev
  # the independent KServe v2 client used by the interoperability test (Python gRPC)
  python3 python3-grpcio python3-protobuf
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "[bootstrap] all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "[bootstrap] installing: ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "[bootstrap] done"
