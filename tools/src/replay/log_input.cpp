// log_input.hpp: file descriptors and text as byte inputs, and gzip decoding with zlib's inflate over any of
// them. Every failure names what went wrong; nothing here may crash on hostile input.
#include "replay/log_input.hpp"

#include "replay/log_copy.hpp"

#include <gpumem/replay/allocation_log.hpp>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <new>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gpumem::detail {

namespace {

constexpr std::size_t raw_chunk_size = 256 * 1024;

/// A file descriptor read with read(2): a file, standard input, a pipe, a FIFO, a terminal.
class fd_input final : public byte_input {
 public:
  /// @param owned whether to close `fd` at the end (not standard input).
  fd_input(int fd, bool owned) noexcept : fd_{fd}, owned_{owned}
  {
    struct stat st{};
    if (::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode)) { size_ = static_cast<std::uint64_t>(st.st_size); }
  }
  ~fd_input() override
  {
    if (owned_) { ::close(fd_); }
  }
  fd_input(fd_input const&) = delete;
  fd_input& operator=(fd_input const&) = delete;
  fd_input(fd_input&&) = delete;
  fd_input& operator=(fd_input&&) = delete;

  std::size_t read(char* buffer, std::size_t size) override
  {
    while (true) {
      ssize_t const n = ::read(fd_, buffer, size);
      if (n >= 0) { return static_cast<std::size_t>(n); }
      if (errno != EINTR) { throw source_failure{std::string{"read error: "} + std::strerror(errno)}; }
    }
  }

  [[nodiscard]] std::optional<std::uint64_t> size() const noexcept override { return size_; }

 private:
  int fd_;
  bool owned_;
  std::optional<std::uint64_t> size_;
};

class text_input final : public byte_input {
 public:
  explicit text_input(std::string text) noexcept : text_{std::move(text)} {}

  std::size_t read(char* buffer, std::size_t size) override
  {
    std::size_t const n = std::min(size, text_.size() - position_);
    std::memcpy(buffer, text_.data() + position_, n);
    position_ += n;
    return n;
  }

  [[nodiscard]] std::optional<std::uint64_t> size() const noexcept override { return text_.size(); }

 private:
  std::string text_;
  std::size_t position_{0};
};

[[nodiscard]] bool is_gzip_magic(unsigned char const* bytes) noexcept { return bytes[0] == 0x1f && bytes[1] == 0x8b; }

}  // namespace

std::string input_name(std::filesystem::path const& path)
{
  return path == "-" ? std::string{"standard input"} : path.string();
}

bool can_reopen(std::filesystem::path const& path)
{
  if (path == "-") { return false; }
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) { return true; }  // opening it reports why it cannot be read
  return S_ISREG(st.st_mode);
}

std::unique_ptr<byte_input> open_input(std::filesystem::path const& path)
{
  if (path == "-") { return std::make_unique<fd_input>(STDIN_FILENO, false); }
  std::string const name = path.string();
  int const fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) { throw log_format_error(name, 0, std::string{"cannot open: "} + std::strerror(errno)); }
  struct stat st{};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw log_format_error(name, 0, "cannot read: it is a directory");
  }
  return std::make_unique<fd_input>(fd, true);
}

std::unique_ptr<byte_input> memory_input(std::string text) { return std::make_unique<text_input>(std::move(text)); }

decoded_input::decoded_input(std::unique_ptr<byte_input> raw, std::shared_ptr<log_copy> copy)
  : raw_{std::move(raw)}, copy_{std::move(copy)}, in_(raw_chunk_size)
{
}

decoded_input::~decoded_input()
{
  if (zlib_ready_) { ::inflateEnd(&zlib_); }
}

std::size_t decoded_input::read_raw()
{
  if (raw_ended_) { return 0; }
  if (in_begin_ == in_end_) {
    in_begin_ = in_end_ = 0;
  } else if (in_end_ == in_.size()) {
    std::memmove(in_.data(), in_.data() + in_begin_, in_end_ - in_begin_);
    in_end_ -= std::exchange(in_begin_, 0);
  }
  unsigned char* const into = in_.data() + in_end_;
  std::size_t const n = raw_->read(reinterpret_cast<char*>(into), in_.size() - in_end_);
  if (n == 0) {
    raw_ended_ = true;
    if (copy_ && probed_) { copy_->finish(); }
    return 0;
  }
  if (copy_ && probed_) { copy_->append(into, n); }
  in_end_ += n;
  raw_read_ += n;
  return n;
}

