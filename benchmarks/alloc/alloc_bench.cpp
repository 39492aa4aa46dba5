// gpumem_bench_alloc: shared/BENCHMARKS.md's allocation workloads over any registered resource, with the
// CUDA peers in the same run.
//
//   fixed/<resource>/<size>       allocate then free one block, in a loop (256B 4KiB 64KiB 1MiB 64MiB);
//                                 figure: ns_per_pair (one allocate + one deallocate)
//   random/<resource>             at most 1000 live blocks; each step allocates (p = 0.5, or when none are
//                                 live; never above the limit) a size log-uniform in [256 B, 4 MiB], else
//                                 frees a uniformly random live block; 200 000 steps, seed 42; every block
//                                 still live is freed at the end (those frees count as operations);
//                                 figure: ns_per_op
//   random_mt/<resource>/<T>      `random` in T threads (1, 4, 16), each on its own stream from a
//                                 cuda_stream_pool, the live limit and the 200 000 steps split between
//                                 them (so every T does the same total work), thread t seeded 42 + t;
//                                 figure: wall ns_per_op over all threads; speedup_vs_1_thread = the
//                                 1-thread figure of this resource (random_mt/<resource>/1) / this one
//
// Method. The operation sequences are generated before timing (the RNG is not measured). Each benchmark
// builds its resource once (and its streams); before the first timed iteration it runs its pattern once
// untimed on that fresh resource: this warms pools and caches (the figures are steady state, cudaMallocAsync's
// pool included) and verifies every allocation (non-null, 256-byte aligned, never overlapping another live
// block) and measures peak live bytes. Any exception or failed check fails the benchmark and the exit status;
// a benchmark call that outlives --timeout ends the process (bench_support.hpp).
// Counters: ns_per_pair / ns_per_op, pairs_per_s / ops_per_s, ops and bytes_allocated per pass, peak live
// bytes; for sub-allocators, peak_upstream_bytes (bytes taken from the cuda_memory_resource below, through
// counting_resource) and fragmentation = peak_upstream_bytes / peak_live_bytes.

