// gpumem_bench_vmm: what the virtual-memory calls under vmm_pool_memory_resource cost, through the backend's
// provider (mr::make_device_vmm_provider: the driver's cuMem* calls on the cuda backend, memfd mappings on
// the host backend). A growth of the VMM pool pays one create + map per piece of physical memory.
//
//   vmm/piece/<size>     one piece of physical memory: create, map (with access), unmap, release, in a loop;
//                        sizes 2MiB (one granule), 32MiB (the default slab), 128MiB; figure: us_per_piece,
//                        and each call's mean: create_us, map_us, unmap_us, release_us
//   vmm/grow/<T>         64 slabs of 32 MiB created and mapped from T host threads (1, 2, 4, 8), each thread
//                        its share, then unmapped and released (untimed); figure: us_per_slab (wall time of
//                        the create + map phase / 64), speedup_vs_1_thread, slabs and slab_bytes
//
// One reservation of address space serves the whole run. Before timing, each benchmark maps one piece and
// checks that the provider counts it (its device's free memory falls by at least the piece) and gives it
// back. --smoke uses 2 MiB slabs and 4 of them per growth.

#include "../common/bench_support.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/backend/virtual_memory_provider.hpp>
#include <gpumem/device.hpp>

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace gpumem::bench {
namespace {

options g_options;
constexpr std::size_t mib = std::size_t{1} << 20;
constexpr int grow_slabs_full = 64;
constexpr int grow_slabs_smoke = 4;

using clock_type = std::chrono::steady_clock;

double us_between(clock_type::time_point a, clock_type::time_point b)
{
  return std::chrono::duration<double, std::micro>(b - a).count();
}

/// The provider of device 0 and one reservation large enough for any benchmark of the run.
struct vmm_context {
  std::unique_ptr<mr::virtual_memory_provider> provider = mr::make_device_vmm_provider(0);
  std::size_t bytes = std::size_t{4} << 30;
  std::uintptr_t base = provider->reserve(bytes);
  vmm_context() = default;
  ~vmm_context() { provider->unreserve(base, bytes); }
  vmm_context(vmm_context const&) = delete;
  vmm_context& operator=(vmm_context const&) = delete;
};

vmm_context& context()
{
  static vmm_context ctx;
  return ctx;
}

/// Creates and maps one piece of `bytes` at the reservation's start and checks the device's free memory
/// fell by it. @return an error, or "" (the piece is given back either way).
std::string check_one_piece(vmm_context& ctx, std::size_t bytes)
{
  std::size_t const free_before = ctx.provider->mem_info().free;
  mr::physical_handle const h = ctx.provider->create(bytes);
  if (h == 0) { return "create of " + std::to_string(bytes) + " bytes found no memory"; }
  ctx.provider->map(ctx.base, bytes, h);
  std::size_t const free_after = ctx.provider->mem_info().free;
  ctx.provider->unmap(ctx.base, bytes);
  ctx.provider->release(h);
  if (free_before < free_after + bytes) {
    return "a mapped piece of " + std::to_string(bytes) + " bytes did not lower the device's free memory (" +
           std::to_string(free_before) + " before, " + std::to_string(free_after) + " after)";
  }
  return {};
}

void bm_piece(benchmark::State& state, std::string const& id, std::size_t bytes)
{
  watchdog_scope const watch{id};
  try {
    vmm_context& ctx = context();
    if (std::string const error = check_one_piece(ctx, bytes); !error.empty()) {
      record_failure(state, id + ": " + error);
      return;
    }
    double create = 0, map = 0, unmap = 0, release = 0;
    for (auto _ : state) {
      auto const t0 = clock_type::now();
      mr::physical_handle const h = ctx.provider->create(bytes);
      auto const t1 = clock_type::now();
      if (h == 0) {
        record_failure(state, id + ": create found no memory");
        return;
      }
      ctx.provider->map(ctx.base, bytes, h);
      auto const t2 = clock_type::now();
      ctx.provider->unmap(ctx.base, bytes);
      auto const t3 = clock_type::now();
      ctx.provider->release(h);
      auto const t4 = clock_type::now();
      create += us_between(t0, t1);
      map += us_between(t1, t2);
      unmap += us_between(t2, t3);
      release += us_between(t3, t4);
      state.SetIterationTime(us_between(t0, t4) / 1e6);
    }
    auto const n = static_cast<double>(state.iterations());
    state.counters["create_us"] = create / n;
    state.counters["map_us"] = map / n;
    state.counters["unmap_us"] = unmap / n;
    state.counters["release_us"] = release / n;
    state.counters["us_per_piece"] = (create + map + unmap + release) / n;
  } catch (std::exception const& e) {
    record_failure(state, id + ": " + e.what());
  }
}

/// us_per_slab of vmm/grow/1 in this run, for speedup_vs_1_thread.
std::map<int, double>& grow_figures()
{
  static std::map<int, double> figures;
  return figures;
}

void bm_grow(benchmark::State& state, std::string const& id, int threads)
{
  watchdog_scope const watch{id};
  try {
    vmm_context& ctx = context();
    std::size_t const slab = (g_options.smoke ? 2 : 32) * mib;
    int const slabs = g_options.smoke ? grow_slabs_smoke : grow_slabs_full;
    if (std::string const error = check_one_piece(ctx, slab); !error.empty()) {
      record_failure(state, id + ": " + error);
      return;
    }
    std::vector<mr::physical_handle> handles(static_cast<std::size_t>(slabs), 0);
    double total_us = 0;
    for (auto _ : state) {
      std::mutex error_mutex;
      std::string error;
      auto const start = clock_type::now();
      std::vector<std::thread> team;
      for (int t = 0; t < threads; ++t) {
        team.emplace_back([&, t] {
          try {
            for (int i = t; i < slabs; i += threads) {
              mr::physical_handle const h = ctx.provider->create(slab);
              if (h == 0) { throw std::runtime_error{"create found no memory"}; }
              handles[static_cast<std::size_t>(i)] = h;
              ctx.provider->map(ctx.base + static_cast<std::uintptr_t>(i) * slab, slab, h);
            }
          } catch (std::exception const& e) {
            std::lock_guard const lock{error_mutex};
            error = e.what();
          }
        });
      }
      for (std::thread& worker : team) { worker.join(); }
      auto const stop = clock_type::now();
      for (int i = 0; i < slabs; ++i) {  // untimed: give everything back, mapped or not
        mr::physical_handle& h = handles[static_cast<std::size_t>(i)];
        if (h == 0) { continue; }
        if (error.empty()) { ctx.provider->unmap(ctx.base + static_cast<std::uintptr_t>(i) * slab, slab); }
        ctx.provider->release(h);
        h = 0;
      }
      if (!error.empty()) {
        record_failure(state, id + ": " + error);
        return;
      }
      total_us += us_between(start, stop);
      state.SetIterationTime(us_between(start, stop) / 1e6);
    }
    double const us_per_slab = total_us / static_cast<double>(state.iterations()) / slabs;
    state.counters["us_per_slab"] = us_per_slab;
    state.counters["slabs"] = slabs;
    state.counters["slab_bytes"] = static_cast<double>(slab);
    if (threads == 1) { grow_figures()[1] = us_per_slab; }
    if (auto const it = grow_figures().find(1); it != grow_figures().end()) {
      state.counters["speedup_vs_1_thread"] = it->second / us_per_slab;
    }
  } catch (std::exception const& e) {
    record_failure(state, id + ": " + e.what());
  }
}

void configure(benchmark::internal::Benchmark* b)
{
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
  if (g_options.smoke) { b->Iterations(2); }
  apply_common(b, g_options);
}

void register_benchmarks()
{
  for (std::size_t const size_mib : {std::size_t{2}, std::size_t{32}, std::size_t{128}}) {
    if (g_options.smoke && size_mib > 2) { continue; }
    std::string const id = "vmm/piece/" + std::to_string(size_mib) + "MiB";
    configure(benchmark::RegisterBenchmark(id.c_str(), bm_piece, id, size_mib * mib));
  }
  for (int const threads : {1, 2, 4, 8}) {
    std::string const id = "vmm/grow/" + std::to_string(threads);
    configure(benchmark::RegisterBenchmark(id.c_str(), bm_grow, id, threads));
  }
}

}  // namespace
}  // namespace gpumem::bench

int main(int argc, char** argv)
{
  using namespace gpumem::bench;
  if (auto const code = parse_options(argc, argv, "gpumem_bench_vmm", g_options)) { return *code; }
  int status = 1;
  try {
    benchmark::AddCustomContext("gpumem_backend", std::string{gpumem::to_string(gpumem::current_backend_kind())});
    benchmark::AddCustomContext("gpumem_device", gpumem::get_device_properties(gpumem::cuda_device_id{0}).name);
    benchmark::AddCustomContext("gpumem_mode", g_options.smoke ? "smoke" : "full");
    benchmark::AddCustomContext("gpumem_vmm_provider", context().provider->describe());
    register_benchmarks();
    status = run_benchmarks(argc, argv, g_options.timeout);
  } catch (std::exception const& e) {
    record_failure(std::string{"gpumem_bench_vmm: "} + e.what());
    status = 1;
  }
  return status;
}
