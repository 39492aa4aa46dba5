// allocation_log.hpp: the error type, and whole logs in memory, read with allocation_log_reader
// (log_reader.hpp) row by row.
#include <gpumem/replay/allocation_log.hpp>

#include <gpumem/replay/log_reader.hpp>

#include "replay/live_bytes.hpp"

#include <string>
#include <unordered_map>
#include <utility>

namespace gpumem {

namespace {
/// "FILE:LINE: PROBLEM", or "FILE: PROBLEM" for line 0. Appended piece by piece: GCC 12 reports a false
/// -Wrestrict on the equivalent chain of operator+ at -O3 (GCC bug 105329).
std::string format_error_message(std::string const& file, std::size_t line, std::string const& problem)
{
  std::string message = file;
  if (line != 0) {
    message += ':';
    message += std::to_string(line);
  }
  message += ": ";
  message += problem;
  return message;
}

allocation_log read_all(allocation_log_reader reader)
{
  allocation_log log;
  log.source = reader.source();
  while (std::optional<log_event> const event = reader.next()) { log.events.push_back(*event); }
  return log;
}
}  // namespace

log_format_error::log_format_error(std::string file, std::size_t line, std::string const& problem)
  : logic_error(format_error_message(file, line, problem)),
    file_{std::move(file)},
    line_{line}
{
}

std::string_view to_string(log_action action) noexcept
{
  switch (action) {
    case log_action::allocate: return "allocate";
    case log_action::free: return "free";
    case log_action::allocate_failure: return "allocate failure";
  }
  return "unknown";
}

allocation_log read_allocation_log(std::filesystem::path const& path)
{
  return read_all(allocation_log_reader{path});
}

allocation_log parse_allocation_log(std::string_view text, std::string_view source_name)
{
  return read_all(allocation_log_reader::from_text(std::string{text}, std::string{source_name}));
}

std::size_t peak_live_bytes(allocation_log const& log)
{
  std::unordered_map<std::uintptr_t, std::size_t> live;
  detail::live_bytes_meter meter;
  for (log_event const& e : log.events) {
    if (e.action == log_action::allocate) {
      auto const [it, inserted] = live.try_emplace(e.pointer, e.size);
      if (!inserted) {  // the log lost the free of the previous block at this address
        meter.subtract(it->second);
        it->second = e.size;
      }
      meter.add(e.size);
    } else if (e.action == log_action::free) {
      if (auto const it = live.find(e.pointer); it != live.end()) {
        meter.subtract(it->second);
        live.erase(it);
      }
    }
  }
  return meter.peak();
}

}  // namespace gpumem
