// Scales, legend and axes shared by the report's charts (svg_frame.hpp).
#include "report/svg_frame.hpp"

#include "report/report_format.hpp"

#include <algorithm>
#include <cmath>

namespace gpumem::detail {

namespace {

constexpr double legend_row_height = 18.0;
constexpr int max_log2_ticks = 8;
constexpr int min_log2_exponent = -6;

/// The 1-2-5 step (times a power of ten) at or above `raw`.
double nice_step(double raw)
{
  if (!std::isfinite(raw) || raw <= 0.0) { return 1.0; }
  double const base = std::pow(10.0, std::floor(std::log10(raw)));
  double const f = raw / base;
  return (f <= 1.0 ? 1.0 : f <= 2.0 ? 2.0 : f <= 5.0 ? 5.0 : 10.0) * base;
}

}  // namespace

std::string coord(double value) { return fixed(value, 1); }

std::size_t text_length(std::string_view text)
{
  return static_cast<std::size_t>(
    std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0U) != 0x80U; }));
}

std::string truncated(std::string_view text, std::size_t max_chars)
{
  if (text_length(text) <= max_chars || max_chars == 0) { return std::string{text}; }
  std::size_t chars = 0;
  std::size_t end = 0;
  // Stop at the start of code point number max_chars (0-based max_chars - 1 kept), never inside one.
  for (; end < text.size(); ++end) {
    if ((static_cast<unsigned char>(text[end]) & 0xC0U) != 0x80U && chars++ == max_chars - 1) { break; }
  }
  return std::string{text.substr(0, end)} + "…";
}

std::string format_value(double value, value_format format)
{
  switch (format) {
    case value_format::bytes: return short_bytes(value);
    case value_format::ratio: return short_ratio(value);
    case value_format::duration: return value == 0.0 ? "0" : short_duration(value);  // the origin: "0", not "0 ns"
    case value_format::count: break;
  }
  return short_count(value);
}

double axis_scale::fraction(double value) const
{
  double f = 0.0;
  if (log2) {
    value = std::clamp(std::isfinite(value) ? value : lo, lo, hi);
    f = (std::log2(value) - std::log2(lo)) / (std::log2(hi) - std::log2(lo));
  } else {
    value = std::clamp(std::isfinite(value) ? value : lo, lo, hi);
    f = (value - lo) / (hi - lo);
  }
  return std::isfinite(f) ? std::clamp(f, 0.0, 1.0) : 0.0;
}

axis_scale linear_scale(double max_value, value_format format, bool round_up)
{
  if (!std::isfinite(max_value) || max_value <= 0.0) { max_value = 1.0; }
  double unit = 1.0;
  if (format == value_format::bytes) {
    while (max_value / unit >= 1024.0 && unit < 0x1p50) { unit *= 1024.0; }
  }
  double step = nice_step(max_value / unit / 5.0) * unit;
  if (format != value_format::ratio) { step = std::max(step, 1.0); }
  double const steps = round_up ? std::max(1.0, std::ceil(max_value / step - 1e-9))
                                : std::max(1.0, std::floor(max_value / step + 1e-9));
  axis_scale scale{.lo = 0.0, .hi = round_up ? steps * step : std::max(max_value, step), .log2 = false, .ticks = {}};
  for (double i = 0.0; i <= steps; i += 1.0) { scale.ticks.push_back(i * step); }
  return scale;
}

axis_scale log2_scale(double min_positive, double max_value)
{
  if (!std::isfinite(min_positive) || min_positive <= 0.0) { min_positive = 1.0; }
  if (!std::isfinite(max_value) || max_value < min_positive) { max_value = min_positive; }
  int const lo_exp = std::max(min_log2_exponent, static_cast<int>(std::floor(std::log2(min_positive))));
  int const hi_exp = std::max(lo_exp + 1, static_cast<int>(std::ceil(std::log2(max_value))));
  int const stride = (hi_exp - lo_exp + max_log2_ticks - 1) / max_log2_ticks;
  axis_scale scale{.lo = std::ldexp(1.0, lo_exp), .hi = std::ldexp(1.0, hi_exp), .log2 = true, .ticks = {}};
  for (int e = lo_exp; e <= hi_exp; e += stride) { scale.ticks.push_back(std::ldexp(1.0, e)); }
  return scale;
}

axis_scale log10_count_scale(double max_value)
{
  if (!std::isfinite(max_value) || max_value < 10.0) { max_value = 10.0; }
  int const hi_exp = static_cast<int>(std::ceil(std::log10(max_value) - 1e-9));
  int const stride = (hi_exp + max_log2_ticks) / max_log2_ticks;
  axis_scale scale{.lo = 0.5, .hi = std::pow(10.0, hi_exp), .log2 = true, .ticks = {}};
  for (int e = 0; e <= hi_exp; e += stride) { scale.ticks.push_back(std::pow(10.0, e)); }
  return scale;
}

void start_svg(std::string& out, std::string_view id, std::string_view title, double height)
{
  std::string const escaped_id = xml_escape(id);
  out += "<svg id=\"" + escaped_id + "\" class=\"chart\" viewBox=\"0 0 " + coord(svg_width) + " " + coord(height) +
         "\" width=\"100%\" role=\"img\" aria-labelledby=\"" + escaped_id +
         "-title\" font-family=\"sans-serif\" font-size=\"12\" fill=\"#222\">\n<title id=\"" + escaped_id +
         "-title\">" + xml_escape(title) + "</title>\n";
}

