#!/usr/bin/env bash
# Issue 7 on the GPU machine: build (release, sm_90), the whole ctest suite, compute-sanitizer memcheck of the
# VMM tests on the cuda backend, and the fragmentation figures of docs/PERFORMANCE.md: `gpumem replay` of
# the four PyTorch logs in data/logs against pool, vmm and cuda_async (five runs each, taking turns; medians
# in the docs), then pool and vmm with pieces that grow with the pool (--mapping-divisor, GPUMEM_VMM_DIVISORS,
# default "48 64"); the VMM driver-call probe (scripts/probes/vmm_costs.cpp) and the time of every growth in
# one replay (debug log). Logs go to "${OUT:-/tmp/gpumem-out}" (ctest.log, memcheck.log, replay.csv,
# divisors.csv, build.log, probe.log, growth.log); a summary ends the output. Slab sizes, fixed piece sizes and
# growth from several threads were measured by earlier versions of this script (docs/PERFORMANCE.md).
#
#   bash scripts/gpu_vmm_check.sh          (GPUMEM_SKIP_CTEST=1: leave out the ctest suite)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${OUT:-/tmp/gpumem-out}; mkdir -p "$out"
build=build/gpu
unset GPUMEM_BACKEND
summary=()
step() {  # step NAME LOG CMD...
  local name=$1 log=$2 start=$SECONDS; shift 2
  printf '\n==== %s: %s\n' "$name" "$*" >>"$out/$log"
  "$@" >>"$out/$log" 2>&1
  local rc=$?
  summary+=("$(printf '%-22s %-8s %4ss' "$name" "$([[ $rc == 0 ]] && echo PASS || echo "FAIL($rc)")" $((SECONDS - start)))")
  return $rc
}
step configure build.log cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DGPUMEM_BUILD_TESTS=ON -DGPUMEM_BUILD_CLI=ON -DGPUMEM_BUILD_PYTHON=ON -DGPUMEM_WARNINGS_AS_ERRORS=OFF
step build build.log cmake --build "$build" --parallel "$(nproc)" || { tail -40 "$out/build.log"; exit 1; }
nvidia-smi -L >>"$out/build.log" 2>&1
if [[ ${GPUMEM_SKIP_CTEST:-0} != 1 ]]; then  # gpu_check.sh runs the same suite: skip it when both run
  step ctest ctest.log ctest --test-dir "$build" --output-on-failure -j 4 --timeout 600
  grep -E "tests passed|tests failed|Failed|\(Failed\)|\(SKIP" "$out/ctest.log" | tail -15
fi
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
step memcheck-vmm memcheck.log env GPUMEM_BACKEND=cuda "$san" --tool memcheck --leak-check full --error-exitcode 1 \
  --report-api-errors no "$build/tests/gpumem_tests" --gtest_filter='*vmm*:*virtual_heap*'
tail -5 "$out/memcheck.log"
logs=(data/logs/pytorch_resnet50_train.csv.gz data/logs/pytorch_gpt_train.csv.gz data/logs/pytorch_unet_train.csv.gz
      data/logs/pytorch_llm_generate.csv.gz)
# Five runs per resource in one process, the resources taking turns (ns/op: the median; --repeat).
step replay replay.csv env GPUMEM_BACKEND=cuda "$build/cli/gpumem" replay --csv --repeat 5 --resource pool,vmm,cuda_async "${logs[@]}"
# Pieces that grow with the pool (vmm_pool_options::mapping_divisor), against the pool in the same process.
for divisor in ${GPUMEM_VMM_DIVISORS:-48 64}; do
  step "replay divisor $divisor" divisors.csv env GPUMEM_BACKEND=cuda "$build/cli/gpumem" replay --csv --repeat 5 \
    --resource pool,vmm --mapping-divisor "$divisor" "${logs[@]}"
done
# Where a growth's time goes: the driver calls alone (probe), and every growth of one vmm replay (debug log).
step probe probe.log bash -c 'nvcc -O2 -std=c++17 scripts/probes/vmm_costs.cpp -lcuda -o /tmp/vmm_costs && /tmp/vmm_costs'
step "growth log" probe.log env GPUMEM_BACKEND=cuda GPUMEM_LOG_LEVEL=debug GPUMEM_DEBUG_LOG_FILE="$out/growth.log" \
  "$build/cli/gpumem" replay --resource vmm data/logs/pytorch_resnet50_train.csv.gz
awk '/grew by/ { n++; for (i = 1; i <= NF; i++) if ($i == "us;") t += $(i - 1) } END { printf "growths %d, total %.1f ms\n", n, t / 1000 }' \
  "$out/growth.log" | tee -a "$out/probe.log"
grep -v "^====" "$out/probe.log" | grep -E "MiB|growths" | tail -8
cat "$out"/replay.csv "$out"/divisors.csv | grep -v "^====" | cut -d, -f1-7,13-15
printf '%s\n' "${summary[@]}"
