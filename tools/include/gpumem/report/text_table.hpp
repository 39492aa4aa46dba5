/**
 * @file text_table.hpp
 * The plain-text tables of `gpumem replay`, `report` and `bench`: fixed-width columns, so that a row can be
 * printed as soon as it is known, and numbers formatted to fit their column whatever their magnitude
 * (a 16 EiB peak, a ratio of 10^15, a fraction of a nanosecond), so that the columns stay aligned.
 */
#pragma once

#include <gpumem/export.hpp>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace gpumem {

/**
 * @brief `value` in at most `width` characters: fixed notation with `decimals` decimals; fewer decimals
 * when that is too wide; scientific notation ("1.2e+15") when even no decimals are. A value under 1 (not
 * 0) gets at least two significant digits ("0.042", "0.25"), or scientific notation ("4.2e-12").
 * Locale-independent. A non-finite value prints as "-".
 * @pre width >= 8 (every double fits in 8 characters in scientific notation with one digit); a smaller
 * width is honoured where the value allows it.
 */
[[nodiscard]] GPUMEM_EXPORT std::string fit_number(double value, int decimals, std::size_t width);

/** @brief A column of a text_table. */
struct text_column {
  std::string header;
  std::size_t width{};  ///< characters of its cells (the header included), not counting the space between columns
  bool left_aligned{false};  ///< text columns (names); numbers are right-aligned
};

/**
 * @brief A table of fixed-width columns separated by one space. A cell is padded to its column's width;
 * a longer cell is cut to it, its last character "~", so that the columns after it stay in place.
 */
class GPUMEM_EXPORT text_table {
 public:
  explicit text_table(std::vector<text_column> columns);

  /** @return the header line, with its newline. */
  [[nodiscard]] std::string header() const;

  /**
   * @return one row, with its newline: `cells[i]` in column i; missing cells are blank, extra ones ignored.
   * Widths are counted in code points (UTF-8), so that "µs" takes two.
   */
  [[nodiscard]] std::string row(std::span<std::string const> cells) const;

 private:
  std::vector<text_column> columns_;
};

}  // namespace gpumem
