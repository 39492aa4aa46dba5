/**
 * @file unified_buffer_pool.hpp
 * `unified_buffer_pool<T>`: hands out unified buffers and takes them back for reuse, so a loop that needs
 * a buffer of the same size each iteration allocates its host and device copies once.
 */
#pragma once

#include <gpumem/buffer/unified_buffer.hpp>
#include <gpumem/buffer/unified_options.hpp>
#include <gpumem/detail/thread_annotations.hpp>
#include <gpumem/error.hpp>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace gpumem {

/** @brief Counters of a unified_buffer_pool. */
struct unified_pool_statistics {
  std::uint64_t hits{};          ///< acquire() served from the cache
  std::uint64_t misses{};        ///< acquire() that made a new buffer
  std::size_t cached_buffers{};  ///< buffers waiting in the cache now
  std::size_t cached_bytes{};    ///< their capacity in bytes
  std::uint64_t releases{};      ///< release() calls that took a buffer back (cached or freed at once)
};

/**
 * @brief A cache of released unified buffers of T, all made with the pool's options.
 *
 * acquire(count) returns a released buffer when one fits: the very same object when its capacity is
 * exactly `count` elements, else the smallest with a capacity up to twice `count` (shrunk to `count`,
 * keeping its memory); otherwise a new buffer. An acquired buffer is UNINITIALIZED: the contents of a
 * released buffer are not kept, only its memory. release(buf) takes a buffer back; a buffer that is simply
 * destroyed instead frees its memory as usual. With max_cached_bytes, the oldest released buffers are
 * freed when the cache would hold more.
 *
 * Thread-safety: all members may be called concurrently.
 * Stream-ordering: a reused buffer keeps its stream; a device access on another stream waits for the
 * buffer's earlier work first (as for any unified_buffer). Cached buffers still free their device copies
 * on their streams, so those streams must outlive the pool (or clear() it first).
 * Invariant: cached_bytes_ == sum of the cached buffers' capacities (<= max_cached_bytes_ when not 0).
 */
template <class T>
class unified_buffer_pool {
 public:
  /** @param max_cached_bytes the most bytes (capacity) kept for reuse; 0: no limit. */
  explicit unified_buffer_pool(unified_options const& options = {}, std::size_t max_cached_bytes = 0)
    : options_{options}, max_cached_bytes_{max_cached_bytes}
  {
  }

  /**
   * @post the result is UNINITIALIZED with size() == count.
   * @throws gpumem::logic_error if count * sizeof(T) overflows or the options conflict.
   */
  [[nodiscard]] std::unique_ptr<unified_buffer<T>> acquire(std::size_t count)
  {
    expects(count <= static_cast<std::size_t>(-1) / sizeof(T) / 2,
            "acquire(" + std::to_string(count) + "): the size overflows");
    std::size_t const bytes = count * sizeof(T);
    {
      detail::lock_guard lock{mutex_};
      auto it = cached_.lower_bound(bytes);
      if (it != cached_.end() && it->first <= 2 * bytes) {
        auto buffer = std::move(it->second.buffer);
        order_.erase(it->second.sequence);
        cached_bytes_ -= it->first;
        cached_.erase(it);
        ++hits_;
        buffer->storage().reset_for_reuse(bytes);
        return buffer;
      }
      ++misses_;
    }
    return std::make_unique<unified_buffer<T>>(count, options_);
  }

