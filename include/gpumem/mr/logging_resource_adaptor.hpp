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
 * Cost: a row is formatted on the stack, then appended to a per-adaptor buffer under one mutex (about a
 * hundred nanoseconds); the buffer goes to the destination only when it holds buffer_bytes bytes, at
 * flush(), and at destruction, unless auto_flush asks for a write (and stream flush) after every row.
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <array>
#include <cstddef>
#include <ctime>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace gpumem::mr {

/**
 * @brief Forwards every call to an upstream resource and logs it as a CSV row (see the file comment).
 *
 * The destination is a file named in code, a caller's std::ostream, or the file that the environment
 * variable GPUMEM_LOG_FILE names. A file is created (truncated) at construction, and the header row is
 * written first in every case.
 *
 * Thread-safety: all members may be called concurrently; rows of concurrent calls never interleave.
 * Stream-ordering: as the upstream's (the adaptor adds no stream work).
 * Equality: equal to another logging_resource_adaptor whose upstream is equal to this one's.
 */
class GPUMEM_EXPORT logging_resource_adaptor final : public device_memory_resource {
 public:
  /** @brief The environment variable read by the constructor that is given no destination. */
  static constexpr char const* log_file_environment_variable = "GPUMEM_LOG_FILE";
  /** @brief The buffer is written out when it holds this many bytes. */
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

  /** @brief Writes out what is buffered (errors of the destination are ignored). */
  ~logging_resource_adaptor() override;
  logging_resource_adaptor(logging_resource_adaptor const&) = delete;
  logging_resource_adaptor(logging_resource_adaptor&&) = delete;
  logging_resource_adaptor& operator=(logging_resource_adaptor const&) = delete;
  logging_resource_adaptor& operator=(logging_resource_adaptor&&) = delete;

  /** @brief Writes the buffered rows to the destination and flushes it. Thread-safety: any thread. */
  void flush() noexcept;

  /** @return the resource this adaptor forwards to. */
  [[nodiscard]] device_memory_resource* upstream_resource() const noexcept { return upstream_; }

 private:
  /// Forwards to the upstream and logs `allocate`, or `allocate failure` and rethrows what the upstream threw.
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  /// Logs `free`, then forwards.
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override;

  void log(std::string_view action, void const* ptr, std::size_t bytes, cuda_stream_view stream) noexcept;
  /// @pre mutex_ is held.
  void write_buffer_locked() noexcept;

  device_memory_resource* upstream_;
  std::unique_ptr<std::ostream> owned_stream_;  // the file, when the adaptor opened one
  std::ostream* out_;                           // guarded by mutex_ (the stream, not the pointer)
  bool const auto_flush_;

  std::mutex mutex_;
  std::string buffer_;                          // guarded by mutex_: rows not yet written to *out_
  std::time_t cached_second_{-1};               // guarded by mutex_: the second that cached_clock_ shows
  std::array<char, 16> cached_clock_{};         // guarded by mutex_: "HH:MM:SS" of cached_second_
};

}  // namespace gpumem::mr
