// gpumem_bench_alloc: docs/benchmarks.md's allocation workloads over any registered resource, with the
// CUDA peers in the same run.
//
//   fixed/<resource>/<size>       allocate then free one block, in a loop (256B 4KiB 64KiB 1MiB 64MiB);
//                                 figure: ns_per_pair (one allocate + one deallocate)
//   fixed_foreign/<resource>/<size>  the same on a stream made with the backend's stream_create, as CuPy,
//                                 PyTorch or raw CUDA make them (never announced to gpumem: frees on it
//                                 record its event during the call, docs/streams.md); 256B 64KiB 1MiB
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
//   random_streams/<resource>/16x4  `random_mt` in 16 threads with 4 streams each (64 streams): the block of
//                                 slot k of a thread is allocated and freed on that thread's stream k % 4;
//                                 figure: wall ns_per_op; fragmentation_over_random = this fragmentation
//                                 minus random/<resource>'s (single thread, single stream)
//
// Method. The operation sequences are generated before timing (the RNG is not measured). Each benchmark
// builds its resource once (and its streams); before the first timed iteration it runs its pattern once
// untimed on that fresh resource: this warms pools and caches (the figures are steady state, cudaMallocAsync's
// pool included) and verifies every allocation (non-null, 256-byte aligned, never overlapping another live
// block) and measures peak live bytes. Any exception or failed check fails the benchmark and the exit status;
// a benchmark call that outlives --timeout ends the process (bench_support.hpp).
// Counters: ns_per_pair / ns_per_op, pairs_per_s / ops_per_s, ops and bytes_allocated per pass, peak live
// bytes; for sub-allocators, peak_upstream_bytes (bytes taken from the cuda_memory_resource below, through
// mr::statistics_resource_adaptor) and fragmentation = peak_upstream_bytes / peak_live_bytes. On several threads
// (random_mt/<T> with T > 1, random_streams), where the interleaving and so the peaks differ from pass to pass,
// a gpumem resource's fragmentation is the median over the untimed passes of fragmentation_samples fresh
// instances (each its own pass's peaks), with fragmentation_min and fragmentation_max; in random_mt and
// random_streams, for resources that count them (vmm), cross_stream_share = the share of the timed allocations
// that took a block another stream freed (each makes its stream wait for that one), and waits_per_cross_take
// = how many other streams such an allocation waits for on average (the streams of the pieces it is cut from).

