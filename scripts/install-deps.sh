#!/usr/bin/env bash
# Installs the Debian packages moecomm builds, tests and runs its examples with, only those
# that are missing. `install-deps.sh --list` prints them, one a line, and installs nothing
# (tests/deps/check_python_imports.py checks the suite's imports against that list).
set -euo pipefail
PACKAGES=(build-essential cmake make pkg-config nlohmann-json3-dev libcli11-dev
          libgtest-dev libgmock-dev libbenchmark-dev libnlopt-dev libnlopt-cxx-dev
          liblemon-dev coinor-libcbc-dev openmpi-bin libopenmpi-dev libopenblas-dev
          iproute2  # iproute2: `moecomm testbed` (ip, tc)
          librsvg2-bin  # rsvg-convert: tests render `moecomm sim --svg` to PNG
          # `make fuzz` and `make test-sanitize`: clang++, libFuzzer and clang's ASan, UBSan,
          # LSan and TSan runtimes (libclang_rt.*).
          clang libclang-rt-14-dev
          # The Python package (python/): bindings, its tests, `pip install .` into a venv.
          python3-dev pybind11-dev python3-pybind11 python3-numpy python3-pytest
          python3-setuptools python3-venv python3-pip
          # moecomm.torch (the torch executor), its tests and examples/train_torch.py.
          python3-torch)
if [ "${1:-}" = "--list" ]; then
  printf '%s\n' "${PACKAGES[@]}"
  exit 0
fi
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
