// The host backend's per-device capacity, for emulations outside host_backend.cpp (the VMM provider):
// physical memory they create counts as device memory in use, so mem_info's free memory falls and rises.
#pragma once

#include <cstddef>

namespace gpumem::detail {

/// Counts `bytes` against host device `device` (a valid id). @return false, counting nothing, when the
/// device has not that much free.
bool host_charge_device_memory(int device, std::size_t bytes) noexcept;
/// Gives back what host_charge_device_memory counted.
void host_uncharge_device_memory(int device, std::size_t bytes) noexcept;

}  // namespace gpumem::detail
