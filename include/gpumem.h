/*
 * gpumem.h: gpumem's C API, for FFI (ctypes, cffi, Rust, Julia, ...) and for allocator hooks such as
 * PyTorch's pluggable CUDA allocator. Pure C (C99 and later); usable from C++ too.
 *
 * The functions wrap the plain C++ API (gpumem/plain.hpp): memory comes from the current device's current
 * resource, and gpumem remembers each pointer's size, resource and device, so freeing needs no size.
 * Memory from gpumem_alloc may be freed with gpumem::free in C++ and vice versa.
 *
 * Lifetimes, as gpumem/plain.hpp: a resource set with a std::shared_ptr (as the Python package does) is
 * kept alive until its last pointer is freed, even when replaced meanwhile; memory of a resource set by
 * raw pointer can be freed only while that resource is still set (GPUMEM_ERROR_INVALID_VALUE afterwards).
 *
 * Errors: every function returns a gpumem_status and never lets a C++ exception escape. On failure,
 * gpumem_last_error() gives a message naming what went wrong (the size, the pointer, the resource, ...).
 *
 * Thread-safety: every function may be called concurrently from any thread; the last-error message is
 * kept per thread.
 */
#ifndef GPUMEM_H
#define GPUMEM_H

#include <gpumem/export.hpp> /* preprocessor only: valid C */

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/** @brief What a gpumem C function did. */
typedef enum gpumem_status {
  GPUMEM_SUCCESS = 0,             /**< the call succeeded */
  GPUMEM_ERROR_OUT_OF_MEMORY,     /**< the device (or host) has not the memory: gpumem::out_of_memory */
  GPUMEM_ERROR_BAD_ALLOC,         /**< the request cannot be served, e.g. its size overflows: gpumem::bad_alloc */
  GPUMEM_ERROR_INVALID_VALUE,     /**< misuse: null out-pointer, unknown pointer, double free: gpumem::logic_error */
  GPUMEM_ERROR_CUDA,              /**< a CUDA (backend) call failed: gpumem::cuda_error */
  GPUMEM_ERROR_UNKNOWN            /**< any other failure */
} gpumem_status;

/**
 * @brief Allocates `size` bytes (256-byte aligned) on the current device, usable at once by work on the
 * legacy default stream. As gpumem::alloc(size).
 * @param out receives the allocation; NULL when size == 0 (and GPUMEM_SUCCESS is returned).
 * @return GPUMEM_SUCCESS; GPUMEM_ERROR_INVALID_VALUE when `out` is NULL; GPUMEM_ERROR_OUT_OF_MEMORY;
 *         GPUMEM_ERROR_BAD_ALLOC when `size` overflows when rounded up to 256; GPUMEM_ERROR_CUDA.
 *         On failure `*out` (when `out` is not NULL) is set to NULL.
 */
GPUMEM_EXPORT gpumem_status gpumem_alloc(size_t size, void** out);

/**
 * @brief As gpumem_alloc, then fills the memory with zeros, in stream order on the legacy default stream:
 * synchronise that stream before reading the memory from the host or another non-blocking stream.
 */
GPUMEM_EXPORT gpumem_status gpumem_zeros(size_t size, void** out);

/**
 * @brief Frees memory from gpumem_alloc/gpumem_zeros/gpumem_alloc_async; may be reused at once by work on
 * the legacy default stream. gpumem_free(NULL) does nothing and returns GPUMEM_SUCCESS.
 * @return GPUMEM_ERROR_INVALID_VALUE (nothing is freed) when `ptr` was already freed, was not allocated by
 *         gpumem, or came from a resource set by raw pointer that has been replaced since (the pointer is
 *         then forgotten and its memory left alone); gpumem_last_error() says which.
 */
GPUMEM_EXPORT gpumem_status gpumem_free(void* ptr);

/**
 * @brief As gpumem_alloc, but stream-ordered on `stream` (a cudaStream_t; NULL is the legacy default
 * stream): the memory is usable at once by work on `stream`.
 */
GPUMEM_EXPORT gpumem_status gpumem_alloc_async(size_t size, void* stream, void** out);

/**
 * @brief As gpumem_free, but the memory may be reused at once by work on `stream` (a cudaStream_t; NULL is
 * the legacy default stream): all work using `ptr` must have been submitted to `stream`.
 */
GPUMEM_EXPORT gpumem_status gpumem_free_async(void* ptr, void* stream);

/**
 * @brief The size asked for when `ptr` was allocated.
 * @return GPUMEM_ERROR_INVALID_VALUE when `out` is NULL or `ptr` is not a live gpumem allocation.
 */
GPUMEM_EXPORT gpumem_status gpumem_allocation_size(const void* ptr, size_t* out);

/**
 * @brief The message of the most recent failed gpumem call on the calling thread, or "" when none has
 * failed on this thread. A successful call does not clear it: the message stays until the next failure.
 * The pointer stays valid until the next failing gpumem call on this thread. Never NULL.
 */
GPUMEM_EXPORT const char* gpumem_last_error(void);

/**
 * @brief A short, static description of `status` (e.g. "out of memory"); never NULL, also for values that
 * are not a gpumem_status.
 */
GPUMEM_EXPORT const char* gpumem_status_string(gpumem_status status);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GPUMEM_H */
