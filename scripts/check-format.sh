#!/usr/bin/env bash
# check-format.sh - fails if any C++/CUDA source differs from .clang-format (clang-format 14).
# `scripts/check-format.sh --fix` rewrites the files instead.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files -- '*.h' '*.cc' '*.cu' '*.cuh')
if [[ ${#files[@]} -eq 0 ]]; then
  echo "no sources"; exit 0
fi
if [[ "${1:-}" == "--fix" ]]; then
  clang-format -i "${files[@]}"
  exit 0
fi
clang-format --dry-run -Werror "${files[@]}"
echo "format ok: ${#files[@]} files"
