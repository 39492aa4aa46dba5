// The allocator hooks (python/torch_allocator/gpumem_allocator_hooks.h): one static table of C function
// pointers over gpumem's C API (gpumem.h), through which the plug-in libraries that ship with the package
// (libgpumem_torch_allocator.so for PyTorch) allocate from this module's gpumem, the one Python configures,
// instead of linking a second copy of the library. Python sees:
//   _gpumem._allocator_hooks_address()  the table's address, an int, for the plug-in's install function
//   _gpumem._allocator_hooks_version    GPUMEM_ALLOCATOR_HOOKS_VERSION, to be passed along with it
// Both are private: gpumem.allocators.torch uses them.
//
// Version 2 (PyTorch's allocator features) composes the pieces declared in torch_hooks.hpp: alloc2 routes a
// private pool's request to torch_pools.cpp, and otherwise prepares the device's PyTorch resource
// (torch_resources.cpp), allocates through the C API and, out of memory, makes room and tries once more; free2 asks
// the private pools, then the record-stream table (torch_streams.cpp), then frees through the C API. Observers
// (statistics, history) hear of every allocation, free and failure.
//
// Exit: PyTorch frees some memory only during interpreter teardown or C++ static destruction (tensors held
// by module globals, cuBLAS workspaces), after gpumem.mr's atexit handler has dropped the resources that
// allocated it. So the table closes at exit, before that handler runs (atexit runs handlers in reverse order
// of registration, and this one registers after gpumem.mr's): from then on free_async returns the memory to
// nobody, and the process's exit reclaims it, rather than calling into a destroyed resource.
#include "registry.hpp"
#include "torch_hooks.hpp"

#include <gpumem.h>
#include <gpumem/cuda_device_id.hpp>
#include <gpumem/error.hpp>
#include <gpumem_allocator_hooks.h>

#include <array>
#include <atomic>
#include <new>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <string>

