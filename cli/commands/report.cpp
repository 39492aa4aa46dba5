// `gpumem report LOG [--resource a,b] [--simulate] [-o FILE]`: replays one allocation log against each
// resource twice (once for ns/op, once with a timeline for the plots) and writes the HTML page of
// report/html_report.hpp. The output file is created (as a temporary file beside it) before the first
// replay, so that an unwritable path fails at once, and replaces FILE only once the page is whole. The
// replay and the page are the library's; this file parses the command line.
#include "commands.hpp"
#include "report_builder.hpp"
#include "resource_selection.hpp"

#include <gpumem/replay/log_source.hpp>
#include <gpumem/report/staged_file.hpp>

#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gpumem::cli {
namespace {

struct report_command {
  std::string log;
  std::string output{"report.html"};
  std::vector<std::string> resources;
  bool simulate{false};
};

report_command parse(std::span<std::string_view const> args)
{
  report_command c;
  std::optional<std::string_view> resource_list;
  std::vector<std::string_view> logs;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view const a = args[i];
    if (a == "--simulate") {
      c.simulate = true;
    } else if (a == "--resource" || a == "-r") {
      if (i + 1 == args.size()) { throw usage_error("report: --resource needs a value, e.g. --resource pool,binning"); }
      resource_list = args[++i];
    } else if (a.starts_with("--resource=")) {
      resource_list = a.substr(std::string_view{"--resource="}.size());
    } else if (a == "-o" || a == "--output") {
      if (i + 1 == args.size()) { throw usage_error("report: " + std::string{a} + " needs a file name"); }
      c.output = args[++i];
    } else if (a.starts_with("--output=")) {
      c.output = a.substr(std::string_view{"--output="}.size());
    } else if (a.starts_with("-") && a != "-") {
      throw usage_error("report: unknown option '" + std::string{a} + "'");
    } else {
      logs.push_back(a);
    }
  }
  if (logs.size() != 1) {
    throw usage_error(logs.empty() ? "report: no log file given" : "report: one log file per report, not " +
                                                                       std::to_string(logs.size()));
  }
  c.log = logs.front();
  c.resources = select_replay_resources(resource_list, c.simulate, "report");
  return c;
}

}  // namespace

int run_report(std::span<std::string_view const> args, std::ostream& out)
{
  report_command const c = parse(args);
  std::string const command = command_line("report", args);

  staged_file page{c.output};
  log_source log{c.log};
  report_input const input = build_report(log, c.resources, c.simulate, command, out);
  page.write(render_html_report(input));
  page.commit();
  out << "wrote " << c.output << '\n';
  return 0;
}

}  // namespace gpumem::cli
