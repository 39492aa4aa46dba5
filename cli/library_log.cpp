// library_log.hpp: a log handler that counts lines per level and keeps the first.
#include "library_log.hpp"

#include <cstdlib>
#include <ostream>

namespace gpumem::cli {

namespace {
/// "1 warning", "300 warnings", "2 debug lines".
std::string count_of(std::size_t count, log_level level)
{
  std::string_view noun = "line";
  switch (level) {
    case log_level::trace: noun = "trace line"; break;
    case log_level::debug: noun = "debug line"; break;
    case log_level::info: noun = "info line"; break;
    case log_level::warn: noun = "warning"; break;
    case log_level::error: noun = "error"; break;
    case log_level::off: break;
  }
  return std::to_string(count) + " " + std::string{noun} + (count == 1 ? "" : "s");
}
}  // namespace

library_log_summary::library_log_summary()
{
  if (char const* const file = std::getenv("GPUMEM_DEBUG_LOG_FILE"); file != nullptr && *file != '\0') { return; }
  tally_ = std::make_shared<tally>();
  set_log_handler([tally = tally_](log_level level, std::string_view message) {
    std::lock_guard const lock{tally->mutex};
    ++tally->lines.at(static_cast<std::size_t>(level));
    if (tally->first.empty()) { tally->first = message; }
  });
}

library_log_summary::~library_log_summary()
{
  if (tally_) { set_log_handler({}); }
}

void library_log_summary::report(std::ostream& out, std::string_view what)
{
  if (!tally_) { return; }
  std::lock_guard const lock{tally_->mutex};
  std::string counts;
  for (std::size_t level = tally_->lines.size(); level-- > 0;) {
    if (tally_->lines[level] == 0) { continue; }
    counts += (counts.empty() ? "" : ", ") + count_of(tally_->lines[level], static_cast<log_level>(level));
  }
  if (counts.empty()) { return; }
  out << "gpumem: " << what << ": the library logged " << counts << "; the first: " << tally_->first << '\n';
  tally_->lines = {};
  tally_->first.clear();
}

void library_log_summary::discard()
{
  if (!tally_) { return; }
  std::lock_guard const lock{tally_->mutex};
  tally_->lines = {};
  tally_->first.clear();
}

}  // namespace gpumem::cli
