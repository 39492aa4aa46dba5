// text_table.hpp: numbers that fit a width, and fixed-width rows.
#include <gpumem/report/text_table.hpp>

#include "report/report_format.hpp"
#include "report/svg_frame.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <utility>

namespace gpumem {

namespace {

std::string scientific(double value, int digits)
{
  std::array<char, 64> text{};
  auto const [end, ec] =
    std::to_chars(text.data(), text.data() + text.size(), value, std::chars_format::scientific, digits);
  return ec == std::errc{} ? std::string{text.data(), end} : std::string{"-"};
}

/// `text` padded with spaces (left or right) or cut to `width` code points.
std::string fit_cell(std::string const& text, std::size_t width, bool left)
{
  std::size_t const length = detail::text_length(text);
  if (length > width) {
    if (width == 0) { return {}; }
    std::string cut = detail::truncated(text, width);  // ends in "…": replaced by an ASCII "~"
    cut.erase(cut.size() - std::string_view{"…"}.size());
    return cut + "~";
  }
  std::string const pad(width - length, ' ');
  return left ? text + pad : pad + text;
}

}  // namespace

std::string fit_number(double value, int decimals, std::size_t width)
{
  if (!std::isfinite(value)) { return "-"; }
  decimals = std::max(decimals, 0);
  double const magnitude = std::fabs(value);
  if (magnitude > 0.0 && magnitude < 1.0) {
    // At least two significant digits: 0.04 ns/op is not "0.0".
    decimals = std::max(decimals, static_cast<int>(std::ceil(-std::log10(magnitude))) + 1);
  }
  for (int d = decimals; d >= 0; --d) {
    std::string text = detail::fixed(value, d);
    if (text.size() <= width) { return text; }
    if (magnitude < 1.0) { break; }  // fewer decimals would lose the value: scientific instead
  }
  for (int digits = 2; digits > 0; --digits) {
    std::string text = scientific(value, digits);
    if (text.size() <= width) { return text; }
  }
  return scientific(value, 0);
}

text_table::text_table(std::vector<text_column> columns) : columns_{std::move(columns)} {}

std::string text_table::header() const
{
  std::vector<std::string> headers;
  for (text_column const& c : columns_) { headers.push_back(c.header); }
  return row(headers);
}

std::string text_table::row(std::span<std::string const> cells) const
{
  std::string line;
  for (std::size_t i = 0; i < columns_.size(); ++i) {
    if (i > 0) { line += ' '; }
    line += fit_cell(i < cells.size() ? cells[i] : std::string{}, columns_[i].width, columns_[i].left_aligned);
  }
  while (!line.empty() && line.back() == ' ') { line.pop_back(); }
  line += '\n';
  return line;
}

}  // namespace gpumem
