/**
 * @file thread_cache_registry.hpp
 * One block_cache per thread per resource, found without a lock, and reachable from every thread.
 *
 * The calling thread finds its cache through a one-entry thread-local memo (the registry's id and the
 * cache), so the fast path is one thread-local read and a compare. Each cache has its own small lock,
 * taken by its thread on every operation (uncontended: one atomic exchange) and by other threads only
 * when they must reach every cache: to reclaim memory before failing, to release, to forget a stream,
 * to check invariants, and at the resource's destruction.
 *
 * Lifetimes: a cache is shared by its thread (a thread-local list) and the registry. When the thread
 * exits, the owner's thread_exiting() empties the cache (on that thread) and the cache is detached;
 * when the resource dies first, detach_all() empties every cache and detaches it. A detached cache is
 * never used again; a registry's id is never reused, so a memo of a dead registry never matches.
 *
 * Lock order: the registry's mutex, then caches (several only under the registry's mutex), then the
 * resource's own lock. No cache lock is taken while the resource's lock is held.
 *
 * No CUDA here (DESIGN.md, mr/detail): the owner decides what emptying a cache means.
 */
#pragma once

#include <gpumem/detail/thread_annotations.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/detail/block_cache.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

namespace gpumem::detail {

/// A lock for a cache that its own thread takes on every operation and other threads take rarely.
class GPUMEM_CAPABILITY("cache_lock") cache_lock {
 public:
  void lock() noexcept GPUMEM_ACQUIRE()
  {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      while (locked_.load(std::memory_order_relaxed)) { std::this_thread::yield(); }
    }
  }
  void unlock() noexcept GPUMEM_RELEASE() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

/// What a resource must do for its caches.
class thread_cache_owner {
 public:
  /// Called on a thread that is exiting, with its cache locked: empty it (the cache is detached after).
  virtual void thread_exiting(block_cache& cache) noexcept = 0;

 protected:
  thread_cache_owner() = default;
  ~thread_cache_owner() = default;
  thread_cache_owner(thread_cache_owner const&) = default;
  thread_cache_owner& operator=(thread_cache_owner const&) = default;
};

/// One thread's cache for one resource.
struct thread_cache {
  explicit thread_cache(thread_cache_owner* o) noexcept : owner{o} {}
  cache_lock lock;
  bool detached GPUMEM_GUARDED_BY(lock){false};  // a detached cache is never used again
  thread_cache_owner* const owner;
  block_cache cache GPUMEM_GUARDED_BY(lock);
};

/// The calling thread's most recently used cache (the fast path's memo).
struct last_thread_cache {
  std::uint64_t registry_id;
  thread_cache* cache;
};
extern GPUMEM_EXPORT constinit thread_local last_thread_cache tls_last_thread_cache;

/**
 * @brief The caches of one resource, one per thread that used it.
 * Thread-safety: every member may be called concurrently, except that the destructor must not race
 * with anything (as the resource's own).
 */
class GPUMEM_EXPORT thread_cache_registry {
 public:
  explicit thread_cache_registry(thread_cache_owner* owner);
  /// Detaches the caches still attached, without emptying them (call detach_all() first).
  ~thread_cache_registry();
  thread_cache_registry(thread_cache_registry const&) = delete;
  thread_cache_registry& operator=(thread_cache_registry const&) = delete;
  thread_cache_registry(thread_cache_registry&&) = delete;
  thread_cache_registry& operator=(thread_cache_registry&&) = delete;

  /**
   * @return the calling thread's cache (made on first use), or nullptr while the thread's thread-locals
   *         are being destroyed or when the host heap is exhausted: the caller then goes without a cache.
   *         Lock it, and check `detached`, before use.
   */
  [[nodiscard]] thread_cache* local() noexcept
  {
    last_thread_cache const& last = tls_last_thread_cache;
    if (last.registry_id == id_) { return last.cache; }
    return local_slow();
  }

  /// Calls f(block_cache&) for every attached cache, each locked during its call, one at a time.
  template <class F>
  void for_each(F&& f) GPUMEM_EXCLUDES(mutex_)
  {
    lock_guard registry_lock{mutex_};
    prune_locked();
    for (auto const& c : caches_) {
      lock_guard cache_lock{c->lock};
      if (!c->detached) { f(c->cache); }
    }
  }

  /// Calls f(std::vector<block_cache const*> const&) with every attached cache locked at once.
  /// Not analysed: the analysis cannot follow a lock taken per element of a container.
  template <class F>
  void with_all_locked(F&& f) GPUMEM_EXCLUDES(mutex_) GPUMEM_NO_THREAD_SAFETY_ANALYSIS
  {
    lock_guard registry_lock{mutex_};
    prune_locked();
    for (auto const& c : caches_) { c->lock.lock(); }
    try {
      std::vector<block_cache const*> all;
      all.reserve(caches_.size());
      for (auto const& c : caches_) { all.push_back(&c->cache); }
      f(all);
    } catch (...) {
      for (auto const& c : caches_) { c->lock.unlock(); }
      throw;
    }
    for (auto const& c : caches_) { c->lock.unlock(); }
  }

  /// Calls f(block_cache&) for every attached cache (locked), then detaches it. For the owner's destructor.
  template <class F>
  void detach_all(F&& f) noexcept GPUMEM_EXCLUDES(mutex_)
  {
    lock_guard registry_lock{mutex_};
    for (auto const& c : caches_) {
      lock_guard cache_lock{c->lock};
      if (!c->detached) {
        f(c->cache);
        c->detached = true;
      }
    }
    caches_.clear();
  }

 private:
  thread_cache* local_slow() noexcept GPUMEM_EXCLUDES(mutex_);
  void prune_locked() noexcept GPUMEM_REQUIRES(mutex_);

  std::uint64_t const id_;
  thread_cache_owner* const owner_;
  mutex mutex_;
  std::vector<std::shared_ptr<thread_cache>> caches_ GPUMEM_GUARDED_BY(mutex_);
};

}  // namespace gpumem::detail
