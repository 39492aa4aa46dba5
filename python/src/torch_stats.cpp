// The statistics gpumem.torch.memory_stats() reports: an observer of the allocator hooks (torch_hooks.hpp) that
// counts, per device, the allocations and bytes PyTorch holds (PyTorch's "allocation" and "allocated_bytes": current,
// peak, allocated, freed), the allocations that failed (num_ooms) and those retried after make_room
// (num_alloc_retries); the device's reserved bytes come from its resource when it is a VMM pool or a CUDA memory
// pool (CudaAsyncMemoryResource).
// Cost per allocation or free: a few relaxed atomic adds and a compare-exchange loop on each peak.
// Python (private): _torch_stats(device) -> dict, _torch_reset_peak(device), _torch_reset_accumulated(device).
#include "registry.hpp"
#include "torch_hooks.hpp"
#include "torch_resources.hpp"

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/mr/cuda_async_view_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>

#include <pybind11/stl.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace gpumem::python {
namespace {

using torch_resources::max_devices;

/** @brief PyTorch's Stat: current, peak, allocated (all time), freed (all time). */
struct stat {
  std::atomic<std::int64_t> current{0};
  std::atomic<std::int64_t> peak{0};
  std::atomic<std::int64_t> allocated{0};
  std::atomic<std::int64_t> freed{0};

