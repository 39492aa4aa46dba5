// The report page's chart sections (report_charts.hpp): for each, its heading, its charts (svg_chart.hpp)
// and captions that say how to read them. A resource that reserves its memory up front (the arena) is drawn
// dashed and never sets a chart's scale on its own: a 512 GiB reservation would flatten every other line.
#include "report/report_charts.hpp"

#include "report/report_format.hpp"
#include "report/svg_chart.hpp"

#include <algorithm>
#include <array>
#include <optional>
#include <span>
#include <string_view>
#include <utility>

namespace gpumem::detail {

namespace {

// Live bytes: a dark slate grey, tinted so that no anti-aliased (neutral grey) text pixel passes for it
// in a screenshot (tests/report/check_report_render.py looks for each series' colour).
constexpr std::string_view live_colour = "#2f3b4c";
constexpr std::string_view count_colour = "#4c72b0";
constexpr std::string_view bytes_colour = "#55a868";
/// A reserving resource whose largest value is this many times all others' leaves the scale to them.
constexpr double off_scale_factor = 2.0;

double as_double(std::size_t value) { return static_cast<double>(value); }

/// The first and last non-zero bucket (inclusive), or nothing when every bucket is 0.
std::optional<std::pair<std::size_t, std::size_t>> nonempty_range(std::span<std::size_t const> buckets)
{
  auto const first = std::find_if(buckets.begin(), buckets.end(), [](std::size_t c) { return c != 0; });
  if (first == buckets.end()) { return std::nullopt; }
  auto const last = std::find_if(buckets.rbegin(), buckets.rend(), [](std::size_t c) { return c != 0; });
  return std::pair{static_cast<std::size_t>(first - buckets.begin()),
                   static_cast<std::size_t>(buckets.rend() - last - 1)};
}

void append_figure(std::string& out, std::string const& svg, std::string_view caption)
{
  out += "<figure>\n" + svg + "<figcaption>" + std::string{caption} + "</figcaption>\n</figure>\n";
}

/// The largest upstream_bytes of a resource's samples.
std::size_t max_upstream(report_resource const& r)
{
  std::size_t max = 0;
  for (auto const& s : r.timeline.samples) { max = std::max(max, s.upstream_bytes); }
  return max;
}

}  // namespace

std::string resource_colour(std::size_t index)
{
  // Distinct from each other, from live_colour and from the text's greys.
  static constexpr std::array<std::string_view, 8> palette{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                                           "#9467bd", "#8c564b", "#e377c2", "#17becf"};
  return std::string{palette[index % palette.size()]};
}

void append_over_time_section(std::string& out, report_input const& input)
{
  line_chart chart{.id = "chart-over-time", .title = "Live and reserved bytes over the replay",
                   .x_label = "operations replayed", .y_label = "bytes", .series = {}};
  double others_max = 0.0;
  line_series live{.name = "live", .colour = std::string{live_colour}, .points = {}};
  if (!input.resources.empty()) {
    for (auto const& s : input.resources.front().timeline.samples) {
      live.points.emplace_back(as_double(s.op), as_double(s.live_bytes));
      others_max = std::max(others_max, as_double(s.live_bytes));
    }
  }
  for (report_resource const& r : input.resources) {
    if (!r.reserves_upfront) { others_max = std::max(others_max, as_double(max_upstream(r))); }
  }
  bool clipped = false;
  for (std::size_t i = 0; i < input.resources.size(); ++i) {
    report_resource const& r = input.resources[i];
    line_series series{.name = r.name, .colour = resource_colour(i), .points = {}, .dashed = r.reserves_upfront};
    for (auto const& s : r.timeline.samples) {
      series.points.emplace_back(as_double(s.op), as_double(s.upstream_bytes));
    }
    double const max = as_double(max_upstream(r));
    if (r.reserves_upfront && others_max > 0.0 && max > off_scale_factor * others_max) {
      series.note = "(reserves " + short_bytes(max) + " up front: drawn at the top edge)";
      clipped = true;
    }
    chart.series.push_back(std::move(series));
  }
  // Drawn last, on top: the resources' lines often run along it (a pool holding exactly what is live).
  if (!input.resources.empty()) { chart.series.push_back(std::move(live)); }
  // Headroom above the others' top, so that a line drawn at the top edge stands apart from them.
  if (clipped) { chart.y_limit = others_max * 1.15; }
  out += "<h2>Live and reserved bytes over time</h2>\n";
  append_figure(out, render_svg(chart),
                "Bytes the log holds live (dark grey; as replayed on the first resource) and bytes each resource holds "
                "from its upstream, sampled along the replay. Dashed: a resource that reserves up front.");
}

void append_fragmentation_section(std::string& out, report_input const& input)
{
  bar_chart bars{.id = "chart-fragmentation", .title = "Peak upstream bytes / peak live bytes per resource",
                 .categories = {}, .x_label = "resource", .y_label = "peak upstream / peak live",
                 .y_format = value_format::ratio, .series = {},
                 .reference_y = 1.0, .reference_label = "1× = no overhead", .y_limit = {},
                 .value_labels = true, .legend = false, .height = 320.0};
  bar_series ratio{.name = "peak upstream / peak live", .colour = resource_colour(0), .values = {}};
  double plain_max = 0.0;
  double reserving_max = 0.0;
  for (std::size_t i = 0; i < input.resources.size(); ++i) {
    report_resource const& r = input.resources[i];
    if (!r.result.fragmentation) { continue; }
    bars.categories.push_back(r.name + (r.reserves_upfront ? "*" : ""));
    ratio.values.push_back(*r.result.fragmentation);
    ratio.bar_colours.push_back(resource_colour(i));
    double& max = r.reserves_upfront ? reserving_max : plain_max;
    max = std::max(max, *r.result.fragmentation);
  }
  if (plain_max > 0.0 && reserving_max > off_scale_factor * std::max(plain_max, 1.0)) {
    bars.y_limit = std::max(plain_max, 1.0) * 1.25;
  }
  bars.series.push_back(std::move(ratio));

  line_chart lines{.id = "chart-fragmentation-over-time", .title = "Upstream bytes / peak live bytes so far",
                   .x_label = "operations replayed", .y_label = "upstream / peak live so far (log2)",
                   .y_format = value_format::ratio, .series = {}, .reference_y = 1.0,
                   .reference_label = "1×", .y_limit = {}, .log2_y = true};
  for (std::size_t i = 0; i < input.resources.size(); ++i) {
    report_resource const& r = input.resources[i];
    // Left out: a resource without an upstream figure, and one that reserves up front (its line would be
    // its reservation over a small early peak, millions of times, and flatten every other line).
    if (max_upstream(r) == 0 || r.reserves_upfront) { continue; }
    line_series series{.name = r.name, .colour = resource_colour(i), .points = {}};
    std::size_t peak_live = 0;
    for (auto const& s : r.timeline.samples) {
      peak_live = std::max(peak_live, s.live_bytes);
      if (peak_live > 0) {
        series.points.emplace_back(as_double(s.op), as_double(s.upstream_bytes) / as_double(peak_live));
      }
    }
    lines.series.push_back(std::move(series));
  }

  out += "<h2>Fragmentation</h2>\n";
  append_figure(out, render_svg(bars),
                "The summary table's ratio: the most bytes each resource took from its upstream over the most bytes "
                "the log held live. Resources without an upstream figure are left out; * reserves up front (its bar "
                "is the reservation; a bar cut by two white slashes goes on above the axis).");
  append_figure(out, render_svg(lines),
                "Over the replay, each resource's upstream bytes divided by the highest live bytes sampled so far: "
                "how much more memory it holds than the program has ever needed at once (1×: nothing more), "
                "on a log2 scale. Resources that reserve up front are left out: their line would only show the "
                "reservation.");
}

void append_sizes_section(std::string& out, report_input const& input)
{
  bar_chart counts{.id = "chart-sizes", .title = "Allocations per size bucket", .categories = {},
                   .x_label = "allocation size (log2 bucket: [size, 2 × size))", .y_label = "allocations",
                   .y_format = value_format::count, .series = {}, .legend = false};
  bar_chart bytes = counts;
  bytes.id = "chart-sizes-bytes";
  bytes.title = "Bytes allocated per size bucket";
  bytes.y_label = "bytes allocated";
  bytes.y_format = value_format::bytes;
  bar_series count_series{.name = "allocations", .colour = std::string{count_colour}, .values = {}};
  bar_series byte_series{.name = "bytes", .colour = std::string{bytes_colour}, .values = {}};
  if (auto const range = nonempty_range(input.sizes.counts)) {
    for (std::size_t b = range->first; b <= range->second; ++b) {
      counts.categories.push_back(pow2_bytes_label(b));
      count_series.values.push_back(as_double(input.sizes.counts[b]));
      byte_series.values.push_back(as_double(input.sizes.bytes[b]));
    }
  }
  bytes.categories = counts.categories;
  counts.series.push_back(std::move(count_series));
  bytes.series.push_back(std::move(byte_series));
  out += "<h2>Allocation sizes</h2>\n";
  append_figure(out, render_svg(counts),
                "How many <code>allocate</code> rows of the log fall in each power-of-two size bucket: the bar "
                "labelled 4 KiB counts sizes from 4 KiB up to, not including, 8 KiB.");
  append_figure(out, render_svg(bytes), "The bytes those rows requested, per bucket.");
}

void append_latency_section(std::string& out, report_input const& input)
{
  bar_chart chart{.id = "chart-latency", .title = "Time per operation, per resource", .categories = {},
                  .x_label = "time of one allocate or deallocate (log2 bucket: [t, 2 × t))",
                  .y_label = "operations", .y_format = value_format::count, .series = {},
                  .legend = true, .height = 360.0};
  std::array<std::size_t, replay_timeline::latency_buckets> any{};
  for (report_resource const& r : input.resources) {
    for (std::size_t b = 0; b < any.size(); ++b) { any[b] += r.timeline.latency_histogram[b]; }
  }
  auto const range = nonempty_range(any);
  if (range) {
    for (std::size_t b = range->first; b <= range->second; ++b) { chart.categories.push_back(pow2_ns_label(b)); }
  }
  for (std::size_t i = 0; i < input.resources.size(); ++i) {
    bar_series series{.name = input.resources[i].name, .colour = resource_colour(i), .values = {}};
    if (range) {
      for (std::size_t b = range->first; b <= range->second; ++b) {
        series.values.push_back(as_double(input.resources[i].timeline.latency_histogram[b]));
      }
    }
    chart.series.push_back(std::move(series));
  }
  out += "<h2>Latency</h2>\n";
  append_figure(out, render_svg(chart),
                "Each allocate and deallocate call of the replay with a timeline, timed on its own with "
                "<code>std::chrono::steady_clock</code>: every figure includes one steady_clock read per operation, "
                "so these times run above the summary's ns/op. Buckets are powers of two: the bar labelled 1 µs "
                "counts calls that took from 1024 ns up to, not including, 2048 ns.");
}

}  // namespace gpumem::detail
