// Setting the Python error for a C++ exception, outside pybind11's dispatch (functions bound with the raw
// CPython API for speed, bind_plain.cpp). Inside pybind11's dispatch the module-local translator of
// bind_errors.cpp does the same, with the same mapping.
#pragma once

#include <exception>

namespace gpumem::python {

/**
 * @brief Sets the Python error for `raised` (the current exception when called in a catch block):
 * gpumem::out_of_memory -> gpumem.OutOfMemoryError, gpumem::bad_alloc and std::bad_alloc -> MemoryError,
 * gpumem::logic_error -> ValueError, gpumem::cuda_error -> gpumem.CUDARuntimeError (with .status);
 * pybind11's exceptions -> theirs; any other std::exception -> RuntimeError with its message.
 * @pre the GIL is held, and bind_errors.cpp's registration has run (the module is initialised).
 */
void set_python_error(std::exception_ptr raised) noexcept;

}  // namespace gpumem::python
