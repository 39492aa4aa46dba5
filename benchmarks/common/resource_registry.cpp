// The resource registry (resource_registry.hpp): one line per resource in `entries` below.

#include "resource_registry.hpp"

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/device.hpp>
#include <gpumem/mr/arena_memory_resource.hpp>
#include <gpumem/mr/binning_memory_resource.hpp>
#include <gpumem/mr/cuda_async_memory_resource.hpp>
#include <gpumem/mr/cuda_async_view_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/fixed_size_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <stdexcept>

namespace gpumem::bench {

counting_resource* resource_builder::counted_cuda_upstream()
{
  auto* const cuda = emplace<mr::cuda_memory_resource>();
  auto* const counter = emplace<counting_resource>(cuda);
  handle_->counter_ = counter;
  return counter;
}

std::size_t resource_builder::device_free_bytes() { return available_device_memory().free; }

namespace {

/** @brief cudaMallocAsync as programs use it: the device's default pool, release threshold at the maximum. */
void build_cuda_async_default(resource_builder& b)
{
  cuda_device_id const device = get_current_cuda_device();
  cudaMemPool_t const pool = mr::default_memory_pool(device);
  mr::set_release_threshold(pool, std::numeric_limits<std::uint64_t>::max());
  b.emplace<mr::cuda_async_view_memory_resource>(pool, device);
  // No peak-reserved probe: the default pool outlives the benchmark and keeps its high-water mark.
}

/** @brief gpumem's owning driver pool (its own cudaMemPool, release threshold: keep everything). */
void build_cuda_async(resource_builder& b)
{
  auto* const r = b.emplace<mr::cuda_async_memory_resource>();
  b.set_peak_reserved_probe([r] { return r->usage().reserved_high; });
}

/**
 * @brief The arena's size: 8 GiB, but never more than half the device's free memory (the host backend's
 * emulated device is 8 GiB in all by default).
 */
[[nodiscard]] std::size_t arena_bytes()
{
  constexpr std::size_t gib = std::size_t{1} << 30;
  constexpr std::size_t mib = std::size_t{1} << 20;
  std::size_t const half_free = resource_builder::device_free_bytes() / 2;
  return std::min(8 * gib, half_free / mib * mib);
}

/**
 * @brief fixed_size sized for the workload: blocks of its largest request, batches of at most 256 MiB
 * (128 blocks, RMM's default, up to 2 MiB blocks), one batch preallocated (RMM's default).
 */
void build_fixed_size(resource_builder& b)
{
  std::size_t const block = b.max_request();
  std::size_t const per_batch = std::clamp<std::size_t>((std::size_t{256} << 20) / block, 1, 128);
  b.emplace<mr::fixed_size_memory_resource>(b.counted_cuda_upstream(), block, per_batch, 1);
}

/** @brief RMM's benchmark configuration: power-of-two bins of 256 KiB .. 4 MiB over a pool; larger from the pool. */
void build_binning(resource_builder& b)
{
  auto* const pool = b.emplace<mr::pool_memory_resource>(b.counted_cuda_upstream(), 0);
  b.emplace<mr::binning_memory_resource>(pool, 18, 22);
}

// Registered resources. Peers first (cudaMalloc, then cudaMallocAsync), then gpumem's sub-allocators, each
// over a counted cuda_memory_resource so the benchmarks can report bytes taken from upstream, then gpumem's
// own driver pool. The first sub-allocator is the one --smoke runs by default.
// Add a resource here only once its header exists and compiles.
constexpr std::array entries{
  resource_entry{"cuda", "cudaMalloc/cudaFree per call (mr::cuda_memory_resource): the cudaMalloc peer", true,
                 [](resource_builder& b) { b.emplace<mr::cuda_memory_resource>(); }},
  resource_entry{"cuda_async_default",
                 "cudaMallocAsync on the device's default pool, release threshold UINT64_MAX: the cudaMallocAsync peer",
                 true, build_cuda_async_default},
  resource_entry{"pool", "mr::pool_memory_resource over cuda (initial size 0: grows by doubling, no maximum)", false,
                 [](resource_builder& b) { b.emplace<mr::pool_memory_resource>(b.counted_cuda_upstream(), 0); }},
  resource_entry{"arena", "mr::arena_memory_resource over cuda (arena: 8 GiB, at most half the free memory)", false,
                 [](resource_builder& b) {
                   b.emplace<mr::arena_memory_resource>(b.counted_cuda_upstream(), arena_bytes());
                   b.set_reserves_upfront();
                 }},
  resource_entry{"fixed_size",
                 "mr::fixed_size_memory_resource over cuda, block size = the workload's largest request", false,
                 build_fixed_size},
  resource_entry{"binning", "mr::binning_memory_resource: bins 256 KiB..4 MiB (RMM's benchmark setup) over a pool",
                 false, build_binning},
  resource_entry{"cuda_async", "mr::cuda_async_memory_resource: a driver pool of its own (cudaMemPoolCreate)",
                 false, build_cuda_async},
};

/**
 * @brief Deliberately broken resources that prove a failure cannot pass silently (ctest runs them and
 * expects a non-zero exit). Reachable only by explicit name; not listed, never in the defaults.
 */
class overlapping_resource final : public mr::device_memory_resource {
  // Every allocation is the same address: the second live block overlaps the first. Never dereferenced.
  void* do_allocate(std::size_t, cuda_stream_view) override { return block_; }
  void do_deallocate(void*, std::size_t, cuda_stream_view) noexcept override {}
  alignas(256) static inline char block_[256];
};

class failing_resource final : public mr::device_memory_resource {
  // The first 8 allocations succeed (from a cuda_memory_resource), then every one fails.
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    if (++calls_ > 8) { throw_out_of_memory("selftest_out_of_memory", bytes, 0, "(injected)"); }
    return upstream_.allocate(bytes, stream);
  }
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override
  {
    upstream_.deallocate(ptr, bytes, stream);
  }
  mr::cuda_memory_resource upstream_;
  std::atomic<int> calls_{0};
};

constexpr std::array selftest_entries{
  resource_entry{"selftest_overlapping", "broken on purpose: returns overlapping blocks", false,
                 [](resource_builder& b) { b.emplace<overlapping_resource>(); }},
  resource_entry{"selftest_out_of_memory", "broken on purpose: throws out_of_memory after 8 allocations", false,
                 [](resource_builder& b) { b.emplace<failing_resource>(); }},
};

}  // namespace

