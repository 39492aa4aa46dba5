// The report page (html_report.hpp): allocation_size_histogram's exact log2 buckets on a parsed log; pages
// for 0, 1 and 3 resources (and degenerate timelines) are well-formed and self-contained (DOCTYPE, every
// chart id, every resource name, escaped text, no script, no URL, no nan or inf), every SVG coordinate is a
// finite number inside its chart's viewBox, bars are proportional to their values; write_html_report writes
// the page and names the path it cannot write.
#include <gpumem/error.hpp>
#include <gpumem/replay/allocation_log.hpp>
#include <gpumem/report/html_report.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

namespace gpumem::test {
namespace {

constexpr std::string_view hostile = "<script>&\"x'";  // a name that must come out escaped
constexpr std::string_view hostile_escaped = "&lt;script&gt;&amp;&quot;x&#39;";
constexpr std::array<std::string_view, 5> chart_ids{"chart-over-time", "chart-fragmentation",
                                                    "chart-fragmentation-over-time", "chart-sizes", "chart-latency"};

allocation_log log_of(std::string_view rows)
{
  return parse_allocation_log("Thread,Time,Action,Pointer,Size,Stream\n" + std::string{rows}, "synthetic");
}

/// A resource with `samples` timeline samples (live rising then falling, upstream never shrinking) and a
/// latency histogram over buckets 6..9.
report_resource make_resource(std::string name, double fragmentation, std::size_t samples, bool reserves = false)
{
  report_resource r;
  r.name = std::move(name);
  r.description = "a resource for the test";
  r.reserves_upfront = reserves;
  r.result.ns_per_op = 123.456;
  r.result.peak_live_bytes = 1000 * samples;
  r.result.fragmentation = fragmentation;
  r.result.peak_upstream_bytes =
    static_cast<std::size_t>(fragmentation * static_cast<double>(r.result.peak_live_bytes));
  std::size_t upstream = 0;
  for (std::size_t i = 0; i < samples; ++i) {
    std::size_t const live = 1000 * std::min(i + 1, samples - i);
    upstream = reserves ? *r.result.peak_upstream_bytes : std::max(upstream, live * 3 / 2);
    r.timeline.samples.push_back({.op = 10 * (i + 1), .log_time_ns = static_cast<std::int64_t>(i), .live_bytes = live,
                                  .upstream_bytes = upstream});
  }
  r.timeline.latency_histogram[6] = 10;
  r.timeline.latency_histogram[7] = 40;
  r.timeline.latency_histogram[9] = 5;
  return r;
}

report_input make_input(std::vector<report_resource> resources)
{
  report_input input;
  input.title = "gpumem report: test.csv";
  input.log_source = "/logs/test.csv";
  input.log_events = 54;
  input.log_peak_live_bytes = 1 << 20;
  input.log_duration_ns = 3'400'000;
  input.sizes.counts[8] = 3;
  input.sizes.bytes[8] = 3 * 300;
  input.sizes.counts[12] = 6;
  input.sizes.bytes[12] = 6 * 5000;
  input.environment = "backend host, simulated upstream";
  input.command = std::string{"gpumem report --simulate "} + std::string{hostile};
  input.resources = std::move(resources);
  return input;
}

/// One <svg> of a page: its id, its viewBox's width and height, and its text.
struct svg_chart {
  std::string id;
  double width{};
  double height{};
  std::string text;
};

std::optional<double> number(std::string_view text)
{
  double value{};
  auto const [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || !std::isfinite(value)) { return std::nullopt; }
  return value;
}

/// The attributes of every element (start tag) of `svg`, in order: (tag name, attribute -> value).
std::vector<std::pair<std::string, std::map<std::string, std::string>>> elements(std::string const& svg)
{
  static std::regex const tag_re{R"(<([a-zA-Z]+)([^>]*)>)"};
  static std::regex const attr_re{R"(([a-zA-Z][a-zA-Z0-9:-]*)=\"([^\"]*)\")"};
  std::vector<std::pair<std::string, std::map<std::string, std::string>>> result;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), tag_re); it != std::sregex_iterator{}; ++it) {
    std::map<std::string, std::string> attrs;
    std::string const body = (*it)[2].str();
    for (auto a = std::sregex_iterator(body.begin(), body.end(), attr_re); a != std::sregex_iterator{}; ++a) {
      attrs[(*a)[1].str()] = (*a)[2].str();
    }
    result.emplace_back((*it)[1].str(), std::move(attrs));
  }
  return result;
}

