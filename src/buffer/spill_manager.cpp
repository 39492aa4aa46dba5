// spill_manager: a budget (limiting adaptor) under a retry-on-out-of-memory adaptor whose callback spills
// unified buffers' device copies, least recently used first. The LRU list is intrusive (the buffers' own
// links) and guarded by the manager's mutex. Lock order: a buffer's mutex, then the manager's; the
// manager only ever try_locks a buffer, so a buffer busy on another thread is skipped, never blocked on (an
// allocation that finds only busy buffers retries for a moment, sleeping between tries: on_out_of_memory).
#include <gpumem/buffer/detail/unified_storage.hpp>
#include <gpumem/buffer/spill_manager.hpp>
#include <gpumem/error.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

namespace gpumem {
namespace {

[[nodiscard]] mr::device_memory_resource* checked_upstream(mr::device_memory_resource* upstream)
{
  expects(upstream != nullptr, "the upstream resource must not be null");
  return upstream;
}

[[nodiscard]] std::size_t checked_budget(std::size_t budget)
{
  expects(budget > 0, "the budget must be positive");
  return budget;
}

}  // namespace

spill_manager::spill_manager(mr::device_memory_resource* upstream, std::size_t budget_bytes)
  : limiting_{checked_upstream(upstream), checked_budget(budget_bytes)},
    retrying_{&limiting_, &spill_manager::on_out_of_memory, this}
{
}

spill_manager::~spill_manager()
{
  // Buffers still alive: copy their device data back, free their device copies, and let them go on
  // without a manager (their device copies then come from the upstream).
  std::vector<detail::unified_storage*> remaining;
  {
    detail::lock_guard lock{mutex_};
    remaining.assign(buffers_.begin(), buffers_.end());
  }
  for (auto* storage : remaining) {
    std::lock_guard buffer_lock{storage->mutex_};
    if (storage->spill_device_copy() == 0 && storage->device_allocated_ && storage->capacity_ > 0) {
      std::fprintf(stderr,
                   "gpumem: spill_manager destroyed while a buffer's device data could not be copied back; the "
                   "buffer keeps its device copy from the manager's upstream\n");
      detail::lock_guard lock{mutex_};
      unlink(storage);
    }
    try {
      storage->wait_host_copy();
    } catch (...) {  // NOLINT(bugprone-empty-catch): a failed stream; the buffer reports it on its next use
    }
    storage->spill_ = nullptr;
    storage->device_resource_ = limiting_.upstream_resource();
  }
}

std::size_t spill_manager::resident_buffers() const
{
  detail::lock_guard lock{mutex_};
  return resident_;
}

spill_statistics spill_manager::statistics() const
{
  detail::lock_guard lock{mutex_};
  return statistics_;
}

std::size_t spill_manager::spill(std::size_t bytes) { return spill_some(bytes).freed; }

spill_manager::spill_result spill_manager::spill_some(std::size_t bytes)
{
  spill_result result{};
  std::size_t attempts = resident_buffers();  // each buffer at most once per call
  while (result.freed < bytes && attempts-- > 0) {
    detail::unified_storage* victim = nullptr;
    {
      detail::lock_guard lock{mutex_};
      std::size_t busy = 0;
      for (auto* s = oldest_; s != nullptr; s = s->lru_newer_) {
        if (s->has_residency_hold()) { continue; }
        if (!s->mutex_.try_lock()) {  // in a member call on another thread
          ++busy;
          continue;
        }
        if (s->has_residency_hold()) {  // a guard taken meanwhile
          s->mutex_.unlock();
          continue;
        }
        victim = s;
        unlink(s);
        ++spills_in_flight_;
        break;
      }
      if (victim == nullptr) {
        result.busy = busy;
        result.in_flight = spills_in_flight_;  // other threads' spills: their memory comes free soon
        break;
      }
    }
    std::size_t const n = victim->spill_device_copy();
    {
      detail::lock_guard lock{mutex_};
      if (n == 0 && victim->device_allocated_) { link_newest(victim); }  // its data could not be saved: it keeps its copy
      --spills_in_flight_;
    }
    victim->mutex_.unlock();
    result.freed += n;
  }
  return result;
}

bool spill_manager::on_out_of_memory(std::size_t bytes, void* self)
{
  auto* const manager = static_cast<spill_manager*>(self);
  // Memory freed by another thread between the failure and this call: retry once before spilling. (Once:
  // when the device itself is full, the budget has room and the retry fails again.)
  thread_local bool retried_for_room = false;
  if (!retried_for_room && manager->limiting_.has_room_for(bytes)) {
    retried_for_room = true;
    return true;
  }
  retried_for_room = false;
  // A buffer inside a member call on another thread cannot be spilled now, and another thread's spill
  // frees its memory in a moment: wait for them (backing off, up to busy_wait in all) rather than fail
  // while memory is about to come free. Buffers held by residency guards are not waited for: their
  // holders decide when they let go.
  auto const deadline = std::chrono::steady_clock::now() + busy_wait;
  auto pause = std::chrono::microseconds{50};
  bool waited = false;
  while (true) {
    spill_result const result = manager->spill_some(bytes);
    if (result.freed > 0) { return true; }
    if (waited && manager->limiting_.has_room_for(bytes)) { return true; }  // freed by the spills waited for
    if ((result.busy == 0 && result.in_flight == 0) || std::chrono::steady_clock::now() + pause > deadline) { break; }
    std::this_thread::sleep_for(pause);
    waited = true;
    pause = std::min(pause * 2, std::chrono::microseconds{std::chrono::milliseconds{10}});
  }
  detail::lock_guard lock{manager->mutex_};
  ++manager->statistics_.failed_allocations;
  return false;
}

void spill_manager::on_buffer_created(detail::unified_storage* storage)
{
  detail::lock_guard lock{mutex_};
  buffers_.insert(storage);
}

void spill_manager::on_buffer_destroyed(detail::unified_storage* storage) noexcept
{
  detail::lock_guard lock{mutex_};
  unlink(storage);
  buffers_.erase(storage);
}

void spill_manager::on_device_allocated(detail::unified_storage* storage)
{
  detail::lock_guard lock{mutex_};
  link_newest(storage);
}

void spill_manager::on_device_used(detail::unified_storage* storage) noexcept
{
  detail::lock_guard lock{mutex_};
  if (!storage->in_lru_ || storage == newest_) { return; }
  unlink(storage);
  link_newest(storage);
}

void spill_manager::on_device_cold(detail::unified_storage* storage) noexcept
{
  detail::lock_guard lock{mutex_};
  if (!storage->in_lru_) { return; }
  unlink(storage);
  link_oldest(storage);
}

void spill_manager::on_device_freed(detail::unified_storage* storage) noexcept
{
  detail::lock_guard lock{mutex_};
  unlink(storage);
}

void spill_manager::on_spilled(std::size_t bytes, bool copied_back)
{
  detail::lock_guard lock{mutex_};
  ++statistics_.spills;
  statistics_.bytes_spilled += bytes;
  if (copied_back) {
    ++statistics_.copies_back;
    statistics_.bytes_copied_back += bytes;
  }
}

void spill_manager::unlink(detail::unified_storage* storage) noexcept
{
  if (!storage->in_lru_) { return; }
  (storage->lru_older_ != nullptr ? storage->lru_older_->lru_newer_ : oldest_) = storage->lru_newer_;
  (storage->lru_newer_ != nullptr ? storage->lru_newer_->lru_older_ : newest_) = storage->lru_older_;
  storage->lru_older_ = nullptr;
  storage->lru_newer_ = nullptr;
  storage->in_lru_ = false;
  --resident_;
}

void spill_manager::link_newest(detail::unified_storage* storage) noexcept
{
  if (storage->in_lru_) { return; }
  storage->lru_older_ = newest_;
  storage->lru_newer_ = nullptr;
  (newest_ != nullptr ? newest_->lru_newer_ : oldest_) = storage;
  newest_ = storage;
  storage->in_lru_ = true;
  ++resident_;
}

void spill_manager::link_oldest(detail::unified_storage* storage) noexcept
{
  if (storage->in_lru_) { return; }
  storage->lru_newer_ = oldest_;
  storage->lru_older_ = nullptr;
  (oldest_ != nullptr ? oldest_->lru_older_ : newest_) = storage;
  oldest_ = storage;
  storage->in_lru_ = true;
  ++resident_;
}

}  // namespace gpumem
