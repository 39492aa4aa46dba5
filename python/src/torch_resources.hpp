// What torch_resources.cpp (the device's PyTorch resource) and torch_stats.cpp (the statistics gpumem.torch
// reports) share. Private to the extension module.
#pragma once

#include <gpumem/mr/device_memory_resource.hpp>

#include <cstddef>
#include <memory>

namespace gpumem::python::torch_resources {

/** @brief The most devices gpumem.torch keeps state for (ordinals 0 .. max_devices - 1). */
inline constexpr int max_devices = 64;

/**
 * @brief The resource that serves `device`'s PyTorch allocations, below the adaptors gpumem.torch put on it
 * (memory limit, log): the one it built when that is still the device's resource, else the device's current
 * gpumem resource. Null before the device's first allocation (and for a device beyond max_devices). The pointer shares
 * ownership where the resource is owned by gpumem. Thread-safety: any thread.
 */
[[nodiscard]] std::shared_ptr<mr::device_memory_resource> base_resource(int device) noexcept;

/** @brief Counts one allocation retried after make_room gave memory back (num_alloc_retries). */
void count_alloc_retry(int device) noexcept;

/** @brief Clears the statistics of every device (_torch_reset). */
void reset_statistics() noexcept;

}  // namespace gpumem::python::torch_resources
