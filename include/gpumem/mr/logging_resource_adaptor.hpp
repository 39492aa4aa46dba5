/**
 * @file logging_resource_adaptor.hpp
 * An adaptor that writes one CSV row per allocation event of its upstream, in RMM's log format, so that a
 * run can be inspected or replayed (`gpumem replay`) later.
 *
 * The format (RMM's, column for column):
 *
 *     Thread,Time,Action,Pointer,Size,Stream
 *     1,13:09:44.158987,allocate,0x7f98f9e00000,37632,0x0
 *
 * - Thread: the calling thread's id as an integer (the kernel's thread id on Linux, as RMM's spdlog writes);
 * - Time: local wall-clock time of day, HH:MM:SS.ffffff (microseconds);
 * - Action: `allocate`, `free`, or `allocate failure` (the upstream threw; Pointer is then 0x0);
 * - Pointer: hexadecimal with 0x; Size: bytes in decimal, as requested;
 * - Stream: the cudaStream_t value in hexadecimal (the legacy default stream, cudaStream_t{0}, is 0x0).
 *
 * When rows reach the destination, so that a crash of the process loses none that matter:
 * - A file (named in code or by GPUMEM_LOG_FILE): a row is copied into memory under one mutex, and a writer
 *   thread of the adaptor writes it into the file (write(2): from then on it is the kernel's, and only a
 *   crash of the machine loses it) within flush_interval, or sooner when buffer_bytes wait. flush(),
 *   destruction, exit(), quick_exit() and the signals that end a process by default (SIGABRT, SIGSEGV,
 *   SIGBUS, SIGFPE, SIGILL, SIGTERM, SIGINT, SIGHUP, SIGQUIT) write what still waits (of up to 64 log
 *   files open at once): opening the first log file installs handlers for those signals, which write the
 *   rows and then hand the signal on to the handler or default action that was there before (an ignored
 *   signal stays ignored). A SIGKILL or an _exit() loses at most the rows of the last flush_interval. With
 *   auto_flush, every row is written by the call that logs it, and no thread is started.
 * - A caller's std::ostream: every row is written into the stream by the call that logs it; the stream's
 *   own buffer is the caller's (std::cerr writes at once, a std::ofstream when its buffer fills or it is
 *   flushed). With auto_flush, the stream is also flushed after every row.
 *
 * Cost: formatting a row on the stack and appending it under one mutex (docs/PERFORMANCE.md has the figures
 * of gpumem_bench_adaptors); for a file, one wake-up of the writer and one write(2) per flush_interval or
 * per buffer_bytes of rows, on the writer's thread; with auto_flush, one write(2) per row on the caller's.
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/resource_adaptor_base.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <ctime>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>

namespace gpumem::detail {
class log_destination;
}  // namespace gpumem::detail

namespace gpumem::mr {

/**
 * @brief Forwards every call to an upstream resource and logs it as a CSV row (see the file comment).
 *
 * The destination is a file named in code, a caller's std::ostream, or the file that the environment
 * variable GPUMEM_LOG_FILE names. A file is created (truncated) at construction, and the header row is
 * written first in every case. When each row reaches the destination: see the file comment.
 *
 * Thread-safety: all members may be called concurrently; rows of concurrent calls never interleave, and a
 * row's time is read under the lock that orders the rows, so the rows are in time order.
 * Stream-ordering: as the upstream's (the adaptor adds no stream work).
 * Equality: equal to another logging_resource_adaptor whose upstream is equal to this one's.
 */
class GPUMEM_EXPORT logging_resource_adaptor final : public resource_adaptor_base {
 public:
  /** @brief The environment variable read by the constructor that is given no destination. */
  static constexpr char const* log_file_environment_variable = "GPUMEM_LOG_FILE";
  /** @brief A file's rows are written within this long of being logged (the file comment). */
  static constexpr std::chrono::milliseconds flush_interval{10};
  /** @brief A file's rows are written sooner when this many bytes of them wait. */
  static constexpr std::size_t buffer_bytes = std::size_t{64} << 10;

  /** @return the CSV header row, without a line break: `Thread,Time,Action,Pointer,Size,Stream`. */
  [[nodiscard]] static constexpr std::string_view header() noexcept
  {
    return "Thread,Time,Action,Pointer,Size,Stream";
  }

  /**
   * @brief Logs to the file named by GPUMEM_LOG_FILE.
   * @throws gpumem::logic_error if `upstream` is null, GPUMEM_LOG_FILE is unset or empty, or the file cannot
   *         be opened for writing (the message names it and the reason).
   */
  explicit logging_resource_adaptor(device_memory_resource* upstream, bool auto_flush = false);
  /**
   * @brief Logs to the file `filename` (created or truncated).
   * @throws gpumem::logic_error if `upstream` is null, or the file cannot be opened for writing.
   */
  logging_resource_adaptor(device_memory_resource* upstream, std::string const& filename, bool auto_flush = false);
  /**
   * @brief Logs to `stream`, which must outlive the adaptor.
   * @throws gpumem::logic_error if `upstream` is null.
   */
  logging_resource_adaptor(device_memory_resource* upstream, std::ostream& stream, bool auto_flush = false);

  /** @brief Writes out the rows that wait, and closes a file the adaptor opened (errors are ignored). */
  ~logging_resource_adaptor() override;

  /** @brief Writes the rows that wait to the destination and flushes it. Thread-safety: any thread. */
  void flush() noexcept;

 private:
  /// Forwards to the upstream and logs `allocate`, or `allocate failure` and rethrows what the upstream threw.
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  /// Logs `free`, then forwards.
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;

  void log(std::string_view action, void const* ptr, std::size_t bytes, cuda_stream_view stream) noexcept;
  void write_header();

  std::unique_ptr<detail::log_destination> destination_;  // a file the adaptor opened, or the caller's stream
  std::time_t cached_second_{-1};        // guarded by destination_->lock(): the second that cached_clock_ shows
  std::array<char, 16> cached_clock_{};  // guarded by destination_->lock(): "HH:MM:SS" of cached_second_
};

}  // namespace gpumem::mr
