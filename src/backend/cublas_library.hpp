// libcublas, loaded at run time by the cuda backend (backend::cublas_create): gpumem does not link cuBLAS, so a
// program that never asks for a handle never loads it, and the library builds where cuBLAS is absent.
#pragma once

namespace gpumem::detail {

/** @brief The two entry points of libcublas that gpumem calls. */
struct cublas_library {
  using create_fn = int (*)(void** handle);  // cublasCreate_v2: cublasStatus_t (0: success)
  using destroy_fn = int (*)(void* handle);  // cublasDestroy_v2
  create_fn create{};
  destroy_fn destroy{};
};

/**
 * @brief libcublas, loaded on first call (dlopen of libcublas.so.<CUDA major> of the toolkit gpumem is built with,
 * else libcublas.so) and kept loaded for the life of the process. Thread-safe.
 * @throws cuda_error (cudaErrorNotSupported) naming the libraries tried and dlerror()'s reason when neither loads
 *         or lacks the entry points; a later call tries again.
 */
[[nodiscard]] cublas_library const& load_cublas();

}  // namespace gpumem::detail
