// The `gpumem` subcommands. Each adds itself to the command line (its options, their help and their checks)
// and returns what runs it once the command line is parsed; errors propagate as exceptions, which main()
// reports. A command line that cannot be understood is a CLI::ParseError (CLI11), raised while parsing.
#pragma once

#include <cstddef>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
class Validator;
}  // namespace CLI

namespace gpumem::cli {

/// Exit status for a command line that cannot be understood.
inline constexpr int exit_usage = 2;

/**
 * @brief Runs a parsed subcommand, printing to `out`. `command_line` is the command line as typed (for a
 * report's header).
 * @return the process exit status.
 */
using command_runner = std::function<int(std::string const& command_line, std::ostream& out)>;

/// A subcommand on `gpumem`'s command line: its parser (options, help, checks) and what runs it.
struct command {
  CLI::App* parser;
  command_runner run;
};

/// `gpumem info`: backend, runtime and driver versions, and every device's properties and memory.
command add_info(CLI::App& gpumem);

/// `gpumem demo [--elements N] [--log FILE] [-o FILE] [--simulate]`: a stream-ordered allocate / fill /
/// memset / copy back / verify round trip, then a real program's log replayed and written as a report.
command add_demo(CLI::App& gpumem);

/// `gpumem replay LOG [LOG...] [--resource a,b] [--simulate] [--repeat N] [--csv] ...`: replays allocation logs
/// against resources by name and prints, per log, a table of ns/op (the median of N interleaved runs), peak
/// upstream and live bytes, their ratio, failures and unknown frees (docs/formats.md).
command add_replay(CLI::App& gpumem);

/// `gpumem report LOG [--resource a,b] [--simulate] [--timeline FILE] [-o FILE]`: replays one log against resources
/// and writes a self-contained HTML page with plots (report/html_report.hpp), and the program's allocation timeline
/// when one is given.
command add_report(CLI::App& gpumem);

/// `gpumem bench [--workload LIST] [--resource LIST] [--repeat N] [--quick] [--csv]`: docs/benchmarks.md's
/// allocation workloads (bench/workload.hpp) on resources by name; a table, or CSV.
command add_bench(CLI::App& gpumem);

/// A check that a value is a whole number in [minimum, maximum]; otherwise its message is
/// "<requirement>, not '<value>'" (CLI11 prefixes the option's name).
CLI::Validator whole_number(std::size_t minimum, std::size_t maximum, std::string requirement);

/// Adds `-r,--resource LIST` (comma-separated resource names) to `command`; selected_resources() reads it.
CLI::Option* add_resource_option(CLI::App& command);

/**
 * @brief The resources that `option` (from add_resource_option) names, or every replayable one when it was
 * not given (select_replay_resources in resource_selection.hpp).
 * @throws CLI::ValidationError for a list the registry rejects.
 */
[[nodiscard]] std::vector<std::string> selected_resources(CLI::Option const& option, bool simulate);

}  // namespace gpumem::cli
