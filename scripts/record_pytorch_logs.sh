#!/usr/bin/env bash
# Records the allocation logs of benchmarks/traces/pytorch_programs.py on the GPU machine (the real
# logs of data/logs/): builds the Python package (release, sm_90) in build/gpu-py, then runs every program twice, once on
# gpumem's pluggable allocator with the logging adaptor (writes $OUT/<program>.csv.gz) and once on PyTorch's
# own caching allocator (its peaks). One JSON line per run goes to $OUT/programs.jsonl.
#
#   bash scripts/record_pytorch_logs.sh [program...]     (default: the three of data/logs/; the held-out
#                                                         programs of data/held_out/ are named:
#                                                         moe_train vit_train llm_beam)
#   SEED=1 bash scripts/record_pytorch_logs.sh           (other random choices: logs <program>_seed1.csv.gz, runs
#                                                         that data/logs/, recorded with seed 0, does not hold)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${OUT:-/tmp/gpumem-out}; mkdir -p "$out"
build=build/gpu-py
unset GPUMEM_BACKEND
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DGPUMEM_BUILD_TESTS=OFF -DGPUMEM_BUILD_CLI=ON -DGPUMEM_BUILD_PYTHON=ON -DGPUMEM_PYTHON_STUBS=OFF \
  -DGPUMEM_WARNINGS_AS_ERRORS=OFF >"$out/record-build.log" 2>&1 || { tail -30 "$out/record-build.log"; exit 1; }
cmake --build "$build" --parallel "$(nproc)" >>"$out/record-build.log" 2>&1 || { tail -30 "$out/record-build.log"; exit 1; }
python=$(sed -n 's/^Python3_EXECUTABLE:FILEPATH=//p' "$build/CMakeCache.txt")
programs=("$@"); ((${#programs[@]})) || programs=(gpt_train llm_generate unet_train)
seed=${SEED:-0}
suffix=""; ((seed == 0)) || suffix=_seed$seed
failed=0
for p in "${programs[@]}"; do
  log=/tmp/$p$suffix.csv
  PYTHONUNBUFFERED=1 PYTHONPATH="$build/python" timeout 300 "$python" benchmarks/traces/pytorch_programs.py "$p" \
    --seed "$seed" --allocator gpumem --log "$log" | tee -a "$out/programs.jsonl" || failed=1
  [[ -s $log ]] && { wc -l "$log"; gzip -9 -c "$log" >"$out/$p$suffix.csv.gz"; }
  PYTHONUNBUFFERED=1 timeout 300 "$python" benchmarks/traces/pytorch_programs.py "$p" --seed "$seed" --allocator pytorch \
    | tee -a "$out/programs.jsonl" || failed=1
done
exit $failed
