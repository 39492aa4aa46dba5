// log_file (log_file.hpp): rows appended to a string under the lock; a writer thread swaps the string out
// and writes it with write(2), so that appending never waits for the file.
#include "mr/logging/log_file.hpp"

#include "mr/logging/crash_flush.hpp"

#include <gpumem/error.hpp>

#include <cerrno>
#include <cstring>
#include <ctime>

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

namespace gpumem::detail {
namespace {

int open_for_writing(std::string const& path)
{
  int const fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) {
    int const error = errno;
    throw logic_error("gpumem log file: cannot open '" + path + "' for writing: " + std::strerror(error));
  }
  return fd;
}

/// Writes all of [data, data + size) unless the file fails (the log is best effort). Async-signal-safe.
void write_all(int fd, char const* data, std::size_t size) noexcept
{
  while (size > 0) {
    ssize_t const written = ::write(fd, data, size);
    if (written < 0) {
      if (errno == EINTR) { continue; }
      return;
    }
    data += written;
    size -= static_cast<std::size_t>(written);
  }
}

/// try_lock until `mutex` is taken or about a second has passed. Only async-signal-safe calls besides
/// try_lock, which never blocks.
bool try_lock_for_a_while(std::mutex& mutex) noexcept
{
  timespec start{};
  (void)::clock_gettime(CLOCK_MONOTONIC, &start);
  while (!mutex.try_lock()) {
    timespec now{};
    (void)::clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - start.tv_sec > 1) { return false; }
    (void)::sched_yield();
  }
  return true;
}

}  // namespace

log_file::log_file(std::string const& path, bool write_each_row, std::chrono::milliseconds interval,
                   std::size_t wake_bytes)
  : fd_{open_for_writing(path)}, write_each_row_{write_each_row}, interval_{interval}, wake_bytes_{wake_bytes}
{
  try {
    waiting_.reserve(wake_bytes_ + 4096);
    writing_.reserve(wake_bytes_ + 4096);
    if (!write_each_row_) { writer_ = std::thread{[this] { run_writer(); }}; }
  } catch (...) {
    ::close(fd_);
    throw;
  }
  register_for_crash_flush(this);
}

log_file::~log_file()
{
  unregister_for_crash_flush(this);
  if (writer_.joinable()) {
    {
      std::lock_guard const guard{mutex_};
      stopping_ = true;
    }
    wake_.notify_one();
    writer_.join();
  }
  write_waiting();
  ::close(fd_);
}

void log_file::append_locked(std::string_view row) noexcept
{
  if (write_each_row_) {  // under the lock: rows reach the file in order, one write each
    write_all(fd_, row.data(), row.size());
    return;
  }
  std::size_t const before = waiting_.size();
  try {
    waiting_.append(row);
  } catch (...) {  // no memory for the row: it is dropped, the log is best effort
    return;
  }
  // Wake the writer when the first row arrives (it then waits one interval for more) and when enough wait.
  if (before == 0 || (before < wake_bytes_ && waiting_.size() >= wake_bytes_)) { wake_.notify_one(); }
}

void log_file::flush() noexcept { write_waiting(); }

void log_file::write_waiting() noexcept
{
  std::lock_guard const write_guard{write_mutex_};
  {
    std::lock_guard const guard{mutex_};
    writing_.swap(waiting_);  // waiting_ takes writing_'s empty buffer, so appending does not allocate
  }
  write_all(fd_, writing_.data(), writing_.size());
  writing_.clear();
}

void log_file::run_writer() noexcept
{
  std::unique_lock lock{mutex_};
  while (true) {
    wake_.wait(lock, [this] { return stopping_ || !waiting_.empty(); });
    if (stopping_) { return; }
    // Rows wait at most one interval: what arrives meanwhile goes out in the same write.
    wake_.wait_for(lock, interval_, [this] { return stopping_ || waiting_.size() >= wake_bytes_; });
    lock.unlock();
    write_waiting();
    lock.lock();
  }
}

bool log_file::flush_from_signal() noexcept
{
  if (!try_lock_for_a_while(write_mutex_)) { return false; }  // lets a write in progress finish first
  if (!try_lock_for_a_while(mutex_)) {
    write_mutex_.unlock();
    return false;
  }
  write_all(fd_, waiting_.data(), waiting_.size());
  waiting_.clear();  // if the process goes on (a handled SIGTERM), the writer must not write them again
  mutex_.unlock();
  write_mutex_.unlock();
  return true;
}

}  // namespace gpumem::detail
