// The debug log (debug_log.hpp): an atomic threshold checked inline, the environment read once, and one
// mutex around the destination.

#include <gpumem/debug_log.hpp>
#include <gpumem/error.hpp>

#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <utility>

namespace gpumem {
namespace {

constexpr log_level default_level = log_level::warn;

struct log_state {
  std::mutex mutex;
  std::FILE* file{nullptr};  // guarded by mutex: nullptr means stderr; otherwise owned
  log_level level{default_level};  // guarded by mutex: the configured level (log_threshold mirrors it)
  std::function<void(log_level, std::string_view)> handler;  // guarded by mutex: empty means the file
  log_level flush_level{log_level::trace};  // guarded by mutex: lines at least this severe are flushed at once
};

log_state& state()
{
  static log_state* const instance = new log_state{};  // never destroyed: usable in static destructors
  return *instance;
}

std::once_flag environment_read;

/// @pre state().mutex is held.
void set_file_locked(std::FILE* file)
{
  log_state& s = state();
  if (s.file != nullptr) { std::fclose(s.file); }
  s.file = file;
}

std::FILE* open_file(std::string const& path, std::string& error)
{
  std::FILE* const file = std::fopen(path.c_str(), "a");
  if (file == nullptr) { error = std::strerror(errno); }
  return file;
}

void read_environment() noexcept
{
  log_level level = default_level;
  if (char const* const text = std::getenv("GPUMEM_LOG_LEVEL"); text != nullptr && *text != '\0') {
    if (auto const parsed = parse_log_level(text)) {
      level = *parsed;
    } else {
      std::fprintf(stderr, "gpumem: GPUMEM_LOG_LEVEL='%s' is not a level (trace, debug, info, warn, error, off); "
                           "using warn\n", text);
    }
  }
  std::FILE* file = nullptr;
  if (char const* const path = std::getenv("GPUMEM_DEBUG_LOG_FILE"); path != nullptr && *path != '\0') {
    try {
      std::string error;
      file = open_file(path, error);
      if (file == nullptr) {
        std::fprintf(stderr, "gpumem: cannot open GPUMEM_DEBUG_LOG_FILE='%s' (%s); logging to stderr\n", path,
                     error.c_str());
      }
    } catch (...) {
      file = nullptr;
    }
  }
  log_state& s = state();
  std::lock_guard const lock{s.mutex};
  set_file_locked(file);
  s.level = level;
  detail::log_threshold.store(static_cast<int>(level), std::memory_order_relaxed);
}

void ensure_environment_read() noexcept
{
  try {
    std::call_once(environment_read, read_environment);
  } catch (...) {  // call_once itself failing: keep the defaults
  }
}

}  // namespace

namespace detail {
std::atomic<int> log_threshold{static_cast<int>(log_level::trace)};

void write_log(log_level level, std::string_view message) noexcept
{
  ensure_environment_read();
  if (!log_enabled(level) || level == log_level::off) { return; }
  {
    log_state& s = state();
    std::lock_guard const lock{s.mutex};
    if (s.handler) {
      try {
        s.handler(level, message);
      } catch (...) {  // logging must never change what the caller does
      }
      return;
    }
  }
  auto const now = std::chrono::system_clock::now();
  auto const micros = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
  std::time_t const seconds = static_cast<std::time_t>(micros / 1'000'000);
  std::tm local{};
  if (::localtime_r(&seconds, &local) == nullptr) { local = std::tm{}; }
  std::string_view const name = to_string(level);
  log_state& s = state();
  std::lock_guard const lock{s.mutex};
  std::FILE* const out = s.file != nullptr ? s.file : stderr;
  std::fprintf(out, "[gpumem %02d:%02d:%02d.%06lld] [%.*s] %.*s\n", local.tm_hour, local.tm_min, local.tm_sec,
               static_cast<long long>(micros % 1'000'000), static_cast<int>(name.size()), name.data(),
               static_cast<int>(message.size()), message.data());
  if (level >= s.flush_level) { std::fflush(out); }
}
}  // namespace detail

void set_log_handler(std::function<void(log_level, std::string_view)> handler)
{
  ensure_environment_read();
  log_state& s = state();
  std::lock_guard const lock{s.mutex};
  s.handler = std::move(handler);
}

std::string_view to_string(log_level level) noexcept
{
  switch (level) {
    case log_level::trace: return "trace";
    case log_level::debug: return "debug";
    case log_level::info: return "info";
    case log_level::warn: return "warn";
    case log_level::error: return "error";
    case log_level::off: return "off";
  }
  return "unknown";
}

std::optional<log_level> parse_log_level(std::string_view text) noexcept
{
  std::array<char, 16> lower{};
  if (text.empty() || text.size() >= lower.size()) { return std::nullopt; }
  for (std::size_t i = 0; i < text.size(); ++i) {
    lower[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  }
  std::string_view const name{lower.data(), text.size()};
  if (name == "warning") { return log_level::warn; }
  for (log_level const level : {log_level::trace, log_level::debug, log_level::info, log_level::warn,
                                log_level::error, log_level::off}) {
    if (name == to_string(level)) { return level; }
  }
  return std::nullopt;
}

void set_log_level(log_level level) noexcept
{
  ensure_environment_read();  // so that the environment, read later, cannot override this call
  log_state& s = state();
  std::lock_guard const lock{s.mutex};
  s.level = level;
  detail::log_threshold.store(static_cast<int>(level), std::memory_order_relaxed);
}

log_level get_log_level() noexcept
{
  ensure_environment_read();
  log_state& s = state();
  std::lock_guard const lock{s.mutex};
  return s.level;
}

void set_log_file(std::string const& path)
{
  ensure_environment_read();
  std::FILE* file = nullptr;
  if (!path.empty()) {
    std::string error;
    file = open_file(path, error);
    if (file == nullptr) { throw logic_error("set_log_file: cannot open '" + path + "' for appending: " + error); }
  }
  log_state& s = state();
  std::lock_guard const lock{s.mutex};
  set_file_locked(file);
}

void set_flush_level(log_level level) noexcept
{
  log_state& s = state();
  std::lock_guard const lock{s.mutex};
  s.flush_level = level;
}

log_level get_flush_level() noexcept
{
  log_state& s = state();
  std::lock_guard const lock{s.mutex};
  return s.flush_level;
}

void flush_log() noexcept
{
  log_state& s = state();
  std::lock_guard const lock{s.mutex};
  std::fflush(s.file != nullptr ? s.file : stderr);
}

void configure_log_from_environment() noexcept
{
  ensure_environment_read();
  read_environment();
}

}  // namespace gpumem
