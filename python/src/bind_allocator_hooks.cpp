// The allocator hooks (python/torch_allocator/gpumem_allocator_hooks.h): one static table of C function
// pointers over gpumem's C API (gpumem.h), through which the plug-in libraries that ship with the package
// (libgpumem_torch_allocator.so for PyTorch) allocate from this module's gpumem, the one Python configures,
// instead of linking a second copy of the library. Python sees:
//   _gpumem._allocator_hooks_address()  the table's address, an int, for the plug-in's install function
//   _gpumem._allocator_hooks_version    GPUMEM_ALLOCATOR_HOOKS_VERSION, to be passed along with it
// Both are private: gpumem.allocators.torch uses them.
//
// Exit: PyTorch frees some memory only during interpreter teardown or C++ static destruction (tensors held
// by module globals, cuBLAS workspaces), after gpumem.mr's atexit handler has dropped the resources that
// allocated it. So the table closes at exit, before that handler runs (atexit runs handlers in reverse order
// of registration, and this one registers after gpumem.mr's): from then on free_async returns the memory to
// nobody, and the process's exit reclaims it, rather than calling into a destroyed resource.
#include "registry.hpp"

#include <gpumem.h>
#include <gpumem/cuda_device_id.hpp>
#include <gpumem/error.hpp>
#include <gpumem_allocator_hooks.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <string>

namespace gpumem::python {
namespace {

thread_local std::string hook_error;  // the latest failure through the table on this thread
std::atomic<bool> closed{false};      // set at interpreter exit (file comment); trivially destructible

/** @brief Keeps `message` for last_error(); returns `status`. */
gpumem_status fail(gpumem_status status, char const* message) noexcept
{
  try {
    hook_error = message;
  } catch (...) {  // no memory even for the message: keep the status
    hook_error.clear();
  }
  return status;
}

/** @brief `status` from the C API, its message kept when it failed. */
gpumem_status from_c_api(gpumem_status status) noexcept
{
  return status == GPUMEM_SUCCESS ? status : fail(status, gpumem_last_error());
}

gpumem_status hook_alloc_async(std::size_t size, int device, void* stream, void** out) noexcept
{
  if (device < 0) { return from_c_api(gpumem_alloc_async(size, stream, out)); }
  if (out != nullptr) { *out = nullptr; }
  try {
    cuda_set_device_raii const on_device{cuda_device_id{device}};
    return from_c_api(gpumem_alloc_async(size, stream, out));
  } catch (logic_error const& e) {  // not a device ordinal
    return fail(GPUMEM_ERROR_INVALID_VALUE, e.what());
  } catch (cuda_error const& e) {
    return fail(GPUMEM_ERROR_CUDA, e.what());
  } catch (std::exception const& e) {
    return fail(GPUMEM_ERROR_UNKNOWN, e.what());
  } catch (...) {
    return fail(GPUMEM_ERROR_UNKNOWN, "unknown exception while making the device current");
  }
}

gpumem_status hook_free_async(void* ptr, void* stream) noexcept
{
  if (closed.load(std::memory_order_acquire)) { return GPUMEM_SUCCESS; }  // exiting: see the file comment
  return from_c_api(gpumem_free_async(ptr, stream));
}

char const* hook_last_error() noexcept { return hook_error.c_str(); }

gpumem_allocator_hooks const hooks{&hook_alloc_async, &hook_free_async, &hook_last_error};

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
}  // namespace gpumem::python
