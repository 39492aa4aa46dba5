// gpumem._gpumem.mr, continued: the resources RMM's Python API has beyond bind_mr.cpp's, with its names:
// CallbackMemoryResource, SystemMemoryResource, CudaAsyncViewMemoryResource, PrefetchResourceAdaptor and
// available_device_memory().
//
// CallbackMemoryResource holds its two Python functions (the references are dropped with the GIL, on
// whichever thread frees the resource) and calls them with the GIL held; an exception they raise passes out
// of the allocation (allocate) or is reported as unraisable (deallocate, which must not throw).
#include "arguments.hpp"
#include "bind_mr.hpp"
#include "conversions.hpp"
#include "registry.hpp"

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/device.hpp>
#include <gpumem/mr/callback_memory_resource.hpp>
#include <gpumem/mr/cuda_async_view_memory_resource.hpp>
#include <gpumem/mr/prefetch_resource_adaptor.hpp>
#include <gpumem/mr/system_memory_resource.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

namespace gpumem::python {
namespace {

using mr::device_memory_resource;

/** @brief A Python reference that is dropped with the GIL held, whichever thread lets go of it last. */
std::shared_ptr<py::object> hold_with_gil(py::object object)
{
  return {new py::object(std::move(object)), [](py::object* held) {
            py::gil_scoped_acquire const acquire;
            delete held;  // NOLINT(cppcoreguidelines-owning-memory)
          }};
}

/** @brief The Python stream object a callback receives for `stream` (gpumem.cuda's: Stream.null for 0). */
py::object stream_object(py::handle cuda_module, cuda_stream_view stream)
{
  if (stream.is_default()) { return cuda_module.attr("Stream").attr("null"); }
  return cuda_module.attr("ExternalStream")(to_int(stream.value()));
}

/** @brief The device a `device` argument names: None -> the current one. @throws as device_argument. */
cuda_device_id device_or_current(py::handle device)
{
  return device.is_none() ? get_current_cuda_device() : cuda_device_id{device_argument(device, "device")};
}

void bind_callback(py::module_& sub, py::handle cuda_module)
{
  py::class_<mr::callback_memory_resource, device_memory_resource>(
    sub, "CallbackMemoryResource",
    "A resource whose allocations are made by Python functions (RMM's CallbackMemoryResource): "
    "allocate_func(nbytes, stream) -> int address, deallocate_func(ptr, nbytes, stream). `stream` is a "
    "gpumem.cuda stream object (Stream.null for the default stream). Slow (a Python call per request): for "
    "debugging and for routing requests elsewhere.")
    .def(py::init([cuda_module](py::object allocate_func, py::object deallocate_func) {
           if (PyCallable_Check(allocate_func.ptr()) == 0) { throw_wrong_type("allocate_func", "callable", allocate_func); }
           if (PyCallable_Check(deallocate_func.ptr()) == 0) {
             throw_wrong_type("deallocate_func", "callable", deallocate_func);
           }
           auto const allocate = hold_with_gil(std::move(allocate_func));
           auto const deallocate = hold_with_gil(std::move(deallocate_func));
           mr::allocate_callback_t on_allocate = [allocate, cuda_module](std::size_t bytes, cuda_stream_view stream,
                                                                          void* /*arg*/) -> void* {
             py::gil_scoped_acquire const acquire;
             py::object const result = (*allocate)(bytes, stream_object(cuda_module, stream));
             if (!py::isinstance<py::int_>(result)) {
               throw py::type_error("CallbackMemoryResource: allocate_func must return the address as an int, not " +
                                    type_name(result));
             }
             return to_pointer(result);
           };
           mr::deallocate_callback_t on_deallocate = [deallocate, cuda_module](void* ptr, std::size_t bytes,
                                                                               cuda_stream_view stream, void* /*arg*/) {
             py::gil_scoped_acquire const acquire;
             try {
               (*deallocate)(to_int(ptr), bytes, stream_object(cuda_module, stream));
             } catch (py::error_already_set& error) {  // deallocation must not throw: report it
               error.discard_as_unraisable("CallbackMemoryResource: deallocate_func");
             }
           };
           return std::make_unique<mr::callback_memory_resource>(std::move(on_allocate), std::move(on_deallocate));
         }),
         py::arg("allocate_func"), py::arg("deallocate_func"),
         "Calls allocate_func(nbytes, stream) for each allocation (it must return a 256-byte aligned address as an "
         "int: 0 raises MemoryError, another type TypeError, a misaligned one is given back through "
         "deallocate_func and raises ValueError) and deallocate_func(ptr, nbytes, stream) for each deallocation "
         "(an exception it raises is reported as unraisable: deallocation cannot fail). Keeps both functions alive. "
         "Raises TypeError when either is not callable.");
}

void bind_system(py::module_& sub)
{
  py::class_<mr::system_memory_resource, device_memory_resource>(
    sub, "SystemMemoryResource",
    "malloc/free-backed memory (RMM's SystemMemoryResource) for a device that can access pageable host memory "
    "(HMM or ATS: cudaDevAttrPageableMemoryAccess). Supported on the host backend, whose device memory is host "
    "memory. Deallocation waits for its stream.")
    .def(py::init<>(),
         "A resource for the current device. Raises CUDARuntimeError (cudaErrorNotSupported) naming the device "
         "where it cannot access pageable host memory.");
  sub.def(
    "is_system_memory_supported",
    [](py::handle device) { return mr::is_system_memory_supported(device_or_current(device)); },
    py::arg("device") = py::none(),
    "Whether `device` (None: the current one) can use SystemMemoryResource: True where it can access pageable "
    "host memory, and on the host backend.");
}

void bind_async_view(py::module_& sub)
{
  py::class_<mr::cuda_async_view_memory_resource, device_memory_resource>(
    sub, "CudaAsyncViewMemoryResource",
    "cudaMallocFromPoolAsync from an existing memory pool that this resource does not own (RMM's "
    "CudaAsyncViewMemoryResource); the pool must outlive the resource. Views of the same pool are equal.")
    .def(py::init([](py::handle pool_handle) {
           if (pool_handle.is_none()) { throw_wrong_type("pool_handle", "a cudaMemPool_t (an int)", pool_handle); }
           // An int, or an object that converts to one (cuda-python's cudaMemPool_t and CUmemoryPool do).
           py::object const address = py::isinstance<py::int_>(pool_handle) || py::isinstance<py::float_>(pool_handle) ||
                                          !py::hasattr(pool_handle, "__int__")
                                        ? py::reinterpret_borrow<py::object>(pool_handle)
                                        : py::object{py::int_(py::reinterpret_borrow<py::object>(pool_handle))};
           auto const value = static_cast<std::uintptr_t>(unsigned_argument(address, "pool_handle", UINTPTR_MAX));
           if (value == 0) { throw py::value_error("pool_handle must not be 0 (a null cudaMemPool_t)"); }
           return std::make_unique<mr::cuda_async_view_memory_resource>(reinterpret_cast<cudaMemPool_t>(value),  // NOLINT
                                                                        get_current_cuda_device());
         }),
         py::arg("pool_handle"),
         "A view of the pool `pool_handle` (an int, or a cuda-python cudaMemPool_t / CUmemoryPool) on the current "
         "device, e.g. CudaAsyncMemoryResource.pool_handle() or default_memory_pool(). Raises TypeError or "
         "ValueError for anything that is not a non-null handle.")
    .def(
      "pool_handle", [](mr::cuda_async_view_memory_resource const& self) { return to_int(self.pool_handle()); },
      "The viewed cudaMemPool_t as an int.");
  sub.def(
    "default_memory_pool",
    [](py::handle device) { return to_int(mr::default_memory_pool(device_or_current(device))); },
    py::arg("device") = py::none(),
    "The device's default memory pool (the one cudaMallocAsync uses) as an int, owned by the driver (None: the "
    "current device).");
}

void bind_prefetch(py::module_& sub)
{
  py::class_<mr::prefetch_resource_adaptor, device_memory_resource> prefetch(
    sub, "PrefetchResourceAdaptor",
    "Forwards to `upstream` and prefetches every new allocation to the current device on its stream (RMM's "
    "PrefetchResourceAdaptor): for managed memory, resident before the first kernel touches it. Keeps "
    "`upstream` alive.");
  prefetch.def(py::init([](checked<device_memory_resource*, "upstream"> upstream) {
                 return std::make_unique<mr::prefetch_resource_adaptor>(upstream.value);
               }),
               py::arg("upstream"), py::keep_alive<1, 2>(),
               "Prefetches what `upstream` hands out (managed memory on a GPU; cudaMemPrefetchAsync refuses plain "
               "device memory with CUDARuntimeError).");
  add_upstream(prefetch);
}

registration const resources_more{binding_order::resources, "mr_resources", [](py::module_& m) {
  py::module_ sub = m.attr("mr");
  py::handle const cuda_module = m.attr("cuda");  // the module holds it for the process's life
  bind_callback(sub, cuda_module);
  bind_system(sub);
  bind_async_view(sub);
  bind_prefetch(sub);
  m.def(
    "_parse_bytes",
    [](py::handle value, std::string const& name) { return byte_size_argument(value, name.c_str()); },
    py::arg("value"), py::arg("name"),
    "`value` (an int, or a size string such as \"4MiB\") as bytes, checked as the resources' size arguments "
    "are; errors name `name`.");
  sub.def(
    "available_device_memory",
    [] {
      memory_info const info = available_device_memory();
      return py::make_tuple(info.free, info.total);
    },
    "(free, total) bytes of the current device, as cudaMemGetInfo reports them (RMM's available_device_memory).");
}};

}  // namespace
}  // namespace gpumem::python
