// `gpumem`: the command-line front end. Parses the subcommand, runs it, and maps failures to exit codes:
// 0 success, 1 a failed check or any error ("gpumem: error: ..."; output that could not be written too), 2 a
// command line it cannot understand.
// The commands themselves live in commands/; the logic they show lives in the library.
#include "commands.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr std::string_view usage =
  "usage: gpumem <command> [options]\n"
  "\n"
  "commands:\n"
  "  info                  backend, CUDA runtime and driver versions, devices and their memory\n"
  "  demo [--elements N]   allocate, fill, memset, copy back and verify device buffers on a stream\n"
  "                        (N int32 elements per buffer, default 4194304)\n"
  "  replay LOG [LOG...] [--resource LIST] [--simulate] [--slab-mib N] [--mapping-mib N]\n"
  "         [--mapping-divisor N] [--repeat N] [--csv]\n"
  "                        replay allocation logs (RMM CSV, plain or gzip; LOG may be - for standard\n"
  "                        input, a pipe or a FIFO) against resources and print\n"
  "                        ns/op, peak upstream and live bytes, their ratio, failures, unknown frees;\n"
  "                        LIST: comma-separated, from pool,vmm,arena,binning,cuda_async,cuda (default:\n"
  "                        all); --simulate: pool/vmm/arena/binning over a simulated 1 TiB upstream (no\n"
  "                        memory used); --slab-mib: the vmm pool's slab size (default 32);\n"
  "                        --mapping-mib: its largest piece of physical memory (default: one slab);\n"
  "                        --mapping-divisor: pieces of up to 1/N of its physical memory (default\n"
  "                        64; 0: pieces of --mapping-mib);\n"
  "                        --repeat: N runs per resource, taking turns; ns/op is their median\n"
  "\n"
  "options:\n"
  "  -h, --help            print this help\n"
  "  -V, --version         print gpumem's version\n"
  "\n"
  "environment:\n"
  "  GPUMEM_BACKEND=cuda|host   force a backend (default: cuda when a device is present, else host)\n"
  "  GPUMEM_HOST_MEMORY=BYTES   capacity of each emulated device under the host backend\n";

int run_command(int argc, char** argv)
{
  std::vector<std::string_view> const args(argv + (argc > 0 ? 1 : 0), argv + argc);
  if (args.empty()) {
    std::cerr << usage;
    return gpumem::cli::exit_usage;
  }
  std::string_view const command = args.front();
  std::span<std::string_view const> const rest = std::span{args}.subspan(1);
  try {
    if (command == "-h" || command == "--help" || command == "help") {
      std::cout << usage;
      return 0;
    }
    if (command == "-V" || command == "--version" || command == "version") {
      std::cout << "gpumem " << GPUMEM_VERSION_STRING << '\n';
      return 0;
    }
    if (command == "info") { return gpumem::cli::run_info(rest, std::cout); }
    if (command == "demo") { return gpumem::cli::run_demo(rest, std::cout); }
    if (command == "replay") { return gpumem::cli::run_replay(rest, std::cout); }
    if (command == "report") { return gpumem::cli::run_report(rest, std::cout); }
    if (command == "bench") { return gpumem::cli::run_bench(rest, std::cout); }
    std::cerr << "gpumem: unknown command '" << command << "'\n\n" << usage;
    return gpumem::cli::exit_usage;
  } catch (gpumem::cli::usage_error const& e) {
    std::cerr << "gpumem: " << e.what() << "\n\n" << usage;
    return gpumem::cli::exit_usage;
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
