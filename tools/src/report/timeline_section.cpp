// The report's "Allocation timeline" section (report_charts.hpp): the layout of allocation_timeline.hpp drawn as
// one SVG, x = the events in order, y = bytes. The blocks not drawn one by one show as one grey band: the
// area under the live bytes (per pixel column, its largest value), drawn first, so that the drawn blocks cover
// their own share of it. Each drawn block is one path, coloured by its call site, with a <title> that a
// browser shows on hover (no script). A block whose offset changes more often than the pixels it spans is
// drawn with one offset per pixel, so that the page's size is bounded by the blocks drawn and the chart's width.
#include "report/report_charts.hpp"
#include "report/report_format.hpp"
#include "report/svg_frame.hpp"

#include <gpumem/report/allocation_timeline.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <string_view>

namespace gpumem::detail {
namespace {

constexpr double chart_height = 420.0;
constexpr std::size_t max_site_rows = 30;
constexpr std::string_view other_colour = "#d9d9d9";
constexpr std::string_view unranked_colour = "#8c8c8c";

/// Call sites' colours, by rank (the largest peak first).
constexpr std::array<std::string_view, 10> site_palette{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                                       "#8c564b", "#e377c2", "#bcbd22", "#17becf", "#393b79"};

std::string site_label(allocation_timeline const& t, std::int64_t site)
{
  if (site < 0) { return "(no call site)"; }
  timeline_frame const& f = t.sites[static_cast<std::size_t>(site)];
  return f.name + " (" + f.filename + ":" + std::to_string(f.line) + ")";
}

std::string block_title(allocation_timeline const& t, timeline_block const& b, std::string const& site)
{
  timeline_event const& alloc = t.events[b.alloc_event];
  std::int64_t const t0 = t.events.front().time_us;
  auto const at = [t0](std::int64_t us) { return "+" + short_duration(static_cast<double>(us - t0) * 1000.0); };
  std::string title = short_bytes(static_cast<double>(b.size)) + " (" + std::to_string(b.size) + " bytes) at 0x";
  char hex[17]{};
  std::snprintf(hex, sizeof hex, "%llx", static_cast<unsigned long long>(alloc.address));
  title += hex;
  title += "\nallocated at event " + std::to_string(b.begin) + " (" + at(alloc.time_us) + "), ";
  title += b.freed ? "freed at event " + std::to_string(b.end) + " (" + at(t.events[b.end].time_us) + ")"
                   : std::string{"never freed"};
  title += "\ncall site: " + site;
  if (alloc.stack >= 0) {
    for (timeline_frame const& f : t.stacks[static_cast<std::size_t>(alloc.stack)].frames) {
      title += "\n  " + f.name + " (" + f.filename + ":" + std::to_string(f.line) + ")";
    }
  }
  return xml_escape(title);
}

/// The block's outline: its bottom edge forward along its offsets, then its top edge back.
std::string block_path(timeline_block const& b, plot_area const& area, axis_scale const& x, axis_scale const& y)
{
  auto const px = [&](std::size_t event) { return area.left + x.fraction(static_cast<double>(event)) * area.width(); };
  struct segment {
    double from, to;
    std::size_t offset;
  };
  std::vector<segment> segments;
  for (std::size_t i = 0; i < b.offsets.size(); ++i) {
    double const from = px(b.offsets[i].first);
    double const to = px(i + 1 < b.offsets.size() ? b.offsets[i + 1].first : b.end);
    if (!segments.empty() && to - segments.back().from < 1.0) {  // within one pixel: one offset
      segments.back().to = to;
      segments.back().offset = b.offsets[i].second;
    } else {
      segments.push_back({from, to, b.offsets[i].second});
    }
  }
  double const size = static_cast<double>(b.size);
  std::string d;
  for (segment const& s : segments) {
    std::string const bottom = coord(area.y_of(y, static_cast<double>(s.offset)));
    d += (d.empty() ? "M" : " L") + coord(s.from) + "," + bottom + " L" + coord(s.to) + "," + bottom;
  }
  for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
    std::string const top = coord(area.y_of(y, static_cast<double>(it->offset) + size));
    d += " L" + coord(it->to) + "," + top + " L" + coord(it->from) + "," + top;
  }
  return d + " Z";
}

/// The area under the live bytes, one step per pixel column (its largest value).
std::string live_area(timeline_layout const& layout, plot_area const& area, axis_scale const& y)
{
  std::size_t const n = layout.events;
  auto const columns = static_cast<std::size_t>(std::max(1.0, std::floor(area.width())));
  std::size_t const steps = std::min(n, columns);
  std::string d = "M" + coord(area.left) + "," + coord(area.bottom);
  for (std::size_t c = 0; c < steps; ++c) {
    std::size_t const from = c * n / steps;
    std::size_t const to = (c + 1) * n / steps;
    std::size_t peak = 0;
    for (std::size_t e = from; e < to; ++e) { peak = std::max(peak, layout.live_bytes[e]); }
    std::string const top = coord(area.y_of(y, static_cast<double>(peak)));
    d += " L" + coord(area.left + static_cast<double>(from) / static_cast<double>(n) * area.width()) + "," + top +
         " L" + coord(area.left + static_cast<double>(to) / static_cast<double>(n) * area.width()) + "," + top;
  }
  return d + " L" + coord(area.right) + "," + coord(area.bottom) + " Z";
}

void append_site_table(std::string& out, allocation_timeline const& t, timeline_layout const& layout,
                       std::map<std::int64_t, std::string> const& colours)
{
  out += "<table id=\"timeline-sites\">\n<thead><tr><th>Call site</th><th class=\"num\">Peak live</th>"
         "<th class=\"num\">Allocations</th></tr></thead>\n<tbody>\n";
  std::size_t const rows = std::min(layout.sites.size(), max_site_rows);
  for (std::size_t i = 0; i < rows; ++i) {
    timeline_site_summary const& s = layout.sites[i];
    out += "<tr data-site=\"" + std::to_string(s.site) + "\"><td><span class=\"swatch\" style=\"background:" +
           colours.at(s.site) + "\"></span><code>" + xml_escape(site_label(t, s.site)) + "</code></td>" +
           "<td class=\"num\" title=\"" + std::to_string(s.peak_bytes) + " bytes\">" +
           short_bytes(static_cast<double>(s.peak_bytes)) + "</td><td class=\"num\">" +
           std::to_string(s.allocations) + "</td></tr>\n";
  }
  if (layout.sites.size() > rows) {
    out += "<tr><td colspan=\"3\">" + std::to_string(layout.sites.size() - rows) +
           " more call sites (smaller peaks), drawn in grey.</td></tr>\n";
  }
  if (layout.sites.empty()) { out += "<tr><td colspan=\"3\">No allocation in the timeline.</td></tr>\n"; }
  out += "</tbody>\n</table>\n";
}

}  // namespace

