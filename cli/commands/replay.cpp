// `gpumem replay LOG [LOG...] [--resource a,b] [--simulate] [--slab-mib N] [--mapping-mib N] [--mapping-divisor N]
// [--repeat N] [--threads N] [--warm | --passes N] [--csv]`:
// replays allocation logs against resources by name and prints one table per log (docs/formats.md). Each run
// streams the log (a pipe or standard input is copied on its first pass when there are more runs). The
// reading, the replay and the resources are the library's (replay/log_source.hpp, replay/replay.hpp,
// registry/resource_registry.hpp); this file declares the command line and formats the results. A log whose
// peak is above the device's memory gets one note on stderr after its first run (replay/device_fit.hpp)
// instead of a summary of each run's out-of-memory warnings.
#include "commands.hpp"
#include "compact_bytes.hpp"
#include "csv_field.hpp"
#include "library_log.hpp"
#include "progress_bar.hpp"

#include <gpumem/bench/measure.hpp>
#include <gpumem/replay/device_fit.hpp>
#include <gpumem/replay/log_source.hpp>
#include <gpumem/replay/replay.hpp>
#include <gpumem/registry/resource_registry.hpp>
#include <gpumem/report/text_table.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <functional>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace gpumem::cli {
namespace {

/// Bounds of --slab-mib and --mapping-mib: whole MiB from 1 to 1 TiB.
constexpr std::size_t max_mib = std::size_t{1} << 20;

struct replay_command {
  std::vector<std::string> logs;
  std::vector<std::string> resources;
  bool simulate{false};
  bool csv{false};
  std::size_t repeats{1};                                     // --repeat: runs per resource, interleaved
  std::size_t threads{1};                                     // --threads: replay_options::threads
  bool warm{false};                                           // --warm: --passes 2
  std::size_t passes{1};                                      // --passes: replays per instance, the last timed
  std::size_t vmm_slab_mib{32};                               // --slab-mib: the vmm resource's slab size
  std::optional<std::size_t> vmm_max_mapping_mib{};           // --mapping-mib: its largest new mapping
  std::size_t vmm_mapping_divisor{registry::resource_options{}.vmm_mapping_divisor};  // --mapping-divisor: 1/N of the pool
};

/// The table header's note on the passes: none for one; the timed one among several.
std::string passes_note(std::size_t passes)
{
  if (passes == 1) { return ""; }
  if (passes == 2) { return "; warm: each resource timed on its second replay"; }
  return "; each resource timed on replay " + std::to_string(passes) + " of " + std::to_string(passes) +
         " on one instance, peaks over all";
}

/// The replay table's columns (the ns/op range only for several runs, the ratio's range for several runs on
/// several threads; the workers and their waits only for a replay on several threads).
text_table replay_table(std::size_t repeats, std::size_t threads)
{
  std::vector<text_column> columns{{"resource", 11, true}, {"ns/op", 9}, {"peak upstream", 14}, {"peak live", 12}};
  if (threads != 1) { columns.push_back({"held at once", 13}); }  // the ratio's denominator on several threads
  columns.push_back({"ratio", 8});
  columns.push_back({"failures", 9});
  columns.push_back({"unknown frees", 14});
  if (repeats > 1) { columns.push_back({"ns/op min - max", 21}); }
  if (repeats > 1 && threads != 1) { columns.push_back({"ratio min - max", 17}); }  // interleavings differ
  if (threads != 1) {
    columns.push_back({"threads", 8});
    columns.push_back({"waits", 10});
  }
  return text_table{std::move(columns)};
}

/// The median, lowest and highest ns/op of a resource's runs.
struct timing {
  double median, min, max;
};

timing timing_of(std::vector<replay_result> const& runs)
{
  std::vector<double> ns;
  for (replay_result const& r : runs) { ns.push_back(r.ns_per_op); }
  auto const [low, high] = std::minmax_element(ns.begin(), ns.end());
  return {bench::median(ns), *low, *high};
}

/// The run whose ratio is the median of the runs' (the lower middle for an even count; the first run when
/// there is no ratio): the peaks and counts a table row reports. In log order every run has the same peaks;
/// on several threads they follow the interleaving, which differs from run to run.
replay_result const& median_ratio_run(std::vector<replay_result> const& runs)
{
  std::vector<std::size_t> order(runs.size());
  for (std::size_t k = 0; k < order.size(); ++k) { order[k] = k; }
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return runs[a].fragmentation.value_or(0.0) < runs[b].fragmentation.value_or(0.0);
  });
  return runs[order[(order.size() - 1) / 2]];
}