  /**
   * @brief Takes `buffer` back for reuse (its contents are dropped). A null or moved-from buffer is ignored.
   * @throws gpumem::logic_error if the buffer was made with other options than the pool's (it is then
   *         destroyed).
   */
  void release(std::unique_ptr<unified_buffer<T>> buffer)
  {
    if (!buffer || !buffer->valid()) { return; }
    expects(buffer->storage().options() == options_, "the buffer was made with other unified_options than this pool's");
    std::size_t const capacity = buffer->storage().capacity();
    buffer->storage().reset_for_reuse(0);  // UNINITIALIZED: a spill now just frees the device copy
    std::vector<std::unique_ptr<unified_buffer<T>>> evicted;  // destroyed after the lock is released
    detail::lock_guard lock{mutex_};
    ++releases_;
    if (max_cached_bytes_ != 0 && capacity > max_cached_bytes_) {
      evicted.push_back(std::move(buffer));
      return;
    }
    while (max_cached_bytes_ != 0 && cached_bytes_ + capacity > max_cached_bytes_ && !order_.empty()) {
      evicted.push_back(take_oldest());
    }
    std::uint64_t const sequence = next_sequence_++;
    cached_.emplace(capacity, entry{sequence, std::move(buffer)});
    order_.emplace(sequence, capacity);
    cached_bytes_ += capacity;
  }

  /** @brief Frees every cached buffer. */
  void clear() noexcept
  {
    decltype(cached_) dropped;  // destroyed after the lock is released
    detail::lock_guard lock{mutex_};
    dropped.swap(cached_);
    order_.clear();
    cached_bytes_ = 0;
  }

  /**
   * @brief Sets the most bytes kept for reuse (0: no limit), freeing the oldest cached buffers now until
   * the cache fits.
   */
  void set_max_cached_bytes(std::size_t max_cached_bytes)
  {
    std::vector<std::unique_ptr<unified_buffer<T>>> evicted;  // destroyed after the lock is released
    detail::lock_guard lock{mutex_};
    max_cached_bytes_ = max_cached_bytes;
    while (max_cached_bytes_ != 0 && cached_bytes_ > max_cached_bytes_ && !order_.empty()) {
      evicted.push_back(take_oldest());
    }
  }
  /** @return the most bytes kept for reuse; 0: no limit. */
  [[nodiscard]] std::size_t max_cached_bytes() const
  {
    detail::lock_guard lock{mutex_};
    return max_cached_bytes_;
  }

  [[nodiscard]] unified_pool_statistics statistics() const
  {
    detail::lock_guard lock{mutex_};
    return {hits_, misses_, cached_.size(), cached_bytes_, releases_};
  }
  [[nodiscard]] unified_options const& options() const noexcept { return options_; }

 private:
  struct entry {
    std::uint64_t sequence;
    std::unique_ptr<unified_buffer<T>> buffer;
  };

  /// Removes the buffer released longest ago from the cache. order_ is not empty.
  [[nodiscard]] std::unique_ptr<unified_buffer<T>> take_oldest() GPUMEM_REQUIRES(mutex_)
  {
    auto const [sequence, capacity] = *order_.begin();
    order_.erase(order_.begin());
    auto [first, last] = cached_.equal_range(capacity);
    for (auto it = first; it != last; ++it) {
      if (it->second.sequence == sequence) {
        auto buffer = std::move(it->second.buffer);
        cached_.erase(it);
        cached_bytes_ -= capacity;
        return buffer;
      }
    }
    return nullptr;  // unreachable while the invariant holds
  }

  unified_options options_;
  mutable detail::mutex mutex_;
  std::size_t max_cached_bytes_ GPUMEM_GUARDED_BY(mutex_);
  std::multimap<std::size_t, entry> cached_ GPUMEM_GUARDED_BY(mutex_);  // capacity -> buffer
  // Release sequence -> capacity (same buffers as cached_).
  std::map<std::uint64_t, std::size_t> order_ GPUMEM_GUARDED_BY(mutex_);
  std::uint64_t next_sequence_ GPUMEM_GUARDED_BY(mutex_){};
  std::size_t cached_bytes_ GPUMEM_GUARDED_BY(mutex_){};
  std::uint64_t hits_ GPUMEM_GUARDED_BY(mutex_){};
  std::uint64_t misses_ GPUMEM_GUARDED_BY(mutex_){};
  std::uint64_t releases_ GPUMEM_GUARDED_BY(mutex_){};
};

}  // namespace gpumem
