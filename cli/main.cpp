// `gpumem`: the command-line front end. Builds the command line (CLI11: every subcommand's options, their
// help and their checks), runs the subcommand given, and maps failures to exit codes: 0 success, 1 a failed
// check or any error ("gpumem: error: ..."; output that could not be written too), 2 a command line it cannot
// understand ("gpumem: COMMAND: what was wrong").
// The commands themselves live in commands/; the logic they show lives in the library.
#include "commands.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

namespace {

constexpr char const* environment_help =
  "Environment:\n"
  "  GPUMEM_BACKEND=cuda|host   force a backend (default: cuda when a device is present, else host)\n"
  "  GPUMEM_HOST_MEMORY=BYTES   capacity of each emulated device under the host backend\n";

/// "gpumem ARG...": the command line as typed, for a report's header.
std::string typed_command_line(int argc, char** argv)
{
  // Appended piece by piece: GCC 12 reports a false -Wrestrict on `text += " " + std::string{a}` at -O3.
  std::string text = "gpumem";
  for (int i = 1; i < argc; ++i) {
    text += ' ';
    text += argv[i];
  }
  return text;
}

/// Reports a command line that cannot be understood, naming the subcommand it concerns; @return exit_usage.
int report_usage_error(CLI::App const& gpumem, CLI::ParseError const& e)
{
  std::vector<CLI::App*> const given = gpumem.get_subcommands();  // the one being parsed, if any
  if (given.empty()) {
    std::cerr << "gpumem: " << e.what() << "\n\n" << gpumem.help();
  } else {
    std::string const name = given.front()->get_name();
    std::cerr << "gpumem: " << name << ": " << e.what() << "\nrun 'gpumem " << name << " --help' for its options\n";
  }
  return gpumem::cli::exit_usage;
}

/// Parses the command line and runs the subcommand it names. @return the exit status.
int parse_and_run(int argc, char** argv)
{
  CLI::App gpumem{"gpumem: GPU memory resources, their allocation logs, replays and benchmarks", "gpumem"};
  gpumem.set_help_flag("-h,--help", "print this help");
  gpumem.set_version_flag("-V,--version", std::string{"gpumem "} + GPUMEM_VERSION_STRING, "print gpumem's version");
  gpumem.require_subcommand(0, 1);  // after a command, another command's name is one of its arguments
  gpumem.footer(environment_help);
  std::vector<gpumem::cli::command> const commands{gpumem::cli::add_info(gpumem), gpumem::cli::add_demo(gpumem),
                                                   gpumem::cli::add_replay(gpumem), gpumem::cli::add_report(gpumem),
                                                   gpumem::cli::add_bench(gpumem)};
  CLI::App* const help = gpumem.add_subcommand("help", "print this help");
  CLI::App* const version = gpumem.add_subcommand("version", "print gpumem's version")->group("");
  try {
    gpumem.parse(argc, argv);
  } catch (CLI::ParseError const& e) {
    if (e.get_exit_code() == 0) { return gpumem.exit(e); }  // --help, --version
    return report_usage_error(gpumem, e);
  }

  if (help->parsed()) {  // gpumem.help() would print the help of `help`
    std::cout << gpumem.get_formatter()->make_help(&gpumem, "gpumem", CLI::AppFormatMode::Normal);
    return 0;
  }
  if (version->parsed()) {
    std::cout << "gpumem " << GPUMEM_VERSION_STRING << '\n';
    return 0;
  }
  auto const given = std::find_if(commands.begin(), commands.end(), [](auto const& c) { return c.parser->parsed(); });
  if (given == commands.end()) {  // no command: the help, as an error
    std::cerr << gpumem.help();
    return gpumem::cli::exit_usage;
  }
  return given->run(typed_command_line(argc, argv), std::cout);
}

int run_command(int argc, char** argv)
{
  try {
    return parse_and_run(argc, argv);
  } catch (std::exception const& e) {
    std::cout.flush();
    std::cerr << "gpumem: error: " << e.what() << '\n';
    return 1;
  } catch (...) {
    std::cout.flush();
    std::cerr << "gpumem: error: unknown exception\n";
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv)
{
  int const status = run_command(argc, argv);
  // Output that could not be written (a full disk, /dev/full) must not pass for a success. The reason is
  // known only when the last flush is the one that failed.
  errno = 0;
  bool const written = static_cast<bool>(std::cout.flush()) && std::fflush(stdout) == 0 && std::ferror(stdout) == 0;
  if (!written) {
    int const error = errno;
    std::cerr << "gpumem: error: cannot write the output to standard output"
              << (error != 0 ? std::string{": "} + std::strerror(error) : std::string{" (what was printed is incomplete)"})
              << '\n';
    return 1;
  }
  return status;
}
