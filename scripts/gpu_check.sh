#!/usr/bin/env bash
# The one script for the GPU machine (Ubuntu 24.04; cmake, ninja, nvcc, GoogleTest, Google Benchmark and
# compute-sanitizer preinstalled; no network; run as root). Needs no apt.
#
#   bash scripts/gpu_check.sh [extra cmake configure args...]
#
# Steps: configure + build a release tree in build/gpu with every core (sm_90); nvidia-smi -L; the ctest
# tests labelled gpu (gpu.all: the whole GoogleTest binary on the cuda backend; the Thrust tests); the gtest
# binaries (gpumem_tests, gpumem_thrust_tests) under compute-sanitizer memcheck with leak checking on the
# cuda backend; `gpumem info`, `gpumem demo` and the full-size spill demo (examples/spill_demo, pinned and
# pageable) on the GPU; the Python package: `pip install ./python` from scratch into a temporary target
# (then imported and used on the GPU), its whole pytest suite on the GPU, the suite without the framework
# tests under compute-sanitizer memcheck, and the Python allocation benchmark
# (benchmarks/python/bench_python_alloc.py: gpumem against CuPy and PyTorch). Logs go to
# "${OUT:-/tmp/gpumem-out}" (8 files, flat names); a summary table ends the output. Exits non-zero if any
# step failed.
#
# GPUMEM_GPU_STEPS=build,ctest,memcheck,demo,python (the default: all) chooses the steps, so that a session
# can split them over calls of the device tool (each call is limited to 10 minutes; a call that finds the
# machine warm finds build/gpu there). `ctest` runs the tests labelled gpu but the Python suite (gpu.all:
# the whole GoogleTest binary on the GPU; the Thrust tests); `python` installs the package with pip, runs the
# whole pytest suite on the GPU (CuPy, PyTorch and Numba included: python/tests/test_foreign_streams.py), its
# memcheck, and the Python benchmark. The host-backend tests are CI's.
# GPUMEM_SKIP_CXX_MEMCHECK=1 skips the memcheck of the C++ test binaries (reported as SKIPPED).
#
# Warnings are not errors here (a newer compiler must not cost a GPU session); CI enforces them.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

out=${OUT:-/tmp/gpumem-out}
mkdir -p "$out"
build=build/gpu
jobs=$(nproc 2>/dev/null || echo 4)
unset GPUMEM_BACKEND   # auto: cuda when a device is present

step_names=() step_results=() step_seconds=() step_logs=()
failed=0
steps=",${GPUMEM_GPU_STEPS:-build,ctest,memcheck,demo,python},"
want() { [[ $steps == *",$1,"* ]]; }

# run_step NAME LOG CMD...: runs CMD, appending its output to $out/LOG (and to the terminal), records the
# result. A step after a failed build is recorded as skipped.
run_step() {
  local name=$1 log=$2; shift 2
  local start=$SECONDS rc
  printf '\n==== %s: %s\n' "$name" "$*" | tee -a "$out/$log"
  "$@" 2>&1 | tee -a "$out/$log"
  rc=${PIPESTATUS[0]}
  step_names+=("$name") step_seconds+=($((SECONDS - start))) step_logs+=("$log")
  if ((rc == 0)); then step_results+=(PASS); else step_results+=("FAIL($rc)"); failed=1; fi
  return "$rc"
}
skip_step() {
  step_names+=("$1") step_seconds+=(0) step_logs+=("-") step_results+=(SKIPPED)
}

find_tool() {  # find_tool NAME [FALLBACK...]: prints the path of the first one found
  local name=$1; shift
  command -v "$name" 2>/dev/null && return 0
  local f; for f in "$@"; do [[ -x $f ]] && { echo "$f"; return 0; }; done
  return 1
}
sanitizer=$(find_tool compute-sanitizer /usr/local/cuda/bin/compute-sanitizer \
  /usr/local/cuda/compute-sanitizer/compute-sanitizer) || sanitizer=""
