// log_file: a file of rows that a crash of the process does not lose. Appending a row costs a copy into
// memory; a writer thread gets the rows into the kernel (write(2)) within one interval of their append, and
// from there only a crash of the machine loses them. What still waits is written by flush(), at
// destruction, at exit() and quick_exit(), and on a fatal signal (crash_flush.hpp). A SIGKILL or _exit
// loses at most the rows of the last interval.
#pragma once

#include "mr/logging/log_destination.hpp"

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace gpumem::detail {

/**
 * @brief A file the adaptor opens, written as described in the file comment.
 * Thread-safety: as log_destination; flush_from_signal from a signal handler.
 */
class log_file final : public log_destination {
 public:
  /**
   * @brief Creates or truncates `path`.
   * @param write_each_row write every row at once in append_locked (no writer thread).
   * @param interval       the longest a row waits in memory.
   * @param wake_bytes     rows waiting wake the writer before the interval ends when they reach this size.
   * @throws gpumem::logic_error naming the file and the reason when it cannot be opened for writing.
   */
  log_file(std::string const& path, bool write_each_row, std::chrono::milliseconds interval, std::size_t wake_bytes);
  /** @brief Writes what waits, stops the writer, closes the file. */
  ~log_file() override;

  void append_locked(std::string_view row) noexcept override;
  void flush() noexcept override;

  /**
   * @brief For a signal handler: writes the waiting rows with write(2), after any write in progress, without
   * blocking for long: when a lock stays taken (by the thread the signal interrupted) it gives up.
   * @return whether the rows were written.
   */
  bool flush_from_signal() noexcept;

 private:
  void run_writer() noexcept;
  /// Takes the waiting rows and writes them; writes happen one at a time, in the order rows were taken.
  void write_waiting() noexcept;

  int const fd_;
  bool const write_each_row_;
  std::chrono::milliseconds const interval_;
  std::size_t const wake_bytes_;
  std::string waiting_;           // guarded by mutex_: rows appended and not yet taken by a write
  bool stopping_{false};          // guarded by mutex_
  std::condition_variable wake_;  // with mutex_: rows arrived, enough of them, or stopping
  std::mutex write_mutex_;        // held while writing to fd_; taken before mutex_, never after it
  std::string writing_;           // guarded by write_mutex_: the rows being written
  std::thread writer_;            // none when write_each_row_
};

}  // namespace gpumem::detail
