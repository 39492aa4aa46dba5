// Where logging_resource_adaptor's rows go: the interface, and the destination that is a caller's
// std::ostream (log_file.hpp has the other, a file the adaptor opens).
#pragma once

#include <mutex>
#include <ostream>
#include <string_view>

namespace gpumem::detail {

/**
 * @brief A destination of rows of text, in the order they are appended.
 * Thread-safety: append_locked under lock(); flush from any thread.
 */
class log_destination {
 public:
  log_destination() = default;
  virtual ~log_destination() = default;
  log_destination(log_destination const&) = delete;
  log_destination& operator=(log_destination const&) = delete;
  log_destination(log_destination&&) = delete;
  log_destination& operator=(log_destination&&) = delete;

  /** @return the lock under which rows are appended: rows appended under it keep their order. */
  [[nodiscard]] std::unique_lock<std::mutex> lock() { return std::unique_lock{mutex_}; }
  /** @pre lock() is held by the caller. Errors of the destination are ignored: the log is best effort. */
  virtual void append_locked(std::string_view row) noexcept = 0;
  /** @brief Gets every row appended so far to the destination itself, and flushes it. */
  virtual void flush() noexcept = 0;

 protected:
  std::mutex mutex_;  // guards what the implementation says
};

/**
 * @brief A caller's std::ostream: each row is written into the stream as it is appended, so nothing waits
 * in the adaptor; what the stream's own buffer then does is the stream's (std::cerr writes at once, a
 * std::ofstream when its buffer fills or it is flushed). With `flush_each_row`, the stream is flushed after
 * every row.
 */
class log_stream final : public log_destination {
 public:
  log_stream(std::ostream& stream, bool flush_each_row) : out_{stream}, flush_each_row_{flush_each_row} {}

  void append_locked(std::string_view row) noexcept override
  {
    try {
      out_.write(row.data(), static_cast<std::streamsize>(row.size()));
      if (flush_each_row_) { out_.flush(); }
    } catch (...) {  // a stream with exceptions enabled: the log is best effort
    }
  }

  void flush() noexcept override
  {
    std::lock_guard const guard{mutex_};
    try {
      out_.flush();
    } catch (...) {  // see append_locked
    }
  }

 private:
  std::ostream& out_;  // guarded by mutex_
  bool const flush_each_row_;
};

}  // namespace gpumem::detail
