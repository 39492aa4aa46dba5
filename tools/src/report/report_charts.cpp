// The report page's chart sections (report_charts.hpp): for each, its heading, its charts (svg_chart.hpp)
// and captions that say how to read them. A resource that reserves its memory up front (the arena) is drawn
// dashed and never sets a chart's scale on its own: a 512 GiB reservation would flatten every other line.
#include "report/report_charts.hpp"

#include "report/report_format.hpp"
#include "report/svg_chart.hpp"

#include <gpumem/replay/latency_percentile.hpp>

#include <algorithm>
#include <array>
#include <cmath>
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

/// The x of a sample on the charts over time, and how the axis reads.
struct over_time_x {
  bool log_time;

  [[nodiscard]] double of(replay_timeline::sample const& s) const
  {
    return log_time ? static_cast<double>(s.log_time_ns) : as_double(s.op);
  }
  [[nodiscard]] value_format format() const { return log_time ? value_format::duration : value_format::count; }
  [[nodiscard]] std::string label() const
  {
    return log_time ? "time in the log (its Time column, from the first row)" : "operations replayed";
  }
};

over_time_x over_time_x_of(report_input const& input)
{
  return {chosen_timeline_axis(input) == timeline_axis::log_time};
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
  over_time_x const x = over_time_x_of(input);
  line_chart chart{.id = "chart-over-time", .title = "Live and reserved bytes over the replay",
                   .x_label = x.label(), .x_format = x.format(), .y_label = "bytes", .series = {}};
  double others_max = 0.0;
  line_series live{.name = "live", .colour = std::string{live_colour}, .points = {}};
  if (!input.resources.empty()) {
    for (auto const& s : input.resources.front().timeline.samples) {
      live.points.emplace_back(x.of(s), as_double(s.live_bytes));
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
      series.points.emplace_back(x.of(s), as_double(s.upstream_bytes));
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
                std::string{"Bytes the log holds live (dark grey; as replayed on the first resource) and bytes each "
                            "resource holds from its upstream, sampled along the replay, "} +
                  (x.log_time ? "at the time the log gives each sampled row (its Time column): the program's own "
                                "pace, idle spells included."
                              : "per operation replayed (the log's rows carry no times that rise, so its own time "
                                "cannot be the axis).") +
                  " Dashed: a resource that reserves up front.");
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

  over_time_x const x = over_time_x_of(input);
  line_chart lines{.id = "chart-fragmentation-over-time", .title = "Upstream bytes / peak live bytes so far",
                   .x_label = x.label(), .x_format = x.format(), .y_label = "upstream / peak live so far (log2)",
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
        series.points.emplace_back(x.of(s), as_double(s.upstream_bytes) / as_double(peak_live));
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
                  .y_label = "operations (log scale)", .y_format = value_format::count, .series = {},
                  .legend = true, .log_y = true, .height = 360.0};
  std::array<std::size_t, replay_timeline::latency_buckets> any{};
  for (report_resource const& r : input.resources) {
    for (std::size_t b = 0; b < any.size(); ++b) { any[b] += r.timeline.latency_histogram[b]; }
  }
  auto const range = nonempty_range(any);
  if (range) {
    for (std::size_t b = range->first; b <= range->second; ++b) { chart.categories.push_back(pow2_ns_label(b)); }
  }
  std::string table = "<table id=\"latency-table\">\n<thead><tr><th>Resource</th><th class=\"num\">p50</th>"
                      "<th class=\"num\">p99</th><th class=\"num\">Operations timed</th></tr></thead>\n<tbody>\n";
  for (std::size_t i = 0; i < input.resources.size(); ++i) {
    report_resource const& r = input.resources[i];
    bar_series series{.name = r.name, .colour = resource_colour(i), .values = {}};
    std::size_t timed = 0;
    for (std::size_t const c : r.timeline.latency_histogram) { timed += c; }
    if (range) {
      for (std::size_t b = range->first; b <= range->second; ++b) {
        series.values.push_back(as_double(r.timeline.latency_histogram[b]));
      }
    }
    std::optional<double> const p50 = latency_percentile(r.timeline, 0.50);
    std::optional<double> const p99 = latency_percentile(r.timeline, 0.99);
    std::string note;
    if (p50 && p99 && range) {
      note = "p50 " + short_duration(*p50) + ", p99 " + short_duration(*p99);
      // Category c is bucket range->first + c, spanning [c, c + 1): a time t sits at log2(t) - range->first.
      auto const position = [&range](double ns) { return std::log2(std::max(ns, 1.0)) - as_double(range->first); };
      chart.markers.push_back({position(*p50), r.name, "p50", resource_colour(i), "6 3"});
      chart.markers.push_back({position(*p99), r.name, "p99", resource_colour(i), "2 3"});
    }
    chart.legend_notes.push_back(note.empty() ? note : "(" + note + ")");
    table += "<tr><td><span class=\"swatch\" style=\"background:" + resource_colour(i) + "\"></span>" +
             xml_escape(r.name) + "</td><td class=\"num\">" + (p50 ? short_duration(*p50) : "-") +
             "</td><td class=\"num\">" + (p99 ? short_duration(*p99) : "-") + "</td><td class=\"num\">" +
             std::to_string(timed) + "</td></tr>\n";
    chart.series.push_back(std::move(series));
  }
  if (input.resources.empty()) { table += "<tr><td colspan=\"4\">No resource was replayed.</td></tr>\n"; }
  table += "</tbody>\n</table>\n";
  out += "<h2>Latency</h2>\n";
  append_figure(out, render_svg(chart),
                "Each allocate and deallocate call of the replay with a timeline, timed on its own with "
                "<code>std::chrono::steady_clock</code>: every figure includes one steady_clock read per operation, "
                "so these times run above the summary's ns/op. Buckets are powers of two: the bar labelled 1 µs "
                "counts calls that took from 1024 ns up to, not including, 2048 ns. Counts are on a log scale, so "
                "that the few slow calls show beside the many fast ones. Dashed line: a resource's median (p50); "
                "dotted line: its 99th percentile (p99), estimated inside its bucket.");
  out += table;
  out += "<p class=\"note\">p50 and p99: the time under which half, and 99 in 100, of the calls took; read off "
         "the power-of-two buckets above, so within a factor of two.</p>\n";
}

}  // namespace gpumem::detail

namespace gpumem {

timeline_axis chosen_timeline_axis(report_input const& input)
{
  if (input.over_time_axis != timeline_axis::automatic) { return input.over_time_axis; }
  if (input.resources.empty()) { return timeline_axis::operations; }
  auto const& samples = input.resources.front().timeline.samples;
  if (samples.size() < 2 || samples.back().log_time_ns <= samples.front().log_time_ns) {
    return timeline_axis::operations;
  }
  for (std::size_t i = 1; i < samples.size(); ++i) {
    if (samples[i].log_time_ns < samples[i - 1].log_time_ns) { return timeline_axis::operations; }
  }
  return timeline_axis::log_time;
}

}  // namespace gpumem
