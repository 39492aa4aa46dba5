/**
 * @file log_reader.hpp
 * Reads an allocation log (allocation_log.hpp) one row at a time, from a file, standard input, a pipe or a
 * FIFO, plain or gzip-compressed, in bounded memory: a log of any length reads in about 1.5 MiB of buffers.
 *
 * The input is read once, front to back, and never rewound, so `<(zcat log.gz)`, `/dev/stdin` and a FIFO
 * read like files. Gzip is recognised by its first two bytes (1f 8b) and decoded with zlib; several gzip
 * members one after the other read as one stream (as gzip(1) has it), and any other bytes after the end of
 * the gzip data are an error (a damaged or concatenated file), as are truncated or corrupt gzip data.
 *
 * Rows: the header `Thread,Time,Action,Pointer,Size,Stream` first (spaces around names and a UTF-8 byte-order
 * mark tolerated), then one row per line; blank lines, `\r\n` line ends and a last line without a newline
 * are accepted. Times become nanoseconds since the first row: each row is put on the day that brings it
 * within 12 hours of the row before it, so a jump back of more than 12 hours crosses midnight and a row a
 * little older than the previous one (another thread's, written late) stays on its day, midnight or not.
 */
#pragma once

#include <gpumem/export.hpp>
#include <gpumem/replay/allocation_log.hpp>

#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>

namespace gpumem {

class log_source;

namespace detail {
class decoded_input;
}  // namespace detail

/**
 * @brief One pass over an allocation log, row by row. Movable, not copyable.
 * Thread-safety: one thread at a time per reader; readers are independent.
 */
class GPUMEM_EXPORT allocation_log_reader {
 public:
  /**
   * @brief Opens `path` ("-": standard input, left open afterwards). Nothing is read yet: a FIFO blocks
   * here until a writer opens it, as open(2) does.
   * @throws gpumem::log_format_error (line 0) naming the path when it cannot be opened or is a directory.
   */
  explicit allocation_log_reader(std::filesystem::path const& path);

  /**
   * @brief Reads `text` (CSV, or gzip-compressed CSV) as if it were a file named `source_name`.
   */
  [[nodiscard]] static allocation_log_reader from_text(std::string text, std::string source_name);

  ~allocation_log_reader();
  allocation_log_reader(allocation_log_reader&&) noexcept;
  allocation_log_reader& operator=(allocation_log_reader&&) noexcept;
  allocation_log_reader(allocation_log_reader const&) = delete;
  allocation_log_reader& operator=(allocation_log_reader const&) = delete;

  /**
   * @return the next row, or nothing at the end of the log.
   * @throws gpumem::log_format_error naming the source, the line and the problem: the input is empty (no
   *         header), the header is not `Thread,Time,Action,Pointer,Size,Stream`, a row has other than 6
   *         columns, a number, time or hex value does not parse, the action is unknown, the times run more
   *         than 100 years from the first row, a line is over 64 KiB, the input cannot be read, or the gzip
   *         data are truncated, corrupt or followed by other bytes. A reader that threw reads no further.
   */
  [[nodiscard]] std::optional<log_event> next();

  /**
   * @brief Reads up to out.size() rows into `out`. @return how many; fewer than out.size() only at the end.
   * @throws as next().
   */
  [[nodiscard]] std::size_t read(std::span<log_event> out);

  /** @return the name used in messages: the path as given, or "standard input" for "-". */
  [[nodiscard]] std::string const& source() const noexcept;

  /**
   * @return the fraction of the input read so far (of the compressed bytes for gzip), when the input's size
   * is known in advance (a file, a finished copy); nothing for a pipe.
   */
  [[nodiscard]] std::optional<double> fraction_read() const noexcept;

 private:
  friend class log_source;
  struct impl;
  allocation_log_reader(std::string source, std::unique_ptr<detail::decoded_input> input);

  std::unique_ptr<impl> impl_;
};

}  // namespace gpumem
