#!/usr/bin/env bash
# The GPU smoke check of moecomm.torch, run by hand on a machine with one CUDA GPU (CI never
# runs it: CI has no GPU). From the repository root:
#   bash scripts/gpu-carry.sh        # on a Debian machine with the build dependencies: fills .gpu/
#   OUT=<folder> bash scripts/gpu-check.sh [--device cuda|cpu] [--jobs N]
# Steps, each reported and the next run even when one fails:
#   1. versions: nvidia-smi, python3, torch, pybind11, the compiler, CMake;
#   2. builds moecomm._moecomm for that python3 with -DMOECOMM_PYTHON_ONLY=ON, against .gpu/
#      when it is there (headers, CMake configs, pkg-config files and shared libraries), else
#      against the system's;
#   3. python/tests/gpu_smoke.py: every case of the torch tests (each strategy of MoELayer,
#      and SampleMovingMoE) on 4 processes sharing the GPU (MoELayer needs ep > 1), with gloo
#      on CUDA tensors and with NCCL, against the same case with gloo on CPU (outputs and
#      gradients to 1e-5); collectives given tensors off the GPU are reported; then the
#      layer's forward+backward time against a plain one-process PyTorch MoE.
# $OUT receives gpu-check.log (everything printed), build.log and gpu-smoke.json.
# --device cpu runs the same steps without a GPU (the smoke check then compares gloo on CPU
# with itself, in two processes), to try the script out anywhere.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
device=cuda
jobs=$(nproc)
while (($#)); do
  case $1 in
    --device) device=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    *) echo "gpu-check: unknown argument $1 (--device cuda|cpu, --jobs N)" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-$root/build-gpu-check/out}
mkdir -p "$OUT"
build=${MOECOMM_GPU_BUILD:-$root/build-gpu-check/cmake}
exec > >(tee "$OUT/gpu-check.log") 2>&1
tee_pid=$!
export PYTHONUNBUFFERED=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
py=${PYTHON:-$(command -v python3)}  # PYTHON: another interpreter (Debian's /usr/bin/python3)
start=$SECONDS
failed=()
step() { echo; echo "=== [$((SECONDS - start))s] $*"; }

step "1. versions (device $device)"
if [[ $device == cuda ]]; then nvidia-smi || echo "nvidia-smi failed"; fi
uname -m
$py - <<'EOF' || failed+=("versions")
import sys, sysconfig, os
print("python", sys.version.split()[0], sys.executable)
inc = sysconfig.get_paths()["include"]
print("Python.h:", os.path.exists(os.path.join(inc, "Python.h")), inc)
import numpy; print("numpy", numpy.__version__)
import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
                    "available", torch.cuda.is_available(),
                    torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
import torch.distributed as dist
print("nccl", dist.is_nccl_available(), "gloo", dist.is_gloo_available(),
      torch.cuda.nccl.version() if torch.cuda.is_available() else "")
try:
    import pybind11; print("pybind11", pybind11.__version__, pybind11.get_cmake_dir())
except ImportError as e:
    print("pybind11 missing:", e)
EOF
c++ --version | head -1
cmake --version | head -1
command -v ninja >/dev/null && echo "ninja $(ninja --version)"

step "2. build moecomm._moecomm ($jobs jobs) in $build"
args=(-S "$root" -B "$build" -DMOECOMM_PYTHON_ONLY=ON -DCMAKE_BUILD_TYPE=Release
      -DPython3_EXECUTABLE="$py" -DCMAKE_POLICY_VERSION_MINIMUM=3.5
      -DCMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF)  # no LTO: pybind11's is a serial link
command -v ninja >/dev/null && [[ ! -f $build/Makefile ]] && args+=(-G Ninja)
if pbdir=$($py -c 'import pybind11; print(pybind11.get_cmake_dir())' 2>/dev/null); then
  args+=(-Dpybind11_DIR="$pbdir")
fi
gpu=$root/.gpu
if [[ -d $gpu ]]; then
  lib=$gpu/usr/lib/x86_64-linux-gnu
  echo "using the carried libraries in $gpu"
  export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PKG_CONFIG_SYSROOT_DIR=$gpu PKG_CONFIG_LIBDIR=$lib/pkgconfig
  args+=(-Dnlohmann_json_DIR="$gpu/usr/share/cmake/nlohmann_json"
         -DNLopt_DIR="$lib/cmake/nlopt_cxx"
         -DLEMON_INCLUDE_DIR="$gpu/usr/include" -DLEMON_LIBRARY="$lib/liblemon.a"
         -DPKG_CONFIG_EXECUTABLE="$gpu/bin/pkg-config")
fi
built=0
if cmake "${args[@]}" >"$OUT/build.log" 2>&1 &&
   cmake --build "$build" --target moecomm_python -j "$jobs" >>"$OUT/build.log" 2>&1; then
  built=1
  ls -la "$build"/python/moecomm/_moecomm*.so
else
  failed+=("build")
  echo "BUILD FAILED; the end of build.log:"
  tail -40 "$OUT/build.log"
fi
echo "build step: $((SECONDS - start))s since start"

step "3. smoke check of moecomm.torch on $device"
# At most 400 s, and the whole script within GPU_CHECK_SECONDS (570: a 600 s run limit).
limit=$((${GPU_CHECK_SECONDS:-570} - (SECONDS - start)))
limit=$((limit > 400 ? 400 : limit < 60 ? 60 : limit))
if ((built)); then
  echo "time limit ${limit}s"
  PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH} MOECOMM_DATA_DIR=$root/data \
    timeout "$limit" $py "$root/python/tests/gpu_smoke.py" --device "$device" \
      --json "$OUT/gpu-smoke.json" ||
    failed+=("smoke (exit $?)")
else
  echo "skipped: the extension did not build"
fi

step "done in $((SECONDS - start))s; failed steps: ${failed[*]:-none}"
status=$((${#failed[@]} > 0))
exec >&- 2>&-  # tee sees the end of its input and writes the log out
wait "$tee_pid" 2>/dev/null
exit "$status"
