// `gpumem report LOG [--resource a,b] [--simulate] [--timeline FILE] [-o FILE]`: replays one allocation log
// against each resource twice (once for ns/op, once with a timeline for the plots) and writes the HTML page of
// report/html_report.hpp, with the allocation timeline of FILE (report/allocation_timeline.hpp) when given; the
// timeline is read before the first replay, so that a malformed one fails at once. The output file is created
// (as a temporary file beside it) before the first replay, so that an unwritable path fails at once, and
// replaces FILE only once the page is whole. The replay and the page are the library's; this file declares
// the command line.
#include "commands.hpp"
#include "report_builder.hpp"

#include <gpumem/replay/log_source.hpp>
#include <gpumem/report/allocation_timeline.hpp>
#include <gpumem/report/staged_file.hpp>

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace gpumem::cli {
namespace {

struct report_command {
  std::string log;
  std::string output{"report.html"};
  std::vector<std::string> resources;
  std::string timeline;
  bool simulate{false};
};

int run_report(report_command const& c, std::string const& command, std::ostream& out)
{
  staged_file page{c.output};
  log_source log{c.log};
  std::optional<allocation_timeline> timeline;
  if (!c.timeline.empty()) { timeline = read_allocation_timeline(c.timeline); }
  report_input input = build_report(log, c.resources, c.simulate, command, out);
  input.timeline = std::move(timeline);
  page.write(render_html_report(input));
  page.commit();
  out << "wrote " << c.output << '\n';
  return 0;
}

}  // namespace

command add_report(CLI::App& gpumem)
{
  auto const c = std::make_shared<report_command>();
  CLI::App* const parser = gpumem.add_subcommand(
    "report", "replay one allocation log against resources and write an HTML page with plots");
  parser->add_option("LOG", c->log, "the allocation log (RMM CSV, plain or gzip); - for standard input")
    ->type_name("FILE")
    ->required();
  CLI::Option* const resource = add_resource_option(*parser);
  parser->add_flag("--simulate", c->simulate,
                   "pool, vmm, arena and binning over a simulated 1 TiB upstream (no memory used)");
  parser->add_option("--timeline", c->timeline,
                     "the program's allocation timeline (docs/formats.md), drawn in its own section")
    ->type_name("FILE");
  parser->add_option("-o,--output", c->output, "the page to write (default " + c->output + ")")->type_name("FILE");
  parser->parse_complete_callback([c, resource] { c->resources = selected_resources(*resource, c->simulate); });
  return {parser, [c](std::string const& command, std::ostream& out) { return run_report(*c, command, out); }};
}

}  // namespace gpumem::cli
