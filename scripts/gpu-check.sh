#!/usr/bin/env bash
# The GPU smoke check of moecomm.torch, run by hand on a machine with one CUDA GPU (CI never
# runs it: CI has no GPU). From the repository root:
#   bash scripts/gpu-carry.sh        # optional, on a Debian machine with the build dependencies
#   OUT=<folder> bash scripts/gpu-check.sh [--device auto|cuda|cpu] [--jobs N]
# Steps, each reported and the next run even when one fails:
#   1. versions: nvidia-smi, python3, torch, pybind11, the compiler, CMake; which device runs;
#   2. builds moecomm._moecomm for that python3 with -DMOECOMM_PYTHON_ONLY=ON: it needs a
#      compiler, CMake, pybind11 and nlohmann-json; LEMON, CBC and NLopt are used where found
#      (in .gpu/ when it is there, else the system's), and what needs a missing one is
#      skipped by the checks below, with the reason;
#   3. python/tests/gpu_smoke.py: every case of the torch tests (each strategy of MoELayer,
#      and SampleMovingMoE) on 4 processes sharing the GPU with gloo on CUDA tensors, and
#      through collectives.py's NCCL-only ReduceScatter, against the same case with gloo on
#      CPU (outputs and gradients to 1e-5), with an audit of collectives given tensors off
#      the GPU; MoELayer's forward+backward time against a plain one-process MoE; then NCCL on
#      one rank (NCCL refuses two ranks on one GPU): its collectives, moecomm.torch's
#      collectives and profile_cluster;
#   4. bench/bench_torch_layer.py at a small size on 4 processes, CUDA events: over NCCL with a
#      GPU per rank when there are 4, else over gloo on CUDA tensors with the ranks sharing
#      the GPU (a sitecustomize turns its "nccl" process group into gloo);
#   5. a summary: each step ok, failed or skipped (and why), with its key numbers.
# Device: auto (the default) takes cuda when nvidia-smi lists a GPU and torch sees one, else
# cpu; cpu runs steps 1-4 on CPU (the smoke check then compares gloo on CPU with itself, the
# bench runs smaller) and the summary names the GPU steps it skipped and why. --device cuda on
# a machine without a usable GPU fails those steps instead.
# $OUT receives gpu-check.log (everything printed), build.log, gpu-smoke.json and bench.json.
# Expected on one H100: under 1 min to build on 16 cores, 3-4 min of smoke, 35 s of bench.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
device=auto
jobs=$(nproc)
while (($#)); do
  case $1 in
    --device) device=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    *) echo "gpu-check: unknown argument $1 (--device auto|cuda|cpu, --jobs N)" >&2; exit 2 ;;
  esac
done
case $device in auto | cuda | cpu) ;; *) echo "gpu-check: --device auto, cuda or cpu" >&2; exit 2 ;; esac
OUT=${OUT:-$root/build-gpu-check/out}
mkdir -p "$OUT"
build=${MOECOMM_GPU_BUILD:-$root/build-gpu-check/cmake}
exec > >(tee "$OUT/gpu-check.log") 2>&1
tee_pid=$!
export PYTHONUNBUFFERED=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
py=${PYTHON:-$(command -v python3)}  # PYTHON: another interpreter (Debian's /usr/bin/python3)
start=$SECONDS
summary=()  # "status|step|detail", printed at the end
failed=0
note() {  # note STATUS STEP DETAIL
  summary+=("$1|$2|$3")
  [[ $1 == failed ]] && failed=1
  return 0
}
step() { echo; echo "=== [$((SECONDS - start))s] $*"; }

step "1. versions and device (asked: $device)"
gpus=0
why_no_gpu=""
if command -v nvidia-smi >/dev/null; then
  nvidia-smi || echo "nvidia-smi failed"
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  ((gpus > 0)) || why_no_gpu="nvidia-smi lists no GPU"
else
  why_no_gpu="no nvidia-smi"
