// `gpumem replay LOG [LOG...] [--resource a,b] [--simulate] [--csv]`: replays allocation logs against
// resources by name and prints one table per log (docs/formats.md). The reading, the replay and the
// resources are the library's (replay/allocation_log.hpp, replay/replay.hpp, replay/replay_resource.hpp);
// this file parses the command line and formats the results.
#include "commands.hpp"

#include <gpumem/replay/allocation_log.hpp>
#include <gpumem/replay/replay.hpp>
#include <gpumem/replay/replay_resource.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <functional>
#include <iomanip>
#include <iostream>
#include <optional>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <unistd.h>

namespace gpumem::cli {
namespace {

struct replay_command {
  std::vector<std::string> logs;
  std::vector<std::string> resources;
  bool simulate{false};
  bool csv{false};
};

std::vector<std::string> parse_resources(std::string_view list, bool simulate)
{
  std::vector<std::string> names;
  while (!list.empty()) {
    std::size_t const comma = list.find(',');
    std::string_view const name = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    if (name.empty()) { continue; }
    replay_resource_info const* const info = find_replay_resource(name);
    if (info == nullptr) {
      throw usage_error("replay: unknown resource '" + std::string{name} + "'; valid resources: " +
                        replay_resource_names());
    }
    if (simulate && !info->simulatable) {
      throw usage_error("replay: resource '" + std::string{name} +
                        "' allocates real device memory and cannot be simulated; with --simulate use: " +
                        replay_resource_names(true));
    }
    if (std::find(names.begin(), names.end(), name) == names.end()) { names.emplace_back(name); }
  }
  if (names.empty()) { throw usage_error("replay: --resource names no resource; valid resources: " + replay_resource_names()); }
  return names;
}

replay_command parse(std::span<std::string_view const> args)
{
  replay_command c;
  std::optional<std::string_view> resource_list;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view const a = args[i];
    if (a == "--simulate") {
      c.simulate = true;
    } else if (a == "--csv") {
      c.csv = true;
    } else if (a == "--resource" || a == "-r") {
      if (i + 1 == args.size()) { throw usage_error("replay: --resource needs a value, e.g. --resource pool,binning"); }
      resource_list = args[++i];
    } else if (a.starts_with("--resource=")) {
      resource_list = a.substr(std::string_view{"--resource="}.size());
    } else if (a.starts_with("-") && a != "-") {
      throw usage_error("replay: unknown option '" + std::string{a} + "'");
    } else {
      c.logs.emplace_back(a);
    }
  }
  if (c.logs.empty()) { throw usage_error("replay: no log file given"); }
  if (resource_list) {
    c.resources = parse_resources(*resource_list, c.simulate);
  } else {
    for (auto const& info : replay_resources()) {
      if (!c.simulate || info.simulatable) { c.resources.emplace_back(info.name); }
    }
  }
  return c;
}

/// Bytes as "8.74 GiB" (table cells; --csv prints exact bytes).
std::string compact_bytes(std::size_t bytes)
{
  constexpr std::array<char const*, 5> units{"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < units.size()) {
    value /= 1024.0;
    ++unit;
  }
  std::ostringstream s;
  s << std::fixed << std::setprecision(unit == 0 ? 0 : 2) << value << ' ' << units[unit];
  return s.str();
}

/// A one-line percentage on stderr, redrawn in place; only when stderr is a terminal.
class progress_line {
 public:
  explicit progress_line(std::string label) : label_{std::move(label)}, enabled_{::isatty(STDERR_FILENO) == 1} {}
  ~progress_line() { clear(); }
  progress_line(progress_line const&) = delete;
  progress_line& operator=(progress_line const&) = delete;

  /// Erases the line, so that what follows on the terminal starts clean.
  void clear() noexcept
  {
    if (drawn_) { std::fputs("\r\033[K", stderr); }
    drawn_ = false;
  }

  std::function<void(double)> callback()
  {
    if (!enabled_) { return {}; }
    return [this](double fraction) {
      std::fprintf(stderr, "\r  replaying %s: %3d%%", label_.c_str(), static_cast<int>(fraction * 100.0));
      std::fflush(stderr);
      drawn_ = true;
    };
  }

 private:
  std::string label_;
  bool enabled_;
  bool drawn_{false};
};

void print_table_header(std::ostream& out)
{
  out << std::left << std::setw(11) << "resource" << std::right << std::setw(10) << "ns/op" << std::setw(15)
      << "peak upstream" << std::setw(13) << "peak live" << std::setw(9) << "ratio" << std::setw(10) << "failures"
      << std::setw(15) << "unknown frees" << '\n';
}

}  // namespace

int run_replay(std::span<std::string_view const> args, std::ostream& out)
{
  replay_command const c = parse(args);
  if (c.csv) {
    out << "log,resource,ops,ns_per_op,peak_upstream_bytes,peak_live_bytes,ratio,failures,unknown_frees,"
           "log_failures,log_failures_reproduced,reserves_upfront\n";
  }
  for (std::string const& path : c.logs) {
    allocation_log const log = read_allocation_log(path);
    if (!c.csv) {
      out << "log: " << path << " (" << log.events.size() << " events, peak live " << compact_bytes(peak_live_bytes(log))
          << (c.simulate ? "; simulated upstream" : "") << ")\n";
      print_table_header(out);
    }
    bool any_upfront = false;
    for (std::string const& name : c.resources) {
      replay_resource r = make_replay_resource(name, {.simulate = c.simulate});
      progress_line progress{path + " on " + name};
      replay_result const result = replay(log, r, {.progress = progress.callback()});
      progress.clear();
      any_upfront = any_upfront || r.reserves_upfront();
      std::size_t const upstream = result.peak_upstream_bytes.value_or(0);
      if (c.csv) {
        out << path << ',' << name << ',' << result.ops << ',' << std::fixed << std::setprecision(1)
            << result.ns_per_op << ',' << upstream << ',' << result.peak_live_bytes << ',' << std::setprecision(4)
            << result.fragmentation.value_or(0.0) << ',' << result.failures << ',' << result.unknown_frees << ','
            << result.log_failures << ',' << result.log_failures_reproduced << ',' << (r.reserves_upfront() ? 1 : 0)
            << '\n';
      } else {
        std::ostringstream ratio;
        if (result.fragmentation) {
          ratio << std::fixed << std::setprecision(3) << *result.fragmentation << (r.reserves_upfront() ? "*" : "");
        } else {
          ratio << '-';
        }
        std::ostringstream ns;
        ns << std::fixed << std::setprecision(1) << result.ns_per_op;
        out << std::left << std::setw(11) << name << std::right << std::setw(10) << ns.str() << std::setw(15)
            << compact_bytes(upstream) << std::setw(13) << compact_bytes(result.peak_live_bytes) << std::setw(9)
            << ratio.str() << std::setw(10) << result.failures << std::setw(15) << result.unknown_frees << '\n';
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

}  // namespace gpumem::cli