std::vector<svg_chart> charts_of(std::string const& page)
{
  std::vector<svg_chart> charts;
  for (std::size_t at = page.find("<svg "); at != std::string::npos; at = page.find("<svg ", at + 1)) {
    std::size_t const end = page.find("</svg>", at);
    if (end == std::string::npos) {
      ADD_FAILURE() << "an <svg> is not closed";
      break;
    }
    svg_chart chart;
    chart.text = page.substr(at, end - at);
    auto const all = elements(chart.text);
    auto const& root = all.front().second;
    chart.id = root.count("id") != 0U ? root.at("id") : "";
    std::istringstream view_box{root.count("viewBox") != 0U ? root.at("viewBox") : ""};
    double x0 = -1;
    double y0 = -1;
    view_box >> x0 >> y0 >> chart.width >> chart.height;
    EXPECT_EQ(x0, 0.0) << chart.id;
    EXPECT_EQ(y0, 0.0) << chart.id;
    EXPECT_GT(chart.width, 0.0) << chart.id << ": no viewBox";
    EXPECT_GT(chart.height, 0.0) << chart.id << ": no viewBox";
    EXPECT_EQ(root.count("width") != 0U ? root.at("width") : "", "100%") << chart.id;
    EXPECT_NE(chart.text.find("<title"), std::string::npos) << chart.id << " has no <title>";
    charts.push_back(std::move(chart));
  }
  return charts;
}

/// Splits "1.0,2.0 3,4" or "M1,2 V3 l4,-5" into numbers and single-letter commands.
std::vector<std::string> tokens(std::string const& text)
{
  std::vector<std::string> result;
  std::string current;
  for (char const c : text) {
    if (std::isalpha(static_cast<unsigned char>(c)) != 0) {
      if (!current.empty()) { result.push_back(current); }
      result.emplace_back(1, c);
      current.clear();
    } else if (c == ',' || c == ' ' || c == '\n') {
      if (!current.empty()) { result.push_back(current); }
      current.clear();
    } else {
      current += c;
    }
  }
  if (!current.empty()) { result.push_back(current); }
  return result;
}

/// Every coordinate of `chart` is a finite number inside its viewBox; returns how many points were checked.
std::size_t check_coordinates(svg_chart const& chart)
{
  std::size_t checked = 0;
  auto check_point = [&](double x, double y, std::string const& what) {
    EXPECT_TRUE(x >= 0.0 && x <= chart.width && y >= 0.0 && y <= chart.height)
      << chart.id << ": " << what << " at (" << x << ", " << y << ") is outside 0 0 " << chart.width << " "
      << chart.height;
    ++checked;
  };
  auto value_of = [&](std::string const& text, std::string const& what) {
    auto const v = number(text);
    EXPECT_TRUE(v.has_value()) << chart.id << ": " << what << "=\"" << text << "\" is not a finite number";
    return v.value_or(0.0);
  };
  auto const all = elements(chart.text);
  for (std::size_t e = 1; e < all.size(); ++e) {  // [0] is the <svg> itself (width="100%")
    auto const& [tag, attrs] = all[e];
    for (auto const& [x_name, y_name] : {std::pair{"x", "y"}, {"x1", "y1"}, {"x2", "y2"}, {"cx", "cy"}}) {
      if (attrs.count(x_name) != 0U || attrs.count(y_name) != 0U) {
        check_point(value_of(attrs.count(x_name) != 0U ? attrs.at(x_name) : "0", tag + " " + x_name),
                    value_of(attrs.count(y_name) != 0U ? attrs.at(y_name) : "0", tag + " " + y_name), tag);
      }
    }
    for (char const* size : {"width", "height", "r"}) {
      if (attrs.count(size) != 0U) {
        double const v = value_of(attrs.at(size), tag + " " + size);
        EXPECT_GE(v, 0.0) << chart.id << ": " << tag << " " << size;
        EXPECT_LE(v, std::max(chart.width, chart.height)) << chart.id << ": " << tag << " " << size;
      }
    }
    if (attrs.count("points") != 0U) {
      auto const t = tokens(attrs.at("points"));
      EXPECT_EQ(t.size() % 2, 0U) << chart.id << ": odd number of coordinates in points";
      for (std::size_t i = 0; i + 1 < t.size(); i += 2) {
        check_point(value_of(t[i], "points"), value_of(t[i + 1], "points"), tag + " points");
      }
    }
    if (attrs.count("d") != 0U) {  // the commands the charts use: M, V, H (absolute), l (relative)
      auto const t = tokens(attrs.at("d"));
      double x = 0;
      double y = 0;
      for (std::size_t i = 0; i < t.size();) {
        std::string const command = t[i++];
        if ((command == "M" || command == "l") && i + 1 < t.size()) {
          double const a = value_of(t[i], "d");
          double const b = value_of(t[i + 1], "d");
          i += 2;
          x = command == "M" ? a : x + a;
          y = command == "M" ? b : y + b;
        } else if (command == "V" && i < t.size()) {
          y = value_of(t[i++], "d");
        } else if (command == "H" && i < t.size()) {
          x = value_of(t[i++], "d");
        } else {
          ADD_FAILURE() << chart.id << ": unexpected path command '" << command << "'";
          break;
        }
        check_point(x, y, tag + " d");
      }
    }
    if (attrs.count("transform") != 0U) {
      std::smatch m;
      std::string const& transform = attrs.at("transform");
      static std::regex const translate_re{R"(translate\(([^ ]+) ([^)]+)\))"};
      if (!std::regex_search(transform, m, translate_re)) {
        ADD_FAILURE() << chart.id << ": " << transform;
        continue;
      }
      check_point(value_of(m[1].str(), "translate"), value_of(m[2].str(), "translate"), "translate");
    }
  }
  return checked;
}

