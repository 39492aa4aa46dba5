// The fuzz target of the allocation log reader and replay: any bytes are read as a log (plain or gzip) and
// replayed, with a timeline, on a pool over a small simulated upstream, then drawn as a report page. Bad input
// must end in a gpumem::log_format_error; anything else that escapes (another exception, a crash, a leak,
// undefined behaviour under the sanitizers) is a finding. The replay's counts are checked against the
// in-memory reading of the same bytes.
//
// Built as a libFuzzer target with clang (GPUMEM_LIBFUZZER=ON), or with fuzz_driver.cpp, a deterministic
// mutation driver, which ctest runs (tests/fuzz/CMakeLists.txt).
#include <gpumem/debug_log.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>
#include <gpumem/replay/allocation_log.hpp>
#include <gpumem/replay/log_reader.hpp>
#include <gpumem/replay/replay.hpp>
#include <gpumem/report/html_report.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>

namespace {

/// Stops the process with a message: the fuzzer (or ctest) reports it as a crash.
void require(bool condition, char const* what)
{
  if (!condition) {
    std::fprintf(stderr, "log fuzz target: invariant broken: %s\n", what);
    std::abort();
  }
}

void replay_bytes(std::string const& bytes)
{
  gpumem::allocation_log_reader reader = gpumem::allocation_log_reader::from_text(bytes, "fuzz input");
  gpumem::mr::simulated_memory_resource upstream{std::size_t{64} << 20};
  gpumem::replay_result result;
  gpumem::report_input page;
  page.title = "fuzz";
  {
    gpumem::mr::pool_memory_resource pool{&upstream, 0};
    gpumem::report_resource entry{.name = "pool", .description = "", .result = {}, .timeline = {},
                                  .reserves_upfront = false};
    result = gpumem::replay(reader, pool,
                            {.peak_upstream_bytes = [&] { return upstream.peak_bytes_in_use(); },
                             .timeline = &entry.timeline,
                             .timeline_samples = 16,
                             .upstream_bytes = [&] { return upstream.bytes_in_use(); },
                             .max_streams = 3,
                             .on_rows = [&](std::span<gpumem::log_event const> rows) {
                               for (gpumem::log_event const& row : rows) { page.sizes.add(row); }
                             }});
    entry.result = result;
    page.resources.push_back(entry);
    require(pool.used_bytes() == 0, "the replay freed every block it allocated");
  }
  require(upstream.allocation_count() == 0, "the pool gave everything back to its upstream");
  require(upstream.invalid_deallocations() == 0, "every block was freed with its own size");
  require(result.ops == result.allocations + result.deallocations, "ops = allocations + deallocations");

  // The same bytes read whole into memory tell the same story.
  gpumem::allocation_log const whole = gpumem::parse_allocation_log(bytes, "fuzz input");
  require(whole.events.size() == result.events, "rows read whole = rows streamed");
  require(gpumem::peak_live_bytes(whole) == result.peak_live_bytes, "peak live bytes whole = streamed");
  page.log_events = result.events;
  page.log_peak_live_bytes = result.peak_live_bytes;
  require(!gpumem::render_html_report(page).empty(), "the page renders");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size)
{
  static bool const quiet = [] {
    gpumem::set_log_level(gpumem::log_level::off);  // the pool's out-of-memory warnings are expected here
    return true;
  }();
  (void)quiet;
  std::string const bytes(reinterpret_cast<char const*>(data), size);
  try {
    replay_bytes(bytes);
  } catch (gpumem::log_format_error const&) {  // bad input, reported as such: what is expected
  }
  return 0;
}
