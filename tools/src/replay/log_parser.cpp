// log_parser.hpp: fields split on commas, numbers with std::from_chars, and each row's time placed on the
// day that puts it nearest the row before it. Every problem is a log_format_error naming the line.
#include "replay/log_parser.hpp"

#include <array>
#include <charconv>
#include <system_error>

namespace gpumem::detail {

namespace {

constexpr std::string_view expected_header = "Thread,Time,Action,Pointer,Size,Stream";
constexpr std::size_t column_count = 6;
constexpr std::int64_t ns_per_second = 1'000'000'000;
constexpr std::int64_t ns_per_day = 24 * 3600 * ns_per_second;
/// Rows may lie this many days from the first one: a century, far beyond any program's run, and small
/// enough that no time in nanoseconds can overflow.
constexpr std::int64_t max_days = 36'525;

[[nodiscard]] std::string_view trim(std::string_view s) noexcept
{
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) { s.remove_prefix(1); }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) { s.remove_suffix(1); }
  return s;
}

/// Quotes a field for an error message, shortened so that garbage cannot flood the terminal.
[[nodiscard]] std::string quote(std::string_view field)
{
  constexpr std::size_t shown = 40;
  std::string out = "'";
  for (char const c : field.substr(0, shown)) {
    out += (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) ? '?' : c;
  }
  if (field.size() > shown) { out += "..."; }
  return out + "'";
}

