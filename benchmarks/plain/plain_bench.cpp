// gpumem_bench_plain: what the plain API (plain.hpp) adds to its resource, in the same run.
//
//   plain/pool/<size>                       pool_memory_resource::allocate + deallocate, called directly
//   plain/alloc_free/<size>                 gpumem::alloc + gpumem::free with that pool as the current
//                                           device resource (the per-device lookup and the pointer registry
//                                           on top of the pool)
//   plain/get_current_device_resource       mr::get_current_device_resource() alone
//
// Sizes 256B and 1MiB; the pool (over cudaMalloc, 64 MiB initial size) is built once per run. Figure:
// ns_per_pair (ns_per_call for the lookup), the median over repetitions. Before timing, each pair benchmark
// checks two live blocks: not null, 256-byte aligned, disjoint; the plain API's must also report their size
// (gpumem::allocation_size). Any failure fails the run (bench_support.hpp).

#include "../common/bench_support.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/device.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/per_device_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/plain.hpp>

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>

namespace gpumem::bench {
namespace {

options g_options;

struct plain_size {
  char const* label;
  std::size_t bytes;
};
constexpr plain_size sizes[] = {{"256B", 256}, {"1MiB", std::size_t{1} << 20}};

/// The pool every benchmark of the run shares, over cudaMalloc.
mr::pool_memory_resource& pool()
{
  static mr::cuda_memory_resource upstream;
  static mr::pool_memory_resource resource{&upstream, std::size_t{64} << 20};
  return resource;
}

/// Makes the pool the current device resource for one benchmark; restores the previous one.
class current_pool {
 public:
  current_pool() : previous_{mr::set_current_device_resource(&pool())} {}
  ~current_pool() { mr::set_current_device_resource(previous_); }
  current_pool(current_pool const&) = delete;
  current_pool& operator=(current_pool const&) = delete;

 private:
  mr::device_memory_resource* previous_;
};

/// @return an error for two blocks `a` and `b` of `bytes` that are null, misaligned or overlapping, else "".
std::string check_pair(void const* a, void const* b, std::size_t bytes)
{
  auto const x = reinterpret_cast<std::uintptr_t>(a);
  auto const y = reinterpret_cast<std::uintptr_t>(b);
  if (x == 0 || y == 0) { return "a null block"; }
  if (x % 256 != 0 || y % 256 != 0) { return "a block not 256-byte aligned"; }
  if (x < y + bytes && y < x + bytes) { return "two live blocks overlap"; }
  return {};
}

void set_pair_counters(benchmark::State& state, double seconds)
{
  auto const pairs = static_cast<double>(state.iterations());
  state.counters["ns_per_pair"] = seconds * 1e9 / pairs;
  state.counters["pairs_per_s"] = pairs / seconds;
}

void bm_pool(benchmark::State& state, std::string const& id, std::size_t bytes)
{
  watchdog_scope const watch{id};
  try {
    mr::pool_memory_resource& resource = pool();
    void* const a = resource.allocate(bytes);
    void* const b = resource.allocate(bytes);
    std::string const error = check_pair(a, b, bytes);
    resource.deallocate(b, bytes);
    resource.deallocate(a, bytes);
    if (!error.empty()) {
      record_failure(state, id + ": " + error);
      return;
    }
    auto const start = std::chrono::steady_clock::now();
    for (auto _ : state) {
      void* p = resource.allocate(bytes);
      benchmark::DoNotOptimize(p);
      resource.deallocate(p, bytes);
    }
    set_pair_counters(state, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  } catch (std::exception const& e) {
    record_failure(state, id + ": " + e.what());
  }
}

void bm_alloc_free(benchmark::State& state, std::string const& id, std::size_t bytes)
{
  watchdog_scope const watch{id};
  try {
    current_pool const current;
    void* const a = gpumem::alloc(bytes);
    void* const b = gpumem::alloc(bytes);
    std::string error = check_pair(a, b, bytes);
    if (error.empty() && (gpumem::allocation_size(a) != bytes || gpumem::allocation_size(b) != bytes)) {
      error = "gpumem::allocation_size does not report the size asked for";
    }
    gpumem::free(b);
    gpumem::free(a);
    if (!error.empty()) {
      record_failure(state, id + ": " + error);
      return;
    }
    auto const start = std::chrono::steady_clock::now();
    for (auto _ : state) {
      void* p = gpumem::alloc(bytes);
      benchmark::DoNotOptimize(p);
      gpumem::free(p);
    }
    set_pair_counters(state, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  } catch (std::exception const& e) {
    record_failure(state, id + ": " + e.what());
  }
}

void bm_lookup(benchmark::State& state, std::string const& id)
{
  watchdog_scope const watch{id};
  try {
    current_pool const current;
    if (mr::get_current_device_resource() != &pool()) {
      record_failure(state, id + ": the lookup does not return the resource just set");
      return;
    }
    auto const start = std::chrono::steady_clock::now();
    for (auto _ : state) { benchmark::DoNotOptimize(mr::get_current_device_resource()); }
    double const seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    state.counters["ns_per_call"] = seconds * 1e9 / static_cast<double>(state.iterations());
  } catch (std::exception const& e) {
    record_failure(state, id + ": " + e.what());
  }
}

void configure(benchmark::internal::Benchmark* b)
{
  b->UseRealTime()->Unit(benchmark::kNanosecond);
  if (g_options.smoke) { b->Iterations(64); }
  apply_common(b, g_options);
}

void register_benchmarks()
{
  for (plain_size const& size : sizes) {
    std::string const pool_id = std::string{"plain/pool/"} + size.label;
    configure(benchmark::RegisterBenchmark(pool_id.c_str(), bm_pool, pool_id, size.bytes));
    std::string const plain_id = std::string{"plain/alloc_free/"} + size.label;
    configure(benchmark::RegisterBenchmark(plain_id.c_str(), bm_alloc_free, plain_id, size.bytes));
  }
  std::string const lookup_id = "plain/get_current_device_resource";
  configure(benchmark::RegisterBenchmark(lookup_id.c_str(), bm_lookup, lookup_id));
}

}  // namespace
}  // namespace gpumem::bench

int main(int argc, char** argv)
{
  using namespace gpumem::bench;
  if (auto const code = parse_options(argc, argv, "gpumem_bench_plain", g_options)) { return *code; }
  int status = 1;
  try {
    benchmark::AddCustomContext("gpumem_backend", std::string{gpumem::to_string(gpumem::current_backend_kind())});
    benchmark::AddCustomContext("gpumem_device", gpumem::get_device_properties(gpumem::cuda_device_id{0}).name);
    benchmark::AddCustomContext("gpumem_mode", g_options.smoke ? "smoke" : "full");
    register_benchmarks();
    status = run_benchmarks(argc, argv, g_options.timeout);
  } catch (std::exception const& e) {
    record_failure(std::string{"gpumem_bench_plain: "} + e.what());
    status = 1;
  }
  return status;
}