  void increase(std::int64_t amount) noexcept
  {
    std::int64_t const now = current.fetch_add(amount, std::memory_order_relaxed) + amount;
    allocated.fetch_add(amount, std::memory_order_relaxed);
    std::int64_t seen = peak.load(std::memory_order_relaxed);
    while (now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {}
  }
  void decrease(std::int64_t amount) noexcept
  {
    current.fetch_sub(amount, std::memory_order_relaxed);
    freed.fetch_add(amount, std::memory_order_relaxed);
  }
  void reset_peak() noexcept { peak.store(current.load(std::memory_order_relaxed), std::memory_order_relaxed); }
  void reset_accumulated() noexcept
  {
    allocated.store(0, std::memory_order_relaxed);
    freed.store(0, std::memory_order_relaxed);
  }
  void clear() noexcept
  {
    current.store(0, std::memory_order_relaxed);
    peak.store(0, std::memory_order_relaxed);
    reset_accumulated();
  }
};

struct device_stats {
  stat allocation;
  stat allocated_bytes;
  std::atomic<std::int64_t> num_ooms{0};
  std::atomic<std::int64_t> num_alloc_retries{0};
};

std::array<device_stats, max_devices>& all_stats()
{
  static auto* const instance = new std::array<device_stats, max_devices>;  // NOLINT: leaked, see torch_resources
  return *instance;
}

device_stats* stats_of(int device) noexcept
{
  if (device < 0) {
    try {
      device = get_current_cuda_device().value();
    } catch (...) {
      return nullptr;
    }
  }
  return device < max_devices ? &all_stats()[static_cast<std::size_t>(device)] : nullptr;
}

device_stats& checked_stats(int device)
{
  int const resolved = device >= 0 ? device : get_current_cuda_device().value();
  device_stats* const stats = stats_of(resolved);
  if (stats == nullptr) {
    throw std::invalid_argument("gpumem.torch: device " + std::to_string(resolved) + " is beyond the " +
                                std::to_string(max_devices) + " devices gpumem.torch keeps statistics for");
  }
  return *stats;
}

void observe(torch_hooks::allocation_event const& event) noexcept
{
  device_stats* const stats = stats_of(event.device);
  if (stats == nullptr) { return; }
  auto const bytes = static_cast<std::int64_t>(event.size);
  switch (event.what) {
    case torch_hooks::allocation_event::action::alloc:
      stats->allocation.increase(1);
      stats->allocated_bytes.increase(bytes);
      break;
    case torch_hooks::allocation_event::action::free:
      stats->allocation.decrease(1);
      stats->allocated_bytes.decrease(bytes);
      break;
    case torch_hooks::allocation_event::action::oom: stats->num_ooms.fetch_add(1, std::memory_order_relaxed); break;
  }
}

[[maybe_unused]] bool const observing = (torch_hooks::add_observer(&observe), true);

py::dict stat_dict(stat const& s)
{
  py::dict d;
  d["current"] = s.current.load(std::memory_order_relaxed);
  d["peak"] = s.peak.load(std::memory_order_relaxed);
  d["allocated"] = s.allocated.load(std::memory_order_relaxed);
  d["freed"] = s.freed.load(std::memory_order_relaxed);
  return d;
}

/** @brief The raw statistics of `device` (< 0: current); gpumem.torch._stats shapes them as PyTorch does. */
py::dict stats_dict(int device)
{
  int const resolved = device >= 0 ? device : get_current_cuda_device().value();
  device_stats& stats = checked_stats(resolved);
  py::dict d;
  d["device"] = resolved;
  d["allocation"] = stat_dict(stats.allocation);
  d["allocated_bytes"] = stat_dict(stats.allocated_bytes);
  d["num_ooms"] = stats.num_ooms.load(std::memory_order_relaxed);
  d["num_alloc_retries"] = stats.num_alloc_retries.load(std::memory_order_relaxed);
  std::shared_ptr<mr::device_memory_resource> const base = torch_resources::base_resource(resolved);
  d["resource"] = py::none();
  if (auto const* vmm = dynamic_cast<mr::vmm_pool_memory_resource const*>(base.get())) {
    d["resource"] = "vmm";
    d["reserved_current"] = vmm->physical_bytes();
    d["reserved_peak"] = vmm->peak_physical_bytes();
    d["slab_size"] = vmm->slab_size();
    d["slab_count"] = vmm->slab_count();
    d["mapping_count"] = vmm->mapping_count();
    d["slabs_created"] = vmm->slabs_created();
    d["slabs_released"] = vmm->slabs_released();
    d["slabs_moved"] = vmm->slabs_moved();
    d["cross_stream_takes"] = vmm->cross_stream_takes();
    d["cross_stream_waits"] = vmm->cross_stream_waits();
    d["free_bytes"] = vmm->free_bytes();
    d["largest_free_block"] = vmm->largest_free_block();
    d["maximum_physical_size"] = vmm->maximum_physical_size();
  } else if (auto const* async = dynamic_cast<mr::cuda_async_view_memory_resource const*>(base.get())) {
    d["resource"] = "async";
    auto const usage = async->usage();
    d["reserved_current"] = usage.reserved_current;
    d["reserved_peak"] = usage.reserved_high;
  } else if (auto const* pool = dynamic_cast<mr::pool_memory_resource const*>(base.get())) {
    d["resource"] = "pool";
    d["pool_size"] = pool->pool_size();
  } else if (base) {
    d["resource"] = "other";
  }
  return d;
}

registration const torch_stats_binding{binding_order::allocators, "torch_stats", [](py::module_& m) {
  m.def("_torch_stats", &stats_dict, py::arg("device") = -1,
        "The device's raw gpumem.torch statistics (a dict; gpumem.torch.memory_stats shapes it).");
  m.def(
    "_torch_reset_peak",
    [](int device) {
      device_stats& stats = checked_stats(device);
      stats.allocation.reset_peak();
      stats.allocated_bytes.reset_peak();
      int const resolved = device >= 0 ? device : get_current_cuda_device().value();
      std::shared_ptr<mr::device_memory_resource> const base = torch_resources::base_resource(resolved);
      if (auto* vmm = dynamic_cast<mr::vmm_pool_memory_resource*>(base.get())) { vmm->reset_peak_physical_bytes(); }
    },
    py::arg("device") = -1, "Sets every peak of the device's statistics to its current value.");
  m.def(
    "_torch_reset_accumulated",
    [](int device) {
      device_stats& stats = checked_stats(device);
      stats.allocation.reset_accumulated();
      stats.allocated_bytes.reset_accumulated();
      stats.num_ooms.store(0, std::memory_order_relaxed);
      stats.num_alloc_retries.store(0, std::memory_order_relaxed);
    },
    py::arg("device") = -1, "Sets the device's all-time counts (allocated, freed, num_ooms, num_alloc_retries) to 0.");
}};

}  // namespace

namespace torch_resources {

void count_alloc_retry(int device) noexcept
{
  if (device_stats* const stats = stats_of(device)) { stats->num_alloc_retries.fetch_add(1, std::memory_order_relaxed); }
}

void reset_statistics() noexcept
{
  for (device_stats& stats : all_stats()) {
    stats.allocation.clear();
    stats.allocated_bytes.clear();
    stats.num_ooms.store(0, std::memory_order_relaxed);
    stats.num_alloc_retries.store(0, std::memory_order_relaxed);
  }
}

}  // namespace torch_resources
}  // namespace gpumem::python
