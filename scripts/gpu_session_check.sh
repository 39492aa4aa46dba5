#!/usr/bin/env bash
# One GPU-machine call for issues 6 and 7 together: scripts/gpu_vmm_check.sh (build, ctest, VMM memcheck,
# replays, probes), then memcheck of the plain-API and pool tests, the plain-API cost probe, the Python
# allocation benchmark twice, and 30 repeats of the spill-manager stress tests. Everything under $OUT/session
# is tarred into $OUT/session.tgz (the device tool returns at most 8 files).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
final=${OUT:-/tmp/gpumem-out}; work=/tmp/session; rm -rf "$work"; mkdir -p "$work"
export OUT=$work
bash scripts/gpu_vmm_check.sh > "$work/vmm_check.txt" 2>&1
build=build/gpu
python=/opt/torch/.venv/bin/python3; [[ -x $python ]] || python=python3
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
{
  echo "==== memcheck plain+pool"
  GPUMEM_BACKEND=cuda "$san" --tool memcheck --leak-check full --error-exitcode 1 "$build/tests/gpumem_tests" \
    --gtest_filter='*plain*:*pool_memory_resource*:*thread_cache*' 2>&1 | tail -4
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
