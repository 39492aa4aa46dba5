// Configuration of the host backend's emulated devices, read once from the environment:
//   GPUMEM_HOST_MEMORY   capacity of each emulated device: bytes, or with a suffix K/M/G/T (KiB..TiB,
//                        "8GiB", "512M", ...). Default 8 GiB.
//   GPUMEM_HOST_DEVICES  number of emulated devices, 1..64. Default 1.
// A malformed value is a gpumem::logic_error naming the variable and the value.
#pragma once

#include <cstddef>
#include <string_view>

namespace gpumem::detail::host {

struct host_config {
  std::size_t device_capacity{std::size_t{8} << 30};
  int device_count{1};
};

/// Parses "4096", "64K", "512MiB", "8G", "1TiB" (binary units). @throws logic_error on anything else.
[[nodiscard]] std::size_t parse_byte_size(std::string_view text, std::string_view variable);

[[nodiscard]] host_config read_host_config();

}  // namespace gpumem::detail::host
