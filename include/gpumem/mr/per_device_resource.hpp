/**
 * @file per_device_resource.hpp
 * Each device's current device memory resource.
 *
 * Every device starts with a default resource: a cuda_memory_resource owned by gpumem that lives for the
 * whole process. A resource may be set two ways, which decide who keeps it alive:
 * - by std::shared_ptr: gpumem shares ownership. The registry holds the resource while it is set, and the
 *   plain API (plain.hpp) holds it for every live pointer it allocated, so replacing it and dropping the
 *   caller's reference is safe: it is destroyed when the last of those goes.
 * - by raw pointer: gpumem does not own it. The caller keeps it alive while it is set, and while memory
 *   it allocated is outstanding. The plain API cannot keep such a resource alive; it frees a pointer into
 *   it only while that setting is still in place, and reports a logic_error otherwise (see plain.hpp).
 *
 * Thread-safety: all functions may be called concurrently from any thread. Readers of a raw or default
 * resource take no lock (an atomic load); setters, and readers of a shared one, take the registry's mutex.
 */
#pragma once

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <cstdint>
#include <memory>

namespace gpumem::mr {

/**
 * @brief The resource set for `device` (its default resource if none was set).
 * The pointer stays valid while the resource is set; one set by shared_ptr may be destroyed once replaced
 * (hold_per_device_resource() keeps it alive).
 * @throws gpumem::logic_error if `device` is not a valid device ordinal (the message names it and the count).
 */
[[nodiscard]] GPUMEM_EXPORT device_memory_resource* get_per_device_resource(cuda_device_id device);

/**
 * @brief Sets `device`'s resource to `new_mr`, which the caller keeps alive (see the file comment);
 * nullptr restores the default resource.
 * @return the previous resource (never nullptr). When the previous one was set by shared_ptr and nothing
 *         else holds it, it is destroyed by this call and the result is only good for comparison.
 * @throws gpumem::logic_error if `device` is not a valid device ordinal.
 */
GPUMEM_EXPORT device_memory_resource* set_per_device_resource(cuda_device_id device, device_memory_resource* new_mr);

/**
 * @brief Sets `device`'s resource to `new_mr` and shares its ownership: gpumem holds it while it is set,
 * and the plain API while memory it allocated is live (see the file comment).
 * @return the previous resource, as the raw-pointer overload.
 * @throws gpumem::logic_error if `device` is not a valid device ordinal or `new_mr` is empty.
 */
GPUMEM_EXPORT device_memory_resource* set_per_device_resource(cuda_device_id device,
                                                              std::shared_ptr<device_memory_resource> new_mr);

/** @brief get_per_device_resource(get_current_cuda_device()). */
[[nodiscard]] GPUMEM_EXPORT device_memory_resource* get_current_device_resource();

/** @brief set_per_device_resource(get_current_cuda_device(), new_mr). @return the previous resource. */
GPUMEM_EXPORT device_memory_resource* set_current_device_resource(device_memory_resource* new_mr);

/** @brief set_per_device_resource(get_current_cuda_device(), new_mr), sharing ownership. @return the previous resource. */
GPUMEM_EXPORT device_memory_resource* set_current_device_resource(std::shared_ptr<device_memory_resource> new_mr);

/**
 * @brief Whether a resource was set for `device` (by either overload, and not since restored to its default).
 * @throws gpumem::logic_error if `device` is not a valid device ordinal.
 */
[[nodiscard]] GPUMEM_EXPORT bool is_per_device_resource_set(cuda_device_id device);

/**
 * @brief Sets `device`'s resource to `new_mr`, sharing ownership as set_per_device_resource does, only when
 * none is set (the device has its default): one step under the registry's mutex, so a concurrent setter
 * either comes first (and `new_mr` is not set) or replaces `new_mr` afterwards.
 * @return whether `new_mr` was set.
 * @throws gpumem::logic_error if `device` is not a valid device ordinal or `new_mr` is empty.
 */
GPUMEM_EXPORT bool set_per_device_resource_if_unset(cuda_device_id device, std::shared_ptr<device_memory_resource> new_mr);

/**
 * @brief Restores the default resource of every device, dropping the references gpumem held to shared
 * ones. @return nothing; never throws.
 */
GPUMEM_EXPORT void reset_all_device_resources() noexcept;

/**
 * @brief A device's resource together with what keeps it valid: what the plain API records per pointer.
 * - `owner` shares ownership of a resource set by shared_ptr (empty otherwise);
 * - `raw_setting` names the setting of a resource set by raw pointer (0 for shared and default ones,
 *   which are valid as long as the hold exists): such a resource is known to be alive only while
 *   is_current_raw_setting(device, raw_setting) holds.
 */
struct resource_hold {
  device_memory_resource* resource{};
  std::shared_ptr<device_memory_resource> owner;
  std::uint64_t raw_setting{};
};

/**
 * @brief The resource set for `device`, held (see resource_hold).
 * Cost: two atomic loads for a raw or default resource; the registry's mutex and one reference-count
 * increment for a shared one.
 * @throws gpumem::logic_error if `device` is not a valid device ordinal.
 */
[[nodiscard]] GPUMEM_EXPORT resource_hold hold_per_device_resource(cuda_device_id device);

/**
 * @brief Whether the raw-pointer setting `raw_setting` (from hold_per_device_resource(device)) is still in
 * place: no resource was set on `device`, and its resources were not reset, since.
 * @return false for an invalid device or a setting that is not current.
 */
[[nodiscard]] GPUMEM_EXPORT bool is_current_raw_setting(cuda_device_id device, std::uint64_t raw_setting) noexcept;

}  // namespace gpumem::mr
