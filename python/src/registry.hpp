// How the binding files add themselves to the module: each bind_<area>.cpp defines a static
// `registration` with an order and a function; module.cpp runs them in order when Python imports
// gpumem._gpumem. The order matters where a binding uses another's type at definition time (a default
// argument of a bound type): errors first, then streams and events, resources, buffers, the rest.
#pragma once

#include <pybind11/pybind11.h>

#include <functional>

namespace gpumem::python {

namespace py = pybind11;

/** @brief When a binding area runs: lower first. */
enum class binding_order : int { errors = 0, cuda = 10, resources = 20, buffers = 30, ipc = 35, unified = 40, plain = 50, allocators = 60 };

/** @brief Registers `bind` to run (in `order`) when the module is created. Construct one per file, statically. */
class registration {
 public:
  registration(binding_order order, char const* name, std::function<void(py::module_&)> bind);
};

/** @brief Runs every registered binding in order (module.cpp). */
void run_registrations(py::module_& module);

}  // namespace gpumem::python
