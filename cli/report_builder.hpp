// Replays a log against resources and gathers what the HTML report shows (report/html_report.hpp): shared by
// `gpumem report` and `gpumem demo`. Each resource is replayed twice on a fresh instance: without a timeline
// (the ns/op figure) and with one (the plots), so the per-operation clock reads never reach the ns/op column.
#pragma once

#include <gpumem/replay/allocation_log.hpp>
#include <gpumem/report/html_report.hpp>

#include <iosfwd>
#include <string>
#include <vector>

namespace gpumem::cli {

/**
 * @brief The report's data for `log` on `resources` (names from the replay registry), printing one table row
 * per resource to `out` as it goes (with a progress bar on a terminal).
 * @throws what make_replay_resource and replay throw.
 */
[[nodiscard]] report_input build_report(allocation_log const& log, std::vector<std::string> const& resources,
                                        bool simulate, std::string const& command, std::ostream& out);

}  // namespace gpumem::cli
