// The argument conversions of arguments.hpp.
#include "arguments.hpp"

#include <cctype>
#include <limits>
#include <string>
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

namespace {

/// The multiplier of a byte unit (lower case, "" for none), or 0 for an unknown one.
std::size_t unit_multiplier(std::string_view unit)
{
  if (unit.empty() || unit == "b") { return 1; }
  std::string_view const prefixes = "kmgtp";
  std::size_t const position = prefixes.find(unit.front());
  if (position == std::string_view::npos) { return 0; }
  std::string_view const rest = unit.substr(1);
  std::size_t const base = rest == "b" ? 1000 : rest == "ib" ? 1024 : 0;
  std::size_t multiplier = base;
  for (std::size_t i = 0; i < position; ++i) { multiplier *= base; }
  return multiplier;
}

}  // namespace

std::size_t byte_size_argument(py::handle value, char const* name)
{
  if (!py::isinstance<py::str>(value)) {
    if (PyIndex_Check(value.ptr()) == 0 || py::isinstance<py::bool_>(value)) {
      throw_wrong_type(name, "an int or a str such as \"4MiB\"", value);
    }
    return unsigned_argument(value, name, std::numeric_limits<std::size_t>::max());
  }
  std::string const text = value.cast<std::string>();
  auto const refuse = [&](char const* why) {
    throw py::value_error(std::string{name} + " must be a size in bytes (an int, or a number with an optional unit "
                          "B, kB, MB, GB, TB, PB, KiB, MiB, GiB, TiB or PiB, such as \"4MiB\"), got " +
                          std::string{py::repr(value)} + ": " + why);
  };
  // RMM's form: digits, optionally '.' and digits, optional spaces or tabs, an optional unit.
  std::size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])) != 0) { ++i; }
  if (i == 0) { refuse("it does not start with a number"); }
  std::size_t const integer_end = i;
  std::size_t fraction_end = i;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])) != 0) { ++i; }
    fraction_end = i;
  }
  while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) { ++i; }
  std::string unit;
  for (; i < text.size(); ++i) { unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i]))); }
  std::size_t const multiplier = unit_multiplier(unit);
  if (multiplier == 0) { refuse("unknown unit"); }
  // Exact for the integer part; the fraction is rounded down to whole bytes, as int(n * multiplier) is.
  py::int_ const whole{py::str(text.substr(0, integer_end))};
  py::object total = whole * py::int_(multiplier);
  if (fraction_end > integer_end + 1) {
    std::string const digits = text.substr(integer_end + 1, fraction_end - integer_end - 1);
    py::int_ const numerator{py::str(digits)};
    py::int_ const denominator = py::int_(10).attr("__pow__")(digits.size());
    total = total + (numerator * py::int_(multiplier)).attr("__floordiv__")(denominator);
  }
  py::int_ const bytes{total};
  if (PyObject_RichCompareBool(bytes.ptr(), py::int_(std::numeric_limits<std::size_t>::max()).ptr(), Py_GT) == 1) {
    refuse("more bytes than size_t holds");
  }
  return bytes.cast<std::size_t>();
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
