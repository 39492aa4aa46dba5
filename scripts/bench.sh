#!/usr/bin/env bash
# Runs every benchmark of docs/benchmarks.md and records the results in one file, DIR/bench.json, from which
# `python3 scripts/performance_page.py DIR` writes docs/PERFORMANCE.md. Works on a GPU machine (cuda backend,
# chosen automatically; `bash scripts/gpu_check.sh --bench` runs this on its own build) and without a GPU
# (host backend: regression tracking only, never quoted as a result). Needs cmake, ninja, a C++20 compiler,
# Google Benchmark and python3 (standard library only). No network.
#
#   bash scripts/bench.sh [--out DIR] [--build DIR] [--no-build] [--quick] [--only LIST] [-- ARGS...]
#
#   --out DIR     where bench.json and bench.log go (default: $OUT, else build/bench)
#   --build DIR   the build tree (default build/bench-release: configured here, Release, benchmarks and CLI
#                 on); a tree that exists is reused as it is configured (gpu_check.sh passes build/gpu)
#   --no-build    run what the tree has, as it is (no configure, no build)
#   --quick       3 repetitions and 0.05 s per benchmark, 3 replays per log (sized for one call of a time-limited GPU machine);
#                 the default is 5 repetitions and 5 replays, medians
#   --only LIST   comma-separated runs, from alloc,adaptors,transfer,plain,vmm,cli_bench,replay,replay_warm,
#                 replay_threads,python,ipc,torch
#                 (default: all but torch; python and torch need a tree built with GPUMEM_BUILD_PYTHON=ON, else
#                 they are skipped; torch, PyTorch's allocators against gpumem's on two PyTorch programs, needs
#                 PyTorch and a GPU and takes about ten minutes: TORCH_BENCH_ARGS adds arguments to it)
#   -- ARGS       passed to every Google Benchmark executable (e.g. --benchmark_filter=^fixed)
#
# Environment: GPUMEM_BACKEND=host|cuda forces a backend; GPUMEM_BENCH_LOGS: the logs `gpumem replay` replays
# (default: the four PyTorch logs and the Thrust pipeline's log in data/logs, then the six held-out logs of
# data/held_out); GPUMEM_JOBS: build parallelism.
#
# Each run's output is checked and added to bench.json by scripts/bench_record.py, with the command that
# produced it. The allocation benchmark first runs --smoke over every resource, so that a broken resource
# stops the run in seconds. Exits non-zero when any run failed; the others are still recorded.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2

out=${OUT:-build/bench}
build=build/bench-release
quick=0
no_build=0
only=alloc,adaptors,transfer,plain,vmm,cli_bench,replay,replay_warm,replay_threads,python,ipc
extra=()
while (($#)); do
  case $1 in
    --out) shift; out=${1:?--out needs a folder} ;;
    --build) shift; build=${1:?--build needs a folder} ;;
    --quick) quick=1 ;;
    --no-build) no_build=1 ;;
    --only) shift; only=${1:?--only needs a list} ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
for run in ${only//,/ }; do
  case $run in
    alloc | adaptors | transfer | plain | vmm | cli_bench | replay | replay_warm | replay_threads | python | ipc | torch) ;;
    *) echo "bench.sh: unknown run '$run' in --only (known: alloc,adaptors,transfer,plain,vmm,cli_bench,replay,replay_warm,replay_threads,python,ipc,torch)" >&2
       exit 2 ;;
  esac
done
wants() { [[ ,$only, == *",$1,"* ]]; }

