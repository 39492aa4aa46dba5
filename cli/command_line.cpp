// Command-line helpers that several subcommands share (commands.hpp declares them).
#include "commands.hpp"

#include <charconv>
#include <string>
#include <system_error>

namespace gpumem::cli {

std::size_t parse_count(std::string_view text, std::string_view option, std::string_view command, std::size_t minimum)
{
  std::size_t value = 0;
  auto const [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || value < minimum || value > 1000) {
    throw usage_error(std::string{command} + ": " + std::string{option} + " needs an integer in [" + std::to_string(minimum) + ", 1000], not '" +
                      std::string{text} + "'");
  }
  return value;
}

}  // namespace gpumem::cli
