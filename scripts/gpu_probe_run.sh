#!/usr/bin/env bash
# Investigation run on the GPU machine (no tests): build the CLI and the Python module (release, sm_90),
# then the probes for issue 6 (where a plain alloc+free pair's time goes, C++ and Python) and issue 7
# (whether the VMM driver calls run in parallel; the vmm replay at several mapping sizes). Output: $OUT/probe.log.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${OUT:-/tmp/gpumem-out}; mkdir -p "$out"; log=$out/probe.log
build=build/gpu
python=/opt/torch/.venv/bin/python3; [[ -x $python ]] || python=python3
unset GPUMEM_BACKEND
run() { printf '\n==== %s\n' "$*" >>"$log"; "$@" >>"$log" 2>&1; echo "rc=$? $*" >>"$log"; }
run cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DGPUMEM_BUILD_TESTS=OFF -DGPUMEM_BUILD_CLI=ON -DGPUMEM_BUILD_PYTHON=ON -DGPUMEM_WARNINGS_AS_ERRORS=OFF -DPython3_EXECUTABLE="$python"
run cmake --build "$build" --parallel "$(nproc)"
run nvidia-smi -L
run bash -c "nvcc -O2 -std=c++17 scripts/probes/vmm_parallel.cpp -lcuda -o /tmp/vmm_parallel && /tmp/vmm_parallel"
lib=$(ls $build/libgpumem.a 2>/dev/null || ls $build/libgpumem.so* | head -1)
run bash -c "g++ -O2 -std=c++20 -DGPUMEM_STATIC_DEFINE -Iinclude -I/usr/local/cuda/include scripts/probes/plain_costs.cpp $lib -L/usr/local/cuda/lib64 -lcudart_static -lz -ldl -lrt -lpthread -o /tmp/plain_costs && /tmp/plain_costs && /tmp/plain_costs"
run env PYTHONPATH="$build/python" GPUMEM_BACKEND=cuda "$python" benchmarks/python/bench_python_alloc.py --quick
run which perf
if command -v perf >/dev/null; then
  run env PYTHONPATH="$build/python" GPUMEM_BACKEND=cuda perf record -g -o /tmp/py.perf "$python" -c "
import gpumem; from gpumem import mr
mr.set_current_device_resource(mr.PoolMemoryResource(mr.CudaMemoryResource()))
a, f = gpumem.alloc, gpumem.free
for _ in range(3000000): f(a(256))"
  perf report -i /tmp/py.perf --no-children --percent-limit 1 --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -40 >>"$log"
fi
logs=(data/logs/pytorch_resnet50_train.csv.gz data/logs/pytorch_gpt_train.csv.gz data/logs/pytorch_unet_train.csv.gz
      data/logs/pytorch_llm_generate.csv.gz)
for m in 32 64 128 1048576; do
  run env GPUMEM_BACKEND=cuda "$build/cli/gpumem" replay --csv --resource vmm --mapping-mib "$m" "${logs[@]}"
done
run env GPUMEM_BACKEND=cuda "$build/cli/gpumem" replay --csv --resource pool,vmm "${logs[@]}"
grep -E "rc=|threads|ns|vmm|pool" "$log" | tail -80
