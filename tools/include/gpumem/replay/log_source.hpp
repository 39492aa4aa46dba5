/**
 * @file log_source.hpp
 * An allocation log to read more than once, e.g. replayed on several resources (`gpumem replay`) or twice
 * per resource (`gpumem report`), each pass an allocation_log_reader (log_reader.hpp).
 *
 * A regular file is opened again for each pass. Anything else (standard input as "-", `/dev/stdin`, a pipe
 * such as `<(zcat log.gz)`, a FIFO) can be read only once: its first pass also writes what it reads to a
 * temporary file (in TMPDIR, else /tmp; nameless, so it never outlives the process), gzip data as they come
 * and plain text gzip-compressed, and later passes read that copy. Memory stays bounded either way; the
 * copy takes about the size of the log gzip-compressed on disk.
 */
#pragma once

#include <gpumem/export.hpp>
#include <gpumem/replay/log_reader.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

namespace gpumem {

namespace detail {
class log_copy;
}  // namespace detail

/** @brief How many passes a log_source will be asked for. */
enum class log_passes : std::uint8_t {
  one,   ///< one: input that can be read only once is not copied
  many,  ///< any number: input that can be read only once is copied on its first pass
};

/**
 * @brief A log read pass by pass. Movable, not copyable.
 * Thread-safety: one thread at a time; a pass of a finished copy may be read on any thread.
 */
class GPUMEM_EXPORT log_source {
 public:
  /** @param path a file, "-" for standard input, a FIFO or /dev/fd/N. Nothing is opened yet. */
  explicit log_source(std::filesystem::path path, log_passes passes = log_passes::many);
  ~log_source();
  log_source(log_source&&) noexcept;
  log_source& operator=(log_source&&) noexcept;
  log_source(log_source const&) = delete;
  log_source& operator=(log_source const&) = delete;

  /**
   * @brief Starts a pass over the log, from its first row.
   * @pre for input that can be read only once, passes after the first come after the first pass was read
   *      to its end.
   * @throws gpumem::log_format_error (line 0) naming the log when it cannot be opened, when the copy of
   *         input that can be read only once cannot be made (TMPDIR not writable, a full disk), or when a
   *         second pass is asked of such input with log_passes::one or before its first pass ended.
   */
  [[nodiscard]] allocation_log_reader open();

  /** @return the name used in messages: the path as given, or "standard input" for "-". */
  [[nodiscard]] std::string const& name() const noexcept { return name_; }

 private:
  std::filesystem::path path_;
  std::string name_;
  bool reopenable_;
  log_passes passes_;
  std::size_t opened_{0};
  std::shared_ptr<detail::log_copy> copy_;
};

}  // namespace gpumem
