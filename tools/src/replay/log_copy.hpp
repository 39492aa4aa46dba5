// A copy of an allocation log that can be read only once (standard input, a pipe, a FIFO), made while its
// first pass reads it, so that later passes (more resources, --repeat, the report's second replay) can read
// it again (internal to src/replay; log_source.hpp). The copy lives in a temporary file that has no name
// from the start (TMPDIR, else /tmp), so it never outlives the process. Gzip input is copied as it comes;
// plain text is gzip-compressed (level 1) on the way, so the copy stays near the size of a gzip log even
// where /tmp is memory.
#pragma once

#include "replay/log_input.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <zlib.h>

namespace gpumem::detail {

class log_copy : public std::enable_shared_from_this<log_copy> {
 public:
  /// Creates the temporary file. @throws log_format_error (line 0) naming `source` when it cannot.
  explicit log_copy(std::string source);
  ~log_copy();
  log_copy(log_copy const&) = delete;
  log_copy& operator=(log_copy const&) = delete;
  log_copy(log_copy&&) = delete;
  log_copy& operator=(log_copy&&) = delete;

  /// Before the first append: whether to compress what comes (plain text) or keep it as it is (gzip).
  void begin(bool compress);
  /// @throws source_failure when the copy cannot be written (a full disk).
  void append(unsigned char const* data, std::size_t size);
  /// The input has ended: the copy is complete. @throws source_failure as append.
  void finish();

  /// @return whether finish() has run: the copy holds the whole log.
  [[nodiscard]] bool complete() const noexcept { return complete_; }

  /// @pre complete(). @return the copy's bytes from the start (this object stays alive while it is read).
  [[nodiscard]] std::unique_ptr<byte_input> open();

 private:
  void write_all(unsigned char const* data, std::size_t size);
  void deflate_pending(int flush);

  std::string source_;
  int fd_{-1};
  std::uint64_t size_{0};
  bool compress_{false};
  bool complete_{false};
  z_stream zlib_{};
  bool zlib_ready_{false};
  std::vector<unsigned char> out_;
};

}  // namespace gpumem::detail
