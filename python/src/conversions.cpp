// The shared argument conversions (conversions.hpp).
#include "conversions.hpp"

#include <string>

namespace gpumem::python {

cuda_stream_view to_stream(py::handle stream)
{
  if (stream.is_none()) { return cuda_stream_view{}; }
  if (py::isinstance<py::int_>(stream)) {
    return cuda_stream_view{reinterpret_cast<cudaStream_t>(stream.cast<std::uintptr_t>())};  // NOLINT
  }
  for (char const* attribute : {"ptr", "cuda_stream"}) {
    if (py::hasattr(stream, attribute)) {
      return cuda_stream_view{
        reinterpret_cast<cudaStream_t>(stream.attr(attribute).cast<std::uintptr_t>())};  // NOLINT
    }
  }
  throw py::type_error("a stream must be None, an int (a cudaStream_t), or an object with .ptr or .cuda_stream, not " +
                       std::string{py::str(py::type::of(stream).attr("__name__"))});
}

void* to_pointer(py::handle pointer)
{
  if (py::isinstance<py::int_>(pointer)) {
    return reinterpret_cast<void*>(pointer.cast<std::uintptr_t>());  // NOLINT(performance-no-int-to-ptr)
  }
  if (py::hasattr(pointer, "ptr")) {
    return reinterpret_cast<void*>(pointer.attr("ptr").cast<std::uintptr_t>());  // NOLINT
  }
  throw py::type_error("a pointer must be an int or an object with .ptr, not " +
                       std::string{py::str(py::type::of(pointer).attr("__name__"))});
}

}  // namespace gpumem::python