/// The bars of `chart`: data-value and height.
std::vector<std::pair<double, double>> bars_of(svg_chart const& chart)
{
  std::vector<std::pair<double, double>> bars;
  for (auto const& [tag, attrs] : elements(chart.text)) {
    if (tag == "rect" && attrs.count("data-value") != 0U) {
      bars.emplace_back(number(attrs.at("data-value")).value_or(-1), number(attrs.at("height")).value_or(-1));
    }
  }
  return bars;
}

svg_chart const& chart_named(std::vector<svg_chart> const& charts, std::string_view id)
{
  auto const it = std::find_if(charts.begin(), charts.end(), [&](svg_chart const& c) { return c.id == id; });
  if (it == charts.end()) { throw std::runtime_error("no chart " + std::string{id}); }
  return *it;
}

/// What every page must satisfy, whatever its input.
void check_page(std::string const& page, report_input const& input)
{
  EXPECT_TRUE(page.starts_with("<!DOCTYPE html>"));
  EXPECT_TRUE(page.ends_with("</html>\n"));
  std::string lower = page;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  EXPECT_EQ(lower.find("<script"), std::string::npos) << "the page must carry no script (nor unescaped text)";
  EXPECT_EQ(lower.find("http://"), std::string::npos) << "the page must be self-contained";
  EXPECT_EQ(lower.find("https://"), std::string::npos) << "the page must be self-contained";
  std::smatch m;
  EXPECT_FALSE(std::regex_search(lower, m, std::regex{R"(\b(nan|inf|infinity)\b)"})) << "found '" << m.str() << "'";
  EXPECT_NE(page.find("id=\"summary-table\""), std::string::npos);
  EXPECT_NE(page.find(std::string{"Command: <code>gpumem report --simulate "} + std::string{hostile_escaped}),
            std::string::npos)
    << "the command must be shown escaped";
  for (report_resource const& r : input.resources) {
    std::string escaped = r.name;
    if (r.name == hostile) { escaped = hostile_escaped; }
    EXPECT_NE(page.find(">" + escaped + "<"), std::string::npos) << "resource " << escaped << " is not named";
  }
  auto const charts = charts_of(page);
  for (std::string_view const id : chart_ids) {
    auto const it = std::find_if(charts.begin(), charts.end(), [&](svg_chart const& c) { return c.id == id; });
    ASSERT_NE(it, charts.end()) << "no chart " << id;
    EXPECT_GT(check_coordinates(*it), 5U) << id << ": too few coordinates checked";
  }
  auto count = [&](std::string_view what) {
    std::size_t n = 0;
    for (std::size_t at = page.find(what); at != std::string::npos; at = page.find(what, at + 1)) { ++n; }
    return n;
  };
  std::size_t const figures = count("<figure>\n<svg ");
  std::size_t const captions = count("<figcaption>");
  EXPECT_EQ(figures, charts.size()) << "every chart sits in a <figure>";
  EXPECT_EQ(captions, charts.size()) << "every figure has a <figcaption>";
}

