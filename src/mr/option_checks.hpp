// Checks on the size options of gpumem's resources, made before any of them reaches arithmetic that could
// overflow: each failure is a gpumem::logic_error naming the resource, the option and its value.
#pragma once

#include <gpumem/error.hpp>
#include <gpumem/mr/detail/align.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace gpumem::detail {

/** @throws gpumem::logic_error "<resource>: <option> <value> <problem>". */
[[noreturn]] inline void throw_option_error(std::string_view resource, std::string_view option, std::size_t value,
                                            std::string_view problem)
{
  throw logic_error(std::string{resource} + ": " + std::string{option} + " " + std::to_string(value) + " " +
                    std::string{problem});
}

/**
 * @pre multiple > 0.
 * @return the option's `value` rounded up to a multiple of `multiple`.
 * @throws gpumem::logic_error naming the option and its value when the rounding overflows size_t.
 */
[[nodiscard]] inline std::size_t round_up_option(std::string_view resource, std::string_view option, std::size_t value,
                                                 std::size_t multiple)
{
  std::optional<std::size_t> const rounded = checked_round_up(value, multiple);
  if (!rounded) {
    throw_option_error(resource, option, value,
                       "overflows size_t when rounded up to a multiple of " + std::to_string(multiple) + " bytes");
  }
  return *rounded;
}

}  // namespace gpumem::detail
