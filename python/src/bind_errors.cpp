// gpumem's C++ exceptions as Python exceptions (DESIGN.md, Errors):
//   gpumem::out_of_memory -> gpumem.OutOfMemoryError (a MemoryError; the message names the size, the
//                            resource, the device, free and total memory)
//   gpumem::bad_alloc     -> MemoryError
//   gpumem::logic_error   -> ValueError (misuse: unknown or freed pointers, bad sizes, bad states)
//   gpumem::cuda_error    -> gpumem.CUDARuntimeError (a RuntimeError with .status, the cudaError_t code)
#include "errors.hpp"
#include "registry.hpp"

#include <gpumem/error.hpp>

#include <new>

namespace gpumem::python {
namespace {

PyObject* out_of_memory_type = nullptr;  // gpumem.OutOfMemoryError (owned by the module)
PyObject* cuda_runtime_error_type = nullptr;  // gpumem.CUDARuntimeError (owned by the module)

/// Sets the error for gpumem's own exception types; @return false for any other exception.
bool set_gpumem_error(std::exception_ptr const& raised)
{
  try {
    std::rethrow_exception(raised);
  } catch (out_of_memory const& e) {
    PyErr_SetString(out_of_memory_type, e.what());
  } catch (bad_alloc const& e) {
    PyErr_SetString(PyExc_MemoryError, e.what());
  } catch (logic_error const& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (cuda_error const& e) {
    py::object error = py::reinterpret_borrow<py::object>(cuda_runtime_error_type)(e.what());
    error.attr("status") = static_cast<int>(e.code());
    PyErr_SetObject(cuda_runtime_error_type, error.ptr());
  } catch (...) {
    return false;
  }
  return true;
}

registration const errors{binding_order::errors, "errors", [](py::module_& m) {
  static py::exception<out_of_memory> const out_of_memory_error(m, "OutOfMemoryError", PyExc_MemoryError);
  out_of_memory_error.doc() = "Device memory is exhausted, even after the resource's own retry. A MemoryError.";
  static py::exception<cuda_error> const cuda_runtime_error(m, "CUDARuntimeError", PyExc_RuntimeError);
  cuda_runtime_error.doc() = "A CUDA runtime call failed; .status is the cudaError_t code.";
  out_of_memory_type = out_of_memory_error.ptr();
  cuda_runtime_error_type = cuda_runtime_error.ptr();
  // Module-local: it runs first for exceptions from this module, before the global translators of other
  // pybind11 modules in the process (PyTorch's, for one), which must never see gpumem's types.
  py::register_local_exception_translator([](std::exception_ptr raised) {
    if (raised && !set_gpumem_error(raised)) { std::rethrow_exception(raised); }  // pybind11's own mapping
  });
}};

}  // namespace

void set_python_error(std::exception_ptr raised) noexcept
{
  try {
    if (set_gpumem_error(raised)) { return; }
    std::rethrow_exception(raised);
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (py::builtin_exception const& e) {
    e.set_error();
  } catch (std::bad_alloc const& e) {
    PyErr_SetString(PyExc_MemoryError, e.what());
  } catch (std::exception const& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "gpumem: an unknown C++ exception");
  }
}

}  // namespace gpumem::python
