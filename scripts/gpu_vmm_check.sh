#!/usr/bin/env bash
# Issue 7 on the GPU machine: build (release, sm_90), the whole ctest suite, compute-sanitizer memcheck of the
# VMM tests on the cuda backend, and the fragmentation figures of docs/PERFORMANCE.md: `gpumem replay` of
# the four PyTorch logs in data/logs against pool, vmm and cuda_async, three times (medians in the docs),
# plus vmm at 16 and 64 MiB slabs and with pieces of 64 and 128 MiB; the VMM driver-call probes
# (scripts/probes/vmm_costs.cpp, vmm_parallel.cpp) and the time of
# every growth in one replay (debug log). Logs go to "${OUT:-/tmp/gpumem-out}" (ctest.log, memcheck.log,
# replay-N.csv, slabs.csv, mappings.csv, build.log, probe.log, growth.log); a summary ends the output.
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
for i in 1 2 3; do
  step "replay $i" "replay-$i.csv" env GPUMEM_BACKEND=cuda "$build/cli/gpumem" replay --csv --resource pool,vmm,cuda_async "${logs[@]}"
done
for mib in 16 64; do
  step "replay slab $mib" slabs.csv env GPUMEM_BACKEND=cuda "$build/cli/gpumem" replay --csv --resource vmm --slab-mib "$mib" "${logs[@]}"
done
# Larger pieces of physical memory over 32 MiB slabs (vmm_pool_options::max_mapping_size), three runs each.
for i in 1 2 3; do
  for mib in 64 128; do
    step "replay pieces $mib/$i" mappings.csv env GPUMEM_BACKEND=cuda "$build/cli/gpumem" replay --csv --resource vmm \
      --mapping-mib "$mib" "${logs[@]}"
  done
done
# Where a growth's time goes: the driver calls alone (probe), and every growth of one vmm replay (debug log).
step probe probe.log bash -c 'nvcc -O2 -std=c++17 scripts/probes/vmm_costs.cpp -lcuda -o /tmp/vmm_costs && /tmp/vmm_costs'
step "probe threads" probe.log bash -c 'nvcc -O2 -std=c++17 scripts/probes/vmm_parallel.cpp -lcuda -o /tmp/vmm_parallel && /tmp/vmm_parallel'
step "growth log" probe.log env GPUMEM_BACKEND=cuda GPUMEM_LOG_LEVEL=debug GPUMEM_DEBUG_LOG_FILE="$out/growth.log" \
  "$build/cli/gpumem" replay --resource vmm data/logs/pytorch_resnet50_train.csv.gz
awk '/grew by/ { n++; for (i = 1; i <= NF; i++) if ($i == "us;") t += $(i - 1) } END { printf "growths %d, total %.1f ms\n", n, t / 1000 }' \
  "$out/growth.log" | tee -a "$out/probe.log"
grep -v "^====" "$out/probe.log" | grep -E "MiB|growths" | tail -8
cat "$out"/replay-1.csv
printf '%s\n' "${summary[@]}"
