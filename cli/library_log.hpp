// What the library logs while a command runs (debug_log.hpp), counted rather than printed line by line:
// a replay on a resource that fails 20 000 allocations would otherwise print 20 000 warnings of a few
// hundred bytes each, from inside its timed loop. After each run the command prints one line: how many of
// each level, and the first. With GPUMEM_DEBUG_LOG_FILE set, the user asked for every line in that file,
// and nothing is captured.
#pragma once

#include <gpumem/debug_log.hpp>

#include <array>
#include <cstddef>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace gpumem::cli {

class library_log_summary {
 public:
  /// Starts counting (unless GPUMEM_DEBUG_LOG_FILE is set).
  library_log_summary();
  /// Sends the log where it went before.
  ~library_log_summary();
  library_log_summary(library_log_summary const&) = delete;
  library_log_summary& operator=(library_log_summary const&) = delete;

  /**
   * @brief When anything was logged since the last call, prints one line to `out`:
   * "gpumem: WHAT: the library logged 20000 warnings; the first: MESSAGE", and counts afresh.
   */
  void report(std::ostream& out, std::string_view what);

  /// Forgets what was logged since the last call, for a run whose failures another line explains.
  void discard();

 private:
  struct tally {
    std::mutex mutex;
    std::array<std::size_t, 6> lines{};  // per log_level
    std::string first;
  };
  std::shared_ptr<tally> tally_;
};

}  // namespace gpumem::cli