#include "../common/bench_support.hpp"
#include "../common/resource_registry.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/bench/measure.hpp>
#include <gpumem/bench/worker_team.hpp>
#include <gpumem/bench/workload.hpp>
#include <gpumem/cuda_stream_pool.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/device.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace gpumem::bench {
namespace {

using clock_type = std::chrono::steady_clock;

constexpr std::array<int, 3> mt_thread_counts{1, 4, 16};
constexpr int streams_threads = 16;         // random_streams: threads
constexpr std::size_t streams_per_thread = 4;  // random_streams: streams per thread

options g_options;
std::map<std::string, double> g_random_fragmentation;  // resource -> random/<resource>'s latest fragmentation

[[nodiscard]] random_shape workload_shape() { return g_options.smoke ? random_smoke : random_full; }

/** @brief The sequences of a `random` pass split over `threads` threads (cached: generated once). */
[[nodiscard]] std::vector<sequence> const& sequences_for(int threads)
{
  static std::map<int, std::vector<sequence>> cache;
  auto [it, inserted] = cache.try_emplace(threads);
  if (inserted) { it->second = split_random(workload_shape(), static_cast<std::size_t>(threads)); }
  return it->second;
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
  std::vector<double> fragmentation_samples;  // random_mt on several threads: one per fresh instance's pass
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
  std::optional<std::size_t> const peak = ctx.resource.peak_upstream_bytes();
  if (!peak) { return; }
  auto const peak_reserved = static_cast<double>(*peak);
  state.counters["peak_upstream_bytes"] = peak_reserved;
  if (std::optional<std::size_t> const calls = ctx.resource.upstream_allocations()) {
    state.counters["upstream_allocations"] = static_cast<double>(*calls);
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

/// A stream gpumem did not create and is never told about, for fixed_foreign (kept until the process ends).
cuda_stream_view foreign_stream()
{
  static cudaStream_t const stream = detail::get_backend().stream_create(cudaStreamNonBlocking, 0);
  return cuda_stream_view{stream};
}

void bm_fixed(benchmark::State& state, std::string const& id, std::string const& resource_name, std::size_t bytes,
              bool on_foreign_stream)
{
  watchdog_scope const watch{id};
  try {
    bench_context& ctx = context_for(id, resource_name, 1, bytes);
    mr::device_memory_resource& resource = ctx.resource.get();
    cuda_stream_view const stream = on_foreign_stream ? foreign_stream() : ctx.streams->get_stream(0);
    if (!ctx.warmed) {
      // Two blocks at once: both valid and disjoint; then the pattern once, untimed.
      block_checker checker;
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
      void* p = resource.allocate(bytes, stream);
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
      block_checker checker;
      live_meter meter;
      if (std::string const error = run_sequence_checked(resource, stream, seq, slots, checker, meter); !error.empty()) {
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
      run_sequence(resource, stream, seq, slots);
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
    if (auto const f = state.counters.find("fragmentation"); f != state.counters.end()) {
      g_random_fragmentation[resource_name] = f->second.value;
    }
  } catch (std::exception const& e) {
    record_failure(state, id + ": " + e.what());
  }
}

// ---- random_mt/<resource>/<threads> ---------------------------------------------------------------------

std::map<std::string, double> g_one_thread_ns_per_op;  // resource -> random_mt/<resource>/1's latest figure

/// Fresh instances of a gpumem resource (not of a peer) whose untimed pass each gives one fragmentation sample
/// in random_mt and random_streams on several threads: the threads' interleaving, and so the peaks, differ
/// from pass to pass.
constexpr std::size_t fragmentation_samples = 5;

/// random_mt/<resource>/<threads> (per_thread 1) and random_streams/<resource>/<threads>x<per_thread>.
void bm_random_mt(benchmark::State& state, std::string const& id, std::string const& resource_name, int threads,
                  std::size_t per_thread)
{
  watchdog_scope const watch{id};
  try {
    std::vector<sequence> const& seqs = sequences_for(threads);
    auto const n = static_cast<std::size_t>(threads);
    bench_context& ctx = context_for(id, resource_name, n * per_thread, workload_shape().max_size);
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
    std::vector<cuda_stream_view> streams;
    for (std::size_t t = 0; t < n * per_thread; ++t) { streams.push_back(ctx.streams->get_stream(t)); }
    auto const streams_of = [&](std::size_t t) {
      return std::span<cuda_stream_view const>{streams}.subspan(t * per_thread, per_thread);
    };
    first_error error;
    std::vector<double>& samples = ctx.fragmentation_samples;  // of each fresh instance's untimed pass
    // The untimed verification pass on `r` (a fresh instance): its peak live bytes, or nullopt after a failure.
    auto const verify = [&](resource_handle const& r) -> std::optional<std::size_t> {
      block_checker checker;
      live_meter meter;
      team.run([&](std::size_t t) {
        std::string const e = run_sequence_checked(r.get(), streams_of(t), seqs[t], slots[t], checker, meter);
        if (!e.empty()) { error.set("thread " + std::to_string(t) + ": " + e); }
      });
      if (std::string const e = error.get(); !e.empty()) {
        record_failure(state, id + " (untimed verification pass): " + e);
        return std::nullopt;
      }
      std::optional<std::size_t> const upstream = r.peak_upstream_bytes();
      if (upstream && meter.peak.load() > 0 && !r.reserves_upfront()) {
        samples.push_back(static_cast<double>(*upstream) / static_cast<double>(meter.peak.load()));
      }
      return meter.peak.load();
    };
    if (!ctx.warmed) {
      std::optional<std::size_t> const live = verify(ctx.resource);
      if (!live) { return; }
      ctx.peak_live_bytes = *live;
      ctx.warmed = true;
      registry::resource_info const* const info = registry::find_resource(resource_name);
      if (threads > 1 && !samples.empty() && info != nullptr && !info->peer) {
        for (std::size_t k = 1; k < fragmentation_samples; ++k) {  // one instance at a time: the last goes first
          resource_handle const fresh = make_resource(resource_name, workload_shape().max_size);
          if (!verify(fresh)) { return; }
        }
      }
    }
    double total_seconds = 0;
    std::optional<std::size_t> const cross_before = ctx.resource.cross_stream_takes();
    std::optional<std::size_t> const waits_before = ctx.resource.cross_stream_waits();
    for (auto _ : state) {
      double const seconds = run_sequences(team, resource, streams, seqs, slots, error, per_thread);
      state.SetIterationTime(seconds);
      total_seconds += seconds;
      if (std::string const e = error.get(); !e.empty()) {
        record_failure(state, id + ": " + e);
        return;
      }
    }
    double const total_ops = static_cast<double>(ops) * static_cast<double>(state.iterations());
    state.counters["streams"] = static_cast<double>(n * per_thread);
    double const ns_per_op = total_seconds * 1e9 / total_ops;
    state.counters["ns_per_op"] = ns_per_op;
    state.counters["ops_per_s"] = total_ops / total_seconds;
    state.counters["ops"] = static_cast<double>(ops);
    state.counters["allocations"] = static_cast<double>(allocations);
    state.counters["bytes_allocated"] = static_cast<double>(bytes_allocated);
    state.counters["threads"] = threads;
    state.counters["peak_live_bytes"] = static_cast<double>(ctx.peak_live_bytes);
    if (std::optional<std::size_t> const cross = ctx.resource.cross_stream_takes(); cross && cross_before) {
      // The share of the timed allocations that took a block another stream freed (each a stream wait).
      state.counters["cross_stream_share"] = static_cast<double>(*cross - *cross_before) /
                                             (static_cast<double>(allocations) * static_cast<double>(state.iterations()));
      std::optional<std::size_t> const waits = ctx.resource.cross_stream_waits();
      if (waits && waits_before && *cross > *cross_before) {
        // How many other streams such an allocation waits for, on average.
        state.counters["waits_per_cross_take"] = static_cast<double>(*waits - *waits_before) /
                                                 static_cast<double>(*cross - *cross_before);
      }
    }
    if (per_thread == 1 && threads == 1) {  // random_streams has no speedup figure: its 1-thread peer has one stream
      g_one_thread_ns_per_op[resource_name] = ns_per_op;
    } else if (auto const it = g_one_thread_ns_per_op.find(resource_name);
               per_thread == 1 && it != g_one_thread_ns_per_op.end()) {
      state.counters["speedup_vs_1_thread"] = it->second / ns_per_op;
    }
    set_upstream_counters(state, ctx, ctx.peak_live_bytes, true);
    if (samples.size() > 1) {
      // Each fresh instance's own pass, rather than the timed instance's peak over every pass: the median,
      // and the range.
      state.counters["fragmentation"] = bench::median(samples);
      state.counters["fragmentation_min"] = *std::min_element(samples.begin(), samples.end());
      state.counters["fragmentation_max"] = *std::max_element(samples.begin(), samples.end());
      state.counters["fragmentation_samples"] = static_cast<double>(samples.size());
    }
    if (auto const f = state.counters.find("fragmentation"); per_thread > 1 && f != state.counters.end()) {
      if (auto const r = g_random_fragmentation.find(resource_name); r != g_random_fragmentation.end()) {
        state.counters["fragmentation_over_random"] = f->second.value - r->second;
      }
    }
  } catch (std::exception const& e) {
    record_failure(state, id + ": " + e.what());
  }
}

// ---- registration ---------------------------------------------------------------------------------------

void register_benchmarks()
{
  bool const smoke = g_options.smoke;
  for (std::string const& name : g_options.resources) {
    for (fixed_size const& size : fixed_sizes) {
      for (bool const foreign : {false, true}) {
        std::string_view const label{size.label};
        if (foreign && label != "256B" && label != "64KiB" && label != "1MiB") { continue; }
        std::string const id = (foreign ? "fixed_foreign/" : "fixed/") + name + "/" + size.label;
        auto* b = benchmark::RegisterBenchmark(id.c_str(), bm_fixed, id, name, size.bytes, foreign);
        b->UseRealTime()->Unit(benchmark::kNanosecond);
        if (smoke) { b->Iterations(64); }
        apply_common(b, g_options);
      }
    }
  }
  for (std::string const& name : g_options.resources) {
    std::string const id = "random/" + name;
    auto* b = benchmark::RegisterBenchmark(id.c_str(), bm_random, id, name);
    b->UseManualTime()->Unit(benchmark::kMillisecond);
    if (smoke) { b->Iterations(2); }
    apply_common(b, g_options);
  }
  for (std::string const& name : g_options.resources) {
    for (int const threads : mt_thread_counts) {
      std::string const id = "random_mt/" + name + "/" + std::to_string(threads);
      auto* b = benchmark::RegisterBenchmark(id.c_str(), bm_random_mt, id, name, threads, std::size_t{1});
      b->UseManualTime()->Unit(benchmark::kMillisecond);
      if (smoke) { b->Iterations(2); }
      apply_common(b, g_options);
    }
  }
  for (std::string const& name : g_options.resources) {
    std::string const id = "random_streams/" + name + "/" + std::to_string(streams_threads) + "x" +
                           std::to_string(streams_per_thread);
    auto* b = benchmark::RegisterBenchmark(id.c_str(), bm_random_mt, id, name, streams_threads, streams_per_thread);
    b->UseManualTime()->Unit(benchmark::kMillisecond);
    if (smoke) { b->Iterations(2); }
    apply_common(b, g_options);
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
