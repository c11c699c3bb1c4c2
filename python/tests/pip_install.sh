#!/usr/bin/env bash
# `pip install --no-build-isolation .` into a fresh venv with --system-site-packages, as the
# README shows it, then the README's one-liner from outside the source tree. The extension
# built by CMake is packaged as it is (MOECOMM_EXTENSION), so this checks the packaging in
# seconds; setup.py's CMake build is the same target `make build` compiles.
# Usage: pip_install.sh PYTHON SOURCE_DIR WORK_DIR EXTENSION
set -euo pipefail
python=$1 source=$2 work=$3 extension=$4
rm -rf "$work" && mkdir -p "$work"
"$python" -m venv --system-site-packages "$work/venv"
cd "$source"
MOECOMM_EXTENSION="$extension" MOECOMM_PIP_BUILD_DIR="$work/staging" \
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$work/venv/bin/pip" install -q --no-index --no-build-isolation .
cd "$work"
out=$(env -u PYTHONPATH -u MOECOMM_DATA_DIR "$work/venv/bin/python" -c \
  "import moecomm; print(moecomm.plan().recommended)")
echo "recommended: $out"
test -n "$out"
# The installed package reads the presets it carries, not the source tree's.
env -u PYTHONPATH -u MOECOMM_DATA_DIR "$work/venv/bin/python" -c "
import os, moecomm
data = os.environ['MOECOMM_DATA_DIR']
assert data.startswith('$work/venv'), data
assert 'netmoe-a800-4x8' in moecomm.presets('clusters')
"
# The torch executor is part of the installed package.
env -u PYTHONPATH -u MOECOMM_DATA_DIR "$work/venv/bin/python" -c "
import moecomm.torch
assert moecomm.torch.MoELayer.__module__ == 'moecomm.torch.layer'
"
