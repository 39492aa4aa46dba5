// The non-template part of stream_ordered_memory_resource (stream_ordered_memory_resource.hpp): the
// per-thread token that keys each thread's per-thread default stream. Defined once here so that every
// instantiation of the template shares one counter.
#include <gpumem/mr/stream_ordered_memory_resource.hpp>

#include <atomic>
#include <cstdint>

namespace gpumem::detail {

std::uint64_t this_thread_token() noexcept
{
  static std::atomic<std::uint64_t> next{1};  // 0 means "not the per-thread default stream"
  thread_local std::uint64_t const token = next.fetch_add(1, std::memory_order_relaxed);
  return token;
}

}  // namespace gpumem::detail