TEST(html_report, size_histogram_counts_allocate_rows_in_exact_log2_buckets)
{
  allocation_log const log = log_of(
    "1,13:09:44.158987,allocate,0x7f98f9e00000,37632,0x0\n"  // [32 KiB, 64 KiB): bucket 15
    "1,13:09:44.158990,allocate,0x7f98f9e10000,256,0x0\n"    // bucket 8
    "1,13:09:44.158991,allocate,0x7f98f9e20000,511,0x0\n"    // bucket 8
    "1,13:09:44.158992,allocate,0x7f98f9e30000,1,0x0\n"      // bucket 0
    "1,13:09:44.158993,allocate,0x7f98f9e40000,0,0x0\n"      // bucket 0 too
    "1,13:09:44.158994,free,0x7f98f9e10000,256,0x0\n"        // frees are not allocations
    "1,13:09:44.158995,allocate failure,0x0,4096,0x0\n"      // nor are the program's failures
    "1,13:09:44.158996,allocate,0x7f98f9e50000,1048576,0x1\n"  // 2^20: bucket 20
    "1,13:09:44.158997,allocate,0x7f98f9e60000,1048575,0x1\n");  // just under: bucket 19
  size_histogram const h = allocation_size_histogram(log);
  std::array<std::size_t, 64> counts{};
  std::array<std::size_t, 64> bytes{};
  counts[0] = 2;
  bytes[0] = 1;
  counts[8] = 2;
  bytes[8] = 256 + 511;
  counts[15] = 1;
  bytes[15] = 37632;
  counts[19] = 1;
  bytes[19] = 1048575;
  counts[20] = 1;
  bytes[20] = 1048576;
  EXPECT_EQ(h.counts, counts);
  EXPECT_EQ(h.bytes, bytes);
  EXPECT_EQ(allocation_size_histogram(log_of("")).counts, (std::array<std::size_t, 64>{}));
}

TEST(html_report, size_histogram_bytes_saturate_instead_of_wrapping)
{
  allocation_log const log = log_of(
    "1,13:09:44.158987,allocate,0x100,18446744073709551615,0x0\n"   // 2^64 - 1: bucket 63
    "1,13:09:44.158988,allocate,0x200,9223372036854775808,0x0\n");  // 2^63: bucket 63 too
  size_histogram const h = allocation_size_histogram(log);
  EXPECT_EQ(h.counts[63], 2U);
  EXPECT_EQ(h.bytes[63], std::numeric_limits<std::size_t>::max());
}

TEST(html_report, page_with_three_resources_shows_every_chart_and_escapes_text)
{
  report_input const input = make_input({make_resource("pool", 1.5, 100), make_resource("arena", 40.0, 100, true),
                                         make_resource(std::string{hostile}, 3.0, 100)});
  std::string const page = render_html_report(input);
  check_page(page, input);
  EXPECT_EQ(page.find(hostile), std::string::npos) << "raw text leaked into the page";
  EXPECT_NE(page.find("data-series=\"" + std::string{hostile_escaped} + "\""), std::string::npos);
  EXPECT_NE(page.find("123.5"), std::string::npos) << "ns/op with one decimal";
  EXPECT_NE(page.find("1.500<"), std::string::npos) << "the ratio with three decimals";
  EXPECT_NE(page.find("40.000*"), std::string::npos) << "a reserving resource's ratio is marked";
  EXPECT_NE(page.find("id=\"reserves-note\""), std::string::npos) << "and explained";
  EXPECT_EQ(render_html_report(input), page) << "rendering is deterministic";
}

