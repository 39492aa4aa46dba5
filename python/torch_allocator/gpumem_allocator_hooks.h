/*
 * gpumem_allocator_hooks.h: the table of C function pointers through which the allocator plug-ins that ship
 * with gpumem's Python package (libgpumem_torch_allocator.so, gpumem_torch_allocator.cpp) reach the gpumem
 * of the Python module gpumem._gpumem, without linking gpumem themselves.
 *
 * Why a table, not a link: a plug-in linked to the gpumem library would carry a second copy of gpumem's
 * state (a second registry of live pointers, a second current resource per device), so PyTorch's memory
 * would come from a resource that gpumem.mr.set_current_device_resource() never reaches. Instead the module
 * fills one static table (python/src/bind_allocator_hooks.cpp), Python hands its address
 * (gpumem._gpumem._allocator_hooks_address()) and its version (gpumem._gpumem._allocator_hooks_version) to
 * the plug-in's install function, and the plug-in calls through it: one gpumem per process.
 *
 * Versioning: members are only ever appended, and GPUMEM_ALLOCATOR_HOOKS_VERSION grows with each addition,
 * so a table of version N starts with every member of the versions below N. A plug-in accepts a table whose
 * version is at least the one it was compiled with.
 *
 * Lifetime: the table is a static object of gpumem._gpumem, which Python never unloads.
 * Thread-safety: every member may be called concurrently from any thread, with or without the GIL (none of
 * them runs Python code unless a resource written in Python does, and then it takes the GIL itself).
 *
 * Pure C, so that any plug-in can include it.
 */
#ifndef GPUMEM_ALLOCATOR_HOOKS_H
#define GPUMEM_ALLOCATOR_HOOKS_H

#include <gpumem.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** @brief The version of gpumem_allocator_hooks this header describes. */
#define GPUMEM_ALLOCATOR_HOOKS_VERSION 2

/**
 * @brief gpumem's plain C API (gpumem.h), as one process-wide table (version 1), and the PyTorch allocator's
 * features (version 2): private pools for CUDA graphs, Tensor.record_stream, emptying the cache, a memory
 * fraction, and the per-device statistics and history that gpumem.torch reports.
 */
typedef struct gpumem_allocator_hooks {
  /**
   * @brief As gpumem_alloc_async(size, stream, out), on `device`: made current for the call and restored
   * after it when it is not current already; device < 0 means the calling thread's current device.
   * gpumem remembers the device, so free_async needs none.
   * @return as gpumem_alloc_async; GPUMEM_ERROR_INVALID_VALUE when `device` is not a device ordinal.
   */
  gpumem_status (*alloc_async)(size_t size, int device, void* stream, void** out);
  /**
   * @brief As gpumem_free_async(ptr, stream); but once the interpreter exits (gpumem.mr is about to drop its
   * resources) it does nothing and returns GPUMEM_SUCCESS, leaving the memory to the process's exit
   * (bind_allocator_hooks.cpp says why).
   */
  gpumem_status (*free_async)(void* ptr, void* stream);
  /**
   * @brief The message of the latest failed call through this table on the calling thread ("" when none
   * failed); valid until the next failing call on this thread. Never NULL.
   */
  const char* (*last_error)(void);

  /* ---- version 2 ------------------------------------------------------------------------------------ */

  /**
   * @brief `size` bytes on `device` (made current for the call, as alloc_async does), ordered on `stream`.
   * Pool (0, 0) is the device's PyTorch resource: gpumem.torch's configured resource, built on the device's
   * first allocation when the program has not set one, else the device's current gpumem resource. Any other
   * pool id is a private pool of CUDA graphs, made by pool_begin: blocks of a private pool are never handed
   * out to another pool.
   * When the resource is out of memory, gpumem makes room (spill managers registered with gpumem.torch give
   * back device memory, idle private pools are released) and tries once more before it fails.
   * @return as alloc_async; GPUMEM_ERROR_INVALID_VALUE for a private pool that pool_begin did not make.
   */
  gpumem_status (*alloc2)(size_t size, int device, void* stream, uint64_t pool_a, uint64_t pool_b, void** out);
  /**
   * @brief Frees `ptr` (from alloc2; `size` and `device` as allocated) for reuse by work on `stream`, the stream
   * it was allocated on, after the work of every stream that record_stream added for it. Closed at exit as
   * free_async is.
   */
  gpumem_status (*free2)(void* ptr, size_t size, int device, void* stream);
  /**
   * @brief PyTorch's Tensor.record_stream: the block at `ptr` (a live allocation of alloc2) is in use on `stream`
   * too, so its free waits for the work queued on `stream` until then (stream-ordered, no host wait).
   * @return GPUMEM_ERROR_INVALID_VALUE when `ptr` is not live, or when record_stream is configured to refuse.
   */
  gpumem_status (*record_stream)(void* ptr, void* stream);
  /**
   * @brief A CUDA graph capture on `device` starts allocating to private pool (pool_a, pool_b): the pool is
   * made, or its use count raised.
   */
  gpumem_status (*pool_begin)(int device, uint64_t pool_a, uint64_t pool_b);
  /** @brief The capture that allocated to the pool ended: frees held back during it are carried out. */
  gpumem_status (*pool_end)(int device, uint64_t pool_a, uint64_t pool_b);
  /** @brief The pool's use count drops; at zero, with no live block, its memory goes back to the device. */
  gpumem_status (*pool_release)(int device, uint64_t pool_a, uint64_t pool_b);
  /**
   * @brief Returns the memory that no live block uses to the device: the device's PyTorch resource's free
   * memory (where the resource can give it back) and idle private pools. `device` < 0: every device.
   * @param released receives the bytes given back (may be NULL).
   */
  gpumem_status (*empty_cache)(int device, size_t* released);
  /**
   * @brief Caps the device memory the device's PyTorch resource may hold at `fraction` of the device's total
   * (0 < fraction <= 1). @return GPUMEM_ERROR_INVALID_VALUE for a fraction out of range or a resource that
   * takes no limit.
   */
  gpumem_status (*set_memory_fraction)(double fraction, int device);
} gpumem_allocator_hooks;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GPUMEM_ALLOCATOR_HOOKS_H */
