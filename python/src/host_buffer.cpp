// host_buffer.hpp: buffer-protocol objects checked before a copy.
#include "host_buffer.hpp"

#include "arguments.hpp"

#include <string>

namespace gpumem::python {

host_buffer::host_buffer(py::handle object, access mode, char order, char const* what)
{
  if (PyObject_CheckBuffer(object.ptr()) == 0) {
    throw py::type_error(std::string{what} + " must support the buffer protocol (bytes, bytearray, memoryview, a "
                         "NumPy array), not " + type_name(object));
  }
  int const flags = PyBUF_RECORDS_RO | (mode == access::write ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(object.ptr(), &view_, flags) != 0) {
    py::error_already_set const error;  // BufferError: read-only, or strides the exporter cannot give
    throw py::value_error(std::string{what} + (mode == access::write ? " must be a writable buffer" : " is not usable") +
                          " (" + error.what() + ")");
  }
  try {
    if (format_holds_objects(view_.format)) {
      throw py::type_error(std::string{what} + " holds Python objects (buffer format '" + view_.format +
                           "', a NumPy dtype object): their bytes are references, which cannot be copied as data");
    }
    if (PyBuffer_IsContiguous(&view_, order) == 0) {
      throw py::value_error(std::string{what} + " must be " + (order == 'C' ? "C-contiguous" : "contiguous") +
                            " (copy it first, e.g. numpy.ascontiguousarray)");
    }
  } catch (...) {
    PyBuffer_Release(&view_);
    throw;
  }
}

host_buffer::~host_buffer() { PyBuffer_Release(&view_); }

bool format_holds_objects(char const* format) noexcept
{
  if (format == nullptr) { return false; }  // "B": bytes
  bool in_name = false;                     // field names of structured formats sit between colons
  for (char const* c = format; *c != '\0'; ++c) {
    if (*c == ':') {
      in_name = !in_name;
    } else if (!in_name && *c == 'O') {
      return true;
    }
  }
  return false;
}

void refuse_object_dtype(py::handle dtype, char const* what)
{
  if (dtype.attr("hasobject").cast<bool>()) {
    throw py::type_error(std::string{what} + ": dtype " + std::string{py::str(dtype)} +
                         " holds Python objects, which cannot be stored in device memory or copied as bytes");
  }
}

}  // namespace gpumem::python
