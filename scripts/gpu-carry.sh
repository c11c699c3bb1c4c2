#!/usr/bin/env bash
# Copies into .gpu/ (git-ignored) the solver libraries of the Python extension from this Debian
# machine, for a GPU machine that has a compiler, CMake, Python, pybind11, nlohmann-json and
# torch but none of our other Debian packages (scripts/gpu-check.sh builds there against .gpu/
# when it is there). Optional: without .gpu/ the extension builds without LEMON, CBC and NLopt
# (CMakeLists.txt, MOECOMM_PYTHON_ONLY) and gpu-check.sh skips what needs them (FSMoE's
# planned cases, the ilp and lemon-* solvers); with it, everything runs:
#   headers     nlohmann-json (for an image without it), LEMON, COIN-OR (CBC and the libraries
#               under it), NLopt
#   CMake       the nlohmann_json and NLopt package configs (their paths are relative)
#   pkg-config  the .pc files of cbc and what it requires, and pkgconf itself
#   libraries   liblemon.a; libnlopt_cxx and CBC's shared libraries with their dependency
#               closure (ldd), less glibc, libstdc++ and libgcc_s, which the machine has.
# MPI and OpenBLAS are not carried: a python-only build never looks them up.
# The layout mirrors / (.gpu/usr/include, .gpu/usr/lib/x86_64-linux-gnu), so the .pc files work
# unchanged with PKG_CONFIG_SYSROOT_DIR=.gpu. BLAS and LAPACK are the reference ones (libblas3
# here, liblapack3 fetched with apt-get download): OpenBLAS alone would be 35 MiB.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/.gpu"
ml=/usr/lib/x86_64-linux-gnu
lib="$dest/usr/lib/x86_64-linux-gnu"

rm -rf "$dest"
mkdir -p "$dest/usr/include" "$lib/pkgconfig" "$lib/cmake" "$dest/usr/share/cmake" "$dest/bin"

# Headers.
cp -a /usr/include/nlohmann /usr/include/lemon /usr/include/coin "$dest/usr/include/"
cp -a /usr/include/nlopt.h /usr/include/nlopt.hpp "$dest/usr/include/"

# CMake package configs.
cp -a /usr/share/cmake/nlohmann_json "$dest/usr/share/cmake/"
cp -a "$ml/cmake/nlopt_cxx" "$lib/cmake/"
cp -a "$ml/liblemon.a" "$lib/"

# pkg-config: cbc and the modules it requires, transitively.
todo=(cbc)
declare -A seen=()
while ((${#todo[@]})); do
  m=${todo[0]}
  todo=("${todo[@]:1}")
  [[ -n ${seen[$m]:-} ]] && continue
  seen[$m]=1
  cp -a "$(pkg-config --variable=pcfiledir "$m")/$m.pc" "$lib/pkgconfig/"
  for r in $(pkg-config --print-requires --print-requires-private "$m" | awk '{print $1}'); do
    todo+=("$r")
  done
done
cp -a "$(readlink -f /usr/bin/pkg-config)" "$dest/bin/pkg-config"

# Copies a shared library's file as <real name> with its soname and .so links beside it.
# $1: the library file (any link to it), $2: the name to link with (libX.so), or "".
copy_so() {
  local real soname
  real=$(readlink -f "$1")
  soname=$(objdump -p "$real" | awk '/SONAME/ {print $2}')
  cp -f "$real" "$lib/"
  if [[ -n $soname && $soname != "$(basename "$real")" ]]; then
    ln -sf "$(basename "$real")" "$lib/$soname"
  fi
  if [[ -n ${2:-} && $2 != "$(basename "$real")" ]]; then ln -sf "$(basename "$real")" "$lib/$2"; fi
  return 0
}

# The libraries the link lines name (pkg-config's -l, NLopt's), glibc's own left out.
glibc='^(c|m|pthread|rt|dl|util|resolv)$'
for l in $(pkg-config --libs-only-l cbc | tr ' ' '\n' | sed -n 's/^-l//p') nlopt_cxx; do
  [[ $l =~ $glibc || $l == blas || $l == lapack ]] && continue
  copy_so "$ml/lib$l.so" "lib$l.so"
done
copy_so "$ml/libpkgconf.so.3" ""

# Reference BLAS (installed with the build dependencies) and LAPACK (its .deb, unpacked here).
copy_so "$ml/blas/libblas.so.3" libblas.so
tmp=$(mktemp -d)
chmod 755 "$tmp"  # apt-get download runs as _apt
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download -q liblapack3 >/dev/null && dpkg-deb -x liblapack3_*.deb x)
copy_so "$(ls "$tmp"/x/usr/lib/x86_64-linux-gnu/lapack/liblapack.so.3.*)" liblapack.so

# The dependency closure, resolved against .gpu first.
skip='^(linux-vdso|ld-linux|libc|libm|libpthread|librt|libdl|libutil|libresolv'
skip+='|libstdc\+\+|libgcc_s)\.so'
while :; do
  added=0
  for f in "$lib"/*.so* "$dest/bin/pkg-config"; do
    while read -r name path; do
      [[ $name =~ $skip || -e $lib/$name ]] && continue
      if [[ -z $path || $path == "not" ]]; then
        echo "gpu-carry: $f needs $name, which ldd does not find" >&2
        exit 1
      fi
      copy_so "$path" ""
      added=1
    done < <(LD_LIBRARY_PATH="$lib" ldd "$f" | awk '$2 == "=>" {print $1, $3}')
  done
  ((added)) || break
done

echo "gpu-carry: $(du -sh "$dest" | cut -f1) in $dest"
ls "$lib" | grep '\.so' | tr '\n' ' '
echo
