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

#ifdef __cplusplus
extern "C" {
#endif

/** @brief The version of gpumem_allocator_hooks this header describes. */
#define GPUMEM_ALLOCATOR_HOOKS_VERSION 1

/** @brief gpumem's plain C API (gpumem.h), as one process-wide table. Version 1. */
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
} gpumem_allocator_hooks;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GPUMEM_ALLOCATOR_HOOKS_H */
