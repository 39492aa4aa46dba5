// Line and bar charts as inline SVG (svg_chart.hpp), over the scales, legend and axes of svg_frame.hpp.
// Every data value goes through axis_scale::fraction, which clamps to [0, 1] and maps non-finite values to
// the axis' bottom, so a coordinate is always finite and inside the viewBox.
#include "report/svg_chart.hpp"

#include "report/report_format.hpp"
#include "report/svg_frame.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace gpumem::detail {

namespace {

constexpr double min_height = 160.0;
constexpr double max_height = 2000.0;
constexpr double max_bar_width = 90.0;

double sane_height(double height)
{
  return std::isfinite(height) ? std::clamp(height, min_height, max_height) : min_height;
}

double sane_value(double value) { return std::isfinite(value) && value > 0.0 ? value : 0.0; }

}  // namespace

std::string render_svg(line_chart const& chart)
{
  double const height = sane_height(chart.height);
  std::string out;
  start_svg(out, chart.id, chart.title, height);
  std::vector<legend_entry> legend;
  for (line_series const& s : chart.series) { legend.push_back({s.name, s.colour, true, s.dashed, s.note}); }
  double const legend_height = append_legend(out, legend);
  plot_area const area{.top = legend_height > 0.0 ? legend_height + 20.0 : 16.0, .bottom = height - 48.0,
                       .height = height};

  bool any = false;
  double max_x = 0.0;
  double max_y = 0.0;
  double min_positive = std::numeric_limits<double>::infinity();
  for (line_series const& s : chart.series) {
    for (auto const& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) { continue; }
      any = true;
      max_x = std::max(max_x, x);
      max_y = std::max(max_y, y);
      if (y > 0.0) { min_positive = std::min(min_positive, y); }
    }
  }
  if (chart.reference_y && std::isfinite(*chart.reference_y)) {
    max_y = std::max(max_y, *chart.reference_y);
    if (*chart.reference_y > 0.0) { min_positive = std::min(min_positive, *chart.reference_y); }
  }
  if (chart.y_limit && std::isfinite(*chart.y_limit) && *chart.y_limit > 0.0) {
    max_y = std::min(max_y, *chart.y_limit);
  }
  axis_scale const y_scale = chart.log2_y ? log2_scale(min_positive, max_y) : linear_scale(max_y, chart.y_format);
  axis_scale const x_scale = linear_scale(max_x, chart.x_format, false);

  append_y_axis(out, area, y_scale, chart.y_format, chart.y_label);
  append_x_ticks(out, area, x_scale, chart.x_format);
  append_x_label(out, area, chart.x_label);
  if (!any) { append_no_data(out, area); }

  for (line_series const& s : chart.series) {
    std::string points;
    std::string last;
    std::size_t drawn = 0;
    for (auto const& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) { continue; }
      std::string point =
        coord(area.left + x_scale.fraction(x) * area.width()) + "," + coord(area.y_of(y_scale, y));
      if (point == last) { continue; }  // thousands of samples often share a pixel
      if (!points.empty()) { points += ' '; }
      points += point;
      last = std::move(point);
      ++drawn;
    }
    std::string const series_attributes = " data-series=\"" + xml_escape(s.name) + "\"";
    if (drawn == 1) {  // a polyline of one point draws nothing: a dot instead
      auto const comma = last.find(',');
      out += "<circle" + series_attributes + " cx=\"" + last.substr(0, comma) + "\" cy=\"" + last.substr(comma + 1) +
             "\" r=\"3.5\" fill=\"" + xml_escape(s.colour) + "\"/>\n";
    } else if (drawn > 1) {
      out += "<polyline" + series_attributes + " fill=\"none\" stroke=\"" + xml_escape(s.colour) +
             "\" stroke-width=\"2\" stroke-linejoin=\"round\"" + (s.dashed ? " stroke-dasharray=\"7 4\"" : "") +
             " points=\"" + points + "\"/>\n";
    }
  }
  if (chart.reference_y) { append_reference(out, area, y_scale, *chart.reference_y, chart.reference_label); }
  out += "</svg>\n";
  return out;
}