template <class Unsigned>
[[nodiscard]] std::optional<Unsigned> parse_unsigned(std::string_view text, int base) noexcept
{
  if (text.empty()) { return std::nullopt; }
  Unsigned value{};
  auto const [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (ec != std::errc{} || end != text.data() + text.size()) { return std::nullopt; }
  return value;
}

[[nodiscard]] std::optional<std::uintptr_t> parse_hex(std::string_view text) noexcept
{
  if (text.size() < 3 || text[0] != '0' || (text[1] != 'x' && text[1] != 'X')) { return std::nullopt; }
  text.remove_prefix(2);
  // from_chars accepts no sign for unsigned types, so "0x-1" is refused.
  return parse_unsigned<std::uintptr_t>(text, 16);
}

/// "HH:MM:SS" with an optional ".f" of 1 to 9 digits. @return nanoseconds since midnight.
[[nodiscard]] std::optional<std::int64_t> parse_time(std::string_view text) noexcept
{
  auto const two_digits = [](std::string_view s, int limit) -> std::optional<std::int64_t> {
    if (s.size() != 2) { return std::nullopt; }
    auto const v = parse_unsigned<unsigned>(s, 10);
    if (!v || *v >= static_cast<unsigned>(limit)) { return std::nullopt; }
    return static_cast<std::int64_t>(*v);
  };
  if (text.size() < 8 || text[2] != ':' || text[5] != ':') { return std::nullopt; }
  auto const h = two_digits(text.substr(0, 2), 24);
  auto const m = two_digits(text.substr(3, 2), 60);
  auto const s = two_digits(text.substr(6, 2), 61);  // 60: a leap second
  if (!h || !m || !s) { return std::nullopt; }
  std::int64_t const ns = ((*h * 60 + *m) * 60 + *s) * ns_per_second;
  std::string_view rest = text.substr(8);
  if (rest.empty()) { return ns; }
  if (rest.front() != '.' || rest.size() < 2 || rest.size() > 10) { return std::nullopt; }
  rest.remove_prefix(1);
  auto const fraction = parse_unsigned<std::uint32_t>(rest, 10);
  if (!fraction) { return std::nullopt; }
  std::int64_t scaled = *fraction;
  for (std::size_t digits = rest.size(); digits < 9; ++digits) { scaled *= 10; }
  return ns + scaled;
}

/// a / b rounded towards minus infinity. @pre b > 0.
[[nodiscard]] constexpr std::int64_t floor_div(std::int64_t a, std::int64_t b) noexcept
{
  std::int64_t const q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

static_assert(floor_div(-1, ns_per_day) == -1 && floor_div(0, ns_per_day) == 0 && floor_div(ns_per_day, ns_per_day) == 1);

}  // namespace

void log_parser::fail(std::string const& problem) const { throw log_format_error(source_, line_number_, problem); }

void log_parser::fail_reading(std::string const& problem) const
{
  throw log_format_error(source_, line_number_ + 1, problem);
}

void log_parser::finish() const
{
  if (line_number_ == 0) {
    throw log_format_error(source_, 1, "empty file: expected the header '" + std::string{expected_header} + "'");
  }
}

std::optional<log_event> log_parser::add_line(std::string_view line)
{
  ++line_number_;
  if (line_number_ == 1) {
    // A UTF-8 byte-order mark, as some editors write, is not part of the header.
    if (line.starts_with("\xEF\xBB\xBF")) { line.remove_prefix(3); }
    check_header(line);
    return std::nullopt;
  }
  if (trim(line).empty()) { return std::nullopt; }
  return parse_row(line);
}

void log_parser::check_header(std::string_view line) const
{
  // Spaces around the column names are tolerated; names and order are not negotiable.
  std::string normalised;
  std::string_view rest = line;
  while (normalised.size() <= expected_header.size()) {
    std::size_t const comma = rest.find(',');
    normalised += trim(rest.substr(0, comma));
    if (comma == std::string_view::npos) { break; }
    normalised += ',';
    rest.remove_prefix(comma + 1);
  }
  if (normalised != expected_header) {
    fail("wrong header " + quote(trim(line)) + ": expected '" + std::string{expected_header} + "'");
  }
}

std::int64_t log_parser::place_in_time(std::int64_t time_of_day)
{
  // The log has times of day only. Each row goes on the day that puts it within 12 hours of the row before
  // it: a jump back of more than 12 hours crossed midnight, and a row a little older than the one before it
  // (another thread's, written late) stays on the day before, even across midnight.
  if (!have_first_) {
    have_first_ = true;
    first_time_ = previous_time_ = time_of_day;
    return 0;
  }
  std::int64_t const day = floor_div(previous_time_ - time_of_day + ns_per_day / 2, ns_per_day);
  if (day > max_days || day < -max_days) {
    fail("time goes more than " + std::to_string(max_days) +
         " days (100 years) from the first row, counting a day at each jump back of over 12 hours: not a "
         "program's log");
  }
  previous_time_ = time_of_day + day * ns_per_day;
  return previous_time_ - first_time_;
}

log_event log_parser::parse_row(std::string_view line)
{
  std::array<std::string_view, column_count> fields{};
  std::size_t count = 0;
  std::string_view rest = line;
  while (true) {
    std::size_t const comma = rest.find(',');
    if (count < column_count) { fields[count] = trim(rest.substr(0, comma)); }
    ++count;
    if (comma == std::string_view::npos) { break; }
    rest.remove_prefix(comma + 1);
  }
  if (count != column_count) {
    fail("wrong column count: " + std::to_string(count) + " columns, expected 6 (" + std::string{expected_header} +
         ")");
  }

  log_event e;
  auto const thread = parse_unsigned<std::uint64_t>(fields[0], 10);
  if (!thread) { fail("bad thread " + quote(fields[0]) + ": expected a decimal integer"); }
  e.thread = *thread;

  auto const time = parse_time(fields[1]);
  if (!time) { fail("bad time " + quote(fields[1]) + ": expected HH:MM:SS.ffffff"); }
  e.time_ns = place_in_time(*time);

  if (fields[2] == "allocate") {
    e.action = log_action::allocate;
  } else if (fields[2] == "free") {
    e.action = log_action::free;
  } else if (fields[2] == "allocate failure") {
    e.action = log_action::allocate_failure;
  } else {
    fail("unknown action " + quote(fields[2]) + ": expected allocate, free or allocate failure");
  }

  auto const pointer = parse_hex(fields[3]);
  if (!pointer) { fail("bad pointer " + quote(fields[3]) + ": expected hexadecimal with 0x, e.g. 0x7f98f9e00000"); }
  e.pointer = *pointer;

  auto const size = parse_unsigned<std::size_t>(fields[4], 10);
  if (!size) { fail("bad size " + quote(fields[4]) + ": expected a decimal number of bytes"); }
  e.size = *size;

  auto const stream = parse_hex(fields[5]);
  if (!stream) { fail("bad stream " + quote(fields[5]) + ": expected hexadecimal with 0x, e.g. 0x0"); }
  e.stream = *stream;
  return e;
}

}  // namespace gpumem::detail
