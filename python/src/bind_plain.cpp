// The plain API (plain.hpp): gpumem.alloc(size) -> int, gpumem.zeros(size) -> int, gpumem.free(ptr),
// gpumem.allocation_size(ptr), gpumem.live_allocation_count(). Pointers are ints, as in CuPy and RMM. The
// GIL is released around every call that may block (allocation may grow a pool or wait for a stream; free
// may synchronise).
//
// alloc, zeros and free are the hot path (an allocation + free pair from Python is benchmarked against
// CuPy's and PyTorch's): they are bound with the raw CPython vectorcall convention (METH_FASTCALL), which
// costs a fraction of pybind11's general dispatch, and convert their arguments by hand. alloc and free
// first try gpumem's non-blocking path with the GIL held (a pool's thread cache: no lock another thread
// holds across a blocking call, so holding the GIL there cannot deadlock or stall), and release the GIL
// only for the full path, which may block. Errors are the same as everywhere else (errors.hpp).
#include "arguments.hpp"
#include "conversions.hpp"
#include "errors.hpp"
#include "registry.hpp"

#include <gpumem/plain.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <string>
#include <string_view>

namespace gpumem::python {
namespace {

/** @brief Releases the GIL for its scope (the raw CPython calls: cheaper than gil_scoped_release). */
class without_gil {
 public:
  without_gil() noexcept : state_{PyEval_SaveThread()} {}
  without_gil(without_gil const&) = delete;
  without_gil& operator=(without_gil const&) = delete;
  ~without_gil() { PyEval_RestoreThread(state_); }