void decoded_input::wait_for(std::size_t count)
{
  while (in_end_ - in_begin_ < count && read_raw() != 0) {}
}

void decoded_input::probe()
{
  // A pipe may deliver a single byte first: wait for two before deciding.
  wait_for(2);
  probed_ = true;
  gzip_ = in_end_ - in_begin_ >= 2 && is_gzip_magic(in_.data() + in_begin_);
  if (copy_) {
    copy_->begin(!gzip_);
    copy_->append(in_.data() + in_begin_, in_end_ - in_begin_);
    if (raw_ended_) { copy_->finish(); }
  }
  if (gzip_) {
    // 16 + MAX_WBITS: gzip framing only (header and CRC-32 trailer checked).
    int const status = ::inflateInit2(&zlib_, 16 + MAX_WBITS);
    if (status == Z_MEM_ERROR) { throw std::bad_alloc{}; }
    if (status != Z_OK) { throw source_failure{"cannot start gzip decoding (zlib error " + std::to_string(status) + ")"}; }
    zlib_ready_ = true;
  }
}

std::size_t decoded_input::read(char* buffer, std::size_t size)
{
  if (!probed_) { probe(); }
  if (gzip_) { return inflate_into(buffer, size); }
  if (in_begin_ == in_end_ && read_raw() == 0) { return 0; }
  std::size_t const n = std::min(size, in_end_ - in_begin_);
  std::memcpy(buffer, in_.data() + in_begin_, n);
  in_begin_ += n;
  return n;
}

std::size_t decoded_input::inflate_into(char* buffer, std::size_t size)
{
  auto const wanted = static_cast<uInt>(std::min<std::size_t>(size, UINT_MAX));
  zlib_.next_out = reinterpret_cast<Bytef*>(buffer);
  zlib_.avail_out = wanted;
  while (zlib_.avail_out == wanted) {
    if (member_ended_) {
      wait_for(2);
      std::size_t const left = in_end_ - in_begin_;
      if (left == 0) { return 0; }
      if (left < 2 || !is_gzip_magic(in_.data() + in_begin_)) {
        throw source_failure{"data after the end of the gzip stream (not another gzip member): a damaged or "
                             "concatenated file?"};
      }
      ::inflateReset(&zlib_);
      member_ended_ = false;
    }
    if (in_begin_ == in_end_) { (void)read_raw(); }
    zlib_.next_in = in_.data() + in_begin_;
    zlib_.avail_in = static_cast<uInt>(in_end_ - in_begin_);
    int const status = ::inflate(&zlib_, Z_NO_FLUSH);
    in_begin_ = in_end_ - zlib_.avail_in;
    switch (status) {
      case Z_STREAM_END: member_ended_ = true; break;
      case Z_OK: break;
      case Z_BUF_ERROR:  // no progress without more input
        if (raw_ended_ && in_begin_ == in_end_) {
          throw source_failure{"truncated gzip data (the input ends inside the compressed stream)"};
        }
        break;
      case Z_MEM_ERROR: throw std::bad_alloc{};
      case Z_DATA_ERROR:
        throw source_failure{std::string{"corrupt gzip data ("} + (zlib_.msg != nullptr ? zlib_.msg : "bad data") + ")"};
      default: throw source_failure{"gzip decoding failed (zlib error " + std::to_string(status) + ")"};
    }
  }
  return wanted - zlib_.avail_out;
}

std::optional<double> decoded_input::fraction_read() const noexcept
{
  std::optional<std::uint64_t> const total = raw_->size();
  if (!total || *total == 0) { return std::nullopt; }
  return std::min(1.0, static_cast<double>(raw_read_) / static_cast<double>(*total));
}

}  // namespace gpumem::detail
