/**
 * @file per_device_resource.hpp
 * Each device's current device memory resource.
 *
 * Every device starts with a default resource: a cuda_memory_resource owned by gpumem that lives for the
 * whole process. Setting a resource does not take ownership: the caller keeps it alive while it is set
 * (and while memory it allocated is outstanding).
 *
 * Thread-safety: all functions may be called concurrently from any thread (one mutex guards the map).
 */
#pragma once

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

namespace gpumem::mr {

/**
 * @brief The resource set for `device` (its default resource if none was set).
 * @throws gpumem::logic_error if `device` is not a valid device ordinal (the message names it and the count).
 */
[[nodiscard]] GPUMEM_EXPORT device_memory_resource* get_per_device_resource(cuda_device_id device);

/**
 * @brief Sets `device`'s resource to `new_mr`; nullptr restores the default resource.
 * @return the previous resource (never nullptr).
 * @throws gpumem::logic_error if `device` is not a valid device ordinal.
 */
GPUMEM_EXPORT device_memory_resource* set_per_device_resource(cuda_device_id device, device_memory_resource* new_mr);

/** @brief get_per_device_resource(get_current_cuda_device()). */
[[nodiscard]] GPUMEM_EXPORT device_memory_resource* get_current_device_resource();

/** @brief set_per_device_resource(get_current_cuda_device(), new_mr). @return the previous resource. */
GPUMEM_EXPORT device_memory_resource* set_current_device_resource(device_memory_resource* new_mr);

/** @brief Restores the default resource of every device. @return nothing; never throws. */
GPUMEM_EXPORT void reset_all_device_resources() noexcept;

}  // namespace gpumem::mr
