// libgpumem_torch_allocator.so: gpumem as PyTorch's CUDA allocator, through
// torch.cuda.memory.CUDAPluggableAllocator(path, "gpumem_torch_alloc", "gpumem_torch_free").
// gpumem.allocators.torch_allocator() loads it, installs the hooks and builds that allocator.
//
// The library does not link gpumem: it calls the gpumem of the Python module gpumem._gpumem through the
// table of gpumem_allocator_hooks.h, installed once by gpumem_torch_install(), so PyTorch allocates from the
// resource that gpumem.mr.set_current_device_resource() chose (one gpumem per process).
//
// Exported (C linkage):
//   int   gpumem_torch_install(const gpumem_allocator_hooks* hooks, int version)
//   void* gpumem_torch_alloc(ssize_t size, int device, cudaStream_t stream)          PyTorch's alloc_fn
//   void  gpumem_torch_free(void* ptr, ssize_t size, int device, cudaStream_t stream)  PyTorch's free_fn
//   int   gpumem_torch_built_with_torch(void)
//   const char* gpumem_torch_torch_version(void)                                        "" without PyTorch
//   void  gpumem_torch_record_stream(void* ptr, cudaStream_t stream)                 set_record_stream_fn
//   void  gpumem_torch_empty_cache(void)                                              set_reset_fn
//   void  gpumem_torch_set_memory_fraction(double fraction, int device)               set_memory_fraction_fn
// and, built with PyTorch only (C++ types in the signature, exactly as PyTorch's setters expect them):
//   void  gpumem_torch_begin_allocate_to_pool(int, MempoolId_t, std::function<bool(cudaStream_t)>)
//                                                                                   set_begin_allocate_to_pool
//   void  gpumem_torch_end_allocate_to_pool(int, MempoolId_t)                      set_end_allocate_to_pool_fn
//   void  gpumem_torch_release_pool(int, MempoolId_t)                              set_release_pool
// cudaStream_t is a pointer, so `void*` here is the same ABI, and the library needs no CUDA headers.
//
// CUDA graphs: PyTorch calls begin_allocate_to_pool before a capture (torch.cuda.graph) with the pool's id and a
// filter that says which streams' allocations belong to the capture, end_allocate_to_pool after it, and
// release_pool when the graph is reset. The library keeps those routes {device, pool id, filter} under a mutex, with
// an atomic count of them: an allocation reads the count (one atomic load) and only when it is non-zero takes the
// mutex, and the first route whose device matches and whose filter accepts the stream gives the private pool that
// alloc2 allocates from. gpumem's side (torch_pools.cpp) keeps the pools themselves.
//
// Failure: PyTorch's CUDAPluggableAllocator::malloc does not check for NULL (it would hand out a tensor at
// address 0), so when built with PyTorch's headers (GPUMEM_TORCH_ALLOCATOR_WITH_TORCH=1) an allocation that
// fails throws c10::OutOfMemoryError (out of memory, or a request too large to serve), which PyTorch's Python
// layer raises as torch.OutOfMemoryError, or c10::Error (RuntimeError) for anything else, with gpumem's
// message. Built without PyTorch, it prints the message to stderr and returns NULL, and
// gpumem_torch_built_with_torch() says 0, so that torch_allocator() refuses to use it. Frees never throw
// (PyTorch calls them from destructors): a failure is printed to stderr. The setter hooks (record_stream,
// memory fraction) throw c10::Error with gpumem's message when built with PyTorch; without it they print it.
#include "gpumem_allocator_hooks.h"

#include <atomic>
#include <cstdio>
#include <string>
#include <utility>

#include <sys/types.h>  // ssize_t

#ifndef GPUMEM_TORCH_ALLOCATOR_WITH_TORCH
#define GPUMEM_TORCH_ALLOCATOR_WITH_TORCH 0  // CMake defines it: 1 when PyTorch's headers and libc10 are used
#endif

#if GPUMEM_TORCH_ALLOCATOR_WITH_TORCH
#include <c10/util/Exception.h>

#include <cstdint>
#include <functional>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

struct CUstream_st;
using gpumem_cuda_stream = CUstream_st*;                                      // cudaStream_t
using gpumem_mempool_id = std::pair<unsigned long long, unsigned long long>;  // c10::cuda::MempoolId_t
#if defined(GPUMEM_TORCH_ALLOCATOR_WITH_C10_CUDA) && __has_include(<c10/cuda/CUDACachingAllocator.h>)
#include <c10/cuda/CUDACachingAllocator.h>  // CMake adds CUDA's headers, which c10/cuda needs: check the types
static_assert(std::is_same_v<gpumem_mempool_id, c10::cuda::MempoolId_t>, "PyTorch's MempoolId_t changed");
static_assert(std::is_same_v<gpumem_cuda_stream, cudaStream_t>, "cudaStream_t changed");
#endif
#endif

