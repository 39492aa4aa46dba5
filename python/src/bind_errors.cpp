// gpumem's C++ exceptions as Python exceptions (DESIGN.md, Errors):
//   gpumem::out_of_memory -> gpumem.OutOfMemoryError (a MemoryError; the message names the size, the
//                            resource, the device, free and total memory)
//   gpumem::bad_alloc     -> MemoryError
//   gpumem::logic_error   -> ValueError (misuse: unknown or freed pointers, bad sizes, bad states)
//   gpumem::cuda_error    -> gpumem.CUDARuntimeError (a RuntimeError with .status, the cudaError_t code)
#include "registry.hpp"

#include <gpumem/error.hpp>

namespace gpumem::python {
namespace {

registration const errors{binding_order::errors, "errors", [](py::module_& m) {
  static py::exception<out_of_memory> const out_of_memory_error(m, "OutOfMemoryError", PyExc_MemoryError);
  out_of_memory_error.doc() = "Device memory is exhausted, even after the resource's own retry. A MemoryError.";
  static py::exception<cuda_error> const cuda_runtime_error(m, "CUDARuntimeError", PyExc_RuntimeError);
  cuda_runtime_error.doc() = "A CUDA runtime call failed; .status is the cudaError_t code.";
  // Module-local: it runs first for exceptions from this module, before the global translators of other
  // pybind11 modules in the process (PyTorch's, for one), which must never see gpumem's types.
  py::register_local_exception_translator([](std::exception_ptr raised) {
    try {
      if (raised) { std::rethrow_exception(raised); }
    } catch (out_of_memory const& e) {
      PyErr_SetString(out_of_memory_error.ptr(), e.what());
    } catch (bad_alloc const& e) {
      PyErr_SetString(PyExc_MemoryError, e.what());
    } catch (logic_error const& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (cuda_error const& e) {
      py::object error = py::reinterpret_borrow<py::object>(cuda_runtime_error.ptr())(e.what());
      error.attr("status") = static_cast<int>(e.code());
      PyErr_SetObject(cuda_runtime_error.ptr(), error.ptr());
    }
  });
}};

}  // namespace
}  // namespace gpumem::python
