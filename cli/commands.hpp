// The `gpumem` subcommands. Each takes its own arguments (after the subcommand's name), prints to `out`,
// and returns the process exit status; errors propagate as exceptions, which main() reports.
#pragma once

#include <cstddef>
#include <iosfwd>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

namespace gpumem::cli {

/// Exit status for a command line that cannot be understood.
inline constexpr int exit_usage = 2;

/// A command line that cannot be understood: main() prints the message and the usage, and exits with 2.
class usage_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// The value of `option` (an integer in [minimum, 1000]) for `command`. @throws usage_error naming both otherwise.
std::size_t parse_count(std::string_view text, std::string_view option, std::string_view command,
                        std::size_t minimum = 1);

/// "gpumem COMMAND ARG...": the command line as the user typed it, for a report's header.
[[nodiscard]] std::string command_line(std::string_view command, std::span<std::string_view const> args);

/// `gpumem info`: backend, runtime and driver versions, and every device's properties and memory.
int run_info(std::span<std::string_view const> args, std::ostream& out);

/// `gpumem demo [--elements N]`: a stream-ordered allocate / fill / memset / copy back / verify round trip.
int run_demo(std::span<std::string_view const> args, std::ostream& out);

/// `gpumem replay LOG [LOG...] [--resource a,b] [--simulate] [--repeat N] [--csv]`: replays allocation logs
/// against resources by name and prints, per log, a table of ns/op (the median of N interleaved runs), peak
/// upstream and live bytes, their ratio, failures and unknown frees (docs/formats.md).
int run_replay(std::span<std::string_view const> args, std::ostream& out);

/// `gpumem report LOG [--resource a,b] [--simulate] [-o FILE]`: replays one log against resources and writes a
/// self-contained HTML page with plots (report/html_report.hpp).
int run_report(std::span<std::string_view const> args, std::ostream& out);

/// `gpumem bench [--workload LIST] [--resource LIST] [--repeat N] [--quick] [--csv]`: docs/benchmarks.md's
/// allocation workloads (bench/workload.hpp) on resources by name; a table, or CSV.
int run_bench(std::span<std::string_view const> args, std::ostream& out);

}  // namespace gpumem::cli
