/**
 * @file bench_support.hpp
 * What every gpumem benchmark executable shares: its own command-line flags (parsed and removed before
 * benchmark::Initialize sees argv), the failure record that turns any error into a non-zero exit, and
 * the closing of a run.
 *
 * Flags (before or among Google Benchmark's own):
 *   --resource=a,b,...   resources to run (default: every registered one; env GPUMEM_BENCH_RESOURCES)
 *   --list               print the registered resources and exit
 *   --smoke              tiny sizes and fixed iteration counts (ctest); default resources: the cudaMalloc
 *                        peer and the first sub-allocator
 *   --min-time=SECONDS   minimum time per benchmark (Google Benchmark's MinTime, set per benchmark so the
 *                        flag works across Google Benchmark versions, whose --benchmark_min_time differs)
 *   --timeout=SECONDS    a single call of one benchmark (its warm-up pass included) that runs longer than
 *                        this fails the run at once: the name is printed and the process exits 3, so a hang
 *                        cannot eat a GPU session (default 300; 60 with --smoke)
 *   --help               this text, then Google Benchmark's
 */
#pragma once

#include <benchmark/benchmark.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpumem::bench {

struct options {
  std::vector<std::string> resources;  ///< validated names, in the order given
  bool smoke{false};
  std::optional<double> min_time;      ///< seconds
  double timeout{300};                 ///< seconds per benchmark call
};

/**
 * @brief Marks one call of a benchmark for the watchdog (see --timeout): construct it first thing in the
 * benchmark function. Not nested.
 */
class watchdog_scope {
 public:
  explicit watchdog_scope(std::string const& benchmark_id);
  ~watchdog_scope();
  watchdog_scope(watchdog_scope const&) = delete;
  watchdog_scope& operator=(watchdog_scope const&) = delete;
};

/** @brief Applies the options every registered benchmark shares (--min-time). */
inline void apply_common(benchmark::internal::Benchmark* b, options const& o)
{
  if (o.min_time) { b->MinTime(*o.min_time); }
}

/**
 * @brief Parses gpumem's flags out of argv (compacting it for benchmark::Initialize).
 * @return an exit code when the program should stop now (after --list or --help, or on a bad flag, which
 *         prints the error with the known resources), std::nullopt to go on.
 */
[[nodiscard]] std::optional<int> parse_options(int& argc, char** argv, std::string_view program, options& out);

/**
 * @brief Records a failed benchmark: prints `message` to stderr, marks the run failed (non-zero exit) and
 * tells Google Benchmark (SkipWithError). Call from the benchmark's own thread, then return.
 */
void record_failure(benchmark::State& state, std::string const& message);

/** @brief Marks the run failed without a State (e.g. setup outside a benchmark). */
void record_failure(std::string const& message);

/**
 * @brief Initializes Google Benchmark, runs the registered benchmarks under the watchdog (`timeout_seconds`
 * per benchmark call, see --timeout), and returns the exit code: 0 when at least one benchmark ran and none
 * failed, 1 otherwise (a timeout exits 3 at once).
 */
[[nodiscard]] int run_benchmarks(int argc, char** argv, double timeout_seconds);

}  // namespace gpumem::bench
