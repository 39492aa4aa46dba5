// The chart sections of the report page (html_report.cpp puts the page together): live and reserved bytes
// over time, fragmentation, allocation sizes, latency. Each appends an <h2>, one or two <figure>s holding
// an inline <svg> (svg_chart.hpp) and a caption. Internal to the library.
#pragma once

#include <gpumem/report/html_report.hpp>

#include <cstddef>
#include <string>

namespace gpumem::detail {

/**
 * @return the colour ("#rrggbb") of the resource at `index` of report_input::resources, the same in the
 * summary table and every chart: 8 distinct colours, then again from the first.
 */
[[nodiscard]] std::string resource_colour(std::size_t index);

/** @brief "Live and reserved bytes over time": chart-over-time. */
void append_over_time_section(std::string& out, report_input const& input);

/** @brief "Fragmentation": chart-fragmentation (bars) and chart-fragmentation-over-time (lines). */
void append_fragmentation_section(std::string& out, report_input const& input);

/** @brief "Allocation sizes": chart-sizes (counts) and chart-sizes-bytes (bytes) per log2 size bucket. */
void append_sizes_section(std::string& out, report_input const& input);

/** @brief "Latency": chart-latency, each resource's log2 latency histogram as grouped bars. */
void append_latency_section(std::string& out, report_input const& input);

/**
 * @brief "Allocation timeline" when input.timeline holds one (nothing otherwise): chart-timeline, the largest
 * timeline_max_blocks blocks stacked over the events, and the call-site table timeline-sites.
 */
void append_timeline_section(std::string& out, report_input const& input);

/// The blocks the timeline draws one by one; the others form one band.
inline constexpr std::size_t timeline_max_blocks = 200;

}  // namespace gpumem::detail
