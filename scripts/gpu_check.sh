#!/usr/bin/env bash
# gpumem on a GPU machine: builds a release tree for the GPU (sm_90) from scratch, or updates one, and runs the
# checks chosen by the flags. For a fresh Ubuntu 24.04 machine with nvcc, cmake, ninja, GoogleTest, Google
# Benchmark, compute-sanitizer and python3 (numpy, pytest, pybind11, CuPy, PyTorch, Numba); no network, no apt.
#
#   bash scripts/gpu_check.sh [FLAGS...] [-- CMAKE_ARGS...]
#
#   (no flag)     what to run before calling a GPU change done: --tests --memcheck --frameworks --demo
#   --tests       ctest's tests labelled gpu (the whole GoogleTest binary on the cuda backend, the Thrust
#                 tests, the small spill demos), `pip install ./python` from scratch into a temporary folder
#                 (then imported and used on the GPU), and the Python suite on the GPU without the framework
#                 tests
#   --memcheck    compute-sanitizer memcheck with leak checking of the C++ test binaries (the death tests left
#                 out: under the sanitizer their child runs the whole suite again), and memcheck (no leak
#                 check) of the Python suite without the framework tests
#   --frameworks  CuPy, PyTorch and Numba end to end: the framework tests of the Python suite
#                 (test_allocators.py, test_foreign_streams.py, test_torch_gpu_*.py: gpumem as PyTorch's
#                 allocator with its statistics, streams, CUDA graphs and history); fails when one of the three is missing,
#                 instead of skipping
#   --demo        `gpumem info`, `gpumem demo`, and the full-size spill demo (12 GiB of unified buffers under an
#                 8 GiB budget, pinned then pageable host copies)
#   --bench       every benchmark, through scripts/bench.sh on this build: bench.json (the input of
#                 scripts/performance_page.py) and bench.log
#   --vmm         the VMM pool's comparison: memcheck of its tests (unless --memcheck runs them all), `gpumem
#                 replay` of the PyTorch logs on pool and vmm with pieces of 1/N of the pool for each N in
#                 GPUMEM_VMM_DIVISORS (default "64 48 0"), recorded in bench.json, and the time of every
#                 growth in one replay (debug log)
#   --all         every flag above
#   --quick       with --bench: 3 repetitions instead of 5 (sized for one call of a time-limited GPU machine)
#   --only LIST   with --bench: only these runs of scripts/bench.sh (alloc,adaptors,transfer,plain,vmm,
#                 cli_bench,replay,replay_warm,replay_threads,python,ipc), so that the benchmarks can be split over calls; performance_page.py
#                 merges the bench.json files of several calls
#   --out DIR     where the logs, bench.json and summary.txt go (default: $OUT, else /tmp/gpumem-out); at most
#                 8 files, flat names
#   --build DIR   the build tree (default build/gpu); a call that finds it built only updates it, so the flags
#                 can be split over several calls on one machine where one command's time is limited (e.g.
#                 --tests --memcheck, then --frameworks --demo, then --bench --quick, then --vmm)
#
# Every step has a time limit, so that a hang cannot spend the machine's time. A summary table ends the output (and
# summary.txt); the exit status is non-zero when any step failed or a tool is missing. The host-backend
# tests are CI's. Warnings are not errors here (a newer compiler must not cost a GPU run); CI enforces
# them.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2

out=${OUT:-/tmp/gpumem-out}
build=build/gpu
groups=()
quick=0
bench_only=""
cmake_args=()
while (($#)); do
  case $1 in
    --tests | --memcheck | --frameworks | --demo | --bench | --vmm) groups+=("${1#--}") ;;
    --all) groups+=(tests memcheck frameworks demo bench vmm) ;;
    --quick) quick=1 ;;
    --only) shift; bench_only=${1:?--only needs a list} ;;
    --out) shift; out=${1:?--out needs a folder} ;;
    --build) shift; build=${1:?--build needs a folder} ;;
    --) shift; cmake_args=("$@"); break ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
