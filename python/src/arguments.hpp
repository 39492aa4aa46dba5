// Arguments converted with errors in the caller's terms.
//
// pybind11 reports an argument it cannot convert as "incompatible function arguments" followed by every
// signature, also when only the value is wrong (DeviceBuffer(size=-1)), and a failed py::cast inside a
// binding as "Unable to cast Python instance of type ... to C++ type ...". A binding declares such an
// argument as checked<T, "name"> instead: its caster takes any object and converts it, raising
//   TypeError   "size must be an int, not str"                        the wrong kind of object
//   ValueError  "size must be >= 0, got -1"                           a negative value for an unsigned one
//   ValueError  "size must be at most 18446744073709551615, got 2**64" a value out of the C++ type's range
// The signature pybind11 shows, and the stubs generated from it, keep T's Python type. The converting
// functions are also used directly, for arguments taken as py::handle.
#pragma once

#include <pybind11/pybind11.h>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

namespace gpumem::python {

namespace py = pybind11;

/** @brief A string literal as a template argument: the name of a checked argument. */
template <std::size_t N>
struct argument_name {
  constexpr argument_name(char const (&text)[N]) noexcept { std::copy_n(text, N, value); }  // NOLINT: implicit
  char value[N]{};  // NOLINT(cppcoreguidelines-avoid-c-arrays)
};

/** @brief An argument of C++ type T that a binding receives already checked (see the file comment). */
template <class T, argument_name Name>
struct checked {
  T value{};
};

/** @brief How Python code would name the type of `value` ("int", "str", "NoneType", ...). */
[[nodiscard]] std::string type_name(py::handle value);

/** @throws py::type_error "`name` must be `expected`, not <type of value>". */
[[noreturn]] void throw_wrong_type(char const* name, char const* expected, py::handle value);

/**
 * @brief `value` as an integer in [minimum, maximum]: an int or anything with __index__ (a NumPy integer).
 * @throws py::type_error for other objects; py::value_error, naming `name` and the value, out of range.
 */
[[nodiscard]] long long signed_argument(py::handle value, char const* name, long long minimum, long long maximum);
/** @brief As signed_argument, for an unsigned range [0, maximum]. */
[[nodiscard]] unsigned long long unsigned_argument(py::handle value, char const* name, unsigned long long maximum);

/** @brief The Python name of the class pybind11 registered for `type` ("DeviceMemoryResource"), or "object". */
[[nodiscard]] std::string registered_name(std::type_info const& type);

/** @brief "a DeviceBuffer", "an Event". */
[[nodiscard]] std::string with_article(std::string const& noun);

/**
 * @brief A size in bytes as RMM accepts it: an int, or a string of a number with an optional unit
 * ("4MiB", "1GB", "1.5 kib", "100"): B, kB, MB, GB, TB, PB (powers of 1000) or KiB, MiB, GiB, TiB, PiB
 * (powers of 1024), case-insensitive, spaces or tabs before the unit (RMM's parse_bytes).
 */
struct byte_size {
  std::size_t value{};
};

/**
 * @brief `value` (an int, or a string as byte_size says) as a number of bytes.
 * @throws py::type_error naming `name` for other objects; py::value_error naming `name` for a negative
 *         int, a string that is no size, or a size past size_t.
 */
[[nodiscard]] std::size_t byte_size_argument(py::handle value, char const* name);

template <class T>
inline constexpr bool is_optional = false;
template <class T>
inline constexpr bool is_optional<std::optional<T>> = true;

/**
 * @brief `value` converted to T, with the errors of the file comment; `name` names the argument.
 * Integers: range-checked; optional<U>: None or a U; a pointer to a bound class: an instance (not None);
 * anything else: what pybind11's caster for T accepts.
 */
template <class T>
[[nodiscard]] T convert_argument(py::handle value, char const* name)
{
  if constexpr (std::integral<T> && !std::same_as<T, bool>) {
    if constexpr (std::is_signed_v<T>) {
      return static_cast<T>(signed_argument(value, name, std::numeric_limits<T>::min(), std::numeric_limits<T>::max()));
    } else {
      return static_cast<T>(unsigned_argument(value, name, std::numeric_limits<T>::max()));
    }
  } else if constexpr (std::same_as<T, byte_size>) {
    return byte_size{byte_size_argument(value, name)};
  } else if constexpr (is_optional<T>) {
    if (value.is_none()) { return std::nullopt; }
    return convert_argument<typename T::value_type>(value, name);
  } else {
    using caster_type = py::detail::make_caster<T>;
    caster_type caster;
    bool const is_null_pointer = std::is_pointer_v<T> && value.is_none();
    if (is_null_pointer || !caster.load(value, true)) {
      std::string expected;
      if constexpr (std::is_class_v<std::remove_cv_t<std::remove_pointer_t<T>>>) {
        expected = with_article(registered_name(typeid(std::remove_cv_t<std::remove_pointer_t<T>>)));
      } else if constexpr (std::same_as<T, bool>) {
        expected = "a bool";
      } else if constexpr (std::floating_point<T>) {
        expected = "a number";
      } else {
        expected = caster_type::name.text;
      }
      throw_wrong_type(name, expected.c_str(), value);
    }
    return py::detail::cast_op<T>(std::move(caster));
  }
}

}  // namespace gpumem::python

namespace pybind11::detail {

/** @brief byte_size in signatures and stubs: "int | str" (loaded only through checked<>, which converts). */
template <>
struct type_caster<gpumem::python::byte_size> {
  PYBIND11_TYPE_CASTER(gpumem::python::byte_size, const_name("int | str"));
  bool load(handle source, bool /*convert*/)
  {
    value.value = gpumem::python::byte_size_argument(source, "size");
    return true;
  }
  static handle cast(gpumem::python::byte_size const& source, return_value_policy /*policy*/, handle /*parent*/)
  {
    return PyLong_FromSize_t(source.value);
  }
};

/** @brief Loads any object into a checked<T, Name>, converting it with convert_argument (it raises). */
template <class T, gpumem::python::argument_name Name>
struct type_caster<gpumem::python::checked<T, Name>> {
  using value_type = gpumem::python::checked<T, Name>;
  PYBIND11_TYPE_CASTER(value_type, make_caster<T>::name);

  bool load(handle source, bool /*convert*/)
  {
    value.value = gpumem::python::convert_argument<T>(source, Name.value);
    return true;
  }

  static handle cast(value_type const& source, return_value_policy policy, handle parent)
  {
    return make_caster<T>::cast(source.value, policy, parent);
  }
};

}  // namespace pybind11::detail
