// report_builder.hpp: the two replays per resource, and the page's header fields.
#include "report_builder.hpp"

#include "compact_bytes.hpp"
#include "progress_bar.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/device.hpp>
#include <gpumem/replay/replay.hpp>
#include <gpumem/replay/replay_resource.hpp>

#include <cstdio>
#include <filesystem>
#include <ostream>

namespace gpumem::cli {
namespace {

std::string environment_line(bool simulate)
{
  auto& backend = detail::get_backend();
  cuda_device_id const device = get_current_cuda_device();
  auto const memory = available_device_memory(device);
  std::string line = std::string{to_string(backend.kind())} + " backend, device " + std::to_string(device.value()) +
                     " (" + get_device_properties(device).name + ", " + compact_bytes(memory.total) + ")";
  if (simulate) { line += "; sub-allocators over a simulated upstream (addresses only)"; }
  return line;
}

}  // namespace

report_input build_report(allocation_log const& log, std::vector<std::string> const& resources, bool simulate,
                          std::string const& command, std::ostream& out)
{
  report_input input;
  input.title = "gpumem report: " + std::filesystem::path{log.source}.filename().string();
  input.log_source = log.source;
  input.log_events = log.events.size();
  input.log_peak_live_bytes = peak_live_bytes(log);
  if (!log.events.empty()) { input.log_duration_ns = log.events.back().time_ns - log.events.front().time_ns; }
  input.sizes = allocation_size_histogram(log);
  input.environment = environment_line(simulate);
  input.command = command;

  char header[160];
  std::snprintf(header, sizeof header, "%-11s %9s %14s %12s %8s %9s\n", "resource", "ns/op", "peak upstream",
                "peak live", "ratio", "failures");
  out << header;
  for (std::string const& name : resources) {
    report_resource entry;
    entry.name = name;
    if (replay_resource_info const* const info = find_replay_resource(name)) { entry.description = info->description; }
    {
      replay_resource r = make_replay_resource(name, {.simulate = simulate});
      progress_bar progress{log.source + " on " + name + " (timing)"};
      entry.result = replay(log, r, {.progress = progress.callback()});
      entry.reserves_upfront = r.reserves_upfront();
    }
    {
      replay_resource r = make_replay_resource(name, {.simulate = simulate});
      progress_bar progress{log.source + " on " + name + " (timeline)"};
      (void)replay(log, r, {.progress = progress.callback(), .timeline = &entry.timeline});
    }
    replay_result const& res = entry.result;
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