mkdir -p "$out"
out=$(cd "$out" && pwd)
bundle=$out/bench.json
log=$out/bench.log
jobs=${GPUMEM_JOBS:-$(nproc 2>/dev/null || echo 2)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=()

if ((quick)); then
  gb_flags=(--benchmark_repetitions=3 --benchmark_report_aggregates_only=true --min-time=0.05)
  repeat=3
else
  gb_flags=(--benchmark_repetitions=5 --benchmark_report_aggregates_only=true)
  repeat=5
fi
if [[ -n ${GPUMEM_BENCH_LOGS:-} ]]; then
  read -r -a logs <<<"$GPUMEM_BENCH_LOGS"
else
  logs=(data/logs/pytorch_resnet50_train.csv.gz data/logs/pytorch_gpt_train.csv.gz
        data/logs/pytorch_unet_train.csv.gz data/logs/pytorch_llm_generate.csv.gz data/logs/thrust_pipeline.csv.gz
        data/held_out/pytorch_gpt_train_seed1.csv.gz data/held_out/pytorch_unet_train_seed1.csv.gz
        data/held_out/pytorch_llm_generate_seed1.csv.gz data/held_out/pytorch_moe_train.csv.gz
        data/held_out/pytorch_vit_train.csv.gz data/held_out/pytorch_llm_beam.csv.gz)
fi

say() { printf '\n==== %s\n' "$*" | tee -a "$log"; }
record() {  # record NAME KIND INPUT COMMAND...: adds INPUT to the bundle
  local name=$1 kind=$2 input=$3; shift 3
  local machine=()  # the CLI's device 0 and backend, so that a run without Google Benchmark's context names them
  [[ -n $cli_device ]] && machine=(--device "$cli_device" --backend "$cli_backend")
  python3 scripts/bench_record.py "$bundle" "$input" --name "$name" --kind "$kind" --command "$*" "${machine[@]}" \
    2>&1 | tee -a "$log"
  return "${PIPESTATUS[0]}"
}
# gbench NAME EXE [ARGS...]: a Google Benchmark executable, its JSON recorded.
gbench() {
  local name=$1 args=("$build/benchmarks/$2" "${gb_flags[@]}" "${@:3}" "${extra[@]}")
  say "$name: ${args[*]}"
  timeout 3000 "${args[@]}" --benchmark_out="$tmp/$name.json" --benchmark_out_format=json 2>&1 | tee -a "$log"
  local rc=${PIPESTATUS[0]}
  [[ -s $tmp/$name.json ]] && { record "$name" google_benchmark "$tmp/$name.json" "${args[*]}" || rc=1; }
  ((rc == 0)) || failed+=("$name")
}
# cli NAME COMMAND...: a `gpumem` command whose CSV (standard output) is recorded.
cli() {
  local name=$1; shift
  say "$name: gpumem $*"
  timeout 3000 "$build/cli/gpumem" "$@" >"$tmp/$name.csv" 2> >(tee -a "$log" >&2)
  local rc=$?
  cat "$tmp/$name.csv" >>"$log"
  [[ -s $tmp/$name.csv ]] && { record "$name" csv "$tmp/$name.csv" "gpumem $*" || rc=1; }
  ((rc == 0)) || failed+=("$name")
}

start=$SECONDS
: >"$log"
if ((no_build)); then
  say "build: none asked for (--no-build): $build as it is"
else
  say "build ($build, $jobs jobs)"
  if [[ ! -f $build/CMakeCache.txt ]]; then
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPUMEM_BUILD_BENCHMARKS=ON -DGPUMEM_BUILD_CLI=ON \
      -DGPUMEM_BUILD_TESTS=OFF -DGPUMEM_WARNINGS_AS_ERRORS=OFF 2>&1 | tee -a "$log" | tail -3 ||
      { echo "bench.sh: configure failed ($log)" >&2; exit 1; }
  fi
  targets=(gpumem_bench_alloc gpumem_bench_adaptors gpumem_bench_transfer gpumem_bench_plain gpumem_bench_vmm gpumem_cli)
  timeout 1200 cmake --build "$build" --parallel "$jobs" --target "${targets[@]}" 2>&1 | tee -a "$log" | tail -2
  ((PIPESTATUS[0] == 0)) || { echo "bench.sh: build failed ($log)" >&2; exit 1; }
fi

# The machine as gpumem sees it: device 0 and the backend (`gpumem info`), for the runs that do not say.
cli_device=""
cli_backend=""
if [[ -x $build/cli/gpumem ]]; then
  info=$(timeout 60 "$build/cli/gpumem" info 2>/dev/null)
  cli_device=$(sed -n 's/^device 0: //p' <<<"$info" | head -n 1)
  cli_backend=$(sed -n 's/^backend: *//p' <<<"$info" | head -n 1)
fi

say "environment"
{
  echo "date: $(date -u +%FT%TZ)  host: $(uname -srm)  cores: $(nproc 2>/dev/null || echo ?)"
  [[ -r /etc/os-release ]] && grep PRETTY_NAME /etc/os-release
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "GPUMEM_BACKEND=${GPUMEM_BACKEND:-<auto>}"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  else
    echo "nvidia-smi: not found (host backend figures are not GPU figures)"
  fi
} 2>&1 | tee -a "$log"

if wants alloc; then
  say "alloc smoke run (every resource, every allocation verified)"
  resources=$("$build/benchmarks/gpumem_bench_alloc" --list | cut -d' ' -f1 | paste -sd, -)
  if timeout 300 "$build/benchmarks/gpumem_bench_alloc" --smoke --resource="$resources" >>"$log" 2>&1; then
    gbench alloc gpumem_bench_alloc
  else
    echo "smoke run failed: the allocation benchmark is not run ($log)" | tee -a "$log"
    failed+=(alloc)
  fi
fi
wants adaptors && gbench adaptors gpumem_bench_adaptors
wants transfer && gbench transfer gpumem_bench_transfer
wants plain && gbench plain gpumem_bench_plain
wants vmm && gbench vmm gpumem_bench_vmm
if wants cli_bench; then
  if ((quick)); then cli cli_bench bench --quick --repeat "$repeat" --csv; else cli cli_bench bench --repeat "$repeat" --csv; fi
fi
wants replay && cli replay replay --csv --repeat "$repeat" --resource pool,vmm,cuda_async "${logs[@]}"
# The steady state: each resource replays the log once untimed, then the timed replay on the same instance.
wants replay_warm && cli replay_warm replay --csv --warm --repeat "$repeat" --resource pool,vmm,cuda_async "${logs[@]}"
# The logs of several threads, their threads replayed concurrently (`--threads 0`: one worker per log thread).
if wants replay_threads; then
  threaded=()
  for f in "${logs[@]}"; do
    (($(gzip -cdf "$f" | awk -F, 'NR > 1 { print $1 }' | sort -u | wc -l) > 1)) && threaded+=("$f")
  done
  if ((${#threaded[@]})); then
    cli replay_threads replay --csv --threads 0 --repeat "$repeat" --resource pool,vmm,cuda_async "${threaded[@]}"
  else
    say "replay_threads: skipped (no log of several threads among the logs)"
  fi
fi
if wants python; then
  python=$(sed -n 's/^Python3_EXECUTABLE:FILEPATH=//p' "$build/CMakeCache.txt")
  if [[ -d $build/python/gpumem && -n $python ]]; then
    say "python: benchmarks/python/bench_python_alloc.py"
    if timeout 900 env PYTHONPATH="$build/python" "$python" benchmarks/python/bench_python_alloc.py \
      --json "$tmp/python.json" 2>&1 | tee -a "$log" && record python python_bench "$tmp/python.json" \
      "PYTHONPATH=$build/python python3 benchmarks/python/bench_python_alloc.py"; then :; else failed+=(python); fi
  else
    say "python: skipped ($build has no Python module: configure it with -DGPUMEM_BUILD_PYTHON=ON)"
  fi
fi
if wants ipc; then
  python=$(sed -n 's/^Python3_EXECUTABLE:FILEPATH=//p' "$build/CMakeCache.txt")
  if [[ -d $build/python/gpumem && -n $python ]]; then
    quick_flag=()
    ((quick)) && quick_flag=(--quick)
    say "ipc: benchmarks/python/bench_ipc.py ${quick_flag[*]}"
    if timeout 900 env PYTHONPATH="$build/python" "$python" benchmarks/python/bench_ipc.py \
      --json "$tmp/ipc.json" "${quick_flag[@]}" 2>&1 | tee -a "$log" && record ipc python_bench "$tmp/ipc.json" \
      "PYTHONPATH=$build/python python3 benchmarks/python/bench_ipc.py ${quick_flag[*]}"; then :; else failed+=(ipc); fi
  else
    say "ipc: skipped ($build has no Python module: configure it with -DGPUMEM_BUILD_PYTHON=ON)"
  fi
fi
if wants torch; then
  python=$(sed -n 's/^Python3_EXECUTABLE:FILEPATH=//p' "$build/CMakeCache.txt")
  if [[ -d $build/python/gpumem && -n $python ]]; then
    read -r -a torch_args <<<"${TORCH_BENCH_ARGS:-}"
    say "torch: benchmarks/python/torch_memory_bench.py ${torch_args[*]}"
    if timeout 3000 env PYTHONPATH="$build/python" "$python" benchmarks/python/torch_memory_bench.py \
      --json "$tmp/torch.json" "${torch_args[@]}" 2>&1 | tee -a "$log" && record torch python_bench "$tmp/torch.json" \
      "PYTHONPATH=$build/python python3 benchmarks/python/torch_memory_bench.py ${torch_args[*]}"; then :; else failed+=(torch); fi
  else
    say "torch: skipped ($build has no Python module: configure it with -DGPUMEM_BUILD_PYTHON=ON)"
  fi
fi

say "done in $((SECONDS - start)) s: $bundle"
if ((${#failed[@]})); then
  echo "FAILED: ${failed[*]} (see $log)" | tee -a "$log"
  exit 1
fi
echo "every run recorded; the page: python3 scripts/performance_page.py $out" | tee -a "$log"