namespace gpumem::python {
namespace {

thread_local std::string hook_error;  // the latest failure through the table on this thread
std::atomic<bool> closed{false};      // set at interpreter exit (file comment); trivially destructible

using torch_hooks::fail;
using torch_hooks::fail_with_current_exception;

/** @brief `status` from the C API, its message kept when it failed. */
gpumem_status from_c_api(gpumem_status status) noexcept
{
  return status == GPUMEM_SUCCESS ? status : fail(status, gpumem_last_error());
}

constexpr std::size_t max_observers = 8;
std::array<std::atomic<torch_hooks::observer>, max_observers> observers{};  // filled in order, never emptied
std::atomic<std::size_t> observer_count{0};

void notify(torch_hooks::allocation_event const& event) noexcept
{
  std::size_t const n = observer_count.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < n; ++i) {
    if (auto const fn = observers[i].load(std::memory_order_acquire)) { fn(event); }
  }
}

gpumem_status hook_alloc_async(std::size_t size, int device, void* stream, void** out) noexcept
{
  if (device < 0) { return from_c_api(gpumem_alloc_async(size, stream, out)); }
  if (out != nullptr) { *out = nullptr; }
  try {
    cuda_set_device_raii const on_device{cuda_device_id{device}};
    return from_c_api(gpumem_alloc_async(size, stream, out));
  } catch (...) {  // not a device ordinal, or CUDA refused the device
    return fail_with_current_exception();
  }
}

gpumem_status hook_free_async(void* ptr, void* stream) noexcept
{
  if (closed.load(std::memory_order_acquire)) { return GPUMEM_SUCCESS; }  // exiting: see the file comment
  return from_c_api(gpumem_free_async(ptr, stream));
}

char const* hook_last_error() noexcept { return hook_error.c_str(); }

bool is_out_of_memory(gpumem_status status) noexcept
{
  return status == GPUMEM_ERROR_OUT_OF_MEMORY || status == GPUMEM_ERROR_BAD_ALLOC;
}

/** @brief alloc2 for pool (0, 0) with `device` current: the device's PyTorch resource, one retry after making room. */
gpumem_status allocate_from_device_resource(std::size_t size, int device, void* stream, void** out) noexcept
{
  if (auto const status = torch_hooks::prepare_device(device); status != GPUMEM_SUCCESS) { return status; }
  gpumem_status status = from_c_api(gpumem_alloc_async(size, stream, out));
  if (is_out_of_memory(status) && torch_hooks::make_room(device, size)) {
    status = from_c_api(gpumem_alloc_async(size, stream, out));
  }
  return status;
}

gpumem_status hook_alloc2(std::size_t size, int device, void* stream, std::uint64_t pool_a, std::uint64_t pool_b,
                          void** out) noexcept
{
  if (out == nullptr) { return fail(GPUMEM_ERROR_INVALID_VALUE, "alloc2: the out-pointer is null"); }
  *out = nullptr;
  torch_hooks::pool_id const pool{pool_a, pool_b};
  gpumem_status status = GPUMEM_SUCCESS;
  try {
    std::optional<cuda_set_device_raii> on_device;
    if (device >= 0) { on_device.emplace(cuda_device_id{device}); }
    int const current = device >= 0 ? device : get_current_cuda_device().value();
    status = pool.is_default() ? allocate_from_device_resource(size, current, stream, out)
                               : torch_hooks::pool_allocate(current, pool, size, stream, out);
    using action = torch_hooks::allocation_event::action;
    if (status == GPUMEM_SUCCESS) {
      if (*out != nullptr) { notify({action::alloc, *out, size, current, stream, pool}); }  // 0 bytes: no block
    } else if (is_out_of_memory(status)) {  // other failures (a bad device, a resource that cannot be built) are not
      notify({action::oom, nullptr, size, current, stream, pool});
    }
  } catch (...) {  // not a device ordinal, or CUDA refused the device
    return fail_with_current_exception();
  }
  return status;
}

gpumem_status hook_free2(void* ptr, std::size_t size, int device, void* stream) noexcept
{
  if (ptr == nullptr) { return GPUMEM_SUCCESS; }
  if (closed.load(std::memory_order_acquire)) { return GPUMEM_SUCCESS; }  // exiting: see the file comment
  torch_hooks::pool_id pool{~std::uint64_t{0}, ~std::uint64_t{0}};         // "a private pool" for observers
  gpumem_status status = GPUMEM_SUCCESS;
  if (!torch_hooks::pool_deallocate(ptr, size, stream, &status)) {
    pool = {};
    if (!torch_hooks::free_after_recorded_streams(ptr, stream, &status)) {
      status = from_c_api(gpumem_free_async(ptr, stream));
    }
  }
  if (status == GPUMEM_SUCCESS) {
    notify({torch_hooks::allocation_event::action::free, ptr, size, device, stream, pool});
  }
  return status;
}

gpumem_status hook_pool_begin(int device, std::uint64_t a, std::uint64_t b) noexcept
{
  return torch_hooks::pool_begin(device, {a, b});
}
gpumem_status hook_pool_end(int device, std::uint64_t a, std::uint64_t b) noexcept
{
  return torch_hooks::pool_end(device, {a, b});
}
gpumem_status hook_pool_release(int device, std::uint64_t a, std::uint64_t b) noexcept
{
  return torch_hooks::pool_release(device, {a, b});
}

gpumem_allocator_hooks const hooks{&hook_alloc_async,         &hook_free_async,           &hook_last_error,
                                   &hook_alloc2,              &hook_free2,                &torch_hooks::record_stream,
                                   &hook_pool_begin,          &hook_pool_end,             &hook_pool_release,
                                   &torch_hooks::empty_cache, &torch_hooks::set_memory_fraction};

registration const allocator_hooks{binding_order::allocators, "allocator_hooks", [](py::module_& m) {
  m.def(
    "_allocator_hooks_address", [] { return reinterpret_cast<std::uintptr_t>(&hooks); },
    "The address (an int) of this module's gpumem_allocator_hooks table (python/torch_allocator/"
    "gpumem_allocator_hooks.h), for a plug-in's install function; valid for the life of the process.");
  m.attr("_allocator_hooks_version") = GPUMEM_ALLOCATOR_HOOKS_VERSION;
  m.def(
    "_close_allocator_hooks", [] { closed.store(true, std::memory_order_release); },
    "Makes the hooks' free a no-op for the rest of the process (run at interpreter exit, before gpumem.mr "
    "drops its resources, so that memory freed during teardown is not returned to a destroyed resource).");
  py::module_::import("atexit").attr("register")(m.attr("_close_allocator_hooks"));
}};

}  // namespace

namespace torch_hooks {

void add_observer(observer fn) noexcept
{
  static std::mutex mutex;
  std::scoped_lock const lock{mutex};
  std::size_t const n = observer_count.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < n; ++i) {
    if (observers[i].load(std::memory_order_relaxed) == fn) { return; }
  }
  if (n == max_observers) { return; }  // a fixed set of files registers observers: cannot happen
  observers[n].store(fn, std::memory_order_release);
  observer_count.store(n + 1, std::memory_order_release);
}

gpumem_status fail(gpumem_status status, char const* message) noexcept
{
  try {
    hook_error = message;
  } catch (...) {  // no memory even for the message: keep the status
    hook_error.clear();
  }
  return status;
}

gpumem_status fail_with_current_exception() noexcept
{
  try {
    throw;
  } catch (out_of_memory const& e) {
    return fail(GPUMEM_ERROR_OUT_OF_MEMORY, e.what());
  } catch (bad_alloc const& e) {
    return fail(GPUMEM_ERROR_BAD_ALLOC, e.what());
  } catch (std::bad_alloc const& e) {
    return fail(GPUMEM_ERROR_BAD_ALLOC, e.what());
  } catch (cuda_error const& e) {
    return fail(GPUMEM_ERROR_CUDA, e.what());
  } catch (std::logic_error const& e) {
    return fail(GPUMEM_ERROR_INVALID_VALUE, e.what());
  } catch (std::exception const& e) {
    return fail(GPUMEM_ERROR_UNKNOWN, e.what());
  } catch (...) {
    return fail(GPUMEM_ERROR_UNKNOWN, "unknown exception");
  }
}

}  // namespace torch_hooks
}  // namespace gpumem::python
