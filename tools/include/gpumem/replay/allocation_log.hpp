/**
 * @file allocation_log.hpp
 * Allocation logs in RMM's logging_resource_adaptor CSV format (docs/formats.md):
 *
 *     Thread,Time,Action,Pointer,Size,Stream
 *     1,13:09:44.158987,allocate,0x7f98f9e00000,37632,0x0
 *
 * Their rows (log_event), and a whole log read into memory (allocation_log) for small logs and tests.
 * Logs of any length are read row by row with allocation_log_reader (log_reader.hpp), and more than once
 * with log_source (log_source.hpp); replay() takes either (replay.hpp). Plain and gzip-compressed input is
 * read alike; gzip is recognised by its magic bytes (1f 8b), not by the file's name, and decoded with zlib.
 *
 * The reader checks syntax only (header, columns, numbers, actions). What the events mean together (a free
 * of a pointer never allocated, a double free) is replay's business: such a log still reads.
 */
#pragma once

#include <gpumem/error.hpp>
#include <gpumem/export.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace gpumem {

/** @brief What one log row records. */
enum class log_action : std::uint8_t {
  allocate,          ///< `allocate`: the allocation succeeded at `pointer`.
  free,              ///< `free`: `pointer` was deallocated.
  allocate_failure,  ///< `allocate failure`: the allocation of `size` bytes failed (pointer 0x0).
};

/** @return the action as the log spells it: "allocate", "free", "allocate failure". */
[[nodiscard]] GPUMEM_EXPORT std::string_view to_string(log_action action) noexcept;

/** @brief One row of an allocation log. */
struct log_event {
  std::uint64_t thread{};   ///< the Thread column, as recorded (an integer id)
  std::int64_t time_ns{};   ///< nanoseconds since the first event (negative if a row is older than the first)
  log_action action{};      ///< the Action column
  std::uintptr_t pointer{}; ///< the Pointer column (0 for `allocate failure`)
  std::size_t size{};       ///< the Size column, in bytes
  std::uintptr_t stream{};  ///< the Stream column (0: the default stream)

  friend bool operator==(log_event const&, log_event const&) = default;
};

/**
 * @brief A whole allocation log in memory: its events in file order, and where it came from. It takes about
 * 40 bytes per row: read long logs with allocation_log_reader instead, which holds one row at a time.
 */
struct allocation_log {
  std::string source;            ///< the file's path, or the name given to parse_allocation_log
  std::vector<log_event> events; ///< in file order
};

/**
 * @brief A log that cannot be read: the message is `FILE:LINE: PROBLEM` (LINE is 1-based; the header is
 * line 1), or `FILE: PROBLEM` when the problem concerns the whole file (it cannot be opened, it is empty).
 */
class GPUMEM_EXPORT log_format_error : public logic_error {
 public:
  /** @param line 0 when the problem is not on one line. */
  log_format_error(std::string file, std::size_t line, std::string const& problem);

  /** @return the file (or source name) the problem is in. */
  [[nodiscard]] std::string const& file() const noexcept { return file_; }
  /** @return the 1-based line of the problem, or 0 when it concerns the whole file. */
  [[nodiscard]] std::size_t line() const noexcept { return line_; }

 private:
  std::string file_;
  std::size_t line_;
};

/**
 * @brief Reads the whole allocation log at `path` into memory (plain CSV or gzip-compressed CSV; "-" is
 * standard input), as allocation_log_reader reads it row by row.
 * Thread-safety: reentrant (no shared state).
 * @throws gpumem::log_format_error (a gpumem::logic_error) naming the file, the line and the problem, as
 *         allocation_log_reader::next() does.
 */
[[nodiscard]] GPUMEM_EXPORT allocation_log read_allocation_log(std::filesystem::path const& path);

/**
 * @brief Parses an allocation log held in memory (CSV text), as read_allocation_log does.
 * @param source_name the name used in error messages and allocation_log::source.
 * @throws gpumem::log_format_error as read_allocation_log.
 */
[[nodiscard]] GPUMEM_EXPORT allocation_log parse_allocation_log(std::string_view text, std::string_view source_name);

/**
 * @brief The largest sum of the sizes of live allocations over the log, as the log says: `allocate` adds
 * its size, a `free` of a live pointer subtracts the size it was allocated with; failures and frees of
 * pointers that are not live change nothing. A log may claim more than 2^64 - 1 bytes live at once (no
 * machine holds that much, but the rows say so): the peak is then SIZE_MAX.
 */
[[nodiscard]] GPUMEM_EXPORT std::size_t peak_live_bytes(allocation_log const& log);

}  // namespace gpumem
