// One allocation log line at a time (internal to src/replay): the header, then rows into log_events. Keeps
// what spans lines: the line number, the first row's time and the day each row falls on. Syntax only; what
// the rows mean together is replay's business.
#pragma once

#include <gpumem/replay/allocation_log.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gpumem::detail {

/// A line longer than this is not a log row (binary data, a file of another kind): refusing it keeps the
/// reader's memory bounded on any input.
inline constexpr std::size_t max_log_line_length = 64 * 1024;

class log_parser {
 public:
  explicit log_parser(std::string source) noexcept : source_{std::move(source)} {}

  /**
   * @param line one line without its '\n'.
   * @return the row's event; nothing for the header and for blank lines.
   * @throws log_format_error naming the source, this line and the problem.
   */
  [[nodiscard]] std::optional<log_event> add_line(std::string_view line);

  /// @throws log_format_error at the line being read (the one after the last added).
  [[noreturn]] void fail_reading(std::string const& problem) const;

  /// At the end of the input. @throws log_format_error when there was not even a header.
  void finish() const;

  [[nodiscard]] std::string const& source() const noexcept { return source_; }

 private:
  [[noreturn]] void fail(std::string const& problem) const;
  void check_header(std::string_view line) const;
  [[nodiscard]] log_event parse_row(std::string_view line);
  [[nodiscard]] std::int64_t place_in_time(std::int64_t time_of_day);

  std::string source_;
  std::size_t line_number_{0};
  bool have_first_{false};
  std::int64_t first_time_{0};     // the first row's time of day, ns
  std::int64_t previous_time_{0};  // the previous row's time, ns since midnight before the first row
};

}  // namespace gpumem::detail
