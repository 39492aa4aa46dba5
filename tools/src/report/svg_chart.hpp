// A small SVG chart writer for the report page (html_report.cpp): line charts with several named series,
// and bar charts with one series or several (grouped bars), each with a legend, axes, tick labels, axis
// labels and a <title>. The output is one inline <svg> element (no xmlns: HTML5 does not need it, and the
// page carries no URL): a viewBox, width 100%, coordinates with one decimal, every text escaped. No input
// yields a non-finite number: empty or degenerate data draw an empty frame with a note.
//
// Each series' shapes carry `data-series="NAME"` and the series' colour as a plain `stroke`/`fill`
// attribute, and each bar `data-value`, so that tests can find them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpumem::detail {

/** @brief How an axis' tick labels (and a bar's value label) read. */
enum class value_format : std::uint8_t {
  count,  ///< "950", "1.5k"
  bytes,  ///< "256 B", "4 KiB", "1.5 MiB"
  ratio,  ///< "1.25×"
  duration,  ///< nanoseconds as "850 ns", "1.2 µs", "3.4 ms", "2.1 s"
};

/** @brief One line of a line_chart. */
struct line_series {
  std::string name;    ///< legend text and the polyline's data-series
  std::string colour;  ///< "#rrggbb"
  std::vector<std::pair<double, double>> points;  ///< (x, y) in data units, x ascending
  bool dashed{false};
  std::string note{};  ///< shown in grey after the name in the legend, e.g. "(reserved up front)"
};

/** @brief A line chart over a linear x axis starting at 0. */
struct line_chart {
  std::string id;       ///< the svg element's id
  std::string title;    ///< its <title> (what a screen reader says)
  std::string x_label;
  value_format x_format{value_format::count};
  std::string y_label;
  value_format y_format{value_format::bytes};
  std::vector<line_series> series;
  /// A dashed horizontal line at this y (e.g. ratio 1.0), labelled reference_label.
  std::optional<double> reference_y{};
  std::string reference_label{};
  /// Top of a linear y axis (rounded up to a tick): larger values are drawn at the top edge.
  std::optional<double> y_limit{};
  /// y on a log2 scale from the smallest positive value (at least 2^-6) to the largest; smaller values and
  /// values <= 0 are drawn at the bottom edge.
  bool log2_y{false};
  double height{360.0};
};

/** @brief One series of a bar_chart: one value per category. */
struct bar_series {
  std::string name;    ///< legend text and each bar's data-series
  std::string colour;  ///< "#rrggbb", for every bar unless bar_colours names one
  std::vector<double> values;
  std::vector<std::string> bar_colours{};  ///< per category, optional (empty: all `colour`)
};

/**
 * @brief A vertical line across a bar chart's plot at `position` along the categories: category i spans
 * [i, i + 1), so 2.5 is the middle of the third. Carries `data-series="NAME"` and `data-marker="KIND"`.
 */
struct bar_marker {
  double position{};
  std::string series;  ///< data-series: the series (resource) it belongs to
  std::string kind;    ///< data-marker, e.g. "p50"
  std::string colour;  ///< "#rrggbb"
  std::string dasharray{"6 3"};  ///< its dash pattern (the caption says which pattern is which kind)
};

/** @brief A bar chart: categories along x, for each a group of one bar per series; y linear from 0. */
struct bar_chart {
  std::string id;
  std::string title;
  std::vector<std::string> categories;  ///< x labels (rotated when they do not fit)
  std::string x_label;
  std::string y_label;
  value_format y_format{value_format::count};
  std::vector<bar_series> series;
  /// A dashed horizontal line at this y, labelled reference_label in the legend row above the plot (a
  /// label at the line itself would cross a bar).
  std::optional<double> reference_y{};
  std::string reference_label{};
  /// Top of the y axis (rounded up to a tick): a larger value's bar is cut at the top and marked so.
  std::optional<double> y_limit{};
  bool value_labels{false};  ///< print each bar's value above it (for a few wide bars)
  bool legend{true};         ///< a legend of the series (pointless for one series with per-bar colours)
  /// Notes shown in grey after each series' name in the legend (by series index; missing: none).
  std::vector<std::string> legend_notes{};
  /// y on a log10 scale (counts spanning decades): ticks at 1, 10, 100, ...; the axis starts at 1/2 so that
  /// a value of 1 still shows a bar; 0 draws none.
  bool log_y{false};
  std::vector<bar_marker> markers{};
  double height{340.0};
};

/** @return the chart as an <svg> element. */
[[nodiscard]] std::string render_svg(line_chart const& chart);
/** @return the chart as an <svg> element. */
[[nodiscard]] std::string render_svg(bar_chart const& chart);

}  // namespace gpumem::detail
