// gpumem_bench_adaptors: the overhead of each resource adaptor (adaptor_registry.hpp), each wrapped directly
// around the same base resource as its baseline and measured in the same process and run, on
// docs/benchmarks.md's workloads:
//
//   fixed/<adaptor>/<size>       allocate then free one block, in a loop (256B, 64KiB); figure: ns_per_pair
//   random/<adaptor>             docs/benchmarks.md's `random` (200 000 steps, seed 42); figure: ns_per_op
//   random_mt/<adaptor>/4        `random` split over 4 threads, each on its own stream from a
//                                cuda_stream_pool; figure: wall ns_per_op over all threads (this is where an
//                                adaptor's mutex shows: logging, statistics, tracking, thread_safe, aligned)
//
// <adaptor> `none` is the base resource itself (--resource, default pool); `none_managed` is a pool over
// managed memory, the base of `prefetch` (which prefetches only managed memory). Every other
// adaptor is quoted against its baseline: overhead_ns = its figure - the baseline's figure of the same
// workload in this run (per pair for fixed, per operation otherwise), overhead_ratio = its figure / the
// baseline's. Baselines are registered, hence run, first; the latest baseline figure is used (with
// --benchmark_repetitions, that of its last repetition: compare the aggregates' ns_per_op for medians). A
// --benchmark_filter that leaves out the baseline leaves out these two counters, and
// --benchmark_enable_random_interleaving pairs them with whichever baseline figure came last.
//
// Method, as gpumem_bench_alloc's: sequences are generated before timing; each benchmark builds its base
// and adaptor once, kept across Google Benchmark's calls, and runs an untimed verification pass first
// (every block non-null, 256-byte aligned, disjoint from the live ones, and the adaptor's own per-block
// check; two blocks held live at once while the adaptor's live state is checked). After every call the
// adaptor's records are checked against what the benchmark did (adaptor_checks.hpp: statistics' counts,
// tracking's and limiting's zero at rest, the log's rows, the failure callback never firing); a mismatch
// fails the run (non-zero exit), so a benchmark of an adaptor that does nothing cannot pass (ctest proves it
// with adaptors bypassed on purpose).
// Streams are synchronized after each timed region, untimed: prefetch is timed for enqueueing its
// prefetches (including any wait for a full stream queue), not for the migration the device then does.
// The logging adaptor's buffered writes to its file are timed; its final flush and the check are not.
//
// Flags: --adaptor=a,b (default: all; each adaptor's baseline is added), --list-adaptors, --resource=NAME
// (one base from common/'s registry; default pool; GPUMEM_BENCH_RESOURCES is not read), and the shared
// flags of bench_support.hpp (--smoke, --min-time, --timeout).

#include "../common/bench_support.hpp"
#include "../common/resource_registry.hpp"
#include "adaptor_registry.hpp"
#include <gpumem/bench/measure.hpp>
#include <gpumem/bench/worker_team.hpp>

#include <gpumem/backend/backend.hpp>
#include <gpumem/bench/workload.hpp>
#include <gpumem/cuda_stream_pool.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/device.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <exception>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpumem::bench {
namespace {

using clock_type = std::chrono::steady_clock;

constexpr std::array<fixed_size, 2> adaptor_fixed_sizes{fixed_sizes[0], fixed_sizes[2]};
static_assert(adaptor_fixed_sizes[0].bytes == 256 && adaptor_fixed_sizes[1].bytes == 64 * workload_kib);
constexpr std::size_t mt_threads = 4;
/** @brief The size of the two blocks held live for check_live in random: aligned's threshold (its slow path). */
constexpr std::size_t random_probe_bytes = 64 * workload_kib;

options g_options;
std::string g_base{"pool"};
std::vector<adaptor_entry const*> g_adaptors;

[[nodiscard]] random_shape workload_shape() { return g_options.smoke ? random_smoke : random_full; }

/** @brief The sequences of a `random` pass split over `threads` threads (generated once). */
[[nodiscard]] std::vector<sequence> const& sequences_for(std::size_t threads)
{
  static std::map<std::size_t, std::vector<sequence>> cache;
  auto [it, inserted] = cache.try_emplace(threads);
  if (inserted) { it->second = split_random(workload_shape(), threads); }
  return it->second;
}

[[nodiscard]] double seconds_between(clock_type::time_point a, clock_type::time_point b)
{
  return std::chrono::duration<double>(b - a).count();
}

// ---- per-benchmark state --------------------------------------------------------------------------------

/**
 * @brief One benchmark's base, adaptor and streams, kept across Google Benchmark's calls of it and replaced
 * when the next benchmark starts (one resource holds memory at a time). The streams outlive the resource.
 */
struct bench_context {
  std::string key;
  std::unique_ptr<cuda_stream_pool> streams;
  std::unique_ptr<adapted_resource> resource;
  usage_record usage;  // everything done through resource->get() so far
  bool warmed{false};

