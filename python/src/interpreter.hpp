// The interpreter's state, for code that may run on any thread at any time (destructors, deleters, stream
// callbacks): Python objects may be touched only while the interpreter is running.
#pragma once

#include <pybind11/pybind11.h>

namespace gpumem::python {

/** @brief Whether the interpreter can still run Python code (not before initialisation or during finalisation). */
[[nodiscard]] inline bool python_alive() noexcept
{
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() != 0 && Py_IsFinalizing() == 0;
#else
  return Py_IsInitialized() != 0 && _Py_IsFinalizing() == 0;
#endif
}

}  // namespace gpumem::python