 private:
  PyThreadState* state_;
};

/**
 * @brief The arguments of a METH_FASTCALL | METH_KEYWORDS call, by name: positional ones first, then
 * keywords. Unknown, repeated or missing required arguments raise TypeError, as Python functions do.
 */
template <std::size_t N>
bool parse_arguments(char const* function, std::array<char const*, N> const& names, std::size_t required,
                     PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, std::array<PyObject*, N>& out)
{
  out.fill(nullptr);
  if (nargs > static_cast<Py_ssize_t>(N)) {
    PyErr_Format(PyExc_TypeError, "%s() takes at most %zu arguments (%zd given)", function, N, nargs);
    return false;
  }
  for (Py_ssize_t i = 0; i < nargs; ++i) { out[static_cast<std::size_t>(i)] = args[i]; }
  Py_ssize_t const keywords = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t k = 0; k < keywords; ++k) {
    char const* const key = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
    if (key == nullptr) { return false; }
    std::size_t slot = N;
    for (std::size_t i = 0; i < N; ++i) {
      if (std::string_view{key} == names[i]) { slot = i; }
    }
    if (slot == N) {
      PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%s'", function, key);
      return false;
    }
    if (out[slot] != nullptr) {
      PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", function, key);
      return false;
    }
    out[slot] = args[nargs + k];
  }
  for (std::size_t i = 0; i < required; ++i) {
    if (out[i] == nullptr) {
      PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", function, names[i]);
      return false;
    }
  }
  return true;
}

/**
 * @brief A size argument: an int (or anything with __index__) in [0, SIZE_MAX]. @return false with a Python
 * error set: TypeError for another object, ValueError naming `function`'s size out of range.
 */
bool to_size(char const* function, PyObject* object, std::size_t& size) noexcept
{
  if (PyLong_CheckExact(object)) {  // the common case, without a Python call
    size = PyLong_AsSize_t(object);
    if (size != static_cast<std::size_t>(-1) || PyErr_Occurred() == nullptr) { return true; }
    PyErr_Clear();
  }
  try {
    std::string const name = std::string{function} + ": size";
    size = unsigned_argument(py::handle{object}, name.c_str(), std::numeric_limits<std::size_t>::max());
    return true;
  } catch (...) {
    set_python_error(std::current_exception());
    return false;
  }
}

/** @brief The stream argument (absent or None: the default stream); pybind11's converter for the rest. */
cuda_stream_view stream_argument(PyObject* stream)
{
  if (stream == nullptr || stream == Py_None) { return cuda_stream_view{}; }
  return to_stream(py::handle{stream});
}

void* alloc_bytes(std::size_t size, cuda_stream_view stream) { return gpumem::alloc(size, stream); }
void* zeros_bytes(std::size_t size, cuda_stream_view stream) { return gpumem::zeros(size, stream); }

/// alloc(size, stream=None) and zeros(size, stream=None).
template <void* (*Allocate)(std::size_t, cuda_stream_view)>
PyObject* allocate(char const* function, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) noexcept
{
  static constexpr std::array<char const*, 2> names{"size", "stream"};
  std::array<PyObject*, 2> values{};
  if (!parse_arguments(function, names, 1, args, nargs, kwnames, values)) { return nullptr; }
  std::size_t size = 0;
  if (!to_size(function, values[0], size)) { return nullptr; }
  try {
    cuda_stream_view const stream = stream_argument(values[1]);
    void* ptr = Allocate == alloc_bytes ? gpumem::try_alloc_without_blocking(size, stream) : nullptr;
    if (ptr == nullptr) {
      without_gil const released;  // the resource may block (grow, wait for a lock, synchronise)
      ptr = Allocate(size, stream);
    }
    return PyLong_FromVoidPtr(ptr);
  } catch (...) {
    set_python_error(std::current_exception());
    return nullptr;
  }
}

PyObject* py_alloc(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames)
{
  return allocate<alloc_bytes>("alloc", args, nargs, kwnames);
}

PyObject* py_zeros(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames)
{
  return allocate<zeros_bytes>("zeros", args, nargs, kwnames);
}

PyObject* py_free(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames)
{
  static constexpr std::array<char const*, 2> names{"ptr", "stream"};
  std::array<PyObject*, 2> values{};
  if (!parse_arguments("free", names, 1, args, nargs, kwnames, values)) { return nullptr; }
  try {
    void* ptr = nullptr;
    if (PyLong_CheckExact(values[0])) {  // the common case, without a Python call
      unsigned long long const address = PyLong_AsUnsignedLongLong(values[0]);
      if (address == static_cast<unsigned long long>(-1) && PyErr_Occurred() != nullptr) {
        PyErr_Clear();
        ptr = to_pointer(py::handle{values[0]});  // negative or too large: raises the error naming it
      } else {
        ptr = reinterpret_cast<void*>(static_cast<std::uintptr_t>(address));  // NOLINT(performance-no-int-to-ptr)
      }
    } else {
      ptr = to_pointer(py::handle{values[0]});
    }
    cuda_stream_view const stream = stream_argument(values[1]);
    if (!gpumem::try_free_without_blocking(ptr, stream)) {
      without_gil const released;  // the resource may block (a lock, cudaFree's synchronisation)
      gpumem::free(ptr, stream);
    }
    Py_RETURN_NONE;
  } catch (...) {
    set_python_error(std::current_exception());
    return nullptr;
  }
}

// The first line of each docstring is the signature in pybind11's style, which the stub generator reads.
// NOLINTNEXTLINE(cppcoreguidelines-avoid-c-arrays): CPython's method table
PyMethodDef plain_methods[] = {
  {"alloc", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&py_alloc)), METH_FASTCALL | METH_KEYWORDS,
   "alloc(size: int, stream: object = None) -> int\n\n"
   "Allocates `size` bytes (256-byte aligned) of device memory from the current device's current resource, "
   "ordered on `stream` (None: the default stream; an int cudaStream_t, or an object with .ptr or .cuda_stream); "
   "returns the address as an int (0 for size 0). Raises OutOfMemoryError (a MemoryError naming the size, the "
   "device, free and total memory), ValueError for a negative size or one past SIZE_MAX."},
  {"zeros", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&py_zeros)), METH_FASTCALL | METH_KEYWORDS,
   "zeros(size: int, stream: object = None) -> int\n\n"
   "As alloc(), then sets every byte to zero on `stream` (synchronise the stream before reading on the host)."},
  {"free", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&py_free)), METH_FASTCALL | METH_KEYWORDS,
   "free(ptr: object, stream: object = None) -> None\n\n"
   "Returns memory from alloc()/zeros() (an int, or an object with .ptr) to the resource that allocated it, "
   "ordered on `stream`. Freeing an unknown or already-freed pointer raises ValueError naming the pointer; "
   "free(0) does nothing."},
  {nullptr, nullptr, 0, nullptr},
};

registration const plain{binding_order::plain, "plain", [](py::module_& m) {
  for (PyMethodDef* def = plain_methods; def->ml_name != nullptr; ++def) {
    PyObject* const function = PyCFunction_NewEx(def, nullptr, m.attr("__name__").ptr());
    if (function == nullptr) { throw py::error_already_set(); }
    m.add_object(def->ml_name, py::reinterpret_steal<py::object>(function));
  }
  m.def(
    "allocation_size", [](py::handle ptr) { return gpumem::allocation_size(to_pointer(ptr)); }, py::arg("ptr"),
    "The size asked for when `ptr` was allocated by alloc()/zeros(). Raises ValueError for an unknown pointer.");
  m.def("live_allocation_count", &gpumem::live_allocation_count,
        "How many pointers from alloc()/zeros() are live (not yet freed), over all threads and devices.");
}};

}  // namespace
}  // namespace gpumem::python