TEST(html_report, bars_are_proportional_to_their_values)
{
  report_input const input = make_input({make_resource("pool", 1.5, 20), make_resource("arena", 40.0, 20, true),
                                         make_resource("binning", 3.0, 20)});
  auto const charts = charts_of(render_html_report(input));

  // Fragmentation: pool 1.5 and binning 3.0 on one scale; the arena's 40 is cut at the top, not the scale.
  auto const frag = bars_of(chart_named(charts, "chart-fragmentation"));
  ASSERT_EQ(frag.size(), 3U);
  EXPECT_DOUBLE_EQ(frag[0].first, 1.5);
  EXPECT_DOUBLE_EQ(frag[2].first, 3.0);
  ASSERT_GT(frag[0].second, 10.0);
  EXPECT_NEAR(frag[2].second / frag[0].second, 2.0, 0.01);
  EXPECT_GT(frag[1].second, frag[2].second) << "the reserving resource's bar is the tallest";
  EXPECT_LT(frag[1].second, 40.0 / 3.0 * frag[2].second) << "but cut: it does not set the scale";
  EXPECT_NE(chart_named(charts, "chart-fragmentation").text.find("(cut)"), std::string::npos);

  // Sizes: buckets 8..12 shown (3 empty ones between), counts 3 and 6, bytes 900 and 30000.
  auto const counts = bars_of(chart_named(charts, "chart-sizes"));
  ASSERT_EQ(counts.size(), 5U) << "only the non-empty range of buckets";
  EXPECT_DOUBLE_EQ(counts[0].first, 3.0);
  EXPECT_DOUBLE_EQ(counts[4].first, 6.0);
  EXPECT_DOUBLE_EQ(counts[1].second, 0.0);
  EXPECT_NEAR(counts[4].second / counts[0].second, 2.0, 0.01);
  auto const bytes = bars_of(chart_named(charts, "chart-sizes-bytes"));
  ASSERT_EQ(bytes.size(), 5U);
  EXPECT_NEAR(bytes[4].second / bytes[0].second, 30000.0 / 900.0, 0.5);
  std::string const& sizes = chart_named(charts, "chart-sizes").text;
  EXPECT_NE(sizes.find(">256 B<"), std::string::npos);
  EXPECT_NE(sizes.find(">4 KiB<"), std::string::npos);

  // Latency: three resources' buckets 6..9 grouped; 40 is four times 10.
  auto const latency = bars_of(chart_named(charts, "chart-latency"));
  ASSERT_EQ(latency.size(), 4U * 3U);
  // On a log scale from 1/2: heights go as log(count / 0.5).
  EXPECT_NEAR(latency[3].second / latency[0].second, std::log(80.0) / std::log(20.0), 0.01)
    << "the first resource's 64 ns and 128 ns buckets";
  EXPECT_NE(chart_named(charts, "chart-latency").text.find(">64 ns<"), std::string::npos);
}

TEST(html_report, lines_follow_the_samples_and_stay_in_the_frame)
{
  report_input const input = make_input({make_resource("pool", 1.5, 50), make_resource("binning", 3.0, 50)});
  auto const charts = charts_of(render_html_report(input));
  svg_chart const& over_time = chart_named(charts, "chart-over-time");
  std::map<std::string, std::size_t> points_per_series;
  for (auto const& [tag, attrs] : elements(over_time.text)) {
    if (tag == "polyline") { points_per_series[attrs.at("data-series")] = tokens(attrs.at("points")).size() / 2; }
  }
  EXPECT_EQ(points_per_series.size(), 3U) << "live, pool, binning";
  EXPECT_GT(points_per_series["live"], 20U);
  EXPECT_GT(points_per_series["pool"], 5U);
  // The series' colours are distinct.
  std::vector<std::string> colours;
  for (auto const& [tag, attrs] : elements(over_time.text)) {
    if (tag == "polyline") { colours.push_back(attrs.at("stroke")); }
  }
  std::sort(colours.begin(), colours.end());
  EXPECT_EQ(std::adjacent_find(colours.begin(), colours.end()), colours.end());
}

