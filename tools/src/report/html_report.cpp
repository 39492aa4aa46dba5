// The `gpumem report` page (html_report.hpp): one HTML5 string with inline CSS and inline SVG charts, no
// script and no URL, so that the file can be mailed or attached to a CI run and opened anywhere. This file
// holds the page's frame, its heading and summary table, the size histogram and the writing to a file; the
// chart sections are report_charts.cpp's. Every text that comes from the input is escaped
// (report_format.hpp).
#include <gpumem/report/html_report.hpp>

#include "replay/live_bytes.hpp"
#include "report/report_charts.hpp"
#include "report/report_format.hpp"

#include <gpumem/report/staged_file.hpp>

#include <algorithm>
#include <bit>
#include <string_view>

namespace gpumem {

namespace {

using detail::fixed;
using detail::short_bytes;
using detail::xml_escape;

constexpr std::string_view style_sheet = R"(
body { font: 15px/1.45 system-ui, sans-serif; color: #222; background: #fff; margin: 0; }
main { max-width: 1040px; margin: 0 auto; padding: 24px 28px 48px; }
h1 { font-size: 1.6em; margin: 0 0 .4em; }
h2 { font-size: 1.25em; margin: 1.6em 0 .5em; border-bottom: 1px solid #ddd; padding-bottom: .2em; }
p { margin: .3em 0; }
.meta { color: #444; }
code { font: 13px/1.4 ui-monospace, monospace; background: #f2f2f2; padding: 1px 4px; border-radius: 3px;
       overflow-wrap: anywhere; }
table { border-collapse: collapse; width: 100%; font-size: 14px; }
th, td { padding: 5px 8px; border-bottom: 1px solid #e3e3e3; text-align: left; vertical-align: top; }
th { background: #f5f5f5; }
.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.swatch { display: inline-block; width: 11px; height: 11px; margin-right: 6px; border-radius: 2px; }
figure { margin: .8em 0 1.4em; }
figcaption { font-size: 13px; color: #555; margin-top: .2em; }
svg.chart { display: block; height: auto; }
.note { font-size: 13px; color: #555; }
.warning { background: #fff4e0; border-left: 4px solid #e08a00; padding: 6px 10px; }
footer { margin-top: 2.5em; font-size: 12px; color: #888; }
)";

double as_double(std::size_t value) { return static_cast<double>(value); }

void append_header(std::string& out, report_input const& input)
{
  out += "<h1>" + xml_escape(input.title) + "</h1>\n";
  out += "<p class=\"meta\">Log <code>" + xml_escape(input.log_source) + "</code>: " +
         std::to_string(input.log_events) + " events over " +
         detail::short_duration(static_cast<double>(input.log_duration_ns)) + ", peak live " +
         short_bytes(as_double(input.log_peak_live_bytes)) + ".</p>\n";
  if (!input.warning.empty()) {
    out += "<p class=\"warning\" id=\"report-warning\">Note: " + xml_escape(input.warning) + "</p>\n";
  }
  out += "<p class=\"meta\">Environment: " + xml_escape(input.environment) + "</p>\n";
  out += "<p class=\"meta\">Command: <code>" + xml_escape(input.command) + "</code></p>\n";
}

std::string bytes_cell(std::size_t bytes)
{
  return "<td class=\"num\" title=\"" + std::to_string(bytes) + " bytes\">" + short_bytes(as_double(bytes)) + "</td>";
}

void append_summary(std::string& out, report_input const& input)
{
  out += "<h2>Summary</h2>\n<table id=\"summary-table\">\n<thead><tr><th>Resource</th><th>Description</th>"
         "<th class=\"num\">ns/op</th><th class=\"num\">Peak upstream</th><th class=\"num\">Peak live</th>"
         "<th class=\"num\" title=\"peak upstream / peak live\">Ratio</th><th class=\"num\">Failures</th>"
         "<th class=\"num\">Unknown frees</th></tr></thead>\n<tbody>\n";
  bool any_reserving = false;
  for (std::size_t i = 0; i < input.resources.size(); ++i) {
    report_resource const& r = input.resources[i];
    replay_result const& result = r.result;
    out += "<tr><td><span class=\"swatch\" style=\"background:" + detail::resource_colour(i) + "\"></span>" +
           xml_escape(r.name) + "</td><td>" + xml_escape(r.description) + "</td><td class=\"num\">" +
           fixed(result.ns_per_op, 1) + "</td>";
    out += result.peak_upstream_bytes ? bytes_cell(*result.peak_upstream_bytes) : "<td class=\"num\">-</td>";
    out += bytes_cell(result.peak_live_bytes);
    out += "<td class=\"num\">";
    if (result.fragmentation) {
      out += fixed(*result.fragmentation, 3);
      if (r.reserves_upfront) {
        out += "*";
        any_reserving = true;
      }
    } else {
      out += "-";
    }
    out += "</td><td class=\"num\">" + std::to_string(result.failures) + "</td><td class=\"num\">" +
           std::to_string(result.unknown_frees) + "</td></tr>\n";
  }
  if (input.resources.empty()) { out += "<tr><td colspan=\"8\">No resource was replayed.</td></tr>\n"; }
  out += "</tbody>\n</table>\n";
  out += "<p class=\"note\">ns/op: from a replay without per-operation timing. Ratio: peak upstream bytes / peak "
         "live bytes (1.000: the resource never held more than the program used at once).</p>\n";
  if (any_reserving) {
    out += "<p class=\"note\" id=\"reserves-note\">* This resource reserves its memory up front (the arena takes "
           "one fixed reservation when it is built): its peak upstream is the size of that reservation, so the "
           "ratio says how large the reservation is, not how fragmented the heap became.</p>\n";
  }
}

}  // namespace

void size_histogram::add(log_event const& row) noexcept
{
  if (row.action != log_action::allocate) { return; }
  std::size_t const bucket = row.size == 0 ? 0 : static_cast<std::size_t>(std::bit_width(row.size)) - 1;
  ++counts[bucket];
  bytes[bucket] = detail::saturating_add(bytes[bucket], row.size);
}

size_histogram allocation_size_histogram(allocation_log const& log)
{
  size_histogram histogram;
  for (log_event const& e : log.events) { histogram.add(e); }
  return histogram;
}

std::string render_html_report(report_input const& input)
{
  std::string out;
  out.reserve(std::size_t{64} << 10);
  out += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>" +
         xml_escape(input.title) + "</title>\n<style>" + std::string{style_sheet} +
         "</style>\n</head>\n<body>\n<main>\n";
  append_header(out, input);
  append_summary(out, input);
  detail::append_over_time_section(out, input);
  detail::append_fragmentation_section(out, input);
  detail::append_sizes_section(out, input);
  detail::append_latency_section(out, input);
  detail::append_timeline_section(out, input);
  out += "<footer>Generated by gpumem report.</footer>\n</main>\n</body>\n</html>\n";
  return out;
}

void write_html_report(std::filesystem::path const& path, report_input const& input)
{
  staged_file file{path};
  file.write(render_html_report(input));
  file.commit();
}

}  // namespace gpumem
