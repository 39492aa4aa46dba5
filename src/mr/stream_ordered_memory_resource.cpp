// The non-template part of stream_ordered_memory_resource (stream_ordered_memory_resource.hpp): the
// numbers that key each thread's per-thread default stream and each destroyed stream's list. Defined once
// here so that every instantiation of the template shares one counter, and no two keys are equal.
#include <gpumem/mr/stream_ordered_memory_resource.hpp>

#include <atomic>
#include <cstdint>

namespace gpumem::detail {
namespace {

std::uint64_t next_token() noexcept
{
  static std::atomic<std::uint64_t> next{1};  // 0 means "a stream's own list"
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

std::uint64_t this_thread_token() noexcept
{
  thread_local std::uint64_t const token = next_token();
  return token;
}

std::uint64_t orphan_token() noexcept { return next_token(); }

}  // namespace gpumem::detail
