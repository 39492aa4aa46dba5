// log_copy.hpp: an unnamed temporary file, written with write(2) (through zlib's deflate for plain text)
// and read back with pread(2), so that any number of passes read it from their own offsets.
#include "replay/log_copy.hpp"

#include <gpumem/replay/allocation_log.hpp>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>
#include <utility>

#include <unistd.h>

namespace gpumem::detail {

namespace {

constexpr std::size_t deflate_chunk_size = 256 * 1024;

/// The folder of temporary files: $TMPDIR, else /tmp.
[[nodiscard]] std::string temporary_folder()
{
  char const* const tmpdir = std::getenv("TMPDIR");
  return tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp";
}

[[nodiscard]] std::string copy_problem(int error)
{
  return "cannot keep a copy of the log (it can be read only once) in " + temporary_folder() +
         " (TMPDIR): " + std::strerror(error);
}

/// Reads a finished copy with pread(2): every pass has its own offset.
class copy_input final : public byte_input {
 public:
  copy_input(std::shared_ptr<log_copy const> copy, int fd, std::uint64_t size) noexcept
    : copy_{std::move(copy)}, fd_{fd}, size_{size}
  {
  }

  std::size_t read(char* buffer, std::size_t size) override
  {
    while (true) {
      ssize_t const n = ::pread(fd_, buffer, size, static_cast<off_t>(offset_));
      if (n >= 0) {
        offset_ += static_cast<std::uint64_t>(n);
        return static_cast<std::size_t>(n);
      }
      if (errno != EINTR) {
        throw source_failure{std::string{"read error in the copy of the log: "} + std::strerror(errno)};
      }
    }
  }

  [[nodiscard]] std::optional<std::uint64_t> size() const noexcept override { return size_; }

 private:
  std::shared_ptr<log_copy const> copy_;  // keeps the file open
  int fd_;
  std::uint64_t size_;
  std::uint64_t offset_{0};
};

}  // namespace

log_copy::log_copy(std::string source) : source_{std::move(source)}
{
  std::string name = (std::filesystem::path{temporary_folder()} / "gpumem-log-XXXXXX").string();
  fd_ = ::mkstemp(name.data());
  if (fd_ < 0) { throw log_format_error(source_, 0, copy_problem(errno)); }
  ::unlink(name.c_str());  // nameless from now on: the space is freed when the descriptor closes
}

log_copy::~log_copy()
{
  if (zlib_ready_) { ::deflateEnd(&zlib_); }
  if (fd_ >= 0) { ::close(fd_); }
}

void log_copy::begin(bool compress)
{
  compress_ = compress;
  if (!compress_) { return; }
  // Level 1: the copy is read back once per pass, and speed matters more than the last byte.
  int const status = ::deflateInit2(&zlib_, 1, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  if (status == Z_MEM_ERROR) { throw std::bad_alloc{}; }
  if (status != Z_OK) { throw source_failure{"cannot start gzip compression (zlib error " + std::to_string(status) + ")"}; }
  zlib_ready_ = true;
  out_.resize(deflate_chunk_size);
}

void log_copy::write_all(unsigned char const* data, std::size_t size)
{
  while (size > 0) {
    ssize_t const n = ::write(fd_, data, size);
    if (n < 0) {
      if (errno == EINTR) { continue; }
      throw source_failure{copy_problem(errno)};
    }
    data += n;
    size -= static_cast<std::size_t>(n);
    size_ += static_cast<std::uint64_t>(n);
  }
}

void log_copy::deflate_pending(int flush)
{
  while (true) {
    zlib_.next_out = out_.data();
    zlib_.avail_out = static_cast<uInt>(out_.size());
    int const status = ::deflate(&zlib_, flush);
    if (status == Z_STREAM_ERROR) { throw source_failure{"gzip compression of the copy failed"}; }
    write_all(out_.data(), out_.size() - zlib_.avail_out);
    // Done when deflate left room in the output (it had nothing more to say), or at the stream's end.
    if (flush == Z_FINISH ? status == Z_STREAM_END : zlib_.avail_out != 0) { return; }
  }
}

void log_copy::append(unsigned char const* data, std::size_t size)
{
  if (!compress_) {
    write_all(data, size);
    return;
  }
  while (size > 0) {
    auto const n = static_cast<uInt>(std::min<std::size_t>(size, UINT_MAX));
    zlib_.next_in = const_cast<Bytef*>(data);  // zlib's API is not const-correct; it never writes here
    zlib_.avail_in = n;
    deflate_pending(Z_NO_FLUSH);
    data += n;
    size -= n;
  }
}

void log_copy::finish()
{
  if (complete_) { return; }
  if (compress_) {
    zlib_.next_in = nullptr;
    zlib_.avail_in = 0;
    deflate_pending(Z_FINISH);
  }
  complete_ = true;
}

std::unique_ptr<byte_input> log_copy::open()
{
  return std::make_unique<copy_input>(shared_from_this(), fd_, size_);
}

}  // namespace gpumem::detail