#define GPUMEM_TORCH_ALLOCATOR_API extern "C" __attribute__((visibility("default")))

namespace {

/// The installed table; null until gpumem_torch_install. Set once per process (gpumem._gpumem's table).
std::atomic<gpumem_allocator_hooks const*> installed_hooks{nullptr};

/// Why an allocation failed, as PyTorch (or stderr) will show it.
std::string failure_message(ssize_t size, int device, char const* why)
{
  return "gpumem could not allocate " + std::to_string(size) + " bytes on device " + std::to_string(device) +
         " for PyTorch: " + why;
}

/// Reports a failed allocation: throws for PyTorch (see the file comment), or prints it and lets NULL return.
void report_alloc_failure(gpumem_status status, ssize_t size, int device, char const* why)
{
#if GPUMEM_TORCH_ALLOCATOR_WITH_TORCH
  std::string const message = failure_message(size, device, why);
  TORCH_CHECK_WITH(OutOfMemoryError, status != GPUMEM_ERROR_OUT_OF_MEMORY && status != GPUMEM_ERROR_BAD_ALLOC,
                   message);
  TORCH_CHECK(false, message);
#else
  (void)status;
  std::fprintf(stderr, "%s\n", failure_message(size, device, why).c_str());
#endif
}

/// Reports a failed call of a setter hook: c10::Error (RuntimeError in Python) with PyTorch, else stderr.
void report_failure(char const* what, char const* why)
{
#if GPUMEM_TORCH_ALLOCATOR_WITH_TORCH
  TORCH_CHECK(false, "gpumem: ", what, ": ", why);
#else
  std::fprintf(stderr, "gpumem: %s: %s\n", what, why);
#endif
}

/// The installed table, or a failure reported for `what` (then null).
gpumem_allocator_hooks const* hooks_for(char const* what)
{
  gpumem_allocator_hooks const* const hooks = installed_hooks.load(std::memory_order_acquire);
  if (hooks == nullptr) {
    report_failure(what, "called before gpumem_torch_install: build the allocator with gpumem.torch.install()");
  }
  return hooks;
}

#if GPUMEM_TORCH_ALLOCATOR_WITH_TORCH
/** @brief An allocation route of a capture (see the file comment). */
struct pool_route {
  int device;
  gpumem_mempool_id pool;
  std::function<bool(gpumem_cuda_stream)> filter;
};

std::mutex routes_mutex;
std::vector<pool_route> routes;    // guarded by routes_mutex; in the order begun
std::atomic<int> route_count{0};  // routes.size()

/** @brief The private pool an allocation on (device, stream) goes to: (0, 0) when no route takes it. */
gpumem_mempool_id route_of(int device, void* stream)
{
  if (route_count.load(std::memory_order_acquire) == 0) { return {0, 0}; }
  std::scoped_lock const lock{routes_mutex};
  for (pool_route const& route : routes) {
    if (route.device == device && route.filter(static_cast<gpumem_cuda_stream>(stream))) { return route.pool; }
  }
  return {0, 0};
}

/** @brief Throws c10::Error with gpumem's message when `status` failed. */
void check_pool_call(gpumem_allocator_hooks const* hooks, gpumem_status status, char const* what)
{
  if (status != GPUMEM_SUCCESS) { report_failure(what, hooks->last_error()); }
}

#endif

}  // namespace

/**
 * @brief Installs gpumem's hooks table (gpumem._gpumem._allocator_hooks_address()), of `version`
 * (gpumem._gpumem._allocator_hooks_version). Installing the same table again is harmless.
 * Thread-safety: may be called from any thread; the last install wins.
 * @return 0 on success; 1 when `hooks` is NULL or a member is NULL; 2 when `version` is older than
 *         GPUMEM_ALLOCATOR_HOOKS_VERSION (this library needs members the table lacks). Nothing changes on failure.
 */
