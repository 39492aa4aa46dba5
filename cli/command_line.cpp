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

std::string command_line(std::string_view command, std::span<std::string_view const> args)
{
  // Appended piece by piece: GCC 12 reports a false -Wrestrict on `text += " " + std::string{a}` at -O3.
  std::string text = "gpumem ";
  text += command;
  for (std::string_view const a : args) {
    text += ' ';
    text += a;
  }
  return text;
}

}  // namespace gpumem::cli
