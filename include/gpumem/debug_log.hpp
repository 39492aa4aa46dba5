/**
 * @file debug_log.hpp
 * gpumem's own diagnostic log (not the allocation log of logging_resource_adaptor): rare events such as a
 * pool growing, shrinking or failing, at a level chosen at run time.
 *
 * - Level: GPUMEM_LOG_LEVEL = trace | debug | info | warn | error | off (case-insensitive; default warn),
 *   or set_log_level().
 * - Destination: the file GPUMEM_DEBUG_LOG_FILE names (appended to), else stderr; or set_log_file().
 * - Line format: `[gpumem HH:MM:SS.ffffff] [level] message`.
 *
 * Cost when a message's level is disabled: one relaxed atomic load and a compare (detail::log is inline);
 * pass the message as a callable returning it to avoid building the text at all.
 */
#pragma once

#include <gpumem/export.hpp>

#include <atomic>
#include <concepts>
#include <functional>
#include <type_traits>
#include <optional>
#include <string>
#include <string_view>

namespace gpumem {

/** @brief Severity of a debug log message; a message is written when its level >= the log's level. */
enum class log_level : int { trace = 0, debug = 1, info = 2, warn = 3, error = 4, off = 5 };

/** @return "trace", "debug", "info", "warn", "error" or "off". */
[[nodiscard]] GPUMEM_EXPORT std::string_view to_string(log_level level) noexcept;
/** @return the level named by `text` (case-insensitive; "warning" is warn), or nullopt. */
[[nodiscard]] GPUMEM_EXPORT std::optional<log_level> parse_log_level(std::string_view text) noexcept;

/** @brief Sets the level (overrides GPUMEM_LOG_LEVEL). Thread-safety: any thread, at any time. */
GPUMEM_EXPORT void set_log_level(log_level level) noexcept;
/** @return the current level. */
[[nodiscard]] GPUMEM_EXPORT log_level get_log_level() noexcept;
/**
 * @brief Lines of `level` or more severe are flushed to the destination as they are written; others stay in
 * the file's buffer until a later flush (stderr is unbuffered). Default: trace, every line at once.
 * Thread-safety: any thread, at any time.
 */
GPUMEM_EXPORT void set_flush_level(log_level level) noexcept;
/** @return the flush level (see set_flush_level). */
[[nodiscard]] GPUMEM_EXPORT log_level get_flush_level() noexcept;
/** @brief Writes every buffered line to the destination now. Never throws. */
GPUMEM_EXPORT void flush_log() noexcept;
/**
 * @brief Sends the log to the file `path` (appended to), or to stderr when `path` is empty.
 * @throws gpumem::logic_error if the file cannot be opened (the destination is then unchanged).
 */
GPUMEM_EXPORT void set_log_file(std::string const& path);
/**
 * @brief Sends every line that passes the level to `handler` (its level and message, without the time)
 * instead of the file or stderr; an empty handler sends them there again. For tools that count and
 * summarise what a long run logs (`gpumem replay` and `bench`).
 * Thread-safety: any thread, at any time; `handler` is called under the log's lock, one line at a time, so
 * it must not log itself. An exception it throws is swallowed.
 */
GPUMEM_EXPORT void set_log_handler(std::function<void(log_level, std::string_view)> handler);
/**
 * @brief Reads GPUMEM_LOG_LEVEL and GPUMEM_DEBUG_LOG_FILE again (done once automatically, at first use).
 * An unknown level or an unopenable file is reported on stderr and the default (warn, stderr) used.
 */
GPUMEM_EXPORT void configure_log_from_environment() noexcept;

namespace detail {

/// The level below which messages are dropped. Until the environment has been read it is `trace`, so
/// that the first message takes the slow path, which reads it.
GPUMEM_EXPORT extern std::atomic<int> log_threshold;

/// Writes one line (slow path: reads the environment once, checks the level again, takes the lock).
GPUMEM_EXPORT void write_log(log_level level, std::string_view message) noexcept;

/** @return whether a message of `level` would be written (may be true before the first use; see above). */
[[nodiscard]] inline bool log_enabled(log_level level) noexcept
{
  return static_cast<int>(level) >= log_threshold.load(std::memory_order_relaxed);
}

/**
 * @brief Logs `message` at `level`.
 * Thread-safety: any thread; lines are never interleaved. Never throws.
 */
inline void log(log_level level, std::string_view message) noexcept
{
  if (log_enabled(level)) { write_log(level, message); }
}

/** @brief Logs the text `make_message()` returns, which is only called when `level` is enabled. */
template <class MakeMessage>
  requires std::invocable<MakeMessage&> && std::convertible_to<std::invoke_result_t<MakeMessage&>, std::string_view>
inline void log(log_level level, MakeMessage&& make_message) noexcept
{
  if (!log_enabled(level)) { return; }
  try {
    auto const text = make_message();
    write_log(level, text);
  } catch (...) {  // logging must never change what the caller does
  }
}

}  // namespace detail
}  // namespace gpumem
