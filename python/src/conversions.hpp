// Conversions every binding file shares: what Python may pass as a stream, and as a pointer.
#pragma once

#include <gpumem/cuda_stream_view.hpp>

#include <pybind11/pybind11.h>

#include <cstdint>

namespace gpumem::python {

namespace py = pybind11;

/**
 * @brief The stream a Python argument names: None -> the legacy default stream; an int -> that
 * cudaStream_t value; an object with `ptr` (gpumem and CuPy streams) or `cuda_stream` (PyTorch) -> its
 * handle. @throws py::type_error for anything else; py::value_error for a negative or too large handle
 * (the messages name the argument `name`).
 */
[[nodiscard]] cuda_stream_view to_stream(py::handle stream, char const* name = "stream");

/**
 * @brief A stream argument that gpumem keeps using after the call (a buffer frees its memory on it): the
 * stream, and the Python object to hold while it does (none for None or an int, whose streams the caller
 * keeps alive). DESIGN.md: a handle may be used after the call only while gpumem holds the stream alive.
 */
struct held_stream {
  cuda_stream_view view;
  py::object owner;
};

/** @brief to_stream(stream), with the object that owns it. @throws as to_stream. */
[[nodiscard]] held_stream hold_stream(py::handle stream);

/**
 * @brief A pointer from Python: an int, or an object with `ptr` (a memory or buffer) -> its address.
 * @throws py::type_error for anything else; py::value_error for a negative or too large address.
 */
[[nodiscard]] void* to_pointer(py::handle pointer);

/**
 * @brief A device ordinal argument `name`: an int naming an existing device.
 * @throws py::type_error for another object; py::value_error naming `name` for a device that does not exist.
 */
[[nodiscard]] int device_argument(py::handle device, char const* name);

/** @brief A pointer as the int Python code sees (CuPy and RMM report pointers as ints). */
[[nodiscard]] inline std::uintptr_t to_int(void const* pointer) noexcept { return reinterpret_cast<std::uintptr_t>(pointer); }

}  // namespace gpumem::python
