// host_mempool: see mempool.hpp.
#include "mempool.hpp"

#include <gpumem/mr/detail/align.hpp>

#include <algorithm>
#include <utility>

namespace gpumem::detail::host {

host_mempool::host_mempool(int device, std::size_t max_size, raw_allocate allocate, raw_free free)
  : device_{device}, max_size_{max_size}, allocate_{std::move(allocate)}, free_{std::move(free)}
{
}

host_mempool::~host_mempool()
{
  detail::lock_guard lock{mutex_};
  for (auto& [bytes, block] : cached_) {
    block.done->wait();
    free_(block.ptr);
  }
  cached_.clear();
}

void* host_mempool::take_cached(std::size_t bytes, void const* stream)
{
  auto const limit = cached_.upper_bound(2 * bytes);
  for (auto it = cached_.lower_bound(bytes); it != limit; ++it) {
    if (it->second.freed_on == stream || it->second.done->done()) {
      void* const ptr = it->second.ptr;
      std::size_t const block_bytes = it->second.bytes;
      cached_.erase(it);
      live_.emplace(ptr, block_bytes);
      usage_.used_current += block_bytes;
      usage_.used_high = std::max(usage_.used_high, usage_.used_current);
      return ptr;
    }
  }
  return nullptr;
}

void* host_mempool::allocate(std::size_t bytes, void const* stream)
{
  if (bytes == 0) { return nullptr; }
  auto const rounded = checked_align_up(bytes, allocation_alignment);
  if (!rounded) { return nullptr; }
  detail::lock_guard lock{mutex_};
  if (void* const reused = take_cached(*rounded, stream)) { return reused; }
  if (max_size_ != 0 && usage_.reserved_current + *rounded > max_size_) {
    release_completed(0);
    if (usage_.reserved_current + *rounded > max_size_) { return nullptr; }
  }
  void* ptr = allocate_(*rounded);
  if (ptr == nullptr) {  // the device is full: give back what the pool caches, then try once more
    release_completed(0);
    ptr = allocate_(*rounded);
    if (ptr == nullptr) { return nullptr; }
  }
  live_.emplace(ptr, *rounded);
  usage_.reserved_current += *rounded;
  usage_.reserved_high = std::max(usage_.reserved_high, usage_.reserved_current);
  usage_.used_current += *rounded;
  usage_.used_high = std::max(usage_.used_high, usage_.used_current);
  return ptr;
}

bool host_mempool::free(void* ptr, void const* stream, completion_ptr done)
{
  detail::lock_guard lock{mutex_};
  auto const it = live_.find(ptr);
  if (it == live_.end()) { return false; }
  std::size_t const bytes = it->second;
  live_.erase(it);
  usage_.used_current -= bytes;
  cached_.emplace(bytes, cached_block{ptr, bytes, stream, std::move(done)});
  return true;  // released, if over the threshold, at the next synchronisation (release_over_threshold)
}

void host_mempool::release_over_threshold()
{
  detail::lock_guard lock{mutex_};
  if (usage_.reserved_current > release_threshold_) {
    release_completed(static_cast<std::size_t>(release_threshold_));
  }
}

bool host_mempool::owns(void* ptr)
{
  detail::lock_guard lock{mutex_};
  return live_.contains(ptr);
}

void host_mempool::release_completed(std::size_t keep)
{
  for (auto it = cached_.begin(); it != cached_.end() && usage_.reserved_current > keep;) {
    if (it->second.done->done()) {
      free_(it->second.ptr);
      usage_.reserved_current -= it->second.bytes;
      it = cached_.erase(it);
    } else {
      ++it;
    }
  }
}

void host_mempool::trim(std::size_t keep)
{
  detail::lock_guard lock{mutex_};
  release_completed(keep);
}

void host_mempool::set_release_threshold(std::uint64_t bytes)
{
  detail::lock_guard lock{mutex_};
  release_threshold_ = bytes;
}

std::uint64_t host_mempool::release_threshold()
{
  detail::lock_guard lock{mutex_};
  return release_threshold_;
}

mempool_usage host_mempool::usage()
{
  detail::lock_guard lock{mutex_};
  return usage_;
}

}  // namespace gpumem::detail::host
