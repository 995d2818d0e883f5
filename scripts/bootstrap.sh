#!/usr/bin/env bash
# bootstrap.sh - install exactly the Debian 12 packages that building and testing sluice needs.
# `bootstrap.sh --build-only` installs only what building needs (the container images use it);
# `bootstrap.sh --sanitizers` adds clang and its sanitizer runtimes (scripts/sanitize.sh).
#
# Idempotent: a package that is already installed is not touched, and when everything is present
# the script installs nothing and asks no registry. Needs root (or sudo) only when something is
# missing. The CUDA toolkit is not a Debian package here: CMake finds /usr/local/cuda when it is
# present and builds the CPU backend alone when it is not.
set -euo pipefail

# What building sluice needs (also what the container images' build stage installs).
BUILD_PACKAGES=(
  # toolchain
  build-essential cmake pkg-config git
  # compiler cache: rebuilds and second clones compile only what changed (build.sh)
  ccache
  # RPC and protocol
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  # command lines, JSON (client input files, safetensors headers)
  libcli11-dev nlohmann-json3-dev
  # metrics exporter
  prometheus-cpp-dev
  # the HTTP/REST front end: Boost.Beast/Asio (header-only), OpenSSL for its TLS, simdjson for
  # JSON tensors
  libboost1.81-dev libssl-dev libsimdjson-dev zlib1g-dev
  # the CPU backend's GEMMs (cblas_sgemm)
  libopenblas-dev
  # text/'s Unicode (character classes, NFD, lowercase): ICU
  libicu-dev
  # the servers' allocator, tcmalloc (CMake SLUICE_MALLOC; docs/operations.md)
  libgoogle-perftools-dev
)
# What the tests need on top.
TEST_PACKAGES=(
  # unit tests and the format check
  libgtest-dev libgmock-dev clang-format
  # the independent KServe v2 client used by the interoperability test (Python gRPC)
  python3 python3-grpcio python3-protobuf
  # the Prometheus server the metrics integration test scrapes with; curl for scripts/soak.sh
  prometheus curl
  # deployment tests: kustomize rendering (kubectl), YAML parsing, container images (podman,
  # set up by ../shared/tools/container-env.sh when present)
  kubectl python3-yaml
)

# What scripts/sanitize.sh needs on top: clang 14 and its ASan/UBSan/TSan runtimes.
SANITIZER_PACKAGES=(clang libclang-rt-14-dev)

PACKAGES=("${BUILD_PACKAGES[@]}")
if [[ "${1:-}" != "--build-only" ]]; then
  PACKAGES+=("${TEST_PACKAGES[@]}")
fi
if [[ "${1:-}" == "--sanitizers" ]]; then
  PACKAGES+=("${SANITIZER_PACKAGES[@]}")
fi

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