/// The lowest and highest ratio of the runs (0 when none has one).
std::pair<double, double> ratio_range(std::vector<replay_result> const& runs)
{
  std::vector<double> ratios;
  for (replay_result const& r : runs) {
    if (r.fragmentation) { ratios.push_back(*r.fragmentation); }
  }
  if (ratios.empty()) { return {0.0, 0.0}; }
  auto const [low, high] = std::minmax_element(ratios.begin(), ratios.end());
  return {*low, *high};
}

int run_replay(replay_command const& c, std::ostream& out)
{
  std::optional<std::size_t> const vmm_max_mapping_size =
    c.vmm_max_mapping_mib ? std::optional<std::size_t>{*c.vmm_max_mapping_mib << 20} : std::nullopt;
  if (c.csv) {
    out << "log,resource,ops,ns_per_op,peak_upstream_bytes,peak_live_bytes,ratio,failures,unknown_frees,"
           "log_failures,log_failures_reproduced,reserves_upfront,runs,ns_per_op_min,ns_per_op_max,threads,"
           "cross_thread_waits,warm,held_peak_bytes,ratio_min,ratio_max\n";
  }
  library_log_summary library_log;
  text_table const table = replay_table(c.repeats, c.threads);
  std::size_t const device_bytes = c.simulate ? 0 : current_device_memory_bytes();
  for (std::string const& path : c.logs) {
    log_source source{path, c.resources.size() * c.repeats * c.passes > 1 ? log_passes::many : log_passes::one};
    // Every run on a fresh resource; the resources take turns (pool, vmm, pool, vmm, ...), so that a slow
    // spell of the host falls on all of them (docs/benchmarks.md: medians, ratios within one run). With
    // --passes N (--warm: 2), each run first replays the log N - 1 times on its resource, untimed, and the
    // last replay is the one reported: the resource's steady state, without the memory it first takes from
    // the device; the peaks span every pass, so the ratio shows whether the same work needed more memory.
    std::vector<std::vector<replay_result>> runs(c.resources.size());
    std::vector<bool> upfront(c.resources.size(), false);
    for (std::size_t run = 0; run < c.repeats; ++run) {
      for (std::size_t i = 0; i < c.resources.size(); ++i) {
        std::string const& name = c.resources[i];
        registry::resource_handle r = registry::make_resource(name, {.simulate = c.simulate,
                                                                 .vmm_slab_size = c.vmm_slab_mib << 20,
                                                                 .vmm_max_mapping_size = vmm_max_mapping_size,
                                                                 .vmm_mapping_divisor = c.vmm_mapping_divisor});
        std::string const label =
          source.name() + " on " + name + (c.repeats > 1 ? " (run " + std::to_string(run + 1) + ")" : "");
        std::size_t warm_up_held = 0;
        for (std::size_t pass = 1; pass < c.passes; ++pass) {
          progress_bar warm_up{label + " (untimed pass " + std::to_string(pass) + " of " + std::to_string(c.passes) +
                               ")"};
          allocation_log_reader untimed = source.open();
          warm_up_held = std::max(
            warm_up_held, replay(untimed, r, {.progress = warm_up.callback(), .threads = c.threads}).held_peak_bytes);
          warm_up.clear();
        }
        progress_bar progress{label};
        allocation_log_reader log = source.open();
        runs[i].push_back(replay(log, r, {.progress = progress.callback(), .threads = c.threads}));
        progress.clear();
        if (warm_up_held > runs[i].back().held_peak_bytes) {  // the peak upstream spans every pass: so does this
          replay_result& timed = runs[i].back();
          timed.held_peak_bytes = warm_up_held;
          if (timed.peak_upstream_bytes) {
            timed.fragmentation = static_cast<double>(*timed.peak_upstream_bytes) / static_cast<double>(warm_up_held);
          }
        }
        // A peak above the device: one note as soon as the first run shows it, instead of a summary of
        // each run's out-of-memory warnings.
        replay_result const& done = runs[i].back();
        if (auto const note = c.simulate ? std::nullopt
                                         : peak_above_device_note(done.peak_live_bytes, device_bytes, done.failures)) {
          if (run == 0 && i == 0) { std::cerr << "gpumem: " << source.name() << ": " << *note << '\n'; }
          library_log.discard();
        } else {
          library_log.report(std::cerr, label);
        }
        upfront[i] = r.reserves_upfront();
      }
    }
    replay_result const& any = runs.front().front();  // what the log says is the same in every run
    if (!c.csv) {
      out << "log: " << source.name() << " (" << any.events << " events, peak live "
          << compact_bytes(any.peak_live_bytes) << (c.simulate ? "; simulated upstream" : "")
          << (c.repeats > 1 ? "; ns/op: median of " + std::to_string(c.repeats) + " runs, taking turns" : "")
          << (c.threads != 1 ? "; its threads replayed concurrently, ns/op: wall time / ops" : "")
          << passes_note(c.passes) << ")\n";
    }
    if (!c.csv) { out << table.header(); }
    bool any_upfront = false;
    for (std::size_t i = 0; i < c.resources.size(); ++i) {
      std::string const& name = c.resources[i];
      timing const t = timing_of(runs[i]);
      replay_result const& result = median_ratio_run(runs[i]);
      auto const [ratio_min, ratio_max] = ratio_range(runs[i]);
      any_upfront = any_upfront || upfront[i];
      std::size_t const upstream = result.peak_upstream_bytes.value_or(0);
      if (c.csv) {
        out << csv_field(path) << ',' << csv_field(name) << ',' << result.ops << ',' << std::fixed
            << std::setprecision(1) << t.median << ',' << upstream << ',' << result.peak_live_bytes << ','
            << std::setprecision(4) << result.fragmentation.value_or(0.0) << ',' << result.failures << ','
            << result.unknown_frees << ',' << result.log_failures << ',' << result.log_failures_reproduced << ','
            << (upfront[i] ? 1 : 0) << ',' << c.repeats << ',' << std::setprecision(1) << t.min << ',' << t.max
            << ',' << result.threads << ',' << result.cross_thread_waits << ',' << (c.passes - 1) << ','
            << result.held_peak_bytes << ',' << std::setprecision(4) << ratio_min << ',' << ratio_max << '\n';
      } else {
        std::string const ratio = result.fragmentation
                                    ? fit_number(*result.fragmentation, 3, upfront[i] ? 7 : 8) + (upfront[i] ? "*" : "")
                                    : "-";
        std::vector<std::string> cells{name, fit_number(t.median, 1, 9), compact_bytes(upstream),
                                       compact_bytes(result.peak_live_bytes)};
        if (c.threads != 1) { cells.push_back(compact_bytes(result.held_peak_bytes)); }
        cells.push_back(ratio);
        cells.push_back(fit_number(static_cast<double>(result.failures), 0, 9));
        cells.push_back(fit_number(static_cast<double>(result.unknown_frees), 0, 14));
        if (c.repeats > 1) { cells.push_back(fit_number(t.min, 1, 9) + " - " + fit_number(t.max, 1, 9)); }
        if (c.repeats > 1 && c.threads != 1) {
          cells.push_back(result.fragmentation ? fit_number(ratio_min, 3, 7) + " - " + fit_number(ratio_max, 3, 7) : "-");
        }
        if (c.threads != 1) {
          cells.push_back(fit_number(static_cast<double>(result.threads), 0, 8));
          cells.push_back(fit_number(static_cast<double>(result.cross_thread_waits), 0, 10));
        }
        out << table.row(cells);
      }
      out.flush();
    }
    if (!c.csv && any_upfront) {
      out << "* arena takes its whole arena at construction: peak upstream is that size, not a fragmentation figure\n";
    }
    if (!c.csv && &path != &c.logs.back()) { out << '\n'; }
  }
  return 0;
}

}  // namespace

