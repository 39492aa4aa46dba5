#!/usr/bin/env bash
# One GPU-machine call for issues 6 and 7 together: scripts/gpu_vmm_check.sh (build, ctest, VMM memcheck,
# replays, probes), then the plain-API cost probe, the Python allocation benchmark twice, memcheck of the
# whole C++ suite and of the Python suite, and 30 repeats of the spill-manager stress tests. Everything
# under $OUT/session is tarred into $OUT/session.tgz (the device tool returns at most 8 files).
# GPUMEM_SESSION_QUICK=1: build
# instead of gpu_vmm_check.sh, plus one replay of pool and vmm (five runs each, taking turns).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
final=${OUT:-/tmp/gpumem-out}; work=/tmp/session; rm -rf "$work"; mkdir -p "$work"
export OUT=$work
build=build/gpu
if [[ ${GPUMEM_SESSION_QUICK:-0} == 1 ]]; then  # build only, then the steps below and three more replays
  { cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPUMEM_BUILD_TESTS=ON \
      -DGPUMEM_BUILD_CLI=ON -DGPUMEM_BUILD_PYTHON=ON -DGPUMEM_WARNINGS_AS_ERRORS=OFF && cmake --build "$build" --parallel "$(nproc)"
    GPUMEM_BACKEND=cuda "$build/cli/gpumem" replay --csv --repeat 5 --resource pool,vmm data/logs/pytorch_*.csv.gz \
      > "$work/replay.csv"; } > "$work/vmm_check.txt" 2>&1
else
  bash scripts/gpu_vmm_check.sh > "$work/vmm_check.txt" 2>&1
fi
python=/opt/torch/.venv/bin/python3; [[ -x $python ]] || python=python3
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
{
  # API errors are not reported: the out-of-memory tests make CUDA calls fail on purpose (as in gpu_check.sh).
  echo "==== memcheck gpumem_tests"
  GPUMEM_BACKEND=cuda "$san" --tool memcheck --leak-check full --report-api-errors no --error-exitcode 1 \
    "$build/tests/gpumem_tests" > "$work/memcheck-all.log" 2>&1; echo "rc=$?"
  grep -E "ERROR SUMMARY|LEAK SUMMARY|tests ran|PASSED|FAILED" "$work/memcheck-all.log" | tail -5
  echo "==== memcheck pytest"
  PYTHONPATH="$build/python" GPUMEM_BACKEND=cuda PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 PYTHONDONTWRITEBYTECODE=1 "$san" \
    --tool memcheck --leak-check no --report-api-errors no --error-exitcode 1 "$python" -m pytest -q -p no:cacheprovider \
    python/tests --ignore=python/tests/test_allocators.py --ignore=python/tests/test_packaging.py \
    > "$work/memcheck-pytest.log" 2>&1; echo "rc=$?"
  tail -3 "$work/memcheck-pytest.log"
  echo "==== plain_costs"
  g++ -O2 -std=c++20 -DGPUMEM_STATIC_DEFINE -Iinclude -I/usr/local/cuda/include scripts/probes/plain_costs.cpp \
    "$build/libgpumem.a" -L/usr/local/cuda/lib64 -lcudart_static -lz -ldl -lrt -lpthread -o /tmp/plain_costs && /tmp/plain_costs
  for i in 1 2; do
    echo "==== python bench $i"
    PYTHONPATH="$build/python" GPUMEM_BACKEND=cuda "$python" benchmarks/python/bench_python_alloc.py --json "$work/python-bench-$i.json"
  done
  echo "==== spill stress x30"
  GPUMEM_BACKEND=cuda "$build/tests/gpumem_tests" --gtest_filter='SpillManagerStress.*' --gtest_repeat=30 2>&1 | grep -E "FAILED|Failure|exception" | sort | uniq -c | head
  echo "spill stress done"
} > "$work/extra.txt" 2>&1
tar czf "$final/session.tgz" -C /tmp session
tail -25 "$work/vmm_check.txt"; cat "$work/extra.txt" | grep -v "^\[" | tail -60
