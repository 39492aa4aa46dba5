// The parts every chart of svg_chart.cpp shares: axis scales (linear with 1-2-5 ticks, or log2), the
// <svg> element's start, the legend, the plot frame with its grid, tick labels and axis labels, and the
// formatting of coordinates. Internal to the library.
#pragma once

#include "report/svg_chart.hpp"

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace gpumem::detail {

inline constexpr double svg_width = 960.0;
inline constexpr double char_width = 6.6;  ///< a character of the 12 px sans-serif font, estimated

/** @return a coordinate with one decimal (never "nan" or "inf"). */
[[nodiscard]] std::string coord(double value);

/** @return how many characters `text` shows (UTF-8 code points). */
[[nodiscard]] std::size_t text_length(std::string_view text);

/** @return `text` cut to `max_chars` code points, the last one "…", when it is longer (a label must fit). */
[[nodiscard]] std::string truncated(std::string_view text, std::size_t max_chars);

inline constexpr std::size_t max_label_chars = 24;   ///< a category label along the x axis
inline constexpr std::size_t max_legend_chars = 48;  ///< a legend entry's name

/** @return `value` as an axis label in `format`. */
[[nodiscard]] std::string format_value(double value, value_format format);

/** @brief An axis' range and tick positions, in data units. */
struct axis_scale {
  double lo{0.0};
  double hi{1.0};
  bool log2{false};  ///< logarithmic (of any base: fraction() is the same)
  std::vector<double> ticks;

  /** @return where `value` lies between lo (0) and hi (1), clamped to [0, 1]. */
  [[nodiscard]] double fraction(double value) const;
};

/**
 * @return a scale from 0 with about 5 ticks on 1-2-5 steps (of KiB/MiB/GiB for bytes; steps of at least 1
 * unless `format` is ratio), up to `max_value` (1 when there is none), rounded up to the next tick when
 * `round_up` (a y axis) or not (an x axis, so that the data reaches the right edge).
 */
[[nodiscard]] axis_scale linear_scale(double max_value, value_format format, bool round_up = true);

/** @return a log2 scale over [min_positive, max_value] widened to powers of two, bottom at least 2^-6. */
[[nodiscard]] axis_scale log2_scale(double min_positive, double max_value);

/**
 * @return a log10 scale for counts up to `max_value`: from 1/2 (so that a count of 1 is above the bottom)
 * to the power of ten at or above max_value (at least 10), ticks at the powers of ten (every other one, or
 * sparser, beyond 8 of them).
 */
[[nodiscard]] axis_scale log10_count_scale(double max_value);

/** @brief One legend entry: a line sample (line charts) or a square (bar charts). */
struct legend_entry {
  std::string name;
  std::string colour;
  bool line{true};
  bool dashed{false};
  std::string note{};  ///< grey text after the name
};

/** @brief The plot area in SVG coordinates. */
struct plot_area {
  double left{78.0};
  double top{16.0};
  double right{svg_width - 24.0};
  double bottom{0.0};
  double height{0.0};  ///< the whole chart's height

  [[nodiscard]] double width() const { return right - left; }
  [[nodiscard]] double plot_height() const { return bottom - top; }
  [[nodiscard]] double y_of(axis_scale const& scale, double value) const
  {
    return bottom - scale.fraction(value) * plot_height();
  }
};

/** @brief Appends `<svg ...><title>` for a chart `height` high. */
void start_svg(std::string& out, std::string_view id, std::string_view title, double height);

/** @brief Appends the legend in rows from the top left. @return the height it took (0 without entries). */
double append_legend(std::string& out, std::vector<legend_entry> const& entries);

/** @brief Appends the y grid, tick labels and label, and the axis lines. */
void append_y_axis(std::string& out, plot_area const& area, axis_scale const& scale, value_format format,
                   std::string_view label);

/** @brief Appends tick marks and labels along the bottom of a linear x axis. */
void append_x_ticks(std::string& out, plot_area const& area, axis_scale const& scale, value_format format);

/** @brief Appends the x axis label centred under the plot. */
void append_x_label(std::string& out, plot_area const& area, std::string_view label);

/** @brief Appends a dashed horizontal line at `value` with `label` (if any) at its right end (if in range). */
void append_reference(std::string& out, plot_area const& area, axis_scale const& scale, double value,
                      std::string_view label);

/** @brief Appends "no data" in the middle of the plot. */
void append_no_data(std::string& out, plot_area const& area);

}  // namespace gpumem::detail