double append_legend(std::string& out, std::vector<legend_entry> const& entries)
{
  if (entries.empty()) { return 0.0; }
  double x = 78.0;
  double y = 8.0;
  for (legend_entry const& entry : entries) {
    std::string const name = truncated(entry.name, max_legend_chars);
    std::string const note = entry.note.empty() ? std::string{} : " " + entry.note;
    double const w = 24.0 + static_cast<double>(text_length(name) + text_length(note)) * char_width + 20.0;
    if (x + w > svg_width - 24.0 && x > 78.0) {
      x = 78.0;
      y += legend_row_height;
    }
    out += "<g class=\"legend\" data-series=\"" + xml_escape(entry.name) + "\">";
    if (entry.line) {
      out += "<line x1=\"" + coord(x) + "\" y1=\"" + coord(y + 7.0) + "\" x2=\"" + coord(x + 18.0) + "\" y2=\"" +
             coord(y + 7.0) + "\" stroke=\"" + xml_escape(entry.colour) + "\" stroke-width=\"4\"" +
             (entry.dashed ? " stroke-dasharray=\"5 3\"" : "") + "/>";
    } else {
      out += "<rect x=\"" + coord(x + 3.0) + "\" y=\"" + coord(y + 1.0) + "\" width=\"12.0\" height=\"12.0\" fill=\"" +
             xml_escape(entry.colour) + "\"/>";
    }
    out += "<text x=\"" + coord(x + 24.0) + "\" y=\"" + coord(y + 11.0) + "\">" + xml_escape(name) +
           (note.empty() ? std::string{} : "<tspan fill=\"#666\">" + xml_escape(note) + "</tspan>") + "</text></g>\n";
    x += w;
  }
  return y + legend_row_height - 8.0;
}

void append_y_axis(std::string& out, plot_area const& area, axis_scale const& scale, value_format format,
                   std::string_view label)
{
  for (double const tick : scale.ticks) {
    double const y = area.y_of(scale, tick);
    out += "<line x1=\"" + coord(area.left) + "\" y1=\"" + coord(y) + "\" x2=\"" + coord(area.right) + "\" y2=\"" +
           coord(y) + "\" stroke=\"#e4e4e4\"/><text x=\"" + coord(area.left - 6.0) + "\" y=\"" + coord(y + 4.0) +
           "\" text-anchor=\"end\">" + xml_escape(format_value(tick, format)) + "</text>\n";
  }
  out += "<path d=\"M" + coord(area.left) + "," + coord(area.top) + " V" + coord(area.bottom) + " H" +
         coord(area.right) + "\" fill=\"none\" stroke=\"#777\"/>\n";
  double const middle = (area.top + area.bottom) / 2.0;
  out += "<text transform=\"translate(16.0 " + coord(middle) + ") rotate(-90)\" text-anchor=\"middle\">" +
         xml_escape(label) + "</text>\n";
}

void append_x_ticks(std::string& out, plot_area const& area, axis_scale const& scale, value_format format)
{
  for (double const tick : scale.ticks) {
    double const x = area.left + scale.fraction(tick) * area.width();
    out += "<line x1=\"" + coord(x) + "\" y1=\"" + coord(area.bottom) + "\" x2=\"" + coord(x) + "\" y2=\"" +
           coord(area.bottom + 5.0) + "\" stroke=\"#777\"/><text x=\"" + coord(x) + "\" y=\"" +
           coord(area.bottom + 19.0) + "\" text-anchor=\"middle\">" + xml_escape(format_value(tick, format)) +
           "</text>\n";
  }
}

void append_x_label(std::string& out, plot_area const& area, std::string_view label)
{
  out += "<text x=\"" + coord((area.left + area.right) / 2.0) + "\" y=\"" + coord(area.height - 8.0) +
         "\" text-anchor=\"middle\">" + xml_escape(label) + "</text>\n";
}

void append_reference(std::string& out, plot_area const& area, axis_scale const& scale, double value,
                      std::string_view label)
{
  if (!std::isfinite(value) || value < scale.lo || value > scale.hi) { return; }
  double const y = area.y_of(scale, value);
  out += "<line class=\"reference\" x1=\"" + coord(area.left) + "\" y1=\"" + coord(y) + "\" x2=\"" +
         coord(area.right) + "\" y2=\"" + coord(y) +
         "\" stroke=\"#555\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>";
  if (label.empty()) { return; }
  // A white halo (stroke painted under the fill) keeps the label legible where it crosses a line.
  out += "<text x=\"" + coord(area.right - 4.0) + "\" y=\"" + coord(y - 5.0) +
         "\" text-anchor=\"end\" fill=\"#444\" stroke=\"#fff\" stroke-width=\"4\" paint-order=\"stroke\">" +
         xml_escape(label) + "</text>\n";
}

void append_no_data(std::string& out, plot_area const& area)
{
  out += "<text class=\"no-data\" x=\"" + coord((area.left + area.right) / 2.0) + "\" y=\"" +
         coord((area.top + area.bottom) / 2.0) + "\" text-anchor=\"middle\" fill=\"#777\">no data</text>\n";
}

}  // namespace gpumem::detail