void append_timeline_section(std::string& out, report_input const& input)
{
  if (!input.timeline) { return; }
  allocation_timeline const& t = *input.timeline;
  timeline_layout const layout = layout_allocation_timeline(t, timeline_max_blocks);
  std::map<std::int64_t, std::string> colours;
  for (std::size_t i = 0; i < layout.sites.size(); ++i) {
    colours[layout.sites[i].site] = std::string{i < site_palette.size() ? site_palette[i] : unranked_colour};
  }

  out += "<h2 id=\"allocation-timeline\">Allocation timeline</h2>\n<figure>\n";
  start_svg(out, "chart-timeline", "Live blocks over the program's allocations and frees, by call site",
            chart_height);
  plot_area const area{.top = 16.0, .bottom = chart_height - 48.0, .height = chart_height};
  axis_scale const y = linear_scale(static_cast<double>(layout.peak_bytes), value_format::bytes);
  axis_scale const x = linear_scale(static_cast<double>(layout.events), value_format::count, false);
  append_y_axis(out, area, y, value_format::bytes, "bytes live");
  append_x_ticks(out, area, x, value_format::count);
  append_x_label(out, area, "allocations and frees, in order");
  if (layout.events == 0) {
    append_no_data(out, area);
  } else {
    out += "<path data-series=\"other\" fill=\"" + std::string{other_colour} + "\" d=\"" + live_area(layout, area, y) +
           "\"><title>blocks not drawn one by one (" + std::to_string(layout.blocks_total - layout.blocks.size()) +
           " of " + std::to_string(layout.blocks_total) + ")</title></path>\n";
    for (std::size_t i = 0; i < layout.blocks.size(); ++i) {
      timeline_block const& b = layout.blocks[i];
      timeline_event const& alloc = t.events[b.alloc_event];
      std::int64_t const site = alloc.stack >= 0 ? t.stacks[static_cast<std::size_t>(alloc.stack)].site : -1;
      out += "<path data-block=\"" + std::to_string(i) + "\" data-site=\"" + std::to_string(site) + "\" fill=\"" +
             colours.at(site) + "\" stroke=\"#fff\" stroke-width=\"0.4\" d=\"" + block_path(b, area, x, y) +
             "\"><title>" + block_title(t, b, site_label(t, site)) + "</title></path>\n";
    }
  }
  out += "</svg>\n<figcaption>Each block allocated by the program, from its allocation to its free, stacked on "
         "the blocks allocated before it that are still live (as PyTorch's memory_viz draws active memory): "
         "the top edge is the bytes live. Colours are call sites (the first frame of the allocation's Python "
         "stack outside PyTorch and Python's own library); hover over a block for its size, times and stack. ";
  out += "The " + std::to_string(layout.blocks.size()) + " largest of " + std::to_string(layout.blocks_total) +
         " blocks by size × lifetime are drawn one by one, the others as the grey band.</figcaption>\n</figure>\n";
  append_site_table(out, t, layout, colours);
}

}  // namespace gpumem::detail
