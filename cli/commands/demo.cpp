// `gpumem demo`: what gpumem does, in two parts.
// 1. One stream-ordered round trip through the current device resource, each step timed with events:
//    allocate two device_uvector<int32_t>, fill one from the host, memset the other, copy both back, verify
//    every element, deallocate. Exit status 1 on any mismatch.
// 2. The bundled allocation log of a real GPU program (data/logs/, recorded with logging_resource_adaptor)
//    replayed against every resource, printed as a table and written as the HTML report of `gpumem report`.
#include "commands.hpp"
#include "compact_bytes.hpp"
#include "report_builder.hpp"
#include "resource_selection.hpp"

#include <gpumem/buffer/device_uvector.hpp>
#include <gpumem/cuda_stream.hpp>
#include <gpumem/device.hpp>
#include <gpumem/error.hpp>
#include <gpumem/event.hpp>
#include <gpumem/mr/per_device_resource.hpp>
#include <gpumem/replay/log_source.hpp>
#include <gpumem/report/html_report.hpp>
#include <gpumem/report/staged_file.hpp>
#include <gpumem/transfer.hpp>

#include <CLI/CLI.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace gpumem::cli {
namespace {

constexpr std::size_t default_elements = std::size_t{1} << 22;  // 4 Mi int32 = 16 MiB per buffer
/// The most elements whose two buffers' bytes still fit in a size_t.
constexpr std::size_t max_elements = std::numeric_limits<std::size_t>::max() / (2 * sizeof(std::int32_t));
constexpr unsigned char fill_byte = 0x5a;
constexpr std::int32_t fill_value = 0x5a5a5a5a;

/// The host pattern: distinct neighbours, every bit position used, cheap to recompute when verifying.
constexpr std::int32_t pattern(std::size_t i) noexcept
{
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(i) * 2654435761U);
}

/// The log `gpumem demo` replays: recorded from examples/thrust_pipeline on a GPU (docs/formats.md).
constexpr char const* bundled_log_name = "logs/thrust_pipeline.csv.gz";

struct demo_command {
  std::size_t elements{default_elements};
  std::optional<std::string> log;  // default: the bundled log
  std::string report{"gpumem-demo-report.html"};
  bool simulate{false};
};

/// The bundled log: in the source tree's data/ (a build tree), else where `cmake --install` put it.
std::string find_bundled_log()
{
  std::vector<std::filesystem::path> const candidates{
    std::filesystem::path{GPUMEM_SOURCE_DATA_DIR} / bundled_log_name,
    std::filesystem::path{GPUMEM_INSTALL_DATA_DIR} / bundled_log_name};
  std::string searched;
  for (auto const& path : candidates) {
    if (std::filesystem::is_regular_file(path)) { return path.string(); }
    searched += (searched.empty() ? "" : ", ") + path.string();
  }
  throw logic_error("demo: the bundled allocation log is missing (looked at " + searched +
                    "); give one with --log FILE");
}

/// Times one step on `stream` with a pair of events and prints "  <what> ... <ms> ms [<GB/s>]".
class step_timer {
 public:
  step_timer(cuda_stream_view stream, std::ostream& out) : stream_{stream}, out_{out} {}

  template <class Step>
  void operator()(std::string const& what, std::size_t bytes_moved, Step&& step)
  {
    start_.record(stream_);
    step();
    end_.record(stream_);
    end_.synchronize();
    float const ms = event::elapsed_time(start_, end_);
    char line[160];
    if (bytes_moved != 0 && ms > 0.0F) {
      double const gb_per_s = static_cast<double>(bytes_moved) / (static_cast<double>(ms) * 1e6);
      std::snprintf(line, sizeof line, "%9.3f ms  %8.2f GB/s", static_cast<double>(ms), gb_per_s);
    } else {
      std::snprintf(line, sizeof line, "%9.3f ms", static_cast<double>(ms));
    }
    out_ << "  " << what << std::string(what.size() < 52 ? 52 - what.size() : 1, ' ') << line << '\n';
  }

 private:
  cuda_stream_view stream_;
  std::ostream& out_;
  event start_;
  event end_;
};

/// Index of the first element of `got` that differs from expected(i), or nullopt.
template <class Expected>
std::optional<std::size_t> first_mismatch(std::vector<std::int32_t> const& got, Expected expected)
{
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != expected(i)) { return i; }
  }
  return std::nullopt;
}

