// report_builder.hpp: the two replays per resource, and the page's header fields.
#include "report_builder.hpp"

#include "compact_bytes.hpp"
#include "library_log.hpp"
#include "progress_bar.hpp"

#include <gpumem/device.hpp>
#include <gpumem/device.hpp>
#include <gpumem/replay/replay.hpp>
#include <gpumem/registry/resource_registry.hpp>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <ostream>
#include <span>

namespace gpumem::cli {
namespace {

std::string environment_line(bool simulate)
{
  cuda_device_id const device = get_current_cuda_device();
  auto const memory = available_device_memory(device);
  std::string line = std::string{to_string(current_backend_kind())} + " backend, device " + std::to_string(device.value()) +
                     " (" + get_device_properties(device).name + ", " + compact_bytes(memory.total) + ")";
  if (simulate) { line += "; sub-allocators over a simulated upstream (addresses only)"; }
  return line;
}

}  // namespace

report_input build_report(log_source& log, std::vector<std::string> const& resources, bool simulate,
                          std::string const& command, std::ostream& out)
{
  report_input input;
  input.title = "gpumem report: " + std::filesystem::path{log.name()}.filename().string();
  input.log_source = log.name();
  input.environment = environment_line(simulate);
  input.command = command;
  // What the page says of the log itself, gathered while the first resource replays it.
  auto const learn_log = [&input](std::span<log_event const> rows) {
    for (log_event const& row : rows) { input.sizes.add(row); }
    input.log_duration_ns = rows.back().time_ns;  // the first row is at 0
  };

  library_log_summary library_log;
  for (std::string const& name : resources) {
    report_resource entry;
    entry.name = name;
    if (registry::resource_info const* const info = registry::find_resource(name)) { entry.description = info->description; }
    {
      registry::resource_handle r = registry::make_resource(name, {.simulate = simulate});
      progress_bar progress{log.name() + " on " + name + " (timing)"};
      allocation_log_reader rows = log.open();
      replay_options options{.progress = progress.callback()};
      if (input.resources.empty()) { options.on_rows = learn_log; }
      entry.result = replay(rows, r, options);
      entry.reserves_upfront = r.reserves_upfront();
      progress.clear();
      library_log.report(std::cerr, log.name() + " on " + name + " (timing)");
    }
    {
      registry::resource_handle r = registry::make_resource(name, {.simulate = simulate});
      progress_bar progress{log.name() + " on " + name + " (timeline)"};
      allocation_log_reader rows = log.open();
      (void)replay(rows, r, {.progress = progress.callback(), .timeline = &entry.timeline});
      progress.clear();
      library_log.report(std::cerr, log.name() + " on " + name + " (timeline)");
    }
    replay_result const& res = entry.result;
    if (input.resources.empty()) {
      input.log_events = res.events;
      input.log_peak_live_bytes = res.peak_live_bytes;
      out << "log: " << log.name() << " (" << res.events << " events, peak live " << compact_bytes(res.peak_live_bytes)
          << (simulate ? "; simulated upstream" : "") << ")\n";
      char header[160];
      std::snprintf(header, sizeof header, "%-11s %9s %14s %12s %8s %9s\n", "resource", "ns/op", "peak upstream",
                    "peak live", "ratio", "failures");
      out << header;
    }
    char ratio[32] = "-";
    if (res.fragmentation) {
      std::snprintf(ratio, sizeof ratio, "%.3f%s", *res.fragmentation, entry.reserves_upfront ? "*" : "");
    }
    char row[200];
    std::snprintf(row, sizeof row, "%-11s %9.1f %14s %12s %8s %9zu\n", name.c_str(), res.ns_per_op,
                  compact_bytes(res.peak_upstream_bytes.value_or(0)).c_str(),
                  compact_bytes(res.peak_live_bytes).c_str(), ratio, res.failures);
    out << row;
    out.flush();
    input.resources.push_back(std::move(entry));
  }
  return input;
}

}  // namespace gpumem::cli