((${#groups[@]})) || groups=(tests memcheck frameworks demo)
want() { [[ " ${groups[*]} " == *" $1 "* ]]; }

mkdir -p "$out"
out=$(cd "$out" && pwd)
jobs=$(nproc 2>/dev/null || echo 4)
unset GPUMEM_BACKEND   # auto: cuda when a device is present
shopt -s nullglob
framework_tests=(python/tests/test_allocators.py python/tests/test_foreign_streams.py python/tests/test_torch_gpu_*.py)
shopt -u nullglob
ignore_frameworks=()
for f in "${framework_tests[@]}"; do ignore_frameworks+=("--ignore=$f"); done

step_names=() step_results=() step_seconds=() step_logs=()
failed=0

# run_step NAME LOG CMD...: runs CMD, appending its output to $out/LOG and to the terminal; records the result.
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
# fail_step NAME LOG WHY: a step that could not run.
fail_step() {
  echo "$1: $3" | tee -a "$out/$2"
  step_names+=("$1") step_seconds+=(0) step_logs+=("$2") step_results+=("FAIL($3)"); failed=1
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
# memcheck CMD...: CMD under compute-sanitizer. CUDA API errors are not memcheck errors (--report-api-errors
# no): the out-of-memory tests make cudaMalloc fail on purpose, and gpumem checks every CUDA call's result
# itself (a failure is a cuda_error, which the tests catch or fail on).
memcheck=("$sanitizer" --tool memcheck --report-api-errors no --error-exitcode 1)
# to_file FILE CMD...: CMD's standard output into FILE, then shown (its standard error as it comes).
to_file() {
  local file=$1; shift
  "$@" >"$file"
  local rc=$?
  cat "$file"
  return "$rc"
}

for log in build.log tests.log memcheck.log demo.log vmm.log; do : >"$out/$log"; done
{
  echo "date: $(date -u +%FT%TZ)  host: $(uname -srm)  cores: $jobs  checks: ${groups[*]}"
  [[ -r /etc/os-release ]] && grep PRETTY_NAME /etc/os-release
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  cmake --version | head -1; ninja --version | sed 's/^/ninja /'; c++ --version | head -1
  if command -v nvcc >/dev/null; then nvcc --version | tail -1; else /usr/local/cuda/bin/nvcc --version 2>&1 | tail -1; fi
  echo "compute-sanitizer: ${sanitizer:-not found}"
  echo "nvidia-smi: ${nvsmi:-not found}"
} 2>&1 | tee -a "$out/build.log"
if [[ -n $nvsmi ]]; then run_step nvidia-smi build.log "$nvsmi" -L; else fail_step nvidia-smi build.log missing; fi

build_ok=1
run_step configure build.log cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DGPUMEM_BUILD_TESTS=ON -DGPUMEM_BUILD_CLI=ON -DGPUMEM_BUILD_PYTHON=ON \
  -DGPUMEM_BUILD_BENCHMARKS=ON -DGPUMEM_WARNINGS_AS_ERRORS=OFF "${cmake_args[@]}" || build_ok=0
((build_ok)) && { run_step build build.log timeout 500 cmake --build "$build" --parallel "$jobs" || build_ok=0; }
python=$(sed -n 's/^Python3_EXECUTABLE:FILEPATH=//p' "$build/CMakeCache.txt" 2>/dev/null)
python=${python:-python3}
# Dask and Distributed, where scripts/carry_dask_for_gpu.sh put them (carried with .deps/): the Dask tests run
# instead of skipping.
python_path=$build/python
[[ -d .deps/python ]] && python_path+=:$PWD/.deps/python
pytest=(env PYTHONPATH="$python_path" PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 PYTHONDONTWRITEBYTECODE=1 "$python" -m pytest
        -q -p no:cacheprovider -rs)

if ((build_ok)) && want tests; then
  run_step ctest tests.log timeout 400 ctest --timeout 300 --test-dir "$build" --output-on-failure \
    --parallel "$jobs" -L gpu -E '^gpu[.]pytest$'
  site=$(mktemp -d)
  run_step "pip install" tests.log timeout 300 env GPUMEM_WHEEL_BUILD_DIR="$PWD/build/wheel-gpu" GPUMEM_JOBS="$jobs" \
    "$python" -m pip install --no-deps --no-index --target "$site" ./python
  run_step "pip import" tests.log env PYTHONPATH="$site" GPUMEM_BACKEND=cuda "$python" -c \
    "import gpumem; p = gpumem.zeros(1 << 20); gpumem.free(p); print('installed:', gpumem.__file__, gpumem.cuda.get_backend())"
  run_step pytest tests.log timeout 560 env GPUMEM_PYTEST_REQUIRE_GPU=1 "${pytest[@]}" python/tests \
    "${ignore_frameworks[@]}"
fi

if ((build_ok)) && want memcheck; then
  if [[ -z $sanitizer ]]; then
    fail_step memcheck memcheck.log "compute-sanitizer missing"
  else
    run_step "memcheck C++" memcheck.log timeout 400 env GPUMEM_BACKEND=cuda "${memcheck[@]}" --leak-check full \
      "$build/tests/gpumem_tests" --gtest_filter='-*_crash.*'
    if [[ -x $build/tests/gpumem_thrust_tests ]]; then
      run_step "memcheck thrust" memcheck.log timeout 300 env GPUMEM_BACKEND=cuda "${memcheck[@]}" --leak-check full \
        "$build/tests/gpumem_thrust_tests"
    fi
    # Memory errors only: the interpreter exits without freeing module-level objects (and the default
    # pools), so a leak check of the process reports what it kept, not what gpumem lost. Leaks are checked
    # by the suite itself (conftest.py: no gpumem.alloc memory outlives it) and by the C++ memcheck above.
    run_step "memcheck pytest" memcheck.log timeout 400 env GPUMEM_BACKEND=cuda "${memcheck[@]}" \
      --leak-check no "${pytest[@]}" python/tests "${ignore_frameworks[@]}" --ignore=python/tests/test_packaging.py
  fi
fi

if ((build_ok)) && want frameworks; then
  if run_step "import cupy torch numba" tests.log "$python" -c \
    "import cupy, torch, numba; print('cupy', cupy.__version__, 'torch', torch.__version__, 'numba', numba.__version__)"; then
    run_step "framework tests" tests.log timeout 560 env GPUMEM_PYTEST_REQUIRE_GPU=1 "${pytest[@]}" \
      "${framework_tests[@]}"
  fi
fi

if ((build_ok)) && want demo; then
  run_step "gpumem info" demo.log timeout 60 env GPUMEM_BACKEND=cuda "$build/cli/gpumem" info
  run_step "gpumem demo" demo.log timeout 120 env GPUMEM_BACKEND=cuda "$build/cli/gpumem" demo
  # Spilling at full size: 12 GiB of unified buffers under an 8 GiB budget, pinned then pageable host copies.
  run_step "spill pinned" demo.log timeout 240 env GPUMEM_BACKEND=cuda "$build/tests/spill_demo" 8 12 256 3 pinned
  run_step "spill pageable" demo.log timeout 240 env GPUMEM_BACKEND=cuda "$build/tests/spill_demo" 8 12 256 3 pageable
fi

if ((build_ok)) && want bench; then
  bench_args=(--no-build --build "$build" --out "$out")
  ((quick)) && bench_args+=(--quick)
  [[ -n $bench_only ]] && bench_args+=(--only "$bench_only")
  # bench.sh writes bench.log itself; its own output is not logged twice.
  start=$SECONDS
  printf '\n==== bench: bash scripts/bench.sh %s\n' "${bench_args[*]}"
  bash scripts/bench.sh "${bench_args[@]}"
  rc=$?
  step_names+=(bench) step_seconds+=($((SECONDS - start))) step_logs+=(bench.log)
  if ((rc == 0)); then step_results+=(PASS); else step_results+=("FAIL($rc)"); failed=1; fi
fi

if ((build_ok)) && want vmm; then
  if ! want memcheck; then
    if [[ -n $sanitizer ]]; then
      run_step "memcheck vmm" vmm.log timeout 300 env GPUMEM_BACKEND=cuda "${memcheck[@]}" --leak-check full \
        "$build/tests/gpumem_tests" --gtest_filter='*vmm*:*virtual_heap*:-*_crash.*'
    else
      fail_step "memcheck vmm" vmm.log "compute-sanitizer missing"
    fi
  fi
  logs=(data/logs/pytorch_resnet50_train.csv.gz data/logs/pytorch_gpt_train.csv.gz
        data/logs/pytorch_unet_train.csv.gz data/logs/pytorch_llm_generate.csv.gz)
  # Five runs per resource in one process, the resources taking turns: the quotient vmm / pool is taken
  # within one call.
  for divisor in ${GPUMEM_VMM_DIVISORS:-64 48 0}; do
    csv=$(mktemp)
    args=(replay --csv --repeat 5 --resource 'pool,vmm' --mapping-divisor "$divisor" "${logs[@]}")
    if run_step "replay divisor $divisor" vmm.log to_file "$csv" timeout 500 env GPUMEM_BACKEND=cuda \
      "$build/cli/gpumem" "${args[@]}"; then
      python3 scripts/bench_record.py "$out/bench.json" "$csv" --name "vmm_divisor_$divisor" --kind csv \
        --backend cuda --device "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" \
        --command "gpumem ${args[*]}" 2>&1 | tee -a "$out/vmm.log" || failed=1
    fi
    rm -f "$csv"
  done
  # Where a growth's time goes: every growth of one vmm replay, from the debug log.
  growth=$(mktemp)
  run_step "growth log" vmm.log timeout 300 env GPUMEM_BACKEND=cuda GPUMEM_LOG_LEVEL=debug \
    GPUMEM_DEBUG_LOG_FILE="$growth" "$build/cli/gpumem" replay --resource vmm data/logs/pytorch_resnet50_train.csv.gz
  awk '/grew by/ { n++; for (i = 1; i <= NF; i++) if ($i == "us;") t += $(i - 1) } END { printf "growths %d, total %.1f ms\n", n, t / 1000 }' \
    "$growth" | tee -a "$out/vmm.log"
  rm -f "$growth"
fi
((build_ok)) || { step_names+=("every step after the build") step_seconds+=(0) step_logs+=(-) step_results+=(SKIPPED); }

for log in build.log tests.log memcheck.log demo.log vmm.log; do
  [[ -s $out/$log ]] || rm -f "$out/$log"
done
{
  printf '\n==== gpu_check summary (%s; checks: %s)\n' "$(date -u +%FT%TZ)" "${groups[*]}"
  printf '%-26s %-22s %8s  %s\n' step result seconds log
  for i in "${!step_names[@]}"; do
    printf '%-26s %-22s %8s  %s\n' "${step_names[$i]}" "${step_results[$i]}" "${step_seconds[$i]}" "${step_logs[$i]}"
  done
  [[ -f $out/tests.log ]] && grep -E 'tests passed|tests failed' "$out/tests.log" | tail -1 | sed 's/^/ctest: /'
  [[ -f $out/memcheck.log ]] && grep -E 'ERROR SUMMARY' "$out/memcheck.log" | sed 's/^/memcheck: /'
  if ((failed)); then echo "RESULT: FAILED"; else echo "RESULT: PASSED"; fi
  echo "logs: $out"
} | tee "$out/summary.txt"
exit "$failed"
