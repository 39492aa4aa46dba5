// Command-line pieces that several subcommands share (commands.hpp declares them).
#include "commands.hpp"
#include "resource_selection.hpp"

#include <CLI/CLI.hpp>

#include <charconv>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

namespace gpumem::cli {

CLI::Validator whole_number(std::size_t minimum, std::size_t maximum, std::string requirement)
{
  return CLI::Validator{[minimum, maximum, requirement = std::move(requirement)](std::string& text) -> std::string {
                          std::size_t value = 0;
                          auto const [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
                          if (error == std::errc{} && end == text.data() + text.size() && value >= minimum &&
                              value <= maximum) {
                            return {};
                          }
                          return requirement + ", not '" + text + "'";
                        },
                        ""};
}

CLI::Option* add_resource_option(CLI::App& command)
{
  return command.add_option("-r,--resource", "comma-separated resources to run (default: all; see the list "
                                             "in the error for an unknown name)")
    ->type_name("LIST");
}

std::vector<std::string> selected_resources(CLI::Option const& option, bool simulate)
{
  std::optional<std::string> list;
  if (option.count() > 0) { list = option.as<std::string>(); }
  try {
    return select_replay_resources(list, simulate);
  } catch (std::invalid_argument const& e) {
    throw CLI::ValidationError{option.get_name(), e.what()};
  }
}

}  // namespace gpumem::cli
