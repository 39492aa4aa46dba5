// Command-line pieces that several subcommands share (commands.hpp declares them).
#include "commands.hpp"
#include "resource_selection.hpp"

#include <gpumem/registry/resource_registry.hpp>

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
  auto const join = [](std::vector<std::string> const& names) {
    std::string text;
    for (std::string const& name : names) { text += (text.empty() ? "" : ",") + name; }
    return text;
  };
  std::string const any_size =
    registry::resource_names([](registry::resource_info const& info) { return info.any_size; });
  return command.add_option("-r,--resource")
    ->description("comma-separated resources, of " + any_size + " (default " +
                  join(select_replay_resources(std::nullopt, false)) + ")")
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