nvsmi=$(find_tool nvidia-smi /usr/local/nvidia/bin/nvidia-smi /usr/bin/nvidia-smi) || nvsmi=""

: >"$out/env.log"; : >"$out/build.log"; : >"$out/ctest.log"; : >"$out/memcheck.log"
: >"$out/demo.log"; : >"$out/python.log"
{
  echo "date: $(date -u +%FT%TZ)  host: $(uname -srm)  cores: $jobs"
  [[ -r /etc/os-release ]] && grep PRETTY_NAME /etc/os-release
  cmake --version | head -1; ninja --version | sed 's/^/ninja /'; c++ --version | head -1
  if command -v nvcc >/dev/null; then nvcc --version | tail -1; else /usr/local/cuda/bin/nvcc --version 2>&1 | tail -1; fi
  echo "compute-sanitizer: ${sanitizer:-not found}"
  echo "nvidia-smi: ${nvsmi:-not found}"
} 2>&1 | tee -a "$out/env.log"

build_ok=1
if want build || [[ ! -f $build/CMakeCache.txt ]]; then
  run_step configure build.log cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DGPUMEM_BUILD_TESTS=ON -DGPUMEM_BUILD_CLI=ON -DGPUMEM_BUILD_PYTHON=ON \
    -DGPUMEM_WARNINGS_AS_ERRORS=OFF "$@" || build_ok=0
fi
if ((build_ok)); then  # always: a no-op when the tree is up to date
  run_step build build.log timeout 400 cmake --build "$build" --parallel "$jobs" || build_ok=0
else
  skip_step build
fi

if [[ -n $nvsmi ]]; then run_step nvidia-smi env.log "$nvsmi" -L; else
  echo "nvidia-smi not found" | tee -a "$out/env.log"; step_names+=(nvidia-smi) step_seconds+=(0)
  step_logs+=(env.log) step_results+=("FAIL(missing)"); failed=1
fi

if ((build_ok)); then
  # Every step has a time limit: a hang must not spend the whole (scarce) GPU session.
  want ctest && run_step ctest ctest.log timeout 300 ctest --timeout 240 --test-dir "$build" --output-on-failure \
    --parallel "$jobs" -L gpu -E '^gpu[.]pytest$'
  if ! want memcheck; then
    :
  elif [[ ${GPUMEM_SKIP_CXX_MEMCHECK:-0} == 1 ]]; then
    skip_step memcheck   # asked for (a session that changed no C++ device code); say so in the notes
  elif [[ -n $sanitizer ]]; then
    # Every test runs under memcheck; none is excluded. CUDA API errors are not reported as memcheck
    # errors (--report-api-errors no): the out-of-memory tests make cudaMalloc fail on purpose, and gpumem
    # checks every CUDA call's result itself (a failure is a cuda_error, which the tests catch or fail on).
    # The death tests are left out: they re-run the test binary in a child, which the sanitizer also
    # instruments, and under it the child runs the whole suite again.
    run_step memcheck memcheck.log timeout 300 env GPUMEM_BACKEND=cuda "$sanitizer" --tool memcheck --leak-check full \
      --report-api-errors no --error-exitcode 1 "$build/tests/gpumem_tests" --gtest_filter='-*_crash.*'
    if [[ -x $build/tests/gpumem_thrust_tests ]]; then
      run_step "memcheck thrust" memcheck.log timeout 300 env GPUMEM_BACKEND=cuda "$sanitizer" --tool memcheck \
        --leak-check full --report-api-errors no --error-exitcode 1 "$build/tests/gpumem_thrust_tests"
    fi
  else
    echo "compute-sanitizer not found" | tee -a "$out/memcheck.log"; step_names+=(memcheck)
    step_seconds+=(0) step_logs+=(memcheck.log) step_results+=("FAIL(missing)"); failed=1
  fi
  if want demo; then
    run_step "gpumem info" demo.log timeout 60 env GPUMEM_BACKEND=cuda "$build/cli/gpumem" info
    run_step "gpumem demo" demo.log timeout 120 env GPUMEM_BACKEND=cuda "$build/cli/gpumem" demo
    # Spilling at full size: 12 GiB of unified buffers under an 8 GiB budget, pinned then pageable host copies.
    run_step "spill demo" demo.log timeout 240 env GPUMEM_BACKEND=cuda "$build/tests/spill_demo" 8 12 256 3 pinned
    run_step "spill pageable" demo.log timeout 240 env GPUMEM_BACKEND=cuda "$build/tests/spill_demo" 8 12 256 3 pageable
  fi
