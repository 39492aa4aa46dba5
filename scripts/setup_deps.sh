#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages that building and testing gpumem needs, and only the missing ones.
# Idempotent: when everything is present it says so and never touches apt (so it also works on machines
# with no network, such as the GPU machine). Run as root, or with sudo available.
#
#   bash scripts/setup_deps.sh            # C++ toolchain and test libraries
#   GPUMEM_DEPS_TESTS=1 bash scripts/setup_deps.sh    # also what only the tests need (Chromium, which
#                                                     # renders `gpumem report` pages in report.chromium)
#   GPUMEM_DEPS_PYTHON=1 bash scripts/setup_deps.sh   # also the Python package's build/test packages
#                                                     # (python3-dev, python3-pybind11, numpy, pytest,
#                                                     # dask and distributed)
#   GPUMEM_DEPS_EXTRA="valgrind" bash scripts/setup_deps.sh   # and any other packages
#
# A tool counts as present when it is found where builds look for it (a source install under /usr/local
# counts), or when dpkg says its package is installed. The CUDA toolkit is not a Debian package here:
# it must already be at /usr/local/cuda (or where CUDAToolkit_ROOT / nvcc on PATH says).
set -euo pipefail

say() { printf 'setup_deps: %s\n' "$*"; }

# Is a Debian package installed?
dpkg_has() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

# Does any of these paths exist?
any_exists() { local f; for f in "$@"; do [[ -e $f ]] && return 0; done; return 1; }

shopt -s nullglob
lib_dirs=(/usr/lib /usr/lib64 /usr/lib/*-linux-gnu /usr/local/lib /usr/local/lib64 /usr/local/lib/*-linux-gnu)
inc_dirs=(/usr/include /usr/local/include)

has_lib() {  # has_lib NAME: libNAME.a or libNAME.so in a standard directory
  local d; for d in "${lib_dirs[@]}"; do any_exists "$d/lib$1.a" "$d/lib$1.so" && return 0; done; return 1
}
has_header() {  # has_header PATH: PATH under a standard include directory
  local d; for d in "${inc_dirs[@]}"; do [[ -e $d/$1 ]] && return 0; done; return 1
}

# py_has MODULE: can python3 on PATH, or Debian's /usr/bin/python3, import MODULE?
py_has() {
  local py; for py in python3 /usr/bin/python3; do
    command -v "$py" >/dev/null 2>&1 && "$py" -c "import $1" >/dev/null 2>&1 && return 0
  done; return 1
}

# present PACKAGE: does the machine already provide what PACKAGE provides?
present() {
  case $1 in
    cmake)            command -v cmake >/dev/null ;;
    ninja-build)      command -v ninja >/dev/null ;;
    g++)              command -v g++ >/dev/null ;;
    libgtest-dev)     has_header gtest/gtest.h && has_lib gtest ;;
    libgmock-dev)     has_header gmock/gmock.h && has_lib gmock ;;
    googletest)       dpkg_has googletest || [[ -d /usr/src/googletest ]] || { has_header gtest/gtest.h && has_lib gtest; } ;;
    libbenchmark-dev) has_header benchmark/benchmark.h && has_lib benchmark ;;
    zlib1g-dev)       has_header zlib.h && has_lib z ;;
    libcli11-dev)     has_header CLI/CLI.hpp || [[ -e $(dirname "$0")/../.deps/cli11/include/CLI/CLI.hpp ]] ;;
    python3)          command -v python3 >/dev/null ;;
    chromium)         command -v chromium >/dev/null || command -v chromium-browser >/dev/null ;;
    python3-dev)      python3 -c 'import sysconfig,os,sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"],"Python.h")))' 2>/dev/null ;;
    python3-pip)      python3 -m pip --version >/dev/null 2>&1 ;;
    python3-venv)     python3 -c 'import venv, ensurepip' >/dev/null 2>&1 ;;
    python3-pybind11) py_has pybind11 ;;
    python3-numpy)    py_has numpy ;;
    python3-pytest)   py_has pytest ;;
    python3-dask)     py_has dask ;;
    python3-distributed) py_has distributed ;;
    *)                dpkg_has "$1" ;;
  esac || dpkg_has "$1"
}

# zlib1g-dev: gzip-compressed allocation logs. libcli11-dev: the `gpumem` command's options (a copy in .deps/,
# from scripts/vendor_cli11_for_gpu.sh, counts too).
packages=(cmake ninja-build g++ libgtest-dev libgmock-dev googletest libbenchmark-dev zlib1g-dev libcli11-dev)
if [[ ${GPUMEM_DEPS_TESTS:-0} == 1 ]]; then
  packages+=(python3 chromium)
fi
if [[ ${GPUMEM_DEPS_PYTHON:-0} == 1 ]]; then
  # The Python package (GPUMEM_BUILD_PYTHON): headers, pybind11, and what its tests use (Dask's distributed
  # for gpumem.dask's LocalCluster tests).
  packages+=(python3 python3-dev python3-pybind11 python3-numpy python3-pytest python3-dask python3-distributed)
fi
# GPUMEM_DEPS_EXTRA="pkg ...": more Debian packages that a caller needs (checked with dpkg).
read -r -a extra <<<"${GPUMEM_DEPS_EXTRA:-}"
packages+=("${extra[@]}")

missing=()
for p in "${packages[@]}"; do
  if present "$p"; then say "have $p"; else missing+=("$p"); fi
done

if ((${#missing[@]} == 0)); then
  say "all ${#packages[@]} packages present; apt not needed"
else
  say "missing: ${missing[*]}"
  if ! command -v apt-get >/dev/null; then
    say "error: apt-get is not available; install these by hand: ${missing[*]}" >&2
    exit 1
  fi
  sudo=()
  if [[ $(id -u) != 0 ]]; then
    if command -v sudo >/dev/null; then sudo=(sudo); else
      say "error: not root and no sudo; run as root: apt-get install -y ${missing[*]}" >&2
      exit 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  say "running: apt-get update"
  "${sudo[@]}" apt-get update -q
  say "running: apt-get install -y --no-install-recommends ${missing[*]}"
  "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The CUDA toolkit (headers and the static runtime) is needed to build even on machines with no GPU.
cuda_root=${CUDAToolkit_ROOT:-}
if [[ -z $cuda_root ]]; then
  if [[ -x /usr/local/cuda/bin/nvcc || -e /usr/local/cuda/include/cuda_runtime_api.h ]]; then
    cuda_root=/usr/local/cuda
  elif command -v nvcc >/dev/null; then
    cuda_root=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
  fi
fi
if [[ -n $cuda_root && -e $cuda_root/include/cuda_runtime_api.h ]]; then
  say "have CUDA toolkit at $cuda_root"
else
  say "error: no CUDA toolkit found (looked at \$CUDAToolkit_ROOT, /usr/local/cuda, nvcc on PATH)." >&2
  say "       gpumem builds against the CUDA 13 toolkit even where no GPU is present; install it first." >&2
  exit 1
fi
