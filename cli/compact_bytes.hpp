// Bytes as a table cell: "8.74 GiB", "512 B", at most "16.00 EiB" (2^64 - 1 bytes), so that a cell never
// outgrows its column (the commands' --csv output prints exact bytes instead).
#pragma once

#include <array>
#include <cstddef>
#include <cstdio>
#include <string>

namespace gpumem::cli {

[[nodiscard]] inline std::string compact_bytes(std::size_t bytes)
{
  constexpr std::array<char const*, 7> units{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < units.size()) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.2f %s", value, units[unit]);
  return text;
}

}  // namespace gpumem::cli
