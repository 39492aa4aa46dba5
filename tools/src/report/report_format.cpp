// Escaping and number formatting for the report (report_format.hpp). std::to_chars, not printf: it ignores
// the locale (a page must not print "1,5" under a German locale) and gives the same text on every run.
#include "report/report_format.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>

namespace gpumem::detail {

std::string xml_escape(std::string_view text)
{
  std::string out;
  out.reserve(text.size());
  for (char const c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string fixed(double value, int decimals)
{
  if (!std::isfinite(value)) { value = 0.0; }
  // Half a unit of the last decimal rounds to zero: print it as 0, not "-0.0".
  if (std::fabs(value) < 0.5 * std::pow(10.0, -decimals)) { value = 0.0; }
  std::array<char, 400> text{};  // fits DBL_MAX in fixed notation with a few decimals
  auto const [end, ec] =
    std::to_chars(text.data(), text.data() + text.size(), value, std::chars_format::fixed, decimals);
  if (ec != std::errc{}) { return "0"; }
  return {text.data(), end};
}

std::string short_number(double value)
{
  if (!std::isfinite(value)) { return "0"; }
  double const magnitude = std::fabs(value);
  int const decimals = magnitude >= 100.0 ? 0 : magnitude >= 10.0 ? 1 : 2;
  std::string text = fixed(value, decimals);
  if (text.find('.') != std::string::npos) {
    while (text.back() == '0') { text.pop_back(); }
    if (text.back() == '.') { text.pop_back(); }
  }
  return text;
}

namespace {

/// `value` scaled down by `step` while it is at least `step` (at most units.size() - 1 times), with its unit.
template <std::size_t N>
std::string in_units(double value, double step, std::array<char const*, N> const& units)
{
  if (!std::isfinite(value)) { value = 0.0; }
  std::size_t unit = 0;
  while (std::fabs(value) >= step && unit + 1 < N) {
    value /= step;
    ++unit;
  }
  return short_number(value) + " " + units[unit];
}

}  // namespace

std::string short_bytes(double bytes)
{
  static constexpr std::array<char const*, 7> units{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  return in_units(bytes, 1024.0, units);
}

std::string short_count(double count)
{
  if (!std::isfinite(count)) { return "0"; }
  if (std::fabs(count) < 10000.0) { return short_number(count); }
  static constexpr std::array<char const*, 4> units{"", "k", "M", "G"};
  std::string text = in_units(count, 1000.0, units);
  text.erase(text.find(' '), 1);
  return text;
}

std::string short_duration(double ns)
{
  static constexpr std::array<char const*, 4> units{"ns", "µs", "ms", "s"};
  return in_units(ns, 1000.0, units);
}

std::string short_ratio(double ratio) { return short_count(ratio) + "×"; }

std::string pow2_bytes_label(std::size_t b)
{
  static constexpr std::array<char const*, 7> units{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (b >= 64) { b = 63; }
  return std::to_string(std::uint64_t{1} << (b % 10)) + " " + units[b / 10];
}

std::string pow2_ns_label(std::size_t b)
{
  static constexpr std::array<char const*, 4> units{"ns", "µs", "ms", "s"};
  if (b >= 64) { b = 63; }
  std::size_t const unit = b / 10 < units.size() ? b / 10 : units.size() - 1;
  return std::to_string(std::uint64_t{1} << (b - 10 * unit)) + " " + units[unit];
}

}  // namespace gpumem::detail
