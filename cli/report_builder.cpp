// report_builder.hpp: the two replays per resource, and the page's header fields.
#include "report_builder.hpp"

#include "compact_bytes.hpp"
#include "library_log.hpp"
#include "progress_bar.hpp"

#include <gpumem/device.hpp>
#include <gpumem/replay/device_fit.hpp>
#include <gpumem/replay/replay.hpp>
#include <gpumem/registry/resource_registry.hpp>
#include <gpumem/report/text_table.hpp>

#include <optional>
#include <filesystem>
#include <iostream>
#include <ostream>
#include <span>
#include <string>
#include <vector>

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
  text_table const table{{{"resource", 11, true}, {"ns/op", 9}, {"peak upstream", 14}, {"peak live", 12},
                          {"ratio", 8}, {"failures", 9}}};
  std::size_t const device_bytes = simulate ? 0 : current_device_memory_bytes();
  // A peak above the device: one note as soon as the first replay shows it, instead of a summary of each
  // replay's out-of-memory warnings.
  bool noted = false;
  auto const summarise_library_log = [&](replay_result const& done, std::string const& what) {
    if (auto const note = simulate ? std::nullopt
                                   : peak_above_device_note(done.peak_live_bytes, device_bytes, done.failures)) {
      if (!noted) {
        std::cerr << "gpumem: " << log.name() << ": " << *note << '\n';
        input.warning = *note;
      }
      noted = true;
      library_log.discard();
    } else {
      library_log.report(std::cerr, what);
    }
  };
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
      summarise_library_log(entry.result, log.name() + " on " + name + " (timing)");
    }
    {
      registry::resource_handle r = registry::make_resource(name, {.simulate = simulate});
      progress_bar progress{log.name() + " on " + name + " (timeline)"};
      allocation_log_reader rows = log.open();
      replay_result const timed = replay(rows, r, {.progress = progress.callback(), .timeline = &entry.timeline});
      progress.clear();
      summarise_library_log(timed, log.name() + " on " + name + " (timeline)");
    }
    replay_result const& res = entry.result;
    if (input.resources.empty()) {
      input.log_events = res.events;
      input.log_peak_live_bytes = res.peak_live_bytes;
      out << "log: " << log.name() << " (" << res.events << " events, peak live " << compact_bytes(res.peak_live_bytes)
          << (simulate ? "; simulated upstream" : "") << ")\n";
      out << table.header();
    }
    bool const upfront = entry.reserves_upfront;
    std::string const ratio =
      res.fragmentation ? fit_number(*res.fragmentation, 3, upfront ? 7 : 8) + (upfront ? "*" : "") : "-";
    out << table.row(std::vector<std::string>{name, fit_number(res.ns_per_op, 1, 9),
                                              compact_bytes(res.peak_upstream_bytes.value_or(0)),
                                              compact_bytes(res.peak_live_bytes), ratio,
                                              fit_number(static_cast<double>(res.failures), 0, 9)});
    out.flush();
    input.resources.push_back(std::move(entry));
  }
  return input;
}

}  // namespace gpumem::cli
