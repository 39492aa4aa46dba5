// logging_resource_adaptor (logging_resource_adaptor.hpp): CSV rows in RMM's format, handed to a destination
// (mr/logging/: a file written within an interval and at a crash, or the caller's stream) under its lock.
#include "mr/logging/log_destination.hpp"
#include "mr/logging/log_file.hpp"

#include <gpumem/error.hpp>
#include <gpumem/mr/logging_resource_adaptor.hpp>

#include <array>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <ostream>
#include <thread>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

// GCC 12/13 at -O2 report -Wstringop-overflow on the fixed row buffer below: they assume std::to_chars
// may return `end` and then see the separator writes overflow. The row is 160 bytes and its longest
// content (six numbers of at most 20 digits, two "0x", separators) is under 140, so it cannot.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif

namespace gpumem::mr {
namespace {

/// The calling thread's id as an integer: the kernel's id on Linux (what RMM's spdlog logs), else a hash.
std::uint64_t current_thread_number() noexcept
{
  thread_local std::uint64_t const number = [] {
#if defined(__linux__)
    return static_cast<std::uint64_t>(::syscall(SYS_gettid));
#else
    return static_cast<std::uint64_t>(std::hash<std::thread::id>{}(std::this_thread::get_id()));
#endif
  }();
  return number;
}

std::unique_ptr<detail::log_destination> open_log_file(std::string const& filename, bool auto_flush)
{
  expects(!filename.empty(), "the log file name is empty");
  try {
    return std::make_unique<detail::log_file>(filename, auto_flush, logging_resource_adaptor::flush_interval,
                                              logging_resource_adaptor::buffer_bytes);
  } catch (logic_error const& e) {
    throw logic_error(std::string{"logging_resource_adaptor: "} + e.what());
  }
}

std::string log_file_from_environment()
{
  char const* const value = std::getenv(logging_resource_adaptor::log_file_environment_variable);
  if (value == nullptr || *value == '\0') {
    throw logic_error(std::string{"logging_resource_adaptor: no log destination: give a file name or a stream, "
                                  "or set the environment variable "} +
                      logging_resource_adaptor::log_file_environment_variable);
  }
  return value;
}

/// Appends `value` in decimal to [cursor, end); returns the new cursor.
char* put_decimal(char* cursor, char* end, std::uint64_t value) noexcept
{
  return std::to_chars(cursor, end, value).ptr;
}

/// Appends "0x" and `value` in lower-case hexadecimal.
char* put_hex(char* cursor, char* end, std::uintptr_t value) noexcept
{
  *cursor++ = '0';
  *cursor++ = 'x';
  return std::to_chars(cursor, end, value, 16).ptr;
}

char* put_text(char* cursor, std::string_view text) noexcept
{
  std::memcpy(cursor, text.data(), text.size());
  return cursor + text.size();
}

}  // namespace

logging_resource_adaptor::logging_resource_adaptor(device_memory_resource* upstream, bool auto_flush)
  : logging_resource_adaptor(upstream, log_file_from_environment(), auto_flush)
{
}

logging_resource_adaptor::logging_resource_adaptor(device_memory_resource* upstream, std::string const& filename,
                                                   bool auto_flush)
  : resource_adaptor_base{upstream}, destination_{open_log_file(filename, auto_flush)}
{
  write_header();
}

logging_resource_adaptor::logging_resource_adaptor(device_memory_resource* upstream, std::ostream& stream,
                                                   bool auto_flush)
  : resource_adaptor_base{upstream}, destination_{std::make_unique<detail::log_stream>(stream, auto_flush)}
{
  write_header();
}

logging_resource_adaptor::~logging_resource_adaptor() { flush(); }  // then a log file closes

void logging_resource_adaptor::write_header()
{
  std::string const line = std::string{header()} + '\n';
  auto const lock = destination_->lock();
  destination_->append_locked(line);
}

void logging_resource_adaptor::flush() noexcept { destination_->flush(); }

void* logging_resource_adaptor::do_allocate(std::size_t bytes, cuda_stream_view stream)
{
  void* ptr = nullptr;
  try {
    ptr = upstream_resource()->allocate(bytes, stream);
  } catch (...) {
    log("allocate failure", nullptr, bytes, stream);
    throw;
  }
  log("allocate", ptr, bytes, stream);
  return ptr;
}

void logging_resource_adaptor::do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept
{
  // Logged before the memory goes back, so that a replay never sees an address reused before its free.
  log("free", ptr, bytes, stream);
  upstream_resource()->deallocate(ptr, bytes, stream);
}

void logging_resource_adaptor::log(std::string_view action, void const* ptr, std::size_t bytes,
                                   cuda_stream_view stream) noexcept
{
  // Everything but the time is formatted before taking the lock; the time is read under it, so that the
  // rows of the file are in time order.
  std::array<char, 160> row{};  // 20 + 16 + 16 + 18 + 20 + 18 digits and separators fit easily
  char* const end = row.data() + row.size();
  char* cursor = put_decimal(row.data(), end, current_thread_number());
  *cursor++ = ',';
  char* const time_at = cursor;
  cursor += 15;  // "HH:MM:SS.ffffff", filled in under the lock
  *cursor++ = ',';
  cursor = put_text(cursor, action);
  *cursor++ = ',';
  cursor = put_hex(cursor, end, reinterpret_cast<std::uintptr_t>(ptr));
  *cursor++ = ',';
  cursor = put_decimal(cursor, end, bytes);
  *cursor++ = ',';
  cursor = put_hex(cursor, end, reinterpret_cast<std::uintptr_t>(stream.value()));
  *cursor++ = '\n';

  auto const lock = destination_->lock();
  auto const now = std::chrono::system_clock::now();
  auto const since_epoch = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
  std::time_t const second = static_cast<std::time_t>(since_epoch / 1'000'000);
  auto const micro = static_cast<std::uint64_t>(since_epoch % 1'000'000);
  if (second != cached_second_) {  // localtime_r takes a lock in libc: once a second is enough
    std::tm local{};
    if (::localtime_r(&second, &local) == nullptr) { local = std::tm{}; }
    std::snprintf(cached_clock_.data(), cached_clock_.size(), "%02d:%02d:%02d", local.tm_hour, local.tm_min,
                  local.tm_sec);
    cached_second_ = second;
  }
  std::memcpy(time_at, cached_clock_.data(), 8);
  time_at[8] = '.';
  std::uint64_t rest = micro;
  for (int digit = 14; digit >= 9; --digit) {
    time_at[digit] = static_cast<char>('0' + rest % 10);
    rest /= 10;
  }
  destination_->append_locked({row.data(), static_cast<std::size_t>(cursor - row.data())});
}

}  // namespace gpumem::mr
