// resource_selection.hpp: checking `--resource` lists against the resource registry.
#include "resource_selection.hpp"

#include <gpumem/registry/resource_registry.hpp>

#include <algorithm>
#include <stdexcept>

namespace gpumem::cli {

std::vector<std::string> select_replay_resources(std::optional<std::string_view> list, bool simulate)
{
  using registry::resource_info;
  auto const valid = [simulate](resource_info const& info) {
    return info.any_size && (!simulate || info.simulatable);
  };
  std::vector<std::string> names;
  if (!list) {
    for (auto const& info : registry::resources()) {
      if (info.replays_by_default() && valid(info)) { names.emplace_back(info.name); }
    }
    return names;
  }
  std::string_view rest = *list;
  while (!rest.empty()) {
    std::size_t const comma = rest.find(',');
    std::string_view const name = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    if (name.empty()) { continue; }
    resource_info const* const info = registry::find_resource(name);
    if (info == nullptr) {
      throw std::invalid_argument("unknown resource '" + std::string{name} +
                        "'; valid resources: " + registry::resource_names(valid));
    }
    if (!info->any_size) {
      throw std::invalid_argument("resource '" + std::string{name} +
                        "' serves one block size and cannot replay a log of any sizes; valid resources: " +
                        registry::resource_names(valid));
    }
    if (simulate && !info->simulatable) {
      throw std::invalid_argument("resource '" + std::string{name} +
                        "' allocates real device memory and cannot be simulated; with --simulate use: " +
                        registry::resource_names(valid));
    }
    if (std::find(names.begin(), names.end(), name) == names.end()) { names.emplace_back(name); }
  }
  if (names.empty()) {
    throw std::invalid_argument("names no resource; valid resources: " + registry::resource_names(valid));
  }
  return names;
}

}  // namespace gpumem::cli