fi

# The Python package, with the interpreter the build chose (the one that has pybind11, CuPy, PyTorch).
if ((build_ok)) && want python; then
  python=$(sed -n 's/^Python3_EXECUTABLE:FILEPATH=//p' "$build/CMakeCache.txt")
  site=$(mktemp -d)
  run_step "pip install" python.log timeout 300 env GPUMEM_WHEEL_BUILD_DIR="$PWD/build/wheel-gpu" GPUMEM_JOBS="$jobs" \
    "$python" -m pip install --no-deps --no-index --target "$site" ./python
  run_step "pip import" python.log env PYTHONPATH="$site" GPUMEM_BACKEND=cuda "$python" -c \
    "import gpumem; p = gpumem.zeros(1 << 20); gpumem.free(p); print('installed:', gpumem.__file__, gpumem.cuda.get_backend())"
  run_step pytest python.log timeout 560 env PYTHONPATH="$build/python" GPUMEM_PYTEST_REQUIRE_GPU=1 \
    PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 PYTHONDONTWRITEBYTECODE=1 "$python" -m pytest -q -p no:cacheprovider -rs \
    python/tests
  if [[ -n $sanitizer ]]; then
    # Memory errors only: the interpreter exits without freeing module-level objects (and the default
    # pools), so a leak check of the process reports what it kept, not what gpumem lost. Leaks are checked
    # by the suite itself (conftest.py: no gpumem.alloc memory outlives it) and by the C++ memcheck above.
    run_step "memcheck pytest" python.log timeout 300 env PYTHONPATH="$build/python" GPUMEM_BACKEND=cuda \
      PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 PYTHONDONTWRITEBYTECODE=1 "$sanitizer" --tool memcheck --leak-check no \
      --report-api-errors no --error-exitcode 1 "$python" -m pytest -q -p no:cacheprovider python/tests \
      --ignore=python/tests/test_allocators.py --ignore=python/tests/test_packaging.py \
      --ignore=python/tests/test_foreign_streams.py
  fi
  run_step "python bench" python.log timeout 300 env PYTHONPATH="$build/python" GPUMEM_BACKEND=cuda "$python" \
    benchmarks/python/bench_python_alloc.py --json "$out/python-bench.json"
fi
((build_ok)) || skip_step "every step after the build"

{
  printf '\n==== gpu_check summary (%s)\n' "$(date -u +%FT%TZ)"
  printf '%-14s %-12s %8s  %s\n' step result seconds log
  for i in "${!step_names[@]}"; do
    printf '%-14s %-12s %8s  %s\n' "${step_names[$i]}" "${step_results[$i]}" "${step_seconds[$i]}" "${step_logs[$i]}"
  done
  tests_line=$(grep -E 'tests passed|tests failed' "$out/ctest.log" | tail -1)
  [[ -n $tests_line ]] && echo "ctest: $tests_line"
  grep -E 'ERROR SUMMARY' "$out/memcheck.log" | sed 's/^/memcheck: /'

  if ((failed)); then echo "RESULT: FAILED"; else echo "RESULT: PASSED"; fi
  echo "logs: $out"
} | tee "$out/summary.txt"
exit "$failed"
