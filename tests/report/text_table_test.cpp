// The text tables of the commands (text_table.hpp): fit_number keeps any double within its width (16 EiB,
// 10^300, sub-nanosecond times, non-finite values) and shows a tiny value's digits; a text_table's columns
// start at the same character on every row whatever the cells hold.
#include <gpumem/report/text_table.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace gpumem::test {
namespace {

TEST(report_text_table, fit_number_keeps_the_decimals_that_fit)
{
  EXPECT_EQ(fit_number(123.456, 1, 9), "123.5");
  EXPECT_EQ(fit_number(1.25, 3, 8), "1.250");
  EXPECT_EQ(fit_number(0.0, 1, 9), "0.0");
  EXPECT_EQ(fit_number(300.0, 0, 9), "300");
  EXPECT_EQ(fit_number(1234567.8, 1, 9), "1234567.8");
  EXPECT_EQ(fit_number(12345678.9, 1, 9), "12345679");  // one decimal too many: none
}

TEST(report_text_table, fit_number_shows_a_sub_nanosecond_value_instead_of_zero)
{
  EXPECT_EQ(fit_number(0.04, 1, 9), "0.040");
  EXPECT_EQ(fit_number(0.25, 1, 9), "0.25");
  EXPECT_EQ(fit_number(0.5, 1, 9), "0.50");
  EXPECT_EQ(fit_number(3e-12, 1, 9), "3.00e-12");
}

TEST(report_text_table, fit_number_goes_scientific_rather_than_outgrow_its_width)
{
  double const sixteen_eib = std::ldexp(1.0, 64);
  EXPECT_EQ(fit_number(sixteen_eib, 3, 8), "1.84e+19");
  EXPECT_EQ(fit_number(1e300, 1, 8), "1.0e+300");
  EXPECT_EQ(fit_number(-1e15, 1, 9), "-1.00e+15");
  for (double const v : {sixteen_eib, 1e300, -1e300, std::numeric_limits<double>::max(),
                         std::numeric_limits<double>::denorm_min(), 1e-300, 123456789.0, 0.001}) {
    for (std::size_t width : {8U, 9U, 10U, 14U}) {
      EXPECT_LE(fit_number(v, 1, width).size(), width) << v << " in " << width;
      EXPECT_LE(fit_number(v, 3, width).size(), width) << v << " in " << width;
    }
  }
  EXPECT_EQ(fit_number(std::numeric_limits<double>::quiet_NaN(), 1, 9), "-");
  EXPECT_EQ(fit_number(std::numeric_limits<double>::infinity(), 1, 9), "-");
}

/// The character positions where each column's cell ends (right-aligned) in `line`, given the widths.
std::vector<char> column_ends(std::string const& line, std::vector<std::size_t> const& widths)
{
  std::vector<char> ends;
  std::size_t at = 0;
  for (std::size_t const w : widths) {
    at += w;
    ends.push_back(at - 1 < line.size() ? line[at - 1] : '\0');
    ++at;  // the space between columns
  }
  return ends;
}

TEST(report_text_table, columns_stay_aligned_for_huge_and_tiny_values)
{
  text_table const table{{{"resource", 10, true}, {"ns/op", 9}, {"peak live", 12}, {"ratio", 8}, {"failures", 9}}};
  std::string const header = table.header();
  EXPECT_EQ(header, "resource       ns/op    peak live    ratio  failures\n");
  std::vector<std::vector<std::string>> const rows{
    {"pool", fit_number(19064.2, 1, 9), "8.74 GiB", fit_number(0.915, 3, 8), fit_number(497, 0, 9)},
    {"cuda_async", fit_number(0.04, 1, 9), "16.00 EiB", fit_number(std::ldexp(1.0, 64), 3, 8),
     fit_number(1e12, 0, 9)},
    {"a_much_longer_name", fit_number(1e300, 1, 9), "0 B", fit_number(1e-9, 3, 8), fit_number(0, 0, 9)},
  };
  for (auto const& cells : rows) {
    std::string const line = table.row(cells);
    EXPECT_EQ(line.size(), header.size()) << line;  // every cell padded or cut to its column
    // Right-aligned columns end in a non-blank character at the same place as the header's.
    std::vector<char> const ends = column_ends(line, {10, 9, 12, 8, 9});
    for (std::size_t c = 1; c < ends.size(); ++c) { EXPECT_NE(ends[c], ' ') << "column " << c << " of " << line; }
  }
  EXPECT_EQ(table.row(rows[2]).substr(0, 10), "a_much_lo~");  // cut, not pushing the columns after it
  EXPECT_EQ(table.row(std::vector<std::string>{"pool"}), "pool\n");  // missing cells are blank
}

TEST(report_text_table, widths_count_code_points)
{
  text_table const table{{{"time", 6}, {"x", 1}}};
  EXPECT_EQ(table.row(std::vector<std::string>{"2 µs", "1"}), "  2 µs 1\n");
}

}  // namespace
}  // namespace gpumem::test