fi
uname -m
torch_cuda=$($py - <<'EOF'
import sys, sysconfig, os
out = sys.stderr
print("python", sys.version.split()[0], sys.executable, file=out)
inc = sysconfig.get_paths()["include"]
print("Python.h:", os.path.exists(os.path.join(inc, "Python.h")), inc, file=out)
import numpy; print("numpy", numpy.__version__, file=out)
import torch
cuda = torch.cuda.is_available()
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", cuda,
      torch.cuda.get_device_name(0) if cuda else "", file=out)
import torch.distributed as dist
print("nccl", dist.is_nccl_available(), "gloo", dist.is_gloo_available(),
      torch.cuda.nccl.version() if cuda else "", file=out)
try:
    import pybind11; print("pybind11", pybind11.__version__, pybind11.get_cmake_dir(), file=out)
except ImportError as e:
    print("pybind11 missing:", e, file=out)
print(1 if cuda else 0)
EOF
) || { note failed "versions" "python3, numpy or torch did not import"; torch_cuda=0; }
c++ --version | head -1
cmake --version | head -1
command -v ninja >/dev/null && echo "ninja $(ninja --version)"
if [[ -z $why_no_gpu && $torch_cuda != 1 ]]; then
  why_no_gpu="torch.cuda.is_available() is False (torch $($py -c 'import torch; print(torch.__version__)' 2>/dev/null))"
fi
if [[ $device == auto ]]; then
  if [[ -z $why_no_gpu ]]; then device=cuda; else device=cpu; fi
fi
if [[ $device == cpu ]]; then
  cpu_reason=${why_no_gpu:+no CUDA device: $why_no_gpu}
  cpu_reason=${cpu_reason:---device cpu}
  echo "running on CPU ($cpu_reason)"
elif [[ -n $why_no_gpu ]]; then
  echo "--device cuda, but $why_no_gpu"
fi
note ok "versions" "device $device$( ((gpus > 0)) && echo ", $gpus GPU(s)")"

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
build_start=$SECONDS
if cmake "${args[@]}" >"$OUT/build.log" 2>&1 &&
   cmake --build "$build" --target moecomm_python -j "$jobs" >>"$OUT/build.log" 2>&1; then
  built=1
  ls -la "$build"/python/moecomm/_moecomm*.so
  without=$(sed -n 's/.*moecomm: built without \([A-Z]*\):.*/\1/p' "$OUT/build.log" | sort -u |
            tr '\n' ' ')
  note ok "build" "$((SECONDS - build_start)) s${without:+; without ${without% }: what needs them is skipped}"
else
  echo "BUILD FAILED; the end of build.log:"
  tail -40 "$OUT/build.log"
  note failed "build" "see build.log"
fi

step "3. smoke check of moecomm.torch on $device"
# At most 400 s, and the whole script within GPU_CHECK_SECONDS (570: a 600 s run limit),
# less 90 s kept for the bench.
limit=$((${GPU_CHECK_SECONDS:-570} - 90 - (SECONDS - start)))
limit=$((limit > 400 ? 400 : limit < 60 ? 60 : limit))
env_py=(env "PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH}" "MOECOMM_DATA_DIR=$root/data")
smoke_json=$OUT/gpu-smoke.json
rm -f "$smoke_json"
if ((built)); then
  echo "time limit ${limit}s"
  smoke_args=(--device "$device" --json "$smoke_json")
  [[ $device == cpu ]] && smoke_args+=(--cpu-reason "$cpu_reason")
  "${env_py[@]}" timeout "$limit" $py "$root/python/tests/gpu_smoke.py" "${smoke_args[@]}"
  rc=$?
  ((rc == 124)) && note failed "smoke" "killed after ${limit} s"
  ((rc != 0 && rc != 124)) && [[ ! -s $smoke_json ]] && note failed "smoke" "exit $rc, no summary"
else
  note skipped "smoke" "the extension did not build"
fi
# The smoke check's own steps come from its JSON.
if [[ -s $smoke_json ]]; then
  while IFS= read -r line; do summary+=("$line"); done < <($py - "$smoke_json" <<'EOF'
import json, sys
for s in json.load(open(sys.argv[1])).get("steps", []):
    print(f"{s['status']}|smoke: {s['step']}|{s['detail']}")
EOF
  )
