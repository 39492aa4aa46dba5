/**
 * @file cublas_handle.hpp
 * cuBLAS handles without a link dependency: libcublas (libcublas.so.<runtime major>, else libcublas.so) is
 * loaded on first use, so programs that never ask for a handle do not need it.
 */
#pragma once

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/export.hpp>

namespace gpumem {

/**
 * @brief A new cuBLAS handle (a cublasHandle_t) made with `device` current (cublasCreate); the caller destroys
 * it with destroy_cublas_handle.
 * @throws gpumem::logic_error if `device` is not a valid device ordinal.
 * @throws gpumem::cuda_error: cudaErrorNotSupported under the host backend or when libcublas cannot be loaded
 *         (the message says which), cudaErrorUnknown when cublasCreate fails (the message names its status).
 */
[[nodiscard]] GPUMEM_EXPORT void* create_cublas_handle(cuda_device_id device);

/** @brief Destroys a handle of create_cublas_handle (cublasDestroy) with `device` current; never throws. */
GPUMEM_EXPORT void destroy_cublas_handle(void* handle, cuda_device_id device) noexcept;

}  // namespace gpumem
