// host_config: see host_config.hpp.
#include "host_config.hpp"

#include <gpumem/error.hpp>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <optional>
#include <string>

namespace gpumem::detail::host {
namespace {

/// The whole of `text` as a decimal int from `low` to `high`; nullopt for anything else (signs, spaces, empty).
std::optional<int> whole_number(std::string_view text, int low, int high)
{
  int value = 0;
  auto const [rest, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || text.empty() || text.front() == '-' || rest != text.data() + text.size() ||
      value < low || value > high) {
    return std::nullopt;
  }
  return value;
}

}  // namespace

std::size_t parse_byte_size(std::string_view text, std::string_view variable)
{
  auto const bad = [&] {
    return logic_error(std::string{variable} + "=\"" + std::string{text} +
                       "\" is not a byte size (examples: 1073741824, 512MiB, 8G)");
  };
  std::size_t value = 0;
  auto const [rest, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || rest == text.data()) { throw bad(); }
  std::string_view suffix{rest, static_cast<std::size_t>(text.data() + text.size() - rest)};
  unsigned shift = 0;
  if (suffix.empty() || suffix == "B") {
    shift = 0;
  } else if (suffix == "K" || suffix == "KiB" || suffix == "KB") {
    shift = 10;
  } else if (suffix == "M" || suffix == "MiB" || suffix == "MB") {
    shift = 20;
  } else if (suffix == "G" || suffix == "GiB" || suffix == "GB") {
    shift = 30;
  } else if (suffix == "T" || suffix == "TiB" || suffix == "TB") {
    shift = 40;
  } else {
    throw bad();
  }
  if (value > (std::numeric_limits<std::size_t>::max() >> shift)) { throw bad(); }
  return value << shift;
}

std::vector<int> parse_visible_devices(std::string_view text, int emulated_devices)
{
  auto const bad = [&](std::string const& why) {
    return logic_error("GPUMEM_HOST_VISIBLE_DEVICES=\"" + std::string{text} + "\" " + why +
                       " (a comma-separated list of distinct device ordinals, e.g. \"1,0\")");
  };
  std::vector<int> devices;
  std::size_t start = 0;
  while (true) {
    std::size_t const comma = std::min(text.find(',', start), text.size());
    std::string_view const entry = text.substr(start, comma - start);
    std::optional<int> const device = whole_number(entry, 0, emulated_devices - 1);
    if (!device) {
      throw bad(entry.empty() ? std::string{"has an empty entry"}
                              : "has \"" + std::string{entry} + "\", which is not a device ordinal from 0 to " +
                                  std::to_string(emulated_devices - 1) + " (GPUMEM_HOST_DEVICES=" +
                                  std::to_string(emulated_devices) + ")");
    }
    if (std::find(devices.begin(), devices.end(), *device) != devices.end()) {
      throw bad("names device " + std::to_string(*device) + " twice");
    }
    devices.push_back(*device);
    if (comma == text.size()) { return devices; }
    start = comma + 1;
  }
}

host_config read_host_config()
{
  host_config config;
  int emulated_devices = 1;
  if (char const* memory = std::getenv("GPUMEM_HOST_MEMORY"); memory != nullptr && *memory != '\0') {
    config.device_capacity = parse_byte_size(memory, "GPUMEM_HOST_MEMORY");
  }
  if (char const* devices = std::getenv("GPUMEM_HOST_DEVICES"); devices != nullptr && *devices != '\0') {
    std::optional<int> const count = whole_number(devices, 1, 64);
    if (!count) {
      throw logic_error("GPUMEM_HOST_DEVICES=\"" + std::string{devices} + "\" must be a whole number from 1 to 64");
    }
    emulated_devices = *count;
  }
  // Set but empty is an error, unlike the others: CUDA_VISIBLE_DEVICES="" hides every device, and a
  // process without devices is not something the host backend emulates.
  if (char const* visible = std::getenv("GPUMEM_HOST_VISIBLE_DEVICES"); visible != nullptr) {
    config.visible_devices = parse_visible_devices(visible, emulated_devices);
  } else {
    config.visible_devices.resize(static_cast<std::size_t>(emulated_devices));
    std::iota(config.visible_devices.begin(), config.visible_devices.end(), 0);
  }
  return config;
}

}  // namespace gpumem::detail::host