/// Part 1: the round trip. @return true when every element came back as written.
bool round_trip(std::size_t elements, std::ostream& out)
{
  std::size_t const bytes = elements * sizeof(std::int32_t);  // --elements is bounded: no overflow
  mr::device_memory_resource* const resource = mr::get_current_device_resource();
  cuda_device_id const device = get_current_cuda_device();
  // Two buffers larger than the whole device can never be allocated: say so before allocating anything,
  // host memory included.
  if (std::size_t const total = available_device_memory(device).total; 2 * bytes > total) {
    throw bad_alloc("demo: --elements " + std::to_string(elements) + " needs two buffers of " + format_bytes(bytes) +
                    ", more than device " + std::to_string(device.value()) + " has (" + format_bytes(total) +
                    "); give fewer elements");
  }

  out << "== 1. a stream-ordered round trip through the current device resource\n"
      << "backend: " << to_string(current_backend_kind()) << ", device " << device.value() << " ("
      << get_device_properties(device).name << ")\n"
      << "buffers: 2 x " << elements << " int32 = 2 x " << format_bytes(bytes) << '\n'
      << "device memory free before: " << format_bytes(available_device_memory(device).free) << '\n';

  cuda_stream stream;
  step_timer timed{stream.view(), out};
  std::vector<std::int32_t> host(elements);
  for (std::size_t i = 0; i < elements; ++i) { host[i] = pattern(i); }

  std::optional<device_uvector<std::int32_t>> a;
  std::optional<device_uvector<std::int32_t>> b;
  timed("allocate a (" + std::to_string(elements) + " x int32)", 0,
        [&] { a.emplace(elements, stream.view(), resource); });
  timed("allocate b (" + std::to_string(elements) + " x int32)", 0,
        [&] { b.emplace(elements, stream.view(), resource); });
  out << "device memory free after allocating: " << format_bytes(available_device_memory(device).free) << '\n';

  timed("copy host -> a", bytes,
        [&] { memcpy_async(a->data(), host.data(), bytes, stream.value()); });
  timed("memset b to 0x5a bytes", bytes, [&] { memset_async(b->data(), fill_byte, bytes, stream.value()); });

  std::vector<std::int32_t> a_back(elements);
  std::vector<std::int32_t> b_back(elements);
  timed("copy a -> host", bytes, [&] { memcpy_async(a_back.data(), a->data(), bytes, stream.value()); });
  timed("copy b -> host", bytes, [&] { memcpy_async(b_back.data(), b->data(), bytes, stream.value()); });

  timed("deallocate a and b", 0, [&] {
    a.reset();
    b.reset();
  });
  stream.synchronize();
  out << "device memory free after deallocating: " << format_bytes(available_device_memory(device).free) << '\n';

  bool ok = true;
  if (auto const bad = first_mismatch(a_back, pattern)) {
    out << "MISMATCH in a at element " << *bad << ": got " << a_back[*bad] << ", expected " << pattern(*bad) << '\n';
    ok = false;
  }
  if (auto const bad = first_mismatch(b_back, [](std::size_t) { return fill_value; })) {
    out << "MISMATCH in b at element " << *bad << ": got " << b_back[*bad] << ", expected " << fill_value << '\n';
    ok = false;
  }
  if (ok) { out << "verified " << 2 * elements << " elements (" << elements << " in a, " << elements << " in b)\n"; }
  return ok;
}

/// Part 2: the replay of a real program's log, and its report (into `page`, created before part 1).
void replay_and_report(demo_command const& c, std::string const& command, staged_file& page, std::ostream& out)
{
  log_source log{c.log ? *c.log : find_bundled_log()};
  out << "\n== 2. a real program's allocations replayed against every resource\n";
  std::vector<std::string> const resources = select_replay_resources(std::nullopt, c.simulate);
  report_input const input = build_report(log, resources, c.simulate, command, out);
  page.write(render_html_report(input));
  page.commit();
  out << "ratio = peak bytes taken from the device / peak bytes the program had live (1.000 is no waste)\n"
      << "wrote the report: " << std::filesystem::absolute(c.report).string() << " (open it in a browser)\n";
}

int run_demo(demo_command const& c, std::string const& command, std::ostream& out)
{
  staged_file page{c.report};  // an unwritable report path fails now, not after the work
  out << "gpumem demo\n";
  bool const ok = round_trip(c.elements, out);
  replay_and_report(c, command, page, out);
  if (!ok) {
    out << "demo FAILED\n";
    return 1;
  }
  out << "demo passed\n";
  return 0;
}

}  // namespace

command add_demo(CLI::App& gpumem)
{
  auto const c = std::make_shared<demo_command>();
  CLI::App* const parser = gpumem.add_subcommand(
    "demo", "a round trip through device buffers, then a real program's log replayed and written as a report");
  parser
    ->add_option("--elements", c->elements,
                 "int32 elements in each of the two device buffers (default " + std::to_string(default_elements) + ")")
    ->type_name("N")
    ->check(whole_number(1, max_elements,
                         "needs an integer from 1 to " + std::to_string(max_elements) +
                           " (two buffers of that many int32 must be countable in bytes)"));
  parser->add_option("--log", c->log, "the allocation log to replay (default: the bundled one, data/logs/)")
    ->type_name("FILE");
  parser->add_option("-o,--report", c->report, "where to write the HTML report (default " + c->report + ")")
    ->type_name("FILE");
  parser->add_flag("--simulate", c->simulate, "replay over a simulated 1 TiB upstream (no device memory used)");
  return {parser, [c](std::string const& command, std::ostream& out) { return run_demo(*c, command, out); }};
}

}  // namespace gpumem::cli
