// gpumem._gpumem: the extension module. Its contents come from the bind_<area>.cpp files (registry.hpp);
// the pure-Python package gpumem/ re-exports them under CuPy-, RMM- and NumPy-shaped names.
#include "registry.hpp"

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace gpumem::python {
namespace {

struct entry {
  binding_order order;
  std::string name;
  std::function<void(py::module_&)> bind;
};

std::vector<entry>& entries()
{
  static std::vector<entry> list;  // filled by static registrations before the module is initialised
  return list;
}

}  // namespace

registration::registration(binding_order order, char const* name, std::function<void(py::module_&)> bind)
{
  entries().push_back({order, name, std::move(bind)});
}

void run_registrations(py::module_& module)
{
  auto list = entries();
  std::stable_sort(list.begin(), list.end(), [](entry const& a, entry const& b) {
    return std::tie(a.order, a.name) < std::tie(b.order, b.name);
  });
  for (auto const& e : list) { e.bind(module); }
}

}  // namespace gpumem::python

PYBIND11_MODULE(_gpumem, module)
{
  module.doc() = "gpumem's extension module; use the package `gpumem`, which re-exports it.";
  gpumem::python::run_registrations(module);
}