command add_replay(CLI::App& gpumem)
{
  auto const c = std::make_shared<replay_command>();
  CLI::App* const parser = gpumem.add_subcommand(
    "replay", "replay allocation logs against resources: ns/op, peak upstream and live bytes, their ratio, failures");
  parser
    ->add_option("LOG", c->logs,
                 "allocation logs (RMM CSV, plain or gzip); - for standard input; a pipe or a FIFO works too")
    ->type_name("FILE")
    ->required();
  CLI::Option* const resource = add_resource_option(*parser);
  parser->add_flag("--simulate", c->simulate,
                   "pool, vmm, arena and binning over a simulated 1 TiB upstream (no memory used)");
  parser->add_option("--repeat", c->repeats, "runs per resource, taking turns; ns/op is their median (default 1)")
    ->type_name("N")
    ->check(whole_number(1, 1000, "needs an integer in [1, 1000]"));
  parser
    ->add_option("--threads", c->threads,
                 "replay the log's threads concurrently on N worker threads (0: one per log thread, up to " +
                   std::to_string(max_replay_threads) + "; default 1: in log order on one thread)")
    ->type_name("N")
    ->check(whole_number(0, max_replay_threads,
                         "needs an integer in [0, " + std::to_string(max_replay_threads) + "]"));
  parser->add_flag("--warm", c->warm,
                   "replay each log once on each resource untimed, then time a second replay on the same resource "
                   "(the steady state, without the first growth); ratio: the peak over both (--passes 2)");
  CLI::Option* const passes =
    parser
      ->add_option("--passes", c->passes,
                   "replay each log N times on each resource instance, timing the last; ratio: the peak over all N "
                   "(default 1)")
      ->type_name("N")
      ->check(whole_number(1, 1000, "needs an integer in [1, 1000]"));
  parser->add_flag("--csv", c->csv, "print CSV instead of a table (docs/formats.md)");
  std::string const mib_requirement = "takes a whole number of MiB from 1 to " + std::to_string(max_mib);
  parser->add_option("--slab-mib", c->vmm_slab_mib, "the vmm pool's slab size in MiB (default 32)")
    ->type_name("N")
    ->check(whole_number(1, max_mib, mib_requirement));
  parser->add_option("--mapping-mib", c->vmm_max_mapping_mib,
                     "the vmm pool's largest piece of physical memory in MiB (default: one slab)")
    ->type_name("N")
    ->check(whole_number(1, max_mib, mib_requirement));
  parser
    ->add_option("--mapping-divisor", c->vmm_mapping_divisor,
                 "the vmm pool maps pieces of up to 1/N of its physical memory (default " +
                   std::to_string(c->vmm_mapping_divisor) + "; 0: pieces of --mapping-mib)")
    ->type_name("N")
    ->check(whole_number(0, 1000, "needs an integer in [0, 1000]"));
  parser->parse_complete_callback([c, resource, passes] {
    c->resources = selected_resources(*resource, c->simulate);
    if (c->warm) {
      if (passes->count() > 0) {
        throw CLI::ValidationError("--passes", "give --warm or --passes, not both (--warm is --passes 2)");
      }
      c->passes = 2;
    }
  });
  return {parser, [c](std::string const&, std::ostream& out) { return run_replay(*c, out); }};
}

}  // namespace gpumem::cli
