// host_config: see host_config.hpp.
#include "host_config.hpp"

#include <gpumem/error.hpp>

#include <charconv>
#include <cstdlib>
#include <limits>
#include <string>

namespace gpumem::detail::host {

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

host_config read_host_config()
{
  host_config config;
  if (char const* memory = std::getenv("GPUMEM_HOST_MEMORY"); memory != nullptr && *memory != '\0') {
    config.device_capacity = parse_byte_size(memory, "GPUMEM_HOST_MEMORY");
  }
  if (char const* devices = std::getenv("GPUMEM_HOST_DEVICES"); devices != nullptr && *devices != '\0') {
    std::string_view const text{devices};
    int count = 0;
    auto const [rest, ec] = std::from_chars(text.data(), text.data() + text.size(), count);
    if (ec != std::errc{} || rest != text.data() + text.size() || count < 1 || count > 64) {
      throw logic_error("GPUMEM_HOST_DEVICES=\"" + std::string{text} + "\" must be a whole number from 1 to 64");
    }
    config.device_count = count;
  }
  return config;
}

}  // namespace gpumem::detail::host
