// A field of the commands' --csv output (RFC 4180): as it is, or in double quotes with its quotes doubled
// when it holds a comma, a quote or a line break, so that a log path such as "runs,2024/a.csv" stays one
// column.
#pragma once

#include <string>
#include <string_view>

namespace gpumem::cli {

[[nodiscard]] inline std::string csv_field(std::string_view text)
{
  if (text.find_first_of(",\"\r\n") == std::string_view::npos) { return std::string{text}; }
  std::string quoted = "\"";
  for (char const c : text) {
    if (c == '"') { quoted += '"'; }
    quoted += c;
  }
  quoted += '"';
  return quoted;
}

}  // namespace gpumem::cli
