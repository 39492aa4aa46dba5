// simulated_vmm_provider: addresses and byte counts only (virtual_memory_provider.hpp).
#include <gpumem/error.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>
#include <gpumem/backend/virtual_memory_provider.hpp>

#include <algorithm>
#include <iterator>
#include <limits>
#include <string>

namespace gpumem::mr {

simulated_vmm_provider::simulated_vmm_provider(std::size_t physical_capacity, std::size_t granularity)
  : capacity_{physical_capacity}, granularity_{granularity}, next_reservation_{simulated_memory_resource::default_base}
{
  expects(granularity > 0 && (granularity & (granularity - 1)) == 0,
          "granularity " + std::to_string(granularity) + " is not a power of two");
}

memory_info simulated_vmm_provider::mem_info()
{
  std::lock_guard lock{mutex_};
  return {capacity_ - physical_bytes_, capacity_};
}

std::uintptr_t simulated_vmm_provider::reserve(std::size_t bytes)
{
  expects(bytes > 0 && bytes % granularity_ == 0,
          "reserve: " + std::to_string(bytes) + " bytes is not a positive multiple of the granularity");
  std::lock_guard lock{mutex_};
  std::uintptr_t const base = next_reservation_;
  std::uintptr_t const room = std::numeric_limits<std::uintptr_t>::max() - base;
  if (bytes > room || granularity_ > room - bytes) {
    throw out_of_memory("simulated VMM provider: cannot reserve " + format_bytes(bytes) +
                        ": the address space has no room for it");
  }
  next_reservation_ += bytes + granularity_;  // a guard gap between reservations
  reservations_.emplace_back(base, bytes);
  return base;
}

void simulated_vmm_provider::unreserve(std::uintptr_t base, std::size_t bytes) noexcept
{
  std::lock_guard lock{mutex_};
  auto const it = std::find(reservations_.begin(), reservations_.end(), std::pair{base, bytes});
  if (it == reservations_.end()) {
    ++misuse_;
    return;
  }
  auto const first_inside = mappings_.lower_bound(base);
  if (first_inside != mappings_.end() && first_inside->first < base + bytes) { ++misuse_; }  // still mapped
  reservations_.erase(it);
}

physical_handle simulated_vmm_provider::create(std::size_t bytes)
{
  expects(bytes > 0 && bytes % granularity_ == 0,
          "create: " + std::to_string(bytes) + " bytes is not a positive multiple of the granularity");
  std::lock_guard lock{mutex_};
  ++create_calls_;
  if (creates_until_failure_) {
    if (*creates_until_failure_ == 0) { return 0; }
    --*creates_until_failure_;
  }
  if (bytes > capacity_ - physical_bytes_) { return 0; }
  physical_bytes_ += bytes;
  handles_.emplace(next_handle_, bytes);
  return next_handle_++;
}

void simulated_vmm_provider::release(physical_handle handle) noexcept
{
  std::lock_guard lock{mutex_};
  ++release_calls_;
  auto const it = handles_.find(handle);
  if (it == handles_.end()) {
    ++misuse_;
    return;
  }
  physical_bytes_ -= it->second;
  handles_.erase(it);
}

void simulated_vmm_provider::map(std::uintptr_t address, std::size_t bytes, physical_handle handle)
{
  std::lock_guard lock{mutex_};
  ++map_calls_;
  if (maps_until_failure_) {
    if (*maps_until_failure_ == 0) {
      throw cuda_error(cudaErrorMemoryAllocation, "simulated cuMemMap(" +
                                                    format_pointer(reinterpret_cast<void*>(address)) +
                                                    ") failed (failure injection)");
    }
    --*maps_until_failure_;
  }
  auto const known = handles_.find(handle);
  bool const inside = std::any_of(reservations_.begin(), reservations_.end(), [&](auto const& r) {
    return address >= r.first && address + bytes <= r.first + r.second;
  });
  // The mapping at or after `address`, and the one before it, are the only ones that can overlap.
  auto const next = mappings_.lower_bound(address);
  bool overlaps = next != mappings_.end() && next->first < address + bytes;
  if (next != mappings_.begin()) {
    auto const previous = std::prev(next);
    overlaps = overlaps || previous->first + previous->second > address;
  }
  if (known == handles_.end() || known->second != bytes || !inside || overlaps) {
    ++misuse_;
    throw cuda_error(cudaErrorInvalidValue, "simulated cuMemMap(" + format_pointer(reinterpret_cast<void*>(address)) +
                                              "): unknown handle, wrong size, outside a reservation or over a mapping");
  }
  mappings_.emplace(address, bytes);
  mapped_bytes_ += bytes;
}

void simulated_vmm_provider::unmap(std::uintptr_t address, std::size_t bytes) noexcept
{
  std::lock_guard lock{mutex_};
  ++unmap_calls_;
  auto const it = mappings_.find(address);
  if (it == mappings_.end() || it->second != bytes) {
    ++misuse_;
    return;
  }
  mappings_.erase(it);
  mapped_bytes_ -= bytes;
}

void simulated_vmm_provider::fail_create_after(std::size_t calls)
{
  std::lock_guard lock{mutex_};
  creates_until_failure_ = calls;
}

void simulated_vmm_provider::fail_map_after(std::size_t calls)
{
  std::lock_guard lock{mutex_};
  maps_until_failure_ = calls;
}

void simulated_vmm_provider::clear_failures()
{
  std::lock_guard lock{mutex_};
  creates_until_failure_.reset();
  maps_until_failure_.reset();
}

#define GPUMEM_SIMULATED_VMM_COUNTER(name, member)        \
  std::size_t simulated_vmm_provider::name() const        \
  {                                                       \
    std::lock_guard lock{mutex_};                         \
    return member;                                        \
  }
GPUMEM_SIMULATED_VMM_COUNTER(physical_bytes, physical_bytes_)
GPUMEM_SIMULATED_VMM_COUNTER(mapped_bytes, mapped_bytes_)
GPUMEM_SIMULATED_VMM_COUNTER(create_calls, create_calls_)
GPUMEM_SIMULATED_VMM_COUNTER(map_calls, map_calls_)
GPUMEM_SIMULATED_VMM_COUNTER(unmap_calls, unmap_calls_)
GPUMEM_SIMULATED_VMM_COUNTER(release_calls, release_calls_)
GPUMEM_SIMULATED_VMM_COUNTER(misuse_count, misuse_)
#undef GPUMEM_SIMULATED_VMM_COUNTER

}  // namespace gpumem::mr
