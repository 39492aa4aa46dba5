// The argument conversions of arguments.hpp.
#include "arguments.hpp"

#include <string_view>

namespace gpumem::python {
namespace {

/** @brief `value` as an int (through __index__). @throws py::type_error naming `name` for other objects. */
py::int_ to_index(py::handle value, char const* name)
{
  if (PyIndex_Check(value.ptr()) == 0) { throw_wrong_type(name, "an int", value); }
  PyObject* const index = PyNumber_Index(value.ptr());
  if (index == nullptr) { throw py::error_already_set(); }
  return py::reinterpret_steal<py::int_>(index);
}

bool less_than(py::int_ const& value, long long bound)
{
  int const result = PyObject_RichCompareBool(value.ptr(), py::int_(bound).ptr(), Py_LT);
  if (result < 0) { throw py::error_already_set(); }
  return result == 1;
}

bool greater_than(py::int_ const& value, py::int_ const& bound)
{
  int const result = PyObject_RichCompareBool(value.ptr(), bound.ptr(), Py_GT);
  if (result < 0) { throw py::error_already_set(); }
  return result == 1;
}

}  // namespace

std::string type_name(py::handle value) { return py::str(py::type::of(value).attr("__name__")); }

void throw_wrong_type(char const* name, char const* expected, py::handle value)
{
  throw py::type_error(std::string{name} + " must be " + expected + ", not " + type_name(value));
}

long long signed_argument(py::handle value, char const* name, long long minimum, long long maximum)
{
  py::int_ const index = to_index(value, name);
  if (less_than(index, minimum) || greater_than(index, py::int_(maximum))) {
    throw py::value_error(std::string{name} + " must be between " + std::to_string(minimum) + " and " +
                          std::to_string(maximum) + ", got " + std::string{py::repr(index)});
  }
  return index.cast<long long>();
}

unsigned long long unsigned_argument(py::handle value, char const* name, unsigned long long maximum)
{
  py::int_ const index = to_index(value, name);
  if (less_than(index, 0)) {
    throw py::value_error(std::string{name} + " must be >= 0, got " + std::string{py::repr(index)});
  }
  if (greater_than(index, py::int_(maximum))) {
    throw py::value_error(std::string{name} + " must be at most " + std::to_string(maximum) + ", got " +
                          std::string{py::repr(index)});
  }
  return index.cast<unsigned long long>();
}

std::string registered_name(std::type_info const& type)
{
  py::handle const found = py::detail::get_type_handle(type, false);
  return found ? std::string{py::str(found.attr("__name__"))} : std::string{"object"};
}

std::string with_article(std::string const& noun)
{
  bool const vowel = !noun.empty() && std::string_view{"AEIOUaeiou"}.find(noun.front()) != std::string_view::npos;
  return (vowel ? "an " : "a ") + noun;
}

}  // namespace gpumem::python
