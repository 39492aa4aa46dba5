// Host memory given to a copy as a buffer-protocol object (a NumPy array, bytes, a memoryview, ...).
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>

namespace gpumem::python {

namespace py = pybind11;

/**
 * @brief A contiguous view of a buffer-protocol object's bytes for a copy, released on destruction (with
 * the GIL held). Every entry point that copies to or from such an object goes through it, so that each
 * refuses, before a byte moves:
 *   TypeError   an object without the buffer protocol;
 *   TypeError   items that hold Python objects (NumPy dtype object, "O" in the format): their bytes are
 *               references, which a copy would duplicate or overwrite without counting;
 *   ValueError  a buffer that is not contiguous in `order` ('C', or 'A' for C or Fortran order);
 *   ValueError  a read-only buffer given as a destination.
 * Each message starts with `what`, which names the function and the argument ("DeviceBuffer.copy_to_host:
 * out"). Sizes are the caller's to check against size().
 */
class host_buffer {
 public:
  enum class access { read, write };

  host_buffer(py::handle object, access mode, char order, char const* what);
  ~host_buffer();
  host_buffer(host_buffer const&) = delete;
  host_buffer& operator=(host_buffer const&) = delete;
  host_buffer(host_buffer&&) = delete;
  host_buffer& operator=(host_buffer&&) = delete;

  [[nodiscard]] void* data() const noexcept { return view_.buf; }
  [[nodiscard]] std::size_t size() const noexcept { return static_cast<std::size_t>(view_.len); }

 private:
  Py_buffer view_{};
};

/** @brief Whether a buffer-protocol format string (struct module syntax) has an object ('O') item. */
[[nodiscard]] bool format_holds_objects(char const* format) noexcept;

/** @throws py::type_error, starting with `what`, when NumPy dtype `dtype` holds Python objects. */
void refuse_object_dtype(py::handle dtype, char const* what);

}  // namespace gpumem::python
