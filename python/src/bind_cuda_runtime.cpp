// The C++ parts of gpumem.cuda.runtime (CuPy's cupy.cuda.runtime functions) and gpumem.cuda.get_cublas_handle:
//   _pointer_get_attributes(ptr)   cudaPointerGetAttributes as a tuple (type, device, devicePointer, hostPointer)
//   _CublasHandle(device)          one cuBLAS handle (cublasCreate on `device`), destroyed with the object or by
//                                  destroy(); gpumem/cuda/_cublas.py keeps one per device and thread
//   _set_memory_hooks_active       (memory_hooks.hpp)
// The pure-Python parts are python/gpumem/cuda/runtime.py and _cublas.py.
#include "arguments.hpp"
#include "conversions.hpp"
#include "memory_hooks.hpp"
#include "registry.hpp"

#include <gpumem/cublas_handle.hpp>
#include <gpumem/cuda_device_id.hpp>
#include <gpumem/device.hpp>
#include <gpumem/error.hpp>

#include <cstdint>
#include <string>

namespace gpumem::python {
namespace {

/** @brief A cuBLAS handle of one device, destroyed (with its device current) when the object goes or by destroy(). */
class cublas_handle {
 public:
  explicit cublas_handle(int device) : device_{device}
  {
    check_device_id(cuda_device_id{device});
    py::gil_scoped_release const release;
    handle_ = create_cublas_handle(cuda_device_id{device});
  }
  ~cublas_handle() { destroy(); }
  cublas_handle(cublas_handle const&) = delete;
  cublas_handle& operator=(cublas_handle const&) = delete;
  cublas_handle(cublas_handle&&) = delete;
  cublas_handle& operator=(cublas_handle&&) = delete;

  void destroy() noexcept
  {
    if (handle_ == nullptr) { return; }
    destroy_cublas_handle(handle_, cuda_device_id{device_});
    handle_ = nullptr;
  }
  [[nodiscard]] std::uintptr_t ptr() const noexcept { return to_int(handle_); }
  [[nodiscard]] int device() const noexcept { return device_; }

 private:
  int device_;
  void* handle_{};
};

registration const cuda_runtime_registration{binding_order::buffers, "cuda_runtime", [](py::module_& m) {
  py::module_ cuda = m.attr("cuda");
  cuda.def(
    "_pointer_get_attributes",
    [](checked<std::uintptr_t, "ptr"> ptr) {
      pointer_attributes const a =
        get_pointer_attributes(reinterpret_cast<void const*>(ptr.value));  // NOLINT
      return py::make_tuple(a.type, a.device, to_int(a.device_pointer), to_int(a.host_pointer));
    },
    py::arg("ptr"), "cudaPointerGetAttributes(ptr) as (type, device, devicePointer, hostPointer).");

  py::class_<cublas_handle>(cuda, "_CublasHandle", "A cuBLAS handle of one device (gpumem.cuda.get_cublas_handle).")
    .def(py::init([](checked<int, "device"> device) { return std::make_unique<cublas_handle>(device.value); }),
         py::arg("device"),
         "cublasCreate with `device` current. Raises CUDARuntimeError (cudaErrorNotSupported) under the host backend "
         "or when libcublas cannot be loaded.")
    .def_property_readonly("ptr", &cublas_handle::ptr, "The cublasHandle_t as an int (0 once destroyed).")
    .def_property_readonly("device_id", &cublas_handle::device, "The device the handle was made on.")
    .def("destroy", &cublas_handle::destroy, "cublasDestroy now (later calls do nothing).");

  memory_hooks::bind(cuda);
}};

}  // namespace
}  // namespace gpumem::python