fi

step "4. bench/bench_torch_layer.py on $device"
bench_json=$OUT/bench.json
rm -f "$bench_json"
bench_env=()
if [[ $device == cuda ]]; then
  bench_args=(--device cuda --experts 8,64 --strategies "baseline,fsmoe:chunks=4,grad_partitions=4,lina"
              --hidden 512 --ffn 1024 --tokens 2048 --steps 10 --warmup 3)
  if ((gpus >= 4)); then
    bench_how="NCCL, a GPU per rank"
  else
    # NCCL refuses two ranks of one communicator on one GPU ("Duplicate GPU detected"): the
    # bench's ranks share this GPU over gloo, which stages CUDA tensors through the host.
    bench_how="gloo on CUDA tensors, 4 ranks sharing the GPU"
    site=$(mktemp -d)
    cat >"$site/sitecustomize.py" <<'EOF'
# gpu-check.sh: bench_torch_layer.py's ranks share one GPU, where NCCL refuses them.
import torch.distributed as _dist

_init = _dist.init_process_group


def _gloo(backend=None, *args, **kwargs):
    return _init("gloo" if backend == "nccl" else backend, *args, **kwargs)


_dist.init_process_group = _gloo
EOF
    bench_env=("PYTHONPATH=$site:$build/python${PYTHONPATH:+:$PYTHONPATH}")
  fi
else
  bench_args=(--device cpu --experts 8 --strategies "baseline,fsmoe:chunks=4,grad_partitions=4"
              --hidden 64 --ffn 128 --tokens 256 --steps 3 --warmup 1)
  bench_how="gloo on CPU, 4 ranks"
fi
if ((built)); then
  left=$((${GPU_CHECK_SECONDS:-570} - (SECONDS - start)))
  left=$((left < 60 ? 60 : left))
  echo "$bench_how; time limit ${left}s: ${bench_args[*]}"
  bench_start=$SECONDS
  if "${env_py[@]}" "${bench_env[@]}" timeout "$left" $py "$root/bench/bench_torch_layer.py" \
       "${bench_args[@]}" --json "$bench_json"; then
    detail=$($py - "$bench_json" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))["results"]
print("; ".join(f"E={r.get('experts')} {r.get('strategy')}: {r.get('moe_ms', 0):.1f} ms vs "
                f"plain {r.get('plain_ms', 0):.1f} ms, diff {max(r.get('max_diff_out', 0), r.get('max_diff_grad', 0)):.0e}"
                for r in rows))
EOF
    )
    note ok "bench ($bench_how)" "$((SECONDS - bench_start)) s; ${detail:-no rows}"
  else
    note failed "bench ($bench_how)" "exit status $?, after $((SECONDS - bench_start)) s"
  fi
else
  note skipped "bench" "the extension did not build"
fi
[[ -n ${site:-} ]] && rm -rf "$site"

step "5. summary ($((SECONDS - start)) s, device $device)"
skipped=()
for entry in "${summary[@]}"; do
  IFS='|' read -r status name detail <<<"$entry"
  printf '%-9s %s: %s\n' "$status" "$name" "$detail"
  [[ $status == failed ]] && failed=1
  [[ $status == skipped ]] && skipped+=("${name#smoke: }")
done
if [[ $device == cpu ]]; then
  echo "skipped: gloo on CUDA tensors, the NCCL-only ReduceScatter on CUDA, NCCL on one rank," \
       "the bench on CUDA ($cpu_reason)"
elif ((${#skipped[@]})); then
  joined=$(printf '%s, ' "${skipped[@]}")
  echo "skipped: ${joined%, }"
fi
echo "gpu-check: $( ((failed)) && echo FAILED || echo ok) in $((SECONDS - start)) s"
exec >&- 2>&-  # tee sees the end of its input and writes the log out
wait "$tee_pid" 2>/dev/null
exit "$failed"
