// What the gpumem._gpumem.mr binding files share: resource pointers to and from Python, and RMM's
// upstream_mr / get_upstream() names.
#pragma once

#include "arguments.hpp"

#include <gpumem/mr/device_memory_resource.hpp>

#include <pybind11/pybind11.h>

namespace gpumem::python {

/** @brief The Python object for a resource pointer: the existing wrapper when there is one, else a non-owning one. */
inline py::object wrap(mr::device_memory_resource* resource)
{
  return py::cast(resource, py::return_value_policy::reference);
}

/** @brief The resource a Python argument `name` names (None -> null). @throws py::type_error for other objects. */
inline mr::device_memory_resource* unwrap(py::handle resource, char const* name)
{
  return resource.is_none() ? nullptr : convert_argument<mr::device_memory_resource*>(resource, name);
}

/** @brief Adds upstream_mr / get_upstream() (RMM's names) to a class whose C++ type has upstream_resource(). */
template <typename Class>
void add_upstream(Class& cls)
{
  using resource = typename Class::type;
  cls.def_property_readonly(
    "upstream_mr", [](resource const& self) { return wrap(self.upstream_resource()); },
    "The resource this one obtains its memory from (kept alive by this one).");
  cls.def(
    "get_upstream", [](resource const& self) { return wrap(self.upstream_resource()); },
    "The resource this one obtains its memory from (RMM's get_upstream()).");
}

}  // namespace gpumem::python
