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
#include <string>

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

/** @brief A new exception class `name` of the module, deriving from `bases` (a tuple), with `doc`. */
py::object new_exception(py::module_& m, char const* name, py::tuple const& bases, char const* doc)
{
  std::string const qualified = std::string{py::str(m.attr("__name__"))} + "." + name;
  PyObject* const type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (type == nullptr) { throw py::error_already_set(); }
  auto result = py::reinterpret_steal<py::object>(type);
  m.attr(name) = result;
  return result;
}

registration const errors{binding_order::errors, "errors", [](py::module_& m) {
  // RMM's RMMError(errcode, msg): the base of gpumem's own errors, so that `except RMMError` catches them.
  py::object const rmm_error = new_exception(
    m, "RMMError", py::make_tuple(py::handle(PyExc_Exception)),
    "The base of gpumem's errors, as RMM's rmm.RMMError: RMMError(errcode, msg) keeps .errcode (None for "
    "gpumem's own errors: OutOfMemoryError, CUDARuntimeError).");
  rmm_error.attr("errcode") = py::none();
  PyObject* const rmm_type = rmm_error.ptr();  // the module holds it
  rmm_error.attr("__init__") = py::cpp_function(
    [rmm_type](py::handle self, py::args const& args) {
      // RMMError(errcode, msg): .errcode and the message; any other form is Exception's.
      bool const coded = args.size() == 2 && py::type::of(self).ptr() == rmm_type;
      py::object const base_init = py::reinterpret_borrow<py::object>(PyExc_Exception).attr("__init__");
      if (coded) {
        self.attr("errcode") = args[0];
        base_init(self, args[1]);
      } else {
        base_init(self, *args);
      }
    },
    py::name("rmm_error_init"), py::is_method(rmm_error));
  py::object const out_of_memory_error = new_exception(
    m, "OutOfMemoryError", py::make_tuple(py::handle(PyExc_MemoryError), rmm_error),
    "Device memory is exhausted, even after the resource's own retry. A MemoryError (and a gpumem.RMMError).");
  py::object const cuda_runtime_error = new_exception(
    m, "CUDARuntimeError", py::make_tuple(py::handle(PyExc_RuntimeError), rmm_error),
    "A CUDA runtime call failed; .status is the cudaError_t code. A RuntimeError (and a gpumem.RMMError).");
  out_of_memory_type = out_of_memory_error.inc_ref().ptr();  // kept for the life of the process
  cuda_runtime_error_type = cuda_runtime_error.inc_ref().ptr();
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