GPUMEM_TORCH_ALLOCATOR_API int gpumem_torch_install(gpumem_allocator_hooks const* hooks, int version)
{
  if (hooks == nullptr) { return 1; }
  if (version < GPUMEM_ALLOCATOR_HOOKS_VERSION) { return 2; }
  if (hooks->alloc_async == nullptr || hooks->free_async == nullptr ||
      hooks->last_error == nullptr || hooks->alloc2 == nullptr || hooks->free2 == nullptr ||
      hooks->record_stream == nullptr || hooks->pool_begin == nullptr || hooks->pool_end == nullptr ||
      hooks->pool_release == nullptr || hooks->empty_cache == nullptr || hooks->set_memory_fraction == nullptr) {
    return 1;
  }
  installed_hooks.store(hooks, std::memory_order_release);
  return 0;
}

/**
 * @brief PyTorch's alloc_fn: `size` bytes on `device` (PyTorch passes its current device; gpumem makes it
 * current if it is not) from that device's current gpumem resource, ordered on `stream`.
 * @return the memory; NULL for size 0. On failure: see the file comment (throws with PyTorch, else NULL).
 */
GPUMEM_TORCH_ALLOCATOR_API void* gpumem_torch_alloc(ssize_t size, int device, void* stream)
{
  gpumem_allocator_hooks const* const hooks = installed_hooks.load(std::memory_order_acquire);
  if (hooks == nullptr) {
    report_alloc_failure(GPUMEM_ERROR_INVALID_VALUE, size, device,
                         "gpumem_torch_alloc was called before gpumem_torch_install: build the allocator with "
                         "gpumem.allocators.torch_allocator(), which installs gpumem's hooks");
    return nullptr;
  }
  if (size < 0) {
    report_alloc_failure(GPUMEM_ERROR_INVALID_VALUE, size, device, "the size is negative");
    return nullptr;
  }
  void* ptr = nullptr;
#if GPUMEM_TORCH_ALLOCATOR_WITH_TORCH
  gpumem_mempool_id const pool = route_of(device, stream);
#else
  std::pair<unsigned long long, unsigned long long> const pool{0, 0};
#endif
  gpumem_status const status =
    hooks->alloc2(static_cast<size_t>(size), device, stream, pool.first, pool.second, &ptr);
  if (status != GPUMEM_SUCCESS) {
    report_alloc_failure(status, size, device, hooks->last_error());
    return nullptr;
  }
  return ptr;
}

/**
 * @brief PyTorch's free_fn: returns `ptr` (from gpumem_torch_alloc) to the resource and device that
 * allocated it (gpumem remembers both; `size` and `device` are not needed), reusable at once by work on
 * `stream`, the stream it was allocated on. NULL does nothing. Never throws: a failure (a pointer gpumem
 * does not know, hooks not installed) is printed to stderr.
 */
GPUMEM_TORCH_ALLOCATOR_API void gpumem_torch_free(void* ptr, ssize_t size, int device, void* stream)
{
  if (ptr == nullptr) { return; }
  gpumem_allocator_hooks const* const hooks = installed_hooks.load(std::memory_order_acquire);
  if (hooks == nullptr) {
    std::fprintf(stderr, "gpumem_torch_free: called before gpumem_torch_install; %p (%zd bytes, device %d) is leaked\n",
                 ptr, size, device);
    return;
  }
  if (hooks->free2(ptr, static_cast<size_t>(size), device, stream) != GPUMEM_SUCCESS) {
    std::fprintf(stderr, "gpumem_torch_free: could not free %p (%zd bytes, device %d): %s\n", ptr, size, device,
                 hooks->last_error());
  }
}

/** @brief 1 when built with PyTorch's headers (failures throw c10 errors), 0 otherwise (failures return NULL). */
GPUMEM_TORCH_ALLOCATOR_API int gpumem_torch_built_with_torch(void) { return GPUMEM_TORCH_ALLOCATOR_WITH_TORCH; }

#if GPUMEM_TORCH_ALLOCATOR_WITH_TORCH && __has_include(<torch/csrc/api/include/torch/version.h>)
#include <torch/csrc/api/include/torch/version.h>  // TORCH_VERSION: macros only
#define GPUMEM_TORCH_ALLOCATOR_TORCH_VERSION TORCH_VERSION
#elif GPUMEM_TORCH_ALLOCATOR_WITH_TORCH
#define GPUMEM_TORCH_ALLOCATOR_TORCH_VERSION "unknown"
#else
#define GPUMEM_TORCH_ALLOCATOR_TORCH_VERSION ""
#endif

