#!/usr/bin/env bash
# collect-runtime-libs.sh OUT_DIR BINARY... - copies the shared libraries the binaries need into
# OUT_DIR, except the C runtime that every Debian base image already has (glibc, libstdc++,
# libgcc), the CUDA driver (mounted into the container by the NVIDIA runtime) and the CUDA
# toolkit's own runtime libraries (cudart, cuBLAS/cuBLASLt: NVIDIA's runtime base image has them,
# and cuBLASLt alone is half a gigabyte). Used by the
# build stage of the Dockerfiles so the runtime stage carries only what the binaries load.
set -euo pipefail
out=$1
shift
mkdir -p "$out"
for binary in "$@"; do
  ldd "$binary" | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|libstdc++.so.*|libgcc_s.so.*|libcuda.so.*|libcudart.so.*|libcublas.so.*|libcublasLt.so.*)
      ;;
    *)
      cp -L "$lib" "$out/"
      ;;
  esac
done
echo "collected $(ls "$out" | wc -l) libraries into $out"
