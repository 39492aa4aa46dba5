// resource_selection.hpp: checking `--resource` lists against the replay registry.
#include "resource_selection.hpp"

#include "commands.hpp"

#include <gpumem/replay/replay_resource.hpp>

#include <algorithm>

namespace gpumem::cli {

std::vector<std::string> select_replay_resources(std::optional<std::string_view> list, bool simulate,
                                                 std::string_view command)
{
  std::string const prefix = std::string{command} + ": ";
  std::vector<std::string> names;
  if (!list) {
    for (auto const& info : replay_resources()) {
      if (!simulate || info.simulatable) { names.emplace_back(info.name); }
    }
    return names;
  }
  std::string_view rest = *list;
  while (!rest.empty()) {
    std::size_t const comma = rest.find(',');
    std::string_view const name = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    if (name.empty()) { continue; }
    replay_resource_info const* const info = find_replay_resource(name);
    if (info == nullptr) {
      throw usage_error(prefix + "unknown resource '" + std::string{name} +
                        "'; valid resources: " + replay_resource_names());
    }
    if (simulate && !info->simulatable) {
      throw usage_error(prefix + "resource '" + std::string{name} +
                        "' allocates real device memory and cannot be simulated; with --simulate use: " +
                        replay_resource_names(true));
    }
    if (std::find(names.begin(), names.end(), name) == names.end()) { names.emplace_back(name); }
  }
  if (names.empty()) {
    throw usage_error(prefix + "--resource names no resource; valid resources: " + replay_resource_names());
  }
  return names;
}

}  // namespace gpumem::cli
