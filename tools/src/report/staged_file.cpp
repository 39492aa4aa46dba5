// staged_file.hpp: open(2) with O_EXCL for the temporary file, write(2), fsync(2), rename(2).
#include <gpumem/report/staged_file.hpp>

#include <gpumem/error.hpp>

#include <atomic>
#include <cerrno>
#include <string>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gpumem {

namespace {

std::atomic<unsigned> temporary_count{0};

[[noreturn]] void fail(std::filesystem::path const& destination, int error)
{
  throw logic_error("cannot write '" + destination.string() + "': " + std::generic_category().message(error));
}

/// Closes `fd`. @return 0, or the error (a delayed write error of a network file system shows here).
int close_checked(int fd) noexcept { return ::close(fd) == 0 ? 0 : errno; }

}  // namespace

staged_file::staged_file(std::filesystem::path destination) : destination_{std::move(destination)}
{
  struct stat existing{};
  bool const exists = ::stat(destination_.c_str(), &existing) == 0;
  if (exists && S_ISDIR(existing.st_mode)) { fail(destination_, EISDIR); }
  if (exists && !S_ISREG(existing.st_mode)) {  // a terminal, a pipe: write to it as it is
    fd_ = ::open(destination_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) { fail(destination_, errno); }
    return;
  }
  std::error_code error;
  target_ = exists ? std::filesystem::canonical(destination_, error) : destination_;
  if (error) { fail(destination_, error.value()); }
  std::filesystem::path const folder = target_.has_parent_path() ? target_.parent_path() : ".";
  // Appended piece by piece: GCC 12 reports a false -Wrestrict on `"." + std::string` at -O3.
  std::string stem = ".";
  stem += target_.filename().string();
  stem += ".tmp-";
  stem += std::to_string(::getpid());
  stem += '-';
  do {
    temporary_ = folder / (stem + std::to_string(temporary_count.fetch_add(1)));
    fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  } while (fd_ < 0 && errno == EEXIST);
  if (fd_ < 0) {
    int const why = errno;
    temporary_.clear();
    fail(destination_, why);
  }
  // The replacement keeps the permissions of the file it replaces.
  if (exists) { (void)::fchmod(fd_, existing.st_mode & 07777); }
}

staged_file::~staged_file() { discard(); }

staged_file::staged_file(staged_file&& other) noexcept
  : destination_{std::move(other.destination_)},
    target_{std::move(other.target_)},
    temporary_{std::exchange(other.temporary_, {})},
    fd_{std::exchange(other.fd_, -1)}
{
}

staged_file& staged_file::operator=(staged_file&& other) noexcept
{
  if (this != &other) {
    discard();
    destination_ = std::move(other.destination_);
    target_ = std::move(other.target_);
    temporary_ = std::exchange(other.temporary_, {});
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void staged_file::discard() noexcept
{
  if (fd_ >= 0) { ::close(std::exchange(fd_, -1)); }
  if (!temporary_.empty()) { ::unlink(std::exchange(temporary_, {}).c_str()); }
}

void staged_file::write(std::string_view text)
{
  expects(fd_ >= 0, "staged_file: write after commit");
  while (!text.empty()) {
    ssize_t const n = ::write(fd_, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) { continue; }
      fail(destination_, errno);
    }
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

void staged_file::commit()
{
  expects(fd_ >= 0, "staged_file: committed twice");
  if (temporary_.empty()) {  // written directly
    if (int const error = close_checked(std::exchange(fd_, -1)); error != 0) { fail(destination_, error); }
    return;
  }
  if (::fsync(fd_) != 0) { fail(destination_, errno); }
  if (int const error = close_checked(std::exchange(fd_, -1)); error != 0) { fail(destination_, error); }
  if (::rename(temporary_.c_str(), target_.c_str()) != 0) { fail(destination_, errno); }
  temporary_.clear();
}

}  // namespace gpumem