  void add_pass(std::size_t allocations, std::size_t bytes, std::size_t peak_min, std::size_t peak_max)
  {
    usage.allocations += allocations;
    usage.bytes += bytes;
    usage.peak_bytes_min = std::max(usage.peak_bytes_min, peak_min);
    usage.peak_bytes_max = std::max(usage.peak_bytes_max, peak_max);
  }
  void synchronize() const
  {
    for (std::size_t i = 0; i < streams->get_pool_size(); ++i) { streams->get_stream(i).synchronize(); }
  }
};

std::unique_ptr<bench_context> g_context;

[[nodiscard]] bench_context& context_for(std::string const& key, adaptor_entry const& adaptor, std::size_t streams,
                                         std::size_t max_request)
{
  if (!g_context || g_context->key != key) {
    g_context.reset();
    auto ctx = std::make_unique<bench_context>();
    ctx->key = key;
    ctx->streams = std::make_unique<cuda_stream_pool>(streams);
    ctx->resource = adaptor.build(make_base(adaptor, g_base, max_request));
    g_context = std::move(ctx);
  }
  return *g_context;
}

/** @brief Fails the benchmark and drops its context, whose records no longer match a usage record. */
void fail(benchmark::State& state, std::string const& message)
{
  record_failure(state, message);
  g_context.reset();
}

/**
 * @brief The first part of every verification pass: two blocks of `bytes` live at once, each verified,
 * then the adaptor's live state checked; both freed. @return the first error, or an empty string.
 */
[[nodiscard]] std::string verify_two_blocks(bench_context& ctx, cuda_stream_view stream, std::size_t bytes)
{
  checked_resource checked{*ctx.resource};
  block_checker checker;
  std::array<void*, 2> blocks{};
  std::size_t live = 0;
  std::string error;
  try {
    for (void*& block : blocks) {
      block = checked.allocate(bytes, stream);
      ++live;
      if (error.empty()) { error = checker.add(block, bytes); }
    }
  } catch (std::exception const& e) {
    error = e.what();
  }
  if (error.empty()) { error = ctx.resource->check_live(live, bytes); }
  for (std::size_t i = live; i-- > 0;) { checked.deallocate(blocks[i], bytes, stream); }
  ctx.add_pass(live, live * bytes, live * bytes, live * bytes);
  return error;
}

/** @brief After a call's timed region: synchronize, then check the adaptor against the usage record. */
void check_after(benchmark::State& state, std::string const& id, bench_context& ctx)
{
  ctx.synchronize();
  if (std::string const error = ctx.resource->check_idle(ctx.usage); !error.empty()) {
    fail(state, id + ": " + error);
  }
}

// ---- overhead against the baseline ----------------------------------------------------------------------

std::map<std::string, double> g_baseline_figures;  // "<workload>|<baseline>" -> its latest per-op figure

void set_overhead(benchmark::State& state, std::string const& workload, adaptor_entry const& adaptor, double figure)
{
  std::string const key = workload + "|" + std::string{adaptor.baseline};
  if (adaptor.is_baseline()) { g_baseline_figures[key] = figure; }
  if (auto const it = g_baseline_figures.find(key); it != g_baseline_figures.end() && it->second > 0) {
    state.counters["overhead_ns"] = figure - it->second;
    state.counters["overhead_ratio"] = figure / it->second;
  }
}

// ---- fixed/<adaptor>/<size> -----------------------------------------------------------------------------

void bm_fixed(benchmark::State& state, std::string const& id, adaptor_entry const* adaptor, fixed_size size)
{
  watchdog_scope const watch{id};
  try {
    bench_context& ctx = context_for(id, *adaptor, 1, size.bytes);
    mr::device_memory_resource& resource = ctx.resource->get();
    cuda_stream_view const stream = ctx.streams->get_stream(0);
    if (!ctx.warmed) {
      if (std::string const error = verify_two_blocks(ctx, stream, size.bytes); !error.empty()) {
        fail(state, id + " (untimed verification pass): " + error);
        return;
      }
      ctx.warmed = true;
    }
    auto const start = clock_type::now();
    for (auto _ : state) {
      void* p = resource.allocate(size.bytes, stream);
      benchmark::DoNotOptimize(p);
      resource.deallocate(p, size.bytes, stream);
    }
    auto const stop = clock_type::now();
    auto const pairs = static_cast<std::size_t>(state.iterations());
    ctx.add_pass(pairs, pairs * size.bytes, 0, 0);
    double const seconds = seconds_between(start, stop);
    double const ns_per_pair = seconds * 1e9 / static_cast<double>(pairs);
    state.counters["ns_per_pair"] = ns_per_pair;
    state.counters["pairs_per_s"] = static_cast<double>(pairs) / seconds;
    set_overhead(state, std::string{"fixed/"} + size.label, *adaptor, ns_per_pair);
    check_after(state, id, ctx);
  } catch (std::exception const& e) {
    fail(state, id + ": " + e.what());
  }
}

// ---- random/<adaptor> -----------------------------------------------------------------------------------

void bm_random(benchmark::State& state, std::string const& id, adaptor_entry const* adaptor)
{
  watchdog_scope const watch{id};
  try {
    sequence const& seq = sequences_for(1).front();
    bench_context& ctx = context_for(id, *adaptor, 1, workload_shape().max_size);
    mr::device_memory_resource& resource = ctx.resource->get();
    cuda_stream_view const stream = ctx.streams->get_stream(0);
    std::vector<void*> slots(seq.slots, nullptr);
    if (!ctx.warmed) {
      std::string error = verify_two_blocks(ctx, stream, random_probe_bytes);
      if (error.empty()) {
        checked_resource checked{*ctx.resource};
        block_checker checker;
        live_meter meter;
        error = run_sequence_checked(checked, stream, seq, slots, checker, meter);
        if (error.empty() && meter.peak.load() != seq.peak_live_bytes) {
          error = "live-byte accounting disagrees with the sequence";
        }
      }
      if (!error.empty()) {
        fail(state, id + " (untimed verification pass): " + error);
        return;
      }
      ctx.add_pass(seq.allocations, seq.bytes_allocated, seq.peak_live_bytes, seq.peak_live_bytes);
      ctx.warmed = true;
    }
    double total_seconds = 0;
    for (auto _ : state) {
      auto const start = clock_type::now();
      run_sequence(resource, stream, seq, slots);
      auto const stop = clock_type::now();
      state.SetIterationTime(seconds_between(start, stop));
      total_seconds += seconds_between(start, stop);
      stream.synchronize();  // untimed: see the file comment
    }
    auto const passes = static_cast<std::size_t>(state.iterations());
    ctx.add_pass(passes * seq.allocations, passes * seq.bytes_allocated, 0, 0);
    double const total_ops = static_cast<double>(seq.steps.size() * passes);
    double const ns_per_op = total_seconds * 1e9 / total_ops;
    state.counters["ns_per_op"] = ns_per_op;
    state.counters["ops_per_s"] = total_ops / total_seconds;
    state.counters["ops"] = static_cast<double>(seq.steps.size());
    set_overhead(state, "random", *adaptor, ns_per_op);
    check_after(state, id, ctx);
  } catch (std::exception const& e) {
    fail(state, id + ": " + e.what());
  }
}

// ---- random_mt/<adaptor>/4 ------------------------------------------------------------------------------

void bm_random_mt(benchmark::State& state, std::string const& id, adaptor_entry const* adaptor)
{
  watchdog_scope const watch{id};
  try {
    std::vector<sequence> const& seqs = sequences_for(mt_threads);
    bench_context& ctx = context_for(id, *adaptor, mt_threads, workload_shape().max_size);
    mr::device_memory_resource& resource = ctx.resource->get();
    std::vector<std::vector<void*>> slots(mt_threads);
    std::size_t ops = 0;
    std::size_t allocations = 0;
    std::size_t bytes = 0;
    std::size_t peak_min = 0;  // the live peak of one pass over all threads lies in [peak_min, peak_max]
    std::size_t peak_max = 0;
    for (std::size_t t = 0; t < mt_threads; ++t) {
      slots[t].assign(seqs[t].slots, nullptr);
      ops += seqs[t].steps.size();
      allocations += seqs[t].allocations;
      bytes += seqs[t].bytes_allocated;
      peak_min = std::max(peak_min, seqs[t].peak_live_bytes);
      peak_max += seqs[t].peak_live_bytes;
    }
    worker_team team{mt_threads};
    std::vector<cuda_stream_view> streams;
    for (std::size_t t = 0; t < mt_threads; ++t) { streams.push_back(ctx.streams->get_stream(t)); }
    first_error error;
    if (!ctx.warmed) {
      error.set(verify_two_blocks(ctx, ctx.streams->get_stream(0), random_probe_bytes));
      if (error.get().empty()) {
        checked_resource checked{*ctx.resource};
        block_checker checker;
        live_meter meter;
        team.run([&](std::size_t t) {
          cuda_stream_view const stream = ctx.streams->get_stream(t);
          std::string const e = run_sequence_checked(checked, stream, seqs[t], slots[t], checker, meter);
          if (!e.empty()) { error.set("thread " + std::to_string(t) + ": " + e); }
        });
      }
      if (std::string const e = error.get(); !e.empty()) {
        fail(state, id + " (untimed verification pass): " + e);
        return;
      }
      ctx.add_pass(allocations, bytes, peak_min, peak_max);
      ctx.warmed = true;
    }
    double total_seconds = 0;
    for (auto _ : state) {
      double const seconds = run_sequences(team, resource, streams, seqs, slots, error);
      state.SetIterationTime(seconds);
      total_seconds += seconds;
      if (std::string const e = error.get(); !e.empty()) {
        fail(state, id + ": " + e);
        return;
      }
      ctx.synchronize();  // untimed: see the file comment
    }
    auto const passes = static_cast<std::size_t>(state.iterations());
    ctx.add_pass(passes * allocations, passes * bytes, peak_min, peak_max);
    double const total_ops = static_cast<double>(ops * passes);
    double const ns_per_op = total_seconds * 1e9 / total_ops;
    state.counters["ns_per_op"] = ns_per_op;
    state.counters["ops_per_s"] = total_ops / total_seconds;
    state.counters["ops"] = static_cast<double>(ops);
    state.counters["threads"] = static_cast<double>(mt_threads);
    set_overhead(state, "random_mt/" + std::to_string(mt_threads), *adaptor, ns_per_op);
    check_after(state, id, ctx);
  } catch (std::exception const& e) {
    fail(state, id + ": " + e.what());
  }
}

// ---- registration and flags -----------------------------------------------------------------------------

/** @brief Workload by workload; within one, the adaptors in registration order (baselines first). */
void register_benchmarks()
{
  bool const smoke = g_options.smoke;
  for (fixed_size const& size : adaptor_fixed_sizes) {
    for (adaptor_entry const* a : g_adaptors) {
      std::string const id = "fixed/" + std::string{a->name} + "/" + size.label;
      auto* b = benchmark::RegisterBenchmark(id.c_str(), bm_fixed, id, a, size);
      b->UseRealTime()->Unit(benchmark::kNanosecond);
      if (smoke) { b->Iterations(64); }
      apply_common(b, g_options);
    }
  }
  for (adaptor_entry const* a : g_adaptors) {
    std::string const id = "random/" + std::string{a->name};
    auto* b = benchmark::RegisterBenchmark(id.c_str(), bm_random, id, a);
    b->UseManualTime()->Unit(benchmark::kMillisecond);
    if (smoke) { b->Iterations(2); }
    apply_common(b, g_options);
  }
  for (adaptor_entry const* a : g_adaptors) {
    std::string const id = "random_mt/" + std::string{a->name} + "/" + std::to_string(mt_threads);
    auto* b = benchmark::RegisterBenchmark(id.c_str(), bm_random_mt, id, a);
    b->UseManualTime()->Unit(benchmark::kMillisecond);
    if (smoke) { b->Iterations(2); }
    apply_common(b, g_options);
  }
}

constexpr std::string_view program = "gpumem_bench_adaptors";

}  // namespace
}  // namespace gpumem::bench

