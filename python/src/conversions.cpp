// The shared argument conversions (conversions.hpp).
#include "conversions.hpp"

#include "arguments.hpp"

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/device.hpp>

#include <cstdint>
#include <limits>
#include <string>

namespace gpumem::python {
namespace {

constexpr auto max_address = std::numeric_limits<std::uintptr_t>::max();

cudaStream_t to_handle(py::handle value, char const* name)
{
  return reinterpret_cast<cudaStream_t>(static_cast<std::uintptr_t>(unsigned_argument(value, name, max_address)));  // NOLINT
}

}  // namespace

cuda_stream_view to_stream(py::handle stream, char const* name)
{
  if (stream.is_none()) { return cuda_stream_view{}; }
  if (py::isinstance<py::int_>(stream)) { return cuda_stream_view{to_handle(stream, name)}; }
  for (char const* attribute : {"ptr", "cuda_stream"}) {
    if (py::hasattr(stream, attribute)) {
      std::string const qualified = std::string{name} + "." + attribute;
      return cuda_stream_view{to_handle(stream.attr(attribute), qualified.c_str())};
    }
  }
  throw py::type_error(std::string{name} + " must be None, an int (a cudaStream_t), or an object with .ptr or "
                       ".cuda_stream, not " + type_name(stream));
}

int device_argument(py::handle device, char const* name)
{
  int const id = convert_argument<int>(device, name);
  int const count = get_num_cuda_devices();
  if (id < 0 || id >= count) {
    throw py::value_error(std::string{name} + " " + std::to_string(id) + " does not exist: the " +
                          std::string{to_string(current_backend_kind())} + " backend has " + std::to_string(count) +
                          (count == 1 ? " device" : " devices"));
  }
  return id;
}

held_stream hold_stream(py::handle stream)
{
  cuda_stream_view const view = to_stream(stream);
  bool const is_object = !stream.is_none() && !py::isinstance<py::int_>(stream);
  return held_stream{view, is_object ? py::reinterpret_borrow<py::object>(stream) : py::object{}};
}

void* to_pointer(py::handle pointer)
{
  // An object, not a handle: .ptr may return a new int, which must live until it is read.
  py::object const address = py::isinstance<py::int_>(pointer) || !py::hasattr(pointer, "ptr")
                               ? py::reinterpret_borrow<py::object>(pointer)
                               : py::object{pointer.attr("ptr")};
  if (!py::isinstance<py::int_>(address)) {
    throw py::type_error("a pointer must be an int or an object with an int .ptr, not " + type_name(pointer));
  }
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(unsigned_argument(address, "ptr", max_address)));  // NOLINT
}

}  // namespace gpumem::python