TEST(html_report, latency_chart_marks_p50_and_p99_and_counts_on_a_log_scale)
{
  report_input const input = make_input({make_resource("pool", 1.5, 20), make_resource("binning", 3.0, 20)});
  std::string const page = render_html_report(input);
  auto const charts = charts_of(page);
  svg_chart const& latency = chart_named(charts, "chart-latency");
  // Buckets 6 (10 calls), 7 (40) and 9 (5): the median (rank 28) is in bucket 7, p99 (rank 55) in bucket 9.
  std::map<std::string, double> marker_x;
  std::vector<double> bar_x;
  for (auto const& [tag, attrs] : elements(latency.text)) {
    if (tag == "line" && attrs.count("data-marker") != 0U) {
      marker_x[attrs.at("data-series") + " " + attrs.at("data-marker")] = number(attrs.at("x1")).value_or(-1);
      EXPECT_EQ(attrs.at("x1"), attrs.at("x2")) << "a vertical line";
    }
    if (tag == "rect" && attrs.count("data-value") != 0U && attrs.at("data-series") == "pool") {
      bar_x.push_back(number(attrs.at("x")).value_or(-1));
    }
  }
  ASSERT_EQ(marker_x.size(), 4U) << "p50 and p99 of each resource";
  ASSERT_EQ(bar_x.size(), 4U) << "buckets 6 to 9";
  EXPECT_GT(marker_x["pool p50"], bar_x[1]) << "p50 lies in the 128 ns bucket";
  EXPECT_LT(marker_x["pool p50"], bar_x[2]);
  EXPECT_GT(marker_x["pool p99"], bar_x[3]) << "p99 lies in the 512 ns bucket";
  EXPECT_LT(marker_x["pool p99"], latency.width);
  EXPECT_NE(latency.text.find("(p50 173 ns, p99 955 ns)"), std::string::npos) << "the legend gives both";
  // The counts' axis has ticks at powers of ten.
  for (std::string_view const tick : {">1</text>", ">10</text>", ">100</text>"}) {
    EXPECT_NE(latency.text.find(tick), std::string::npos) << tick;
  }
  // And the table under the chart.
  std::size_t const table = page.find("<table id=\"latency-table\">");
  ASSERT_NE(table, std::string::npos);
  std::string const rows = page.substr(table, page.find("</table>", table) - table);
  EXPECT_NE(rows.find("binning</td><td class=\"num\">173 ns</td><td class=\"num\">955 ns</td><td class=\"num\">55<"),
            std::string::npos)
    << rows;
}

TEST(html_report, a_warning_shows_under_the_log_line_escaped)
{
  report_input input = make_input({make_resource("pool", 1.5, 20)});
  EXPECT_EQ(render_html_report(input).find("id=\"report-warning\""), std::string::npos) << "none without one";
  input.warning = "the log's peak <is> above the device";
  std::string const page = render_html_report(input);
  EXPECT_NE(page.find("<p class=\"warning\" id=\"report-warning\">Note: the log&#39;s peak &lt;is&gt; above the device</p>"),
            std::string::npos);
  check_page(page, input);
}

TEST(html_report, charts_over_time_use_the_logs_time_when_it_rises)
{
  report_input input = make_input({make_resource("pool", 1.5, 20)});
  EXPECT_EQ(chosen_timeline_axis(input), timeline_axis::log_time);
  auto const label_of = [](report_input const& in, std::string_view id) {
    return chart_named(charts_of(render_html_report(in)), id).text;
  };
  EXPECT_NE(label_of(input, "chart-over-time").find(">time in the log (its Time column, from the first row)<"),
            std::string::npos);
  EXPECT_NE(label_of(input, "chart-fragmentation-over-time").find(">time in the log"), std::string::npos);

  input.over_time_axis = timeline_axis::operations;
  EXPECT_EQ(chosen_timeline_axis(input), timeline_axis::operations);
  EXPECT_NE(label_of(input, "chart-over-time").find(">operations replayed<"), std::string::npos);

  // A log without times (every row at 0), or with times out of order: operations, and the caption says why.
  input.over_time_axis = timeline_axis::automatic;
  for (auto& s : input.resources.front().timeline.samples) { s.log_time_ns = 0; }
  EXPECT_EQ(chosen_timeline_axis(input), timeline_axis::operations);
  EXPECT_NE(render_html_report(input).find("carry no times that rise"), std::string::npos);
  input.resources.front().timeline.samples[5].log_time_ns = 100;
  input.resources.front().timeline.samples.back().log_time_ns = 200;
  EXPECT_EQ(chosen_timeline_axis(input), timeline_axis::operations) << "a time that falls";
  EXPECT_EQ(chosen_timeline_axis(make_input({})), timeline_axis::operations);
}

TEST(html_report, the_times_on_a_log_time_axis_read_as_durations)
{
  report_resource r = make_resource("pool", 1.5, 20);
  for (std::size_t i = 0; i < r.timeline.samples.size(); ++i) {
    r.timeline.samples[i].log_time_ns = static_cast<std::int64_t>(i) * 250'000'000;  // 0 to 4.75 s
  }
  std::string const chart = chart_named(charts_of(render_html_report(make_input({r}))), "chart-over-time").text;
  EXPECT_NE(chart.find(">1 s</text>"), std::string::npos) << chart;
  EXPECT_NE(chart.find(">4 s</text>"), std::string::npos);
  EXPECT_NE(chart.find(">0</text>"), std::string::npos) << "the origin reads 0, in no unit";
}

