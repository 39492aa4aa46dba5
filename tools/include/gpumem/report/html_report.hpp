/**
 * @file html_report.hpp
 * `gpumem report`'s page: one self-contained HTML file (inline CSS and SVG, no script, no external
 * resource) that shows how a set of resources served one allocation log:
 *
 * - a warning under the log's line when report_input::warning says one (a peak above the device's memory);
 * - a summary table per resource: ns per op, peak upstream bytes, peak live bytes, their ratio, failures;
 * - live bytes and each resource's upstream (reserved) bytes over the log's own time, or its operations
 *   (line chart; chosen_timeline_axis);
 * - fragmentation: peak upstream bytes / peak live bytes per resource (bar chart), and upstream / live over
 *   the replay;
 * - the allocation size histogram of the log (log2 buckets; counts and bytes);
 * - each resource's latency histogram (log2 ns buckets, from replay_timeline; counts on a log scale) with its
 *   p50 and p99 (latency_percentile.hpp) marked, and a table of them;
 * - when report_input::timeline holds one, the program's allocation timeline (allocation_timeline.hpp): its
 *   largest blocks stacked over time as PyTorch's memory_viz draws them, coloured by call site, each with its
 *   stack as a tooltip, and a table of the call sites.
 *
 * The data comes from replay() (replay.hpp): one replay without a timeline for the ns/op figures, one with a
 * timeline for the plots. Rendering is pure: no I/O, deterministic for the same input.
 */
#pragma once

#include <gpumem/export.hpp>
#include <gpumem/report/allocation_timeline.hpp>
#include <gpumem/replay/allocation_log.hpp>
#include <gpumem/replay/replay.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace gpumem {

/** @brief Allocation sizes of a log in log2 buckets: bucket b holds sizes in [2^b, 2^(b+1)) bytes (0 in 0). */
struct size_histogram {
  std::array<std::size_t, 64> counts{};  ///< `allocate` rows per bucket
  std::array<std::size_t, 64> bytes{};   ///< bytes those rows requested (SIZE_MAX when more)

  /** @brief Counts `row` when it is an `allocate` row (other rows change nothing). */
  GPUMEM_EXPORT void add(log_event const& row) noexcept;
};

/** @brief One resource's results on the log. */
struct report_resource {
  std::string name;             ///< as `gpumem replay --resource` spells it (registry/resource_registry.hpp)
  std::string description;      ///< one line, e.g. registry::resource_info::description
  replay_result result;         ///< from a replay without a timeline (its ns_per_op is the figure shown)
  replay_timeline timeline;     ///< from a replay with a timeline (plots)
  bool reserves_upfront{false}; ///< its peak upstream is a fixed reservation, not a fragmentation figure
};

/** @brief What the x axis of the charts over time counts. */
enum class timeline_axis : std::uint8_t {
  automatic,   ///< log_time when the samples' log times rise from first to last and never fall, else operations
  log_time,    ///< the log's own time of each sample's row (replay_timeline::sample::log_time_ns)
  operations,  ///< operations replayed (replay_timeline::sample::op)
};

/** @brief Everything the page shows. */
struct report_input {
  std::string title;                     ///< the page's heading, e.g. "gpumem report: resnet50.csv.gz"
  std::string log_source;                ///< the log's path as given
  std::size_t log_events{};              ///< rows of the log
  std::size_t log_peak_live_bytes{};     ///< peak_live_bytes(log)
  std::int64_t log_duration_ns{};        ///< time of the last row - time of the first
  size_histogram sizes;                  ///< allocation_size_histogram(log)
  std::string environment;               ///< one line: backend, device, simulated upstream or not
  std::string command;                   ///< the command line that produced the page
  /// A warning shown under the log's line when not empty, e.g. peak_above_device_note (device_fit.hpp)
  std::string warning{};
  std::vector<report_resource> resources;
  timeline_axis over_time_axis{timeline_axis::automatic};  ///< x of the charts over time; each chart says which
  /// The program's allocations with their call sites (from a timeline file), drawn when present
  std::optional<allocation_timeline> timeline{};
};

/**
 * @return the axis the charts over time use for `input`: its over_time_axis, with `automatic` resolved on
 * the first resource's timeline samples (log_time when their times rise and never fall; operations for a
 * log whose rows carry no times, or times out of order).
 */
[[nodiscard]] GPUMEM_EXPORT timeline_axis chosen_timeline_axis(report_input const& input);

/** @return the sizes of the `allocate` rows of `log` (not `allocate failure` rows) in log2 buckets. */
[[nodiscard]] GPUMEM_EXPORT size_histogram allocation_size_histogram(allocation_log const& log);

/**
 * @brief The page as a string (UTF-8 HTML5). Every text from the input (names, paths, the command) is
 * HTML-escaped. Any input renders, including no resources, an empty timeline or all-zero histograms (the
 * chart then says "no data"); no coordinate is ever NaN or infinite.
 *
 * The page's elements that tools may look for: the table `id="summary-table"`; the charts (`<svg>` in a
 * `<figure>`) `chart-over-time`, `chart-fragmentation`, `chart-fragmentation-over-time`, `chart-sizes`,
 * `chart-sizes-bytes` and `chart-latency`; the table `id="latency-table"`; with a timeline, the heading
 * `id="allocation-timeline"`, the chart `chart-timeline` (each drawn block a `<path data-block="I"
 * data-site="S">` with a `<title>` holding its size, times and stack; the other blocks one path
 * `data-series="other"`) and the table `id="timeline-sites"` (one row per call site, `data-site="S"`). Each p50 or p99 line of
 * `chart-latency` carries `data-marker="p50"` (or p99) and its resource's `data-series`. Each series' line,
 * dot or bar carries `data-series="NAME"` (a resource's name, or "live") and its colour as a plain
 * `stroke`/`fill` attribute; each bar `data-value`.
 * A resource keeps one colour, by its position in `resources`, in the table and in every chart.
 */
[[nodiscard]] GPUMEM_EXPORT std::string render_html_report(report_input const& input);

/**
 * @brief Writes render_html_report(input) to `path`, replacing it only once the whole page is written
 * (staged_file.hpp: a failed write leaves what was there before).
 * @throws gpumem::logic_error naming the path when it cannot be written.
 */
GPUMEM_EXPORT void write_html_report(std::filesystem::path const& path, report_input const& input);

}  // namespace gpumem
