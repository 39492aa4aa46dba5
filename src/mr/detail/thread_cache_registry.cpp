// thread_cache_registry (mr/detail/thread_cache_registry.hpp): making a thread's cache on first use, and
// emptying every cache of an exiting thread.
#include <gpumem/mr/detail/thread_cache_registry.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace gpumem::detail {

constinit thread_local last_thread_cache tls_last_thread_cache{0, nullptr};

namespace {

/// Set when the calling thread's cache list has been destroyed: the thread is exiting (or, for the main
/// thread, the program is), and no cache may be made for it any more.
constinit thread_local bool tls_caches_gone = false;

/// The caches of the calling thread, one per resource it used. Its destructor runs when the thread exits.
class thread_caches {
 public:
  thread_caches() = default;
  thread_caches(thread_caches const&) = delete;
  thread_caches& operator=(thread_caches const&) = delete;
  thread_caches(thread_caches&&) = delete;
  thread_caches& operator=(thread_caches&&) = delete;

  ~thread_caches()
  {
    tls_caches_gone = true;
    tls_last_thread_cache = {0, nullptr};
    for (auto& [id, c] : entries_) {
      lock_guard lock{c->lock};
      if (!c->detached) {
        c->owner->thread_exiting(c->cache);
        c->detached = true;
      }
    }
  }

  [[nodiscard]] thread_cache* find(std::uint64_t id) const noexcept
  {
    for (auto const& [entry_id, c] : entries_) {
      if (entry_id == id) { return c.get(); }
    }
    return nullptr;
  }

  /// Adds a cache, first forgetting those detached since (their resources are gone).
  void add(std::uint64_t id, std::shared_ptr<thread_cache> c)
  {
    std::erase_if(entries_, [](auto const& entry) {
      lock_guard lock{entry.second->lock};
      return entry.second->detached;
    });
    entries_.emplace_back(id, std::move(c));
  }

 private:
  std::vector<std::pair<std::uint64_t, std::shared_ptr<thread_cache>>> entries_;
};

std::uint64_t next_registry_id() noexcept
{
  static std::atomic<std::uint64_t> next{1};  // 0 is the empty memo
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

thread_cache_registry::thread_cache_registry(thread_cache_owner* owner) : id_{next_registry_id()}, owner_{owner} {}

thread_cache_registry::~thread_cache_registry()
{
  lock_guard registry_lock{mutex_};
  for (auto const& c : caches_) {
    lock_guard cache_lock{c->lock};
    c->detached = true;
  }
}

thread_cache* thread_cache_registry::local_slow() noexcept
{
  if (tls_caches_gone) { return nullptr; }
  thread_local thread_caches mine;
  thread_cache* found = mine.find(id_);
  if (found == nullptr) {
    try {
      auto made = std::make_shared<thread_cache>(owner_);
      {
        lock_guard registry_lock{mutex_};
        caches_.push_back(made);
      }
      found = made.get();
      try {
        mine.add(id_, std::move(made));
      } catch (...) {  // the registry holds it; detach it so that nobody uses a cache no thread owns
        lock_guard registry_lock{mutex_};
        lock_guard cache_lock{found->lock};
        found->detached = true;
        return nullptr;
      }
    } catch (std::bad_alloc const&) {
      return nullptr;
    }
  }
  tls_last_thread_cache = {id_, found};
  return found;
}

void thread_cache_registry::prune_locked() noexcept
{
  std::erase_if(caches_, [](auto const& c) {
    lock_guard lock{c->lock};
    return c->detached;
  });
}

}  // namespace gpumem::detail