#include "../common/bench_support.hpp"
#include "../common/resource_registry.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/cuda_stream_pool.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/device.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace gpumem::bench {
namespace {

using clock_type = std::chrono::steady_clock;

constexpr std::size_t kib = std::size_t{1} << 10;
constexpr std::size_t mib = std::size_t{1} << 20;

struct fixed_size {
  std::size_t bytes;
  char const* label;
};
constexpr std::array<fixed_size, 5> fixed_sizes{
  {{256, "256B"}, {4 * kib, "4KiB"}, {64 * kib, "64KiB"}, {1 * mib, "1MiB"}, {64 * mib, "64MiB"}}};

constexpr std::array<int, 3> mt_thread_counts{1, 4, 16};

/** @brief The `random` workload's parameters (BENCHMARKS.md), and the tiny ones of --smoke. */
struct random_shape {
  std::size_t steps;
  std::size_t max_live;
  std::size_t min_size;
  std::size_t max_size;
  std::uint64_t seed;
};
constexpr random_shape full_shape{200'000, 1000, 256, 4 * mib, 42};
constexpr random_shape smoke_shape{2'000, 64, 256, 4 * mib, 42};

options g_options;

[[nodiscard]] random_shape workload_shape() { return g_options.smoke ? smoke_shape : full_shape; }

// ---- the pre-generated operation sequence ---------------------------------------------------------------

/** @brief One operation: allocate `size` bytes into `slot`, or free the block in `slot` (of that size). */
struct step {
  std::uint32_t size;
  std::uint16_t slot;
  bool allocate;
};

/** @brief A whole pass of `random`: the steps, then the frees of the blocks still live at the end. */
struct sequence {
  std::vector<step> steps;
  std::size_t slots{};            ///< slot indices are < slots (== the live limit)
  std::size_t allocations{};
  std::size_t bytes_allocated{};  ///< sum of the requested sizes
  std::size_t peak_live_bytes{};
  std::size_t peak_live_blocks{};
};

/** @brief Uniform double in [0, 1) from 53 bits of a std::mt19937_64 (whose output the standard fixes). */
[[nodiscard]] double uniform01(std::mt19937_64& gen) { return static_cast<double>(gen() >> 11) * 0x1.0p-53; }

[[nodiscard]] sequence make_sequence(std::size_t steps, std::size_t max_live, random_shape const& shape,
                                     std::uint64_t seed)
{
  std::mt19937_64 gen{seed};
  double const log_min = std::log(static_cast<double>(shape.min_size));
  double const log_max = std::log(static_cast<double>(shape.max_size));
  sequence seq;
  seq.slots = max_live;
  seq.steps.reserve(steps + max_live);
  std::vector<std::uint16_t> free_slots;  // a stack; slot 0 on top
  for (std::size_t s = max_live; s > 0; --s) { free_slots.push_back(static_cast<std::uint16_t>(s - 1)); }
  std::vector<std::uint16_t> live;        // slots of live blocks, in no particular order
  std::vector<std::uint32_t> slot_size(max_live, 0);
  std::size_t live_bytes = 0;
  for (std::size_t i = 0; i < steps; ++i) {
    bool const coin = uniform01(gen) < 0.5;
    bool const allocate = live.empty() || (coin && live.size() < max_live);
    if (allocate) {
      double const size_real = std::exp(log_min + uniform01(gen) * (log_max - log_min));
      auto const size = static_cast<std::uint32_t>(
        std::clamp(static_cast<std::size_t>(std::llround(size_real)), shape.min_size, shape.max_size));
      std::uint16_t const slot = free_slots.back();
      free_slots.pop_back();
      live.push_back(slot);
      slot_size[slot] = size;
      seq.steps.push_back({size, slot, true});
      ++seq.allocations;
      seq.bytes_allocated += size;
      live_bytes += size;
      seq.peak_live_bytes = std::max(seq.peak_live_bytes, live_bytes);
      seq.peak_live_blocks = std::max(seq.peak_live_blocks, live.size());
    } else {
      auto index = static_cast<std::size_t>(uniform01(gen) * static_cast<double>(live.size()));
      index = std::min(index, live.size() - 1);
      std::uint16_t const slot = live[index];
      live[index] = live.back();
      live.pop_back();
      free_slots.push_back(slot);
      seq.steps.push_back({slot_size[slot], slot, false});
      live_bytes -= slot_size[slot];
    }
  }
  for (std::uint16_t const slot : live) { seq.steps.push_back({slot_size[slot], slot, false}); }
  return seq;
}

/** @brief The sequences of a `random` pass split over `threads` threads (cached: generated once). */
[[nodiscard]] std::vector<sequence> const& sequences_for(int threads)
{
  static std::map<int, std::vector<sequence>> cache;
  auto [it, inserted] = cache.try_emplace(threads);
  if (inserted) {
    random_shape const shape = workload_shape();
    auto const n = static_cast<std::size_t>(threads);
    for (std::size_t t = 0; t < n; ++t) {
      std::size_t const steps = shape.steps / n + (t < shape.steps % n ? 1 : 0);
      std::size_t const max_live = shape.max_live / n + (t < shape.max_live % n ? 1 : 0);
      it->second.push_back(make_sequence(steps, max_live, shape, shape.seed + t));
    }
  }
  return it->second;
}

// ---- verification (untimed pass only) -------------------------------------------------------------------

/** @brief Live blocks as address ranges; reports a null, misaligned or overlapping block. Thread-safe. */
class overlap_checker {
 public:
  /** @return an empty string, or what is wrong with the new block. */
  std::string add(void const* ptr, std::size_t bytes)
  {
    auto const begin = reinterpret_cast<std::uintptr_t>(ptr);
    if (ptr == nullptr) { return "allocate(" + std::to_string(bytes) + ") returned nullptr"; }
    if (begin % gpumem::detail::allocation_alignment != 0) {
      return "allocate(" + std::to_string(bytes) + ") returned " + format_pointer(ptr) + ", not 256-byte aligned";
    }
    std::uintptr_t const end = begin + bytes;
    std::lock_guard const lock{mutex_};
    auto const next = live_.lower_bound(begin);
    if (next != live_.end() && next->first < end) {
      return "block " + format_pointer(ptr) + " +" + std::to_string(bytes) + " overlaps the live block at " +
             format_pointer(reinterpret_cast<void const*>(next->first));
    }
    if (next != live_.begin() && std::prev(next)->second > begin) {
      return "block " + format_pointer(ptr) + " +" + std::to_string(bytes) + " overlaps the live block at " +
             format_pointer(reinterpret_cast<void const*>(std::prev(next)->first));
    }
    live_.emplace(begin, end);
    return {};
  }

  void remove(void const* ptr)
  {
    std::lock_guard const lock{mutex_};
    live_.erase(reinterpret_cast<std::uintptr_t>(ptr));
  }

 private:
  std::mutex mutex_;
  std::map<std::uintptr_t, std::uintptr_t> live_;  // begin -> end of each live block
};

/** @brief Live bytes across threads during the untimed pass, and their peak. */
struct live_meter {
  std::atomic<std::size_t> live{0};
  std::atomic<std::size_t> peak{0};
  void add(std::size_t bytes)
  {
    std::size_t const now = live.fetch_add(bytes) + bytes;
    std::size_t p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {}
  }
  void sub(std::size_t bytes) { live.fetch_sub(bytes); }
};

// ---- replaying a sequence -------------------------------------------------------------------------------

/** @brief Frees what steps[0, done) left live (after a failure part-way). Never throws. */
void free_leftovers(mr::device_memory_resource& resource, cuda_stream_view stream, sequence const& seq,
                    std::size_t done, std::span<void*> slots) noexcept
{
  std::vector<std::uint32_t> live_size(seq.slots, 0);
  for (std::size_t i = 0; i < done; ++i) {
    live_size[seq.steps[i].slot] = seq.steps[i].allocate ? seq.steps[i].size : 0;
  }
  for (std::size_t s = 0; s < seq.slots; ++s) {
    if (live_size[s] != 0) { resource.deallocate(slots[s], live_size[s], stream); }
  }
}

/** @brief The timed pass: the steps and nothing else. @throws what allocate throws (after cleaning up). */
void replay(mr::device_memory_resource& resource, cuda_stream_view stream, sequence const& seq,
            std::span<void*> slots)
{
  std::size_t i = 0;
  try {
    for (std::size_t const n = seq.steps.size(); i < n; ++i) {
      step const s = seq.steps[i];
      if (s.allocate) {
        slots[s.slot] = resource.allocate(s.size, stream);
      } else {
        resource.deallocate(slots[s.slot], s.size, stream);
      }
    }
  } catch (...) {
    free_leftovers(resource, stream, seq, i, slots);
    throw;
  }
}

/**
 * @brief The untimed pass: as replay, checking every block and metering live bytes.
 * @return an empty string, or the first check that failed (everything is freed either way).
 */
std::string replay_checked(mr::device_memory_resource& resource, cuda_stream_view stream, sequence const& seq,
                           std::span<void*> slots, overlap_checker& checker, live_meter& meter)
{
  std::size_t i = 0;
  std::string error;
  try {
    for (std::size_t const n = seq.steps.size(); i < n; ++i) {
      step const s = seq.steps[i];
      if (s.allocate) {
        void* const p = resource.allocate(s.size, stream);
        slots[s.slot] = p;
        error = checker.add(p, s.size);
        if (!error.empty()) {
          ++i;  // p is live: free it with the others
          break;
        }
        meter.add(s.size);
      } else {
        checker.remove(slots[s.slot]);
        meter.sub(s.size);
        resource.deallocate(slots[s.slot], s.size, stream);
      }
    }
  } catch (std::exception const& e) {
    error = e.what();
  }
  if (!error.empty()) {
    free_leftovers(resource, stream, seq, i, slots);
    return error;
  }
  return {};
}

// ---- per-benchmark state --------------------------------------------------------------------------------

/**
 * @brief The resource and streams of one benchmark, kept across Google Benchmark's calls of that benchmark
 * (iteration-count probes and repetitions) so it is built and warmed once. Replaced when the next benchmark
 * starts; the streams outlive the resource (members are destroyed in reverse order).
 */
struct bench_context {
  std::string key;
  std::unique_ptr<cuda_stream_pool> streams;
  resource_handle resource;
  bool warmed{false};
  std::size_t peak_live_bytes{};  // measured by the warm-up pass (random_mt)
};

std::unique_ptr<bench_context> g_context;

[[nodiscard]] bench_context& context_for(std::string const& key, std::string const& resource, std::size_t streams,
                                         std::size_t max_request)
{
  if (!g_context || g_context->key != key) {
    g_context.reset();  // the previous benchmark's resource goes first: one resource holds memory at a time
    auto ctx = std::make_unique<bench_context>();
    ctx->key = key;
    ctx->streams = std::make_unique<cuda_stream_pool>(streams);
    ctx->resource = make_resource(resource, max_request);
    g_context = std::move(ctx);
  }
  return *g_context;
}

void set_upstream_counters(benchmark::State& state, bench_context const& ctx, std::size_t peak_live_bytes,
                           bool with_fragmentation)
{
  double const peak_reserved = ctx.resource.peak_reserved_bytes();
  if (peak_reserved < 0) { return; }
  state.counters["peak_upstream_bytes"] = peak_reserved;
  if (counting_resource const* const counter = ctx.resource.upstream_counter(); counter != nullptr) {
    state.counters["upstream_allocations"] = static_cast<double>(counter->allocations());
  }
  if (with_fragmentation && peak_live_bytes > 0 && !ctx.resource.reserves_upfront()) {
    state.counters["fragmentation"] = peak_reserved / static_cast<double>(peak_live_bytes);
  }
}

[[nodiscard]] double seconds_between(clock_type::time_point a, clock_type::time_point b)
{
  return std::chrono::duration<double>(b - a).count();
}

// ---- fixed/<resource>/<size> ----------------------------------------------------------------------------

void bm_fixed(benchmark::State& state, std::string const& id, std::string const& resource_name, std::size_t bytes)
{
  watchdog_scope const watch{id};
  try {
    bench_context& ctx = context_for(id, resource_name, 1, bytes);
    mr::device_memory_resource& resource = ctx.resource.get();
    cuda_stream_view const stream = ctx.streams->get_stream(0);
    if (!ctx.warmed) {
      // Two blocks at once: both valid and disjoint; then the pattern once, untimed.
      overlap_checker checker;
      void* const a = resource.allocate(bytes, stream);
      void* b = nullptr;
      try {
        b = resource.allocate(bytes, stream);
      } catch (...) {
        resource.deallocate(a, bytes, stream);
        throw;
      }
      std::string error = checker.add(a, bytes);
      if (error.empty()) { error = checker.add(b, bytes); }
      resource.deallocate(b, bytes, stream);
      resource.deallocate(a, bytes, stream);
      if (!error.empty()) {
        record_failure(state, id + ": " + error);
        return;
      }
      ctx.warmed = true;
    }
    auto const start = clock_type::now();
    for (auto _ : state) {
      void* const p = resource.allocate(bytes, stream);
      benchmark::DoNotOptimize(p);
      resource.deallocate(p, bytes, stream);
    }
    auto const stop = clock_type::now();
    auto const pairs = static_cast<double>(state.iterations());
    double const seconds = seconds_between(start, stop);
    state.counters["ns_per_pair"] = seconds * 1e9 / pairs;
    state.counters["pairs_per_s"] = pairs / seconds;
    state.counters["bytes_allocated"] = pairs * static_cast<double>(bytes);
    state.counters["peak_live_bytes"] = static_cast<double>(bytes);
    set_upstream_counters(state, ctx, bytes, false);
  } catch (std::exception const& e) {
    record_failure(state, id + ": " + e.what());
  }
}

// ---- random/<resource> ----------------------------------------------------------------------------------

void bm_random(benchmark::State& state, std::string const& id, std::string const& resource_name)
{
  watchdog_scope const watch{id};
  try {
    sequence const& seq = sequences_for(1).front();
    bench_context& ctx = context_for(id, resource_name, 1, workload_shape().max_size);
    mr::device_memory_resource& resource = ctx.resource.get();
    cuda_stream_view const stream = ctx.streams->get_stream(0);
    std::vector<void*> slots(seq.slots, nullptr);
    if (!ctx.warmed) {
      overlap_checker checker;
      live_meter meter;
      if (std::string const error = replay_checked(resource, stream, seq, slots, checker, meter); !error.empty()) {
        record_failure(state, id + " (untimed verification pass): " + error);
        return;
      }
      if (meter.peak.load() != seq.peak_live_bytes) {
        record_failure(state, id + ": live-byte accounting disagrees with the sequence");
        return;
      }
      ctx.warmed = true;
    }
    double total_seconds = 0;
    for (auto _ : state) {
      auto const start = clock_type::now();
      replay(resource, stream, seq, slots);
      auto const stop = clock_type::now();
      double const seconds = seconds_between(start, stop);
      state.SetIterationTime(seconds);
      total_seconds += seconds;
    }
    auto const ops = static_cast<double>(seq.steps.size());
    double const total_ops = ops * static_cast<double>(state.iterations());
    state.counters["ns_per_op"] = total_seconds * 1e9 / total_ops;
    state.counters["ops_per_s"] = total_ops / total_seconds;
    state.counters["ops"] = ops;
    state.counters["allocations"] = static_cast<double>(seq.allocations);
    state.counters["bytes_allocated"] = static_cast<double>(seq.bytes_allocated);
    state.counters["peak_live_bytes"] = static_cast<double>(seq.peak_live_bytes);
    state.counters["peak_live_blocks"] = static_cast<double>(seq.peak_live_blocks);
    set_upstream_counters(state, ctx, seq.peak_live_bytes, true);
  } catch (std::exception const& e) {
    record_failure(state, id + ": " + e.what());
  }
}

// ---- random_mt/<resource>/<threads> ---------------------------------------------------------------------

/**
 * @brief `threads` workers that run job(t) together when released, so thread start-up is outside the
 * timed region. run() returns when every worker has finished the job.
 */
class worker_team {
 public:
  explicit worker_team(std::size_t threads)
    : start_{static_cast<std::ptrdiff_t>(threads + 1)}, done_{static_cast<std::ptrdiff_t>(threads + 1)}
  {
    for (std::size_t t = 0; t < threads; ++t) {
      workers_.emplace_back([this, t] {
        for (;;) {
          start_.arrive_and_wait();
          if (stop_) { return; }
          job_(t);
          done_.arrive_and_wait();
        }
      });
    }
  }
  ~worker_team()
  {
    stop_ = true;
    start_.arrive_and_wait();
    for (auto& w : workers_) { w.join(); }
  }
  worker_team(worker_team const&) = delete;
  worker_team& operator=(worker_team const&) = delete;

  /** @brief Runs job(t) on every worker t; returns the wall seconds from release to the last finish. */
  double run(std::function<void(std::size_t)> job)
  {
    job_ = std::move(job);
    auto const start = clock_type::now();
    start_.arrive_and_wait();
    done_.arrive_and_wait();
    return seconds_between(start, clock_type::now());
  }

 private:
  std::barrier<> start_;
  std::barrier<> done_;
  std::function<void(std::size_t)> job_;
  bool stop_{false};  // written before start_ is passed; the barrier orders it
  std::vector<std::thread> workers_;
};

/** @brief The first error a worker met, if any. */
class first_error {
 public:
  void set(std::string message)
  {
    std::lock_guard const lock{mutex_};
    if (message_.empty()) { message_ = std::move(message); }
  }
  [[nodiscard]] std::string get()
  {
    std::lock_guard const lock{mutex_};
    return message_;
  }

 private:
  std::mutex mutex_;
  std::string message_;
};

std::map<std::string, double> g_one_thread_ns_per_op;  // resource -> random_mt/<resource>/1's latest figure

void bm_random_mt(benchmark::State& state, std::string const& id, std::string const& resource_name, int threads)
{
  watchdog_scope const watch{id};
  try {
    std::vector<sequence> const& seqs = sequences_for(threads);
    auto const n = static_cast<std::size_t>(threads);
    bench_context& ctx = context_for(id, resource_name, n, workload_shape().max_size);
    mr::device_memory_resource& resource = ctx.resource.get();
    std::vector<std::vector<void*>> slots(n);
    for (std::size_t t = 0; t < n; ++t) { slots[t].assign(seqs[t].slots, nullptr); }
    std::size_t ops = 0;
    std::size_t allocations = 0;
    std::size_t bytes_allocated = 0;
    for (auto const& seq : seqs) {
      ops += seq.steps.size();
      allocations += seq.allocations;
      bytes_allocated += seq.bytes_allocated;
    }
    worker_team team{n};
    first_error error;
    if (!ctx.warmed) {
      overlap_checker checker;
      live_meter meter;
      team.run([&](std::size_t t) {
        std::string const e = replay_checked(resource, ctx.streams->get_stream(t), seqs[t], slots[t], checker, meter);
        if (!e.empty()) { error.set("thread " + std::to_string(t) + ": " + e); }
      });
      if (std::string const e = error.get(); !e.empty()) {
        record_failure(state, id + " (untimed verification pass): " + e);
        return;
      }
      ctx.peak_live_bytes = meter.peak.load();
      ctx.warmed = true;
    }
    double total_seconds = 0;
    for (auto _ : state) {
      double const seconds = team.run([&](std::size_t t) {
        try {
          replay(resource, ctx.streams->get_stream(t), seqs[t], slots[t]);
        } catch (std::exception const& e) {
          error.set("thread " + std::to_string(t) + ": " + e.what());
        }
      });
      state.SetIterationTime(seconds);
      total_seconds += seconds;
      if (std::string const e = error.get(); !e.empty()) {
        record_failure(state, id + ": " + e);
        return;
      }
    }
    double const total_ops = static_cast<double>(ops) * static_cast<double>(state.iterations());
    double const ns_per_op = total_seconds * 1e9 / total_ops;
    state.counters["ns_per_op"] = ns_per_op;
    state.counters["ops_per_s"] = total_ops / total_seconds;
    state.counters["ops"] = static_cast<double>(ops);
    state.counters["allocations"] = static_cast<double>(allocations);
    state.counters["bytes_allocated"] = static_cast<double>(bytes_allocated);
    state.counters["threads"] = threads;
    state.counters["peak_live_bytes"] = static_cast<double>(ctx.peak_live_bytes);
    if (threads == 1) {
      g_one_thread_ns_per_op[resource_name] = ns_per_op;
    } else if (auto const it = g_one_thread_ns_per_op.find(resource_name); it != g_one_thread_ns_per_op.end()) {
      state.counters["speedup_vs_1_thread"] = it->second / ns_per_op;
    }
    set_upstream_counters(state, ctx, ctx.peak_live_bytes, true);
  } catch (std::exception const& e) {
    record_failure(state, id + ": " + e.what());
  }
}

// ---- registration ---------------------------------------------------------------------------------------

void apply_common(benchmark::internal::Benchmark* b)
{
  if (g_options.min_time) { b->MinTime(*g_options.min_time); }
}

void register_benchmarks()
{
  bool const smoke = g_options.smoke;
  for (std::string const& name : g_options.resources) {
    for (fixed_size const& size : fixed_sizes) {
      std::string const id = "fixed/" + name + "/" + size.label;
      auto* b = benchmark::RegisterBenchmark(id.c_str(), bm_fixed, id, name, size.bytes);
      b->UseRealTime()->Unit(benchmark::kNanosecond);
      if (smoke) { b->Iterations(64); }
      apply_common(b);
    }
  }
  for (std::string const& name : g_options.resources) {
    std::string const id = "random/" + name;
    auto* b = benchmark::RegisterBenchmark(id.c_str(), bm_random, id, name);
    b->UseManualTime()->Unit(benchmark::kMillisecond);
    if (smoke) { b->Iterations(2); }
    apply_common(b);
  }
  for (std::string const& name : g_options.resources) {
    for (int const threads : mt_thread_counts) {
      std::string const id = "random_mt/" + name + "/" + std::to_string(threads);
      auto* b = benchmark::RegisterBenchmark(id.c_str(), bm_random_mt, id, name, threads);
      b->UseManualTime()->Unit(benchmark::kMillisecond);
      if (smoke) { b->Iterations(2); }
      apply_common(b);
    }
  }
}

}  // namespace
}  // namespace gpumem::bench

int main(int argc, char** argv)
{
  using namespace gpumem::bench;
  if (auto const code = parse_options(argc, argv, "gpumem_bench_alloc", g_options)) { return *code; }
  int status = 1;
  try {
    auto const backend = gpumem::current_backend_kind();
    benchmark::AddCustomContext("gpumem_backend", std::string{gpumem::to_string(backend)});
    auto const props = gpumem::get_device_properties(gpumem::cuda_device_id{0});
    benchmark::AddCustomContext("gpumem_device", props.name);
    std::string resources;
    for (auto const& r : g_options.resources) { resources += (resources.empty() ? "" : ",") + r; }
    benchmark::AddCustomContext("gpumem_resources", resources);
    benchmark::AddCustomContext("gpumem_mode", g_options.smoke ? "smoke" : "full");
    register_benchmarks();
    status = run_benchmarks(argc, argv, g_options.timeout);
  } catch (std::exception const& e) {
    record_failure(std::string{"gpumem_bench_alloc: "} + e.what());
    status = 1;
  }
  g_context.reset();
  return status;
}
