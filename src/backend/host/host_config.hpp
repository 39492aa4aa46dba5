// Configuration of the host backend's emulated devices, read once from the environment:
//   GPUMEM_HOST_MEMORY           capacity of each emulated device: bytes, or with a suffix K/M/G/T (KiB..TiB,
//                                "8GiB", "512M", ...). Default 8 GiB.
//   GPUMEM_HOST_DEVICES          number of emulated devices, 1..64. Default 1.
//   GPUMEM_HOST_VISIBLE_DEVICES  the emulated devices this process sees, in its order: the host backend's
//                                CUDA_VISIBLE_DEVICES. A comma-separated list of distinct ordinals below
//                                GPUMEM_HOST_DEVICES ("2,0"): the process's device i is emulated device list[i],
//                                and its name says which ("gpumem host device 2"). Default: all, in order.
//                                Stricter than CUDA, which stops at the first bad entry: any bad entry, a
//                                duplicate or an empty list is an error.
// A malformed value is a gpumem::logic_error naming the variable and the value.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace gpumem::detail::host {

struct host_config {
  std::size_t device_capacity{std::size_t{8} << 30};
  /// visible_devices[i]: the emulated device (an ordinal below GPUMEM_HOST_DEVICES) that is the process's
  /// device i. Never empty, no duplicates.
  std::vector<int> visible_devices{0};

  /// The devices this process sees.
  [[nodiscard]] int device_count() const noexcept { return static_cast<int>(visible_devices.size()); }
};

/// Parses "4096", "64K", "512MiB", "8G", "1TiB" (binary units). @throws logic_error on anything else.
[[nodiscard]] std::size_t parse_byte_size(std::string_view text, std::string_view variable);

/// Parses GPUMEM_HOST_VISIBLE_DEVICES's value: "2,0" -> {2, 0}, each entry a decimal ordinal below
/// `emulated_devices`. @throws logic_error naming the variable and `text` for an empty list or entry,
/// anything but digits, an ordinal out of range, or a duplicate.
[[nodiscard]] std::vector<int> parse_visible_devices(std::string_view text, int emulated_devices);

[[nodiscard]] host_config read_host_config();

}  // namespace gpumem::detail::host
