// Replays a log against resources and gathers what the HTML report shows (report/html_report.hpp): shared by
// `gpumem report` and `gpumem demo`. Each resource is replayed twice on a fresh instance: without a timeline
// (the ns/op figure) and with one (the plots), so the per-operation clock reads never reach the ns/op column.
// The log is streamed each time; what the page says of the log itself (its size histogram, its duration)
// is gathered during the first replay.
#pragma once

#include <gpumem/replay/log_source.hpp>
#include <gpumem/report/html_report.hpp>

#include <iosfwd>
#include <string>
#include <vector>

namespace gpumem::cli {

/**
 * @brief The report's data for `log` on `resources` (names from the replay registry), printing to `out` the
 * line "log: NAME (N events, peak live X)" once the first replay is done, then one table row per resource
 * as it goes (with a progress bar on a terminal). What the library logs is summarised after each replay;
 * without `simulate`, a log whose peak is above the device's memory gets one note on stderr after the
 * first replay (replay/device_fit.hpp) instead of the summaries of its out-of-memory warnings.
 * @throws what registry::make_resource and replay throw.
 */
[[nodiscard]] report_input build_report(log_source& log, std::vector<std::string> const& resources, bool simulate,
                                        std::string const& command, std::ostream& out);

}  // namespace gpumem::cli
