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
 * handle. @throws py::type_error for anything else.
 */
[[nodiscard]] cuda_stream_view to_stream(py::handle stream);

/** @brief A pointer from Python: an int, or an object with `ptr` (a memory or buffer) -> its address. */
[[nodiscard]] void* to_pointer(py::handle pointer);

/** @brief A pointer as the int Python code sees (CuPy and RMM report pointers as ints). */
[[nodiscard]] inline std::uintptr_t to_int(void const* pointer) noexcept { return reinterpret_cast<std::uintptr_t>(pointer); }

}  // namespace gpumem::python
