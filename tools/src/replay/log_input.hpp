// Where an allocation log's bytes come from (internal to src/replay): a file, standard input, a pipe or a
// FIFO, a copy kept in a temporary file (log_copy.hpp), or text in memory; and their decoding, gzip being
// recognised by its first two bytes and inflated with zlib on the way. Every input is read once, front to
// back: nothing here seeks or rewinds, so a pipe reads like a file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <zlib.h>

namespace gpumem::detail {

class log_copy;

/// A read failure; the reader turns it into a log_format_error at the line being read.
struct source_failure {
  std::string problem;
};

/// Raw bytes, read front to back.
class byte_input {
 public:
  byte_input() = default;
  virtual ~byte_input() = default;
  byte_input(byte_input const&) = delete;
  byte_input& operator=(byte_input const&) = delete;
  byte_input(byte_input&&) = delete;
  byte_input& operator=(byte_input&&) = delete;

  /// @return up to `size` bytes (fewer is not the end), 0 at the end. @throws source_failure.
  [[nodiscard]] virtual std::size_t read(char* buffer, std::size_t size) = 0;
  /// @return the total number of bytes when it is known before the end (a regular file, a finished copy).
  [[nodiscard]] virtual std::optional<std::uint64_t> size() const noexcept { return std::nullopt; }
};

/// The name a path has in messages: "standard input" for "-", else the path as given.
[[nodiscard]] std::string input_name(std::filesystem::path const& path);

/// @return whether `path` can be opened again from its start for another pass: a regular file (not "-").
[[nodiscard]] bool can_reopen(std::filesystem::path const& path);

/// Opens `path` for reading ("-": standard input, which stays open afterwards).
/// @throws log_format_error (line 0) naming `path` when it cannot be opened or is a directory.
[[nodiscard]] std::unique_ptr<byte_input> open_input(std::filesystem::path const& path);

/// `text`, held by the input.
[[nodiscard]] std::unique_ptr<byte_input> memory_input(std::string text);

/**
 * Decoded (CSV) bytes of a raw input: gzip, recognised by its first two bytes (1f 8b), is inflated (several
 * gzip members one after the other are one stream, as gzip(1) has it); anything else passes as it is.
 * Bytes after the end of the gzip data that do not start another member are an error, as are truncated or
 * corrupt gzip data. When `copy` is given, every raw byte read is also appended to it, and it is finished
 * when the raw input ends.
 */
class decoded_input {
 public:
  decoded_input(std::unique_ptr<byte_input> raw, std::shared_ptr<log_copy> copy = nullptr);
  ~decoded_input();
  decoded_input(decoded_input const&) = delete;
  decoded_input& operator=(decoded_input const&) = delete;
  decoded_input(decoded_input&&) = delete;
  decoded_input& operator=(decoded_input&&) = delete;

  /// @return up to `size` decoded bytes, 0 at the end. @throws source_failure.
  [[nodiscard]] std::size_t read(char* buffer, std::size_t size);

  /// @return the fraction of the raw input read so far, when its size is known.
  [[nodiscard]] std::optional<double> fraction_read() const noexcept;

 private:
  /// Reads raw bytes to in_[in_end_...]; copies them; @return how many (0: the raw input ended).
  std::size_t read_raw();
  /// Reads until `count` raw bytes are waiting in in_ or the raw input ends.
  void wait_for(std::size_t count);
  void probe();
  std::size_t inflate_into(char* buffer, std::size_t size);

  std::unique_ptr<byte_input> raw_;
  std::shared_ptr<log_copy> copy_;
  std::vector<unsigned char> in_;  // raw bytes read but not yet used: [in_begin_, in_end_)
  std::size_t in_begin_{0};
  std::size_t in_end_{0};
  std::uint64_t raw_read_{0};
  bool raw_ended_{false};
  bool probed_{false};
  bool gzip_{false};
  bool member_ended_{false};  // gzip: the current member's data and trailer are through
  z_stream zlib_{};
  bool zlib_ready_{false};
};

}  // namespace gpumem::detail