/** @brief The PyTorch version whose headers the library was built against ("major.minor.patch"; "" without them). */
GPUMEM_TORCH_ALLOCATOR_API char const* gpumem_torch_torch_version(void) { return GPUMEM_TORCH_ALLOCATOR_TORCH_VERSION; }

/**
 * @brief PyTorch's record_stream_fn (Tensor.record_stream): the block at `ptr` is used on `stream` too, so its free
 * is ordered after the work queued there. Throws c10::Error when gpumem refuses (see gpumem_allocator_hooks.h).
 */
GPUMEM_TORCH_ALLOCATOR_API void gpumem_torch_record_stream(void* ptr, void* stream)
{
  gpumem_allocator_hooks const* const hooks = hooks_for("Tensor.record_stream");
  if (hooks != nullptr && hooks->record_stream(ptr, stream) != GPUMEM_SUCCESS) {
    report_failure("Tensor.record_stream", hooks->last_error());
  }
}

#if GPUMEM_TORCH_ALLOCATOR_WITH_TORCH
/**
 * @brief PyTorch's begin_allocate_to_pool: from now on, allocations on `device` whose stream `filter` accepts come
 * from private pool `pool` (made, or its use count raised). Throws c10::Error with gpumem's message on failure.
 */
GPUMEM_TORCH_ALLOCATOR_API void gpumem_torch_begin_allocate_to_pool(int device, gpumem_mempool_id pool,
                                                                    std::function<bool(gpumem_cuda_stream)> filter)
{
  gpumem_allocator_hooks const* const hooks = hooks_for("begin_allocate_to_pool");
  if (hooks == nullptr) { return; }
  check_pool_call(hooks, hooks->pool_begin(device, pool.first, pool.second), "begin_allocate_to_pool");
  try {
    std::scoped_lock const lock{routes_mutex};
    routes.push_back({device, pool, std::move(filter)});
    route_count.store(static_cast<int>(routes.size()), std::memory_order_release);
  } catch (...) {
    (void)hooks->pool_end(device, pool.first, pool.second);
    (void)hooks->pool_release(device, pool.first, pool.second);
    throw;
  }
}

/** @brief PyTorch's end_allocate_to_pool: the capture's route ends; frees held back during it are carried out. */
GPUMEM_TORCH_ALLOCATOR_API void gpumem_torch_end_allocate_to_pool(int device, gpumem_mempool_id pool)
{
  gpumem_allocator_hooks const* const hooks = hooks_for("end_allocate_to_pool");
  if (hooks == nullptr) { return; }
  {
    std::scoped_lock const lock{routes_mutex};
    for (auto it = routes.begin(); it != routes.end(); ++it) {
      if (it->device == device && it->pool == pool) {
        routes.erase(it);
        break;
      }
    }
    route_count.store(static_cast<int>(routes.size()), std::memory_order_release);
  }
  check_pool_call(hooks, hooks->pool_end(device, pool.first, pool.second), "end_allocate_to_pool");
}

/** @brief PyTorch's release_pool (a graph's reset): the pool's use count drops; idle, it goes back to the device. */
GPUMEM_TORCH_ALLOCATOR_API void gpumem_torch_release_pool(int device, gpumem_mempool_id pool)
{
  gpumem_allocator_hooks const* const hooks = hooks_for("release_pool");
  if (hooks == nullptr) { return; }
  check_pool_call(hooks, hooks->pool_release(device, pool.first, pool.second), "release_pool");
}
#endif

/** @brief PyTorch's reset_fn (torch.cuda.empty_cache): gives the memory no tensor uses back to every device. */
GPUMEM_TORCH_ALLOCATOR_API void gpumem_torch_empty_cache(void)
{
  gpumem_allocator_hooks const* const hooks = hooks_for("torch.cuda.empty_cache");
  if (hooks != nullptr && hooks->empty_cache(-1, nullptr) != GPUMEM_SUCCESS) {
    report_failure("torch.cuda.empty_cache", hooks->last_error());
  }
}

/** @brief PyTorch's memory_fraction_fn (torch.cuda.set_per_process_memory_fraction). Throws c10::Error on failure. */
GPUMEM_TORCH_ALLOCATOR_API void gpumem_torch_set_memory_fraction(double fraction, int device)
{
  gpumem_allocator_hooks const* const hooks = hooks_for("torch.cuda.set_per_process_memory_fraction");
  if (hooks != nullptr && hooks->set_memory_fraction(fraction, device) != GPUMEM_SUCCESS) {
    report_failure("torch.cuda.set_per_process_memory_fraction", hooks->last_error());
  }
}