TEST(html_report, a_bar_charts_reference_label_sits_in_the_legend_not_over_the_bars)
{
  report_input const input = make_input({make_resource("pool", 1.5, 20), make_resource("binning", 3.0, 20)});
  std::string const frag = chart_named(charts_of(render_html_report(input)), "chart-fragmentation").text;
  std::size_t const label = frag.find(">1× = no overhead<");
  ASSERT_NE(label, std::string::npos);
  std::size_t const group = frag.rfind("<g class=\"legend\"", label);
  ASSERT_NE(group, std::string::npos);
  EXPECT_EQ(frag.find("</g>", group), frag.find("</g>", label)) << "the label is inside a legend entry";
  EXPECT_EQ(frag.find("1× = no overhead", label + 2), std::string::npos) << "and nowhere else";
}

TEST(html_report, bytes_up_to_2_to_the_64_keep_a_unit)
{
  report_input input = make_input({});
  input.log_peak_live_bytes = std::numeric_limits<std::size_t>::max();
  std::string const page = render_html_report(input);
  EXPECT_NE(page.find("peak live 16 EiB."), std::string::npos) << "not 16384 PiB";
}

TEST(html_report, page_without_resources_is_well_formed)
{
  report_input const input = make_input({});
  std::string const page = render_html_report(input);
  check_page(page, input);
  EXPECT_NE(page.find("No resource was replayed"), std::string::npos);
  EXPECT_NE(page.find("no data"), std::string::npos);
}

TEST(html_report, degenerate_data_draws_no_nan_or_inf)
{
  // One resource, a single sample, an all-zero latency histogram, no fragmentation, and an empty log.
  report_resource single = make_resource("pool", 1.0, 1);
  single.timeline.latency_histogram = {};
  single.result.fragmentation.reset();
  single.result.peak_upstream_bytes.reset();
  report_input input = make_input({single});
  input.sizes = {};
  input.log_events = 0;
  std::string page = render_html_report(input);
  check_page(page, input);
  EXPECT_NE(page.find("<circle data-series=\"pool\""), std::string::npos) << "a single sample is drawn as a dot";

  // An empty timeline, zero-valued samples, and a reserving resource alone.
  report_resource empty = make_resource("arena", 0.0, 0, true);
  report_resource zeros = make_resource("binning", 0.0, 3);
  for (auto& s : zeros.timeline.samples) { s = {.op = 0, .log_time_ns = 0, .live_bytes = 0, .upstream_bytes = 0}; }
  input = make_input({empty, zeros});
  page = render_html_report(input);
  check_page(page, input);

  // A name far too long for an axis label or a legend: cut in the charts, whole in the table.
  std::string const long_name = "resource-with-a-very-long-name-" + std::string(300, 'x') + "-end";
  input = make_input({make_resource(long_name, 1.5, 10), make_resource("pool", 1.2, 10)});
  page = render_html_report(input);
  check_page(page, input);
  EXPECT_NE(page.find("resource-with-a-very-lo…<"), std::string::npos) << "the axis label is cut";
}

TEST(html_report, write_html_report_writes_the_page_and_names_a_path_it_cannot_write)
{
  std::filesystem::path const dir =
    std::filesystem::temp_directory_path() / ("gpumem-html-report-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  report_input const input = make_input({make_resource("pool", 1.5, 10)});
  std::filesystem::path const file = dir / "report.html";
  {
    std::ofstream old{file};
    old << "an older, longer file that the report replaces entirely...............................";
  }
  write_html_report(file, input);
  std::ifstream in{file, std::ios::binary};
  std::ostringstream written;  // not istreambuf_iterator: GCC 12 -O2 sees a null dereference in it
  written << in.rdbuf();
  EXPECT_EQ(written.str(), render_html_report(input));

  std::filesystem::path const unwritable = dir / "no-such-directory" / "report.html";
  try {
    write_html_report(unwritable, input);
    ADD_FAILURE() << "write_html_report did not throw";
  } catch (gpumem::logic_error const& e) {
    EXPECT_NE(std::string{e.what()}.find(unwritable.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string{e.what()}.find("No such file or directory"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpumem::test