std::span<resource_entry const> registered_resources() noexcept { return entries; }

std::string known_resource_names()
{
  std::string names;
  for (auto const& e : entries) {
    if (!names.empty()) { names += ", "; }
    names += e.name;
  }
  return names;
}

resource_entry const* find_resource(std::string_view name) noexcept
{
  auto const named = [&](auto const& e) { return e.name == name; };
  if (auto const it = std::find_if(entries.begin(), entries.end(), named); it != entries.end()) { return &*it; }
  auto const it = std::find_if(selftest_entries.begin(), selftest_entries.end(), named);
  return it == selftest_entries.end() ? nullptr : &*it;
}

resource_handle make_resource(std::string_view name, std::size_t max_request)
{
  resource_entry const* const entry = find_resource(name);
  if (entry == nullptr) {
    throw std::invalid_argument("unknown resource '" + std::string{name} + "'; known resources: " +
                                known_resource_names());
  }
  resource_handle handle;
  handle.name_ = std::string{name};
  resource_builder builder{handle, max_request};
  entry->build(builder);
  if (!handle) { throw std::logic_error("resource '" + std::string{name} + "': its factory built nothing"); }
  return handle;
}

std::vector<std::string> parse_resource_list(std::string_view comma_separated)
{
  std::vector<std::string> names;
  if (comma_separated.empty()) {
    for (auto const& e : entries) { names.emplace_back(e.name); }
    return names;
  }
  while (!comma_separated.empty()) {
    std::size_t const comma = comma_separated.find(',');
    std::string_view const name = comma_separated.substr(0, comma);
    comma_separated = comma == std::string_view::npos ? std::string_view{} : comma_separated.substr(comma + 1);
    if (name.empty()) { continue; }
    if (find_resource(name) == nullptr) {
      throw std::invalid_argument("unknown resource '" + std::string{name} + "'; known resources: " +
                                  known_resource_names());
    }
    if (std::find(names.begin(), names.end(), name) != names.end()) {
      throw std::invalid_argument("resource '" + std::string{name} + "' named twice");
    }
    names.emplace_back(name);
  }
  if (names.empty()) { throw std::invalid_argument("no resource named; known resources: " + known_resource_names()); }
  return names;
}

}  // namespace gpumem::bench