int main(int argc, char** argv)
{
  using namespace gpumem::bench;
  bool resource_given = false;
  if (auto const code = parse_adaptor_options(argc, argv, program, resource_given, g_adaptors)) { return *code; }
  if (auto const code = parse_options(argc, argv, program, g_options)) { return *code; }
  if (resource_given) {
    if (g_options.resources.size() != 1) {
      std::cerr << program << ": --resource takes one base resource here; known resources: "
                << known_resource_names() << "\n";
      return 2;
    }
    g_base = g_options.resources.front();
  }
  int status = 1;
  try {
    benchmark::AddCustomContext("gpumem_backend", std::string{gpumem::to_string(gpumem::current_backend_kind())});
    benchmark::AddCustomContext("gpumem_device", gpumem::get_device_properties(gpumem::cuda_device_id{0}).name);
    benchmark::AddCustomContext("gpumem_base_resource", g_base);
    benchmark::AddCustomContext("gpumem_managed_base", "pool_memory_resource over managed_memory_resource");
    std::string adaptors;
    for (auto const* a : g_adaptors) { adaptors += (adaptors.empty() ? "" : ",") + std::string{a->name}; }
    benchmark::AddCustomContext("gpumem_adaptors", adaptors);
    benchmark::AddCustomContext("gpumem_mode", g_options.smoke ? "smoke" : "full");
    register_benchmarks();
    status = run_benchmarks(argc, argv, g_options.timeout);
  } catch (std::exception const& e) {
    record_failure(std::string{program} + ": " + e.what());
    status = 1;
  }
  g_context.reset();
  remove_log_directory();
  return status;
}