std::string render_svg(bar_chart const& chart)
{
  double const height = sane_height(chart.height);
  std::string out;
  start_svg(out, chart.id, chart.title, height);
  std::vector<legend_entry> legend;
  if (chart.legend) {
    for (std::size_t j = 0; j < chart.series.size(); ++j) {
      bar_series const& s = chart.series[j];
      legend.push_back({s.name, s.colour, false, false, j < chart.legend_notes.size() ? chart.legend_notes[j] : ""});
    }
  }
  // The reference line's label goes in the legend row: at the line itself it would cross a bar.
  if (chart.reference_y && !chart.reference_label.empty()) {
    legend.push_back({chart.reference_label, "#555555", true, true, {}});
  }
  double const legend_height = append_legend(out, legend);

  std::size_t const n = chart.categories.size();
  double const plot_width = svg_width - 24.0 - 78.0;
  double const slot = plot_width / static_cast<double>(std::max<std::size_t>(n, 1));
  std::size_t longest = 0;
  for (std::string const& c : chart.categories) { longest = std::max(longest, text_length(c)); }
  longest = std::min(longest, max_label_chars);  // longer labels are truncated
  double const label_width = static_cast<double>(longest) * char_width;
  bool const rotated = label_width + 6.0 > slot;
  double const label_space = rotated ? label_width * 0.71 + 18.0 : 22.0;
  double top = legend_height > 0.0 ? legend_height + 20.0 : 16.0;
  if (chart.value_labels) { top += 14.0; }
  plot_area const area{.top = top, .bottom = height - 30.0 - label_space, .height = height};

  bool any = false;
  double max_y = 0.0;
  for (bar_series const& s : chart.series) {
    for (std::size_t i = 0; i < std::min(n, s.values.size()); ++i) {
      any = any || sane_value(s.values[i]) > 0.0;
      max_y = std::max(max_y, sane_value(s.values[i]));
    }
  }
  if (chart.reference_y) { max_y = std::max(max_y, sane_value(*chart.reference_y)); }
  if (chart.y_limit && std::isfinite(*chart.y_limit) && *chart.y_limit > 0.0) {
    max_y = std::min(max_y, *chart.y_limit);
  }
  axis_scale const y_scale = chart.log_y ? log10_count_scale(max_y) : linear_scale(max_y, chart.y_format);
  append_y_axis(out, area, y_scale, chart.y_format, chart.y_label);
  append_x_label(out, area, chart.x_label);
  if (!any) { append_no_data(out, area); }

  std::size_t const m = chart.series.size();
  double const bar_width =
    std::min(max_bar_width, slot * 0.8 / static_cast<double>(std::max<std::size_t>(m, 1)));
  double const group_offset = (slot - bar_width * static_cast<double>(m)) / 2.0;
  double const gap = m > 1 && bar_width > 4.0 ? 1.0 : 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < m; ++j) {
      bar_series const& s = chart.series[j];
      double const value = i < s.values.size() ? sane_value(s.values[i]) : 0.0;
      std::string const& colour = i < s.bar_colours.size() ? s.bar_colours[i] : s.colour;
      double const x = area.left + static_cast<double>(i) * slot + group_offset + static_cast<double>(j) * bar_width;
      double const y = area.y_of(y_scale, value);
      std::string const shown = format_value(value, chart.y_format);
      out += "<rect class=\"bar\" data-series=\"" + xml_escape(s.name) + "\" data-category=\"" +
             xml_escape(chart.categories[i]) + "\" data-value=\"" + fixed(value, 3) + "\" x=\"" + coord(x) +
             "\" y=\"" + coord(y) + "\" width=\"" + coord(bar_width - gap) + "\" height=\"" + coord(area.bottom - y) +
             "\" fill=\"" + xml_escape(colour) + "\"><title>" +
             xml_escape((m > 1 ? s.name + " · " : std::string{}) + chart.categories[i] + ": " + shown) +
             "</title></rect>\n";
      bool const cut = value > y_scale.hi;
      if (cut) {  // two white slashes across the bar's top: it goes on above the axis
        out += "<path d=\"M" + coord(x) + "," + coord(y + 14.0) + " l" + coord(bar_width - gap) + ",-6 M" + coord(x) +
               "," + coord(y + 20.0) + " l" + coord(bar_width - gap) + ",-6\" stroke=\"#fff\" stroke-width=\"3\"/>\n";
      }
      if (chart.value_labels) {
        out += "<text x=\"" + coord(x + bar_width / 2.0) + "\" y=\"" + coord(y - 5.0) + "\" text-anchor=\"middle\">" +
               xml_escape(shown) + (cut ? " (cut)" : "") + "</text>\n";
      }
    }
  }
  // Category labels: centred under their group, or rotated (and thinned where even that does not fit).
  std::size_t const stride = rotated ? static_cast<std::size_t>(std::max(1.0, std::ceil(15.0 / slot))) : 1;
  for (std::size_t i = 0; i < n; i += stride) {
    double const x = area.left + (static_cast<double>(i) + 0.5) * slot;
    std::string const text = xml_escape(truncated(chart.categories[i], max_label_chars));
    if (rotated) {
      out += "<text transform=\"translate(" + coord(x + 4.0) + " " + coord(area.bottom + 12.0) +
             ") rotate(-45)\" text-anchor=\"end\">" + text + "</text>\n";
    } else {
      out += "<text x=\"" + coord(x) + "\" y=\"" + coord(area.bottom + 17.0) + "\" text-anchor=\"middle\">" + text +
             "</text>\n";
    }
  }
  for (bar_marker const& marker : chart.markers) {
    if (!std::isfinite(marker.position) || n == 0) { continue; }
    double const x = area.left + std::clamp(marker.position, 0.0, static_cast<double>(n)) * slot;
    out += "<line class=\"marker\" data-series=\"" + xml_escape(marker.series) + "\" data-marker=\"" +
           xml_escape(marker.kind) + "\" x1=\"" + coord(x) + "\" y1=\"" + coord(area.top) + "\" x2=\"" + coord(x) +
           "\" y2=\"" + coord(area.bottom) + "\" stroke=\"" + xml_escape(marker.colour) +
           "\" stroke-width=\"2\" stroke-dasharray=\"" + xml_escape(marker.dasharray) + "\"/>\n";
  }
  if (chart.reference_y) { append_reference(out, area, y_scale, *chart.reference_y, {}); }
  out += "</svg>\n";
  return out;
}

}  // namespace gpumem::detail
