#!/usr/bin/env bash
# Runs docs/benchmarks.md's allocation workloads (gpumem_bench_alloc: fixed, random, random_mt) over every
# registered resource with the CUDA peers in the same run, and writes JSON, the log and a markdown table.
# Works on the GPU machine (cuda backend, chosen automatically) and on machines without a GPU (host backend:
# regression tracking only, never quoted as a result). Needs cmake, ninja, a C++20 compiler, Google
# Benchmark and python3 (standard library only). No network.
#
#   bash scripts/bench.sh                  # full: 5 repetitions, medians (GPU: several minutes)
#   bash scripts/bench.sh --quick          # GPU session budget: 3 repetitions, 0.05 s minimum per benchmark
#   bash scripts/bench.sh -- --resource=cuda_async_default,pool --benchmark_filter='^fixed/'
#                                          # anything after -- goes to the benchmark executable
#   bash scripts/bench.sh --suite adaptors # the adaptor overheads (gpumem_bench_adaptors) instead: each
#                                          # adaptor around a pool, its base `none` first in the same run
#   bash scripts/bench.sh --suite transfer # host<->device copies of 1 GiB (gpumem_bench_transfer):
#                                          # cudaMemcpyAsync rows against gpumem's staged copies
#
# Environment: OUT (default build/bench): where the results go; GPUMEM_BENCH_BUILD (default
# build/bench-release): the build tree; GPUMEM_JOBS: build parallelism (default: every core);
# GPUMEM_BACKEND=host|cuda to force a backend; GPUMEM_BENCH_RESOURCES: as --resource.
#
# Steps: configure + build (Release, benchmarks on, tests/CLI off); environment record; a --smoke run on the
# chosen backend (verifies every resource quickly: a failure stops here); the full run; the table.
# Output in $OUT: env.txt, smoke.log, SUITE.log, SUITE.json (Google Benchmark JSON), SUITE.md (table), with
# SUITE alloc, adaptors or transfer.
# Exits non-zero if any step or any benchmark failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

quick=0
suite=alloc
extra=()
while (($#)); do
  case $1 in
    --quick) quick=1 ;;
    --suite) shift; suite=${1:-} ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

case $suite in
  alloc) peer=cuda_async_default ;;
  adaptors) peer=none ;;
  transfer) peer=cudaMemcpyAsync ;;
  *) echo "bench.sh: --suite must be alloc, adaptors or transfer, not '$suite'" >&2; exit 2 ;;
esac
out=${OUT:-build/bench}
build=${GPUMEM_BENCH_BUILD:-build/bench-release}
jobs=${GPUMEM_JOBS:-$(nproc 2>/dev/null || echo 2)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
start=$SECONDS

if ((quick)); then
  run_flags=(--benchmark_repetitions=3 --benchmark_report_aggregates_only=true --min-time=0.05)
else
  run_flags=(--benchmark_repetitions=5 --benchmark_report_aggregates_only=true)
fi

step() { printf '\n==== %s\n' "$*"; }

step "configure + build ($build, $jobs jobs)"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPUMEM_BUILD_BENCHMARKS=ON \
  -DGPUMEM_BUILD_TESTS=OFF -DGPUMEM_BUILD_CLI=OFF -DGPUMEM_WARNINGS_AS_ERRORS=OFF >/dev/null
timeout 600 cmake --build "$build" --parallel "$jobs" --target "gpumem_bench_$suite"
bin=$build/benchmarks/gpumem_bench_$suite

step "environment"
{
  echo "date: $(date -u +%FT%TZ)  host: $(uname -srm)  cores: $(nproc 2>/dev/null || echo ?)"
  [[ -r /etc/os-release ]] && grep PRETTY_NAME /etc/os-release
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
  c++ --version | head -1
  echo "GPUMEM_BACKEND=${GPUMEM_BACKEND:-<auto>}"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || true
  else
    echo "nvidia-smi: not found (host backend figures are not GPU figures)"
  fi
  case $suite in
    alloc) "$bin" --list ;;
    adaptors) "$bin" --list-adaptors ;;
    transfer) "$bin" --benchmark_list_tests ;;
  esac
} 2>&1 | tee "$out/env.txt"

step "smoke run (every allocation verified)"
if [[ $suite == alloc ]]; then
  smoke_flags=(--resource="${GPUMEM_BENCH_RESOURCES:-$("$bin" --list | cut -d' ' -f1 | paste -sd, -)}")
else
  smoke_flags=()
fi
# A smoke run fixes its iteration counts, which Google Benchmark refuses to combine with a minimum time.
for arg in "${extra[@]}"; do [[ $arg == --min-time* ]] || smoke_flags+=("$arg"); done
timeout 300 "$bin" --smoke "${smoke_flags[@]}" >"$out/smoke.log" 2>&1 ||
  { cat "$out/smoke.log"; echo "bench.sh: smoke run failed" >&2; exit 1; }
echo "passed"

step "benchmarks: ${run_flags[*]} ${extra[*]}"
command_line="bash scripts/bench.sh"
[[ $suite != alloc ]] && command_line+=" --suite $suite"
((quick)) && command_line+=" --quick"
((${#extra[@]})) && command_line+=" -- ${extra[*]}"
status=0
timeout 3600 "$bin" "${run_flags[@]}" --benchmark_out="$out/$suite.json" --benchmark_out_format=json \
  "${extra[@]}" 2>&1 | tee "$out/$suite.log" || status=$?

step "table ($out/$suite.md)"
python3 scripts/bench_table.py "$out/$suite.json" --command "$command_line" --peer "$peer" | tee "$out/$suite.md" ||
  status=1

step "done in $((SECONDS - start)) s: $out (status $status)"
exit "$status"
