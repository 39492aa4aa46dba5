/**
 * @file cuda_device_id.hpp
 * A strong type for a device ordinal, the current-device queries, and an RAII guard that sets the
 * current device and restores the previous one.
 */
#pragma once

#include <gpumem/export.hpp>

#include <compare>

namespace gpumem {

/** @brief A device ordinal (0-based), as CUDA numbers devices. A value type; cheap to copy. */
class cuda_device_id {
 public:
  using value_type = int;
  constexpr explicit cuda_device_id(value_type id) noexcept : id_{id} {}
  [[nodiscard]] constexpr value_type value() const noexcept { return id_; }
  friend constexpr auto operator<=>(cuda_device_id, cuda_device_id) noexcept = default;

 private:
  value_type id_;
};

/** @brief The calling thread's current device. @throws cuda_error if the backend cannot say. */
[[nodiscard]] GPUMEM_EXPORT cuda_device_id get_current_cuda_device();

/**
 * @brief Makes `device` the calling thread's current device (cudaSetDevice); work and allocations that name
 * no device go to it from now on.
 * Thread-safety: affects the calling thread only.
 * @throws gpumem::logic_error if `device` is not a valid device ordinal (the current device is unchanged).
 * @throws gpumem::cuda_error if the backend cannot make it current.
 */
GPUMEM_EXPORT void set_current_cuda_device(cuda_device_id device);

/** @brief How many devices the backend has (0 is never returned: the host backend has at least one). */
[[nodiscard]] GPUMEM_EXPORT int get_num_cuda_devices();

/**
 * @brief Makes `device` current for the calling thread for the guard's lifetime, then restores the
 * device that was current before. Does nothing when `device` is already current.
 * Thread-safety: affects the calling thread only.
 * @throws logic_error if `device` is not a valid device ordinal.
 */
class GPUMEM_EXPORT cuda_set_device_raii {
 public:
  explicit cuda_set_device_raii(cuda_device_id device);
  ~cuda_set_device_raii() noexcept;
  cuda_set_device_raii(cuda_set_device_raii const&) = delete;
  cuda_set_device_raii& operator=(cuda_set_device_raii const&) = delete;

 private:
  cuda_device_id previous_;
  bool needs_reset_;
};

}  // namespace gpumem
