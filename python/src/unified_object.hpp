// The object behind gpumem.UnifiedBuffer, shared by bind_unified.cpp (the class) and bind_unified_pool.cpp
// (SpillManager, UnifiedBufferPool, which make and take back these objects).
#pragma once

#include <gpumem/buffer/spill_manager.hpp>
#include <gpumem/buffer/unified_buffer.hpp>

#include "conversions.hpp"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace gpumem::python {

namespace py = pybind11;

using bytes_buffer = unified_buffer<std::byte>;

/**
 * @brief A unified buffer of bytes with a shape and a NumPy dtype.
 *
 * `buffer` is null once the object was released to a UnifiedBufferPool: every use then raises ValueError.
 * `exports` counts the live NumPy arrays, device views and DLPack capsules over the buffer's memory; a
 * buffer with exports cannot be released to a pool (its memory would be reused under them).
 * `keep_alive` holds what the C++ buffer points to without owning (the SpillManager), so it outlives it.
 * `stream` holds the Python object of the buffer's stream (bytes_buffer::stream(): the stream of its latest
 * device access), on which the device copy is copied back, spilled and freed after the call that gave it.
 */
struct py_unified_buffer {
  py::object keep_alive;  // declared first: destroyed after the buffer
  py::object stream;      // (as keep_alive) none: the default stream, or a stream given as an int
  std::vector<py::ssize_t> shape;
  py::dtype dtype;
  std::unique_ptr<bytes_buffer> buffer;
  std::size_t exports{};

  /** @return the buffer. @throws py::value_error when it was released to a pool. */
  [[nodiscard]] bytes_buffer& get() const
  {
    if (!buffer) { throw py::value_error("UnifiedBuffer: this buffer was released to a pool and cannot be used"); }
    return *buffer;
  }

  /**
   * @brief Holds `used` when the buffer's stream is its stream now (after a call that was given it: a device
   * access moves the buffer to its stream; one with nothing to do may leave it where it was).
   */
  void track_stream(held_stream const& used)
  {
    if (buffer && buffer->stream() == used.view) { stream = used.owner; }
  }

  /** @brief Number of elements: the product of the shape. */
  [[nodiscard]] std::size_t count() const
  {
    std::size_t n = 1;
    for (auto const extent : shape) { n *= static_cast<std::size_t>(extent); }
    return n;
  }
};

/** @brief The object behind gpumem.SpillManager: the manager and the resource it draws from. */
struct py_spill_manager {
  py::object upstream;  // declared first: destroyed after the manager
  std::unique_ptr<spill_manager> manager;
};

/** @brief The C++ spill_manager behind a `spill` argument (None: no spilling). @throws py::type_error otherwise. */
[[nodiscard]] spill_manager* spill_of(py::handle spill);

/**
 * @brief The shape a Python argument gives (an int or a sequence of ints) and the bytes it takes with `dtype`.
 * @throws py::type_error for another object; py::value_error for a negative extent or a size that overflows.
 */
[[nodiscard]] std::vector<py::ssize_t> to_shape(py::handle shape);
[[nodiscard]] std::size_t shape_bytes(std::vector<py::ssize_t> const& shape, py::dtype const& dtype);

/**
 * @brief The NumPy dtype a `dtype` argument names, for a buffer's elements.
 * @throws py::type_error naming `what` for a dtype NumPy does not know, or one that holds Python objects.
 */
[[nodiscard]] py::dtype element_dtype(py::handle dtype, char const* what);

}  // namespace gpumem::python
