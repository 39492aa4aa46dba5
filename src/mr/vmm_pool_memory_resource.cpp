// vmm_pool_memory_resource (vmm_pool_memory_resource.hpp has the contract; mr/detail/virtual_heap.hpp the
// placement). This file turns the heap's decisions into provider calls and stream-ordering.
#include <gpumem/backend/backend.hpp>
#include <gpumem/debug_log.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/stream_ordered_memory_resource.hpp>  // this_thread_token
#include <gpumem/mr/vmm_pool_memory_resource.hpp>

#include "mr/option_checks.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <string>
#include <thread>
#include <tuple>
#include <utility>

namespace gpumem::mr {
namespace {

constexpr unsigned max_slots = 63;
constexpr std::uint64_t retired = ~std::uint64_t{0};  // stream_slot::thread of a destroyed stream's slot  // bit 63 stays unused: masks fit in 64 bits with room to spare

[[nodiscard]] std::size_t round_up(std::size_t value, std::size_t multiple) { return (value + multiple - 1) / multiple * multiple; }

[[nodiscard]] bool is_per_thread_default(cudaStream_t stream) noexcept { return stream == cudaStreamPerThread; }

constexpr char const* resource_name = "gpumem::mr::vmm_pool_memory_resource";

/// The bytes of address space the heap spans: `requested` (or four times the device's total memory)
/// rounded up to whole slabs, with room left in size_t for the one slab more that aligns the heap's base.
/// @throws gpumem::logic_error naming reservation_size and its value when that overflows.
[[nodiscard]] std::size_t reservation_for(std::optional<std::size_t> requested, std::size_t device_total,
                                          std::size_t slab)
{
  std::optional<std::size_t> const wanted =
    requested ? requested : detail::checked_multiply(4, std::max(device_total, slab));
  std::optional<std::size_t> const rounded = wanted ? detail::checked_round_up(*wanted, slab) : std::nullopt;
  if (!rounded || !detail::checked_add(*rounded, slab)) {
    if (requested) {
      detail::throw_option_error(resource_name, "reservation_size", *requested,
                                 "overflows size_t when rounded up to slabs of " + std::to_string(slab) +
                                   " bytes, plus the slab that aligns the pool's base");
    }
    detail::throw_option_error(resource_name, "the default reservation_size of four times the device's memory",
                               device_total, "overflows size_t: pass a reservation_size");
  }
  return *rounded;
}

/// Checks the invariants at the end of a call, in debug builds (mr/detail/invariant_checks.hpp).
using checked_call = detail::invariant_check_at_exit<vmm_pool_memory_resource>;
constexpr std::string_view checked_name = "vmm_pool_memory_resource";

}  // namespace

vmm_pool_memory_resource::vmm_pool_memory_resource(vmm_pool_options const& options)
  : vmm_pool_memory_resource(make_device_vmm_provider(detail::get_backend().current_device(), options.peer_devices),
                             options)
{
}

vmm_pool_memory_resource::vmm_pool_memory_resource(std::unique_ptr<virtual_memory_provider> provider,
                                                   vmm_pool_options const& options)
  : provider_{std::move(provider)},
    maximum_physical_{options.maximum_physical_size},
    release_threshold_{options.release_threshold}
{
  expects(provider_ != nullptr, "the virtual memory provider is null");
  expects(options.slab_size > 0, "slab_size is 0");
  std::size_t const granularity = provider_->granularity();
  std::size_t const slab = detail::round_up_option(resource_name, "slab_size", options.slab_size, granularity);
  mapping_divisor_ = options.mapping_divisor;
  if (options.small_block_limit != 0) {
    if (options.small_block_limit % detail::allocation_alignment != 0 ||
        options.small_block_limit > detail::block_cache::largest_cached_block) {
      detail::throw_option_error(resource_name, "small_block_limit", options.small_block_limit,
                                 "is not a multiple of 256 bytes of at most " +
                                   std::to_string(detail::block_cache::largest_cached_block));
    }
    small_block_limit_ = options.small_block_limit;
    pages_.emplace(detail::small_pages::options{.small_limit = options.small_block_limit});
  }
  if (options.thread_cache_limit > small_block_limit_) {
    detail::throw_option_error(resource_name, "thread_cache_limit", options.thread_cache_limit,
                               "is above small_block_limit (" + std::to_string(small_block_limit_) +
                                 "): only blocks of pages are cached");
  }
  // With a release threshold the pool follows its live bytes: no cache keeps a page from going back.
  thread_cache_limit_ = options.release_threshold ? 0 : options.thread_cache_limit;
  max_mapping_slabs_ = std::max<std::size_t>(1, options.max_mapping_size.value_or(slab) / slab);
  if (options.reservation_size) {
    expects(*options.reservation_size >= slab, "reservation_size " + std::to_string(*options.reservation_size) +
                                                 " is smaller than one slab (" + std::to_string(slab) + " bytes)");
  }
  device_total_ = provider_->mem_info().total;
  std::size_t const reservation = reservation_for(options.reservation_size, device_total_, slab);
  if (options.maximum_physical_size) {
    expects(*options.maximum_physical_size >= slab, "maximum_physical_size " + std::to_string(*options.maximum_physical_size) +
                                          " is smaller than one slab (" + std::to_string(slab) + " bytes)");
  }
  if (mapping_divisor_ > 0 && !options.max_mapping_size) { max_mapping_slabs_ = reservation / slab; }
  // Reserve one slab more, so that the heap's base can be aligned to the slab size.
  reservation_size_ = reservation + slab;  // no overflow: reservation_for leaves room for it
  reservation_ = provider_->reserve(reservation_size_);
  try {
    std::uintptr_t const base = round_up(reservation_, slab);
    heap_ = std::make_unique<detail::virtual_heap>(base, reservation, slab, detail::allocation_alignment);
    detail::add_stream_destroy_listener(this);
  } catch (...) {
    provider_->unreserve(reservation_, reservation_size_);
    throw;
  }
}

vmm_pool_memory_resource::~vmm_pool_memory_resource()
{
  detail::remove_stream_destroy_listener(this);
  caches_.detach_all([this](detail::block_cache& cache) { cache.spill_all(std::nullopt, [this](auto const& batch) noexcept { spill(batch, false); }); });
  detail::lock_guard lock{mutex_};
  detail::backend& be = detail::get_backend();
  // Wait for every stream that freed memory here, then take everything down.
  std::uint64_t all = 0;
  for (unsigned i = 0; i < slots_.size(); ++i) {
    if (slots_[i].in_use) { all |= std::uint64_t{1} << i; }
  }
  try {
    wait_on_host(all);
  } catch (std::exception const& e) {
    detail::log(log_level::error, std::string{"vmm_pool_memory_resource: waiting for streams at destruction failed: "} + e.what());
  }
  for (auto const& m : moved_mappings_) { provider_->unmap(m.address, m.bytes); }  // old places of moved pieces
  heap_->for_each_mapping([&](std::uintptr_t address, std::uint64_t handle, std::size_t bytes) {
    provider_->unmap(address, bytes);
    release_piece(handle);
  });
  for (auto const& slot : slots_) {
    if (slot.event != nullptr) { be.event_destroy(slot.event); }
  }
  provider_->unreserve(reservation_, reservation_size_);
}

unsigned vmm_pool_memory_resource::find_slot_scan(cudaStream_t stream) const noexcept
{
  std::uint64_t const thread = is_per_thread_default(stream) ? detail::this_thread_token() : 0;
  auto const is_its = [&](unsigned i) GPUMEM_REQUIRES(mutex_) {
    return slots_[i].in_use && slots_[i].stream == stream && slots_[i].thread == thread;
  };
  if (last_slot_ < slots_.size() && is_its(last_slot_)) { return last_slot_; }
  for (unsigned i = 0; i < slots_.size(); ++i) {
    if (is_its(i)) {
      last_slot_ = i;
      return i;
    }
  }
  return no_slot;
}

unsigned vmm_pool_memory_resource::slot_of(cudaStream_t stream)
{
  if (unsigned const own = find_slot(stream); own != no_slot) { return own; }
  std::uint64_t const thread = is_per_thread_default(stream) ? detail::this_thread_token() : 0;
  unsigned free_slot = no_slot;
  for (unsigned i = 0; i < slots_.size(); ++i) {
    if (!slots_[i].in_use) {
      free_slot = i;
      break;
    }
  }
  if (free_slot == no_slot && slots_.size() >= max_slots) {
    // All slots taken: the frees of slots whose event has completed are safe for every stream, so their
    // bits leave the free ranges; then every slot whose bit no free range carries comes free (a later free
    // on its stream takes a slot again).
    detail::backend& be = detail::get_backend();
    std::uint64_t done = 0;
    for (unsigned i = 0; i < slots_.size(); ++i) {
      bool const recorded = progress_[i].recorded_through.load(std::memory_order_acquire) >= slots_[i].frees;
      if (recorded && be.event_query(slots_[i].event)) { done |= std::uint64_t{1} << i; }
    }
    heap_->forget_streams(done);
    if (pages_) { pages_->forget_streams(done); }
    std::uint64_t const carried = heap_->streams_in_use() | (pages_ ? pages_->streams_in_use() : 0);
    for (unsigned i = 0; i < slots_.size(); ++i) {
      // A slot with holders keeps its stream and event: a taker still records or waits on them.
      if ((carried & (std::uint64_t{1} << i)) == 0 && progress_[i].holders.load(std::memory_order_acquire) == 0) {
        slots_[i].in_use = false;
        if (free_slot == no_slot) { free_slot = i; }
      }
    }
  }
  if (free_slot == no_slot) {
    if (slots_.size() >= max_slots) { return no_slot; }
    free_slot = static_cast<unsigned>(slots_.size());
    slots_.push_back({});
  }
  stream_slot& slot = slots_[free_slot];
  if (slot.event == nullptr) { slot.event = detail::get_backend().event_create(cudaEventDisableTiming); }
  slot.stream = stream;
  slot.thread = thread;
  slot.frees = 0;  // no holder (the reuse rule above): nothing reads the old counts any more
  progress_[free_slot].recorded_through.store(0, std::memory_order_release);
  slot.record_at_free = thread != 0 || !detail::stream_outlives_calls(cuda_stream_view{stream});
  slot.in_use = true;
  return free_slot;
}

namespace {

/// Raises `recorded` to `through` (records made outside the lock may finish in any order).
void note_recorded(std::atomic<std::uint64_t>& recorded, std::uint64_t through) noexcept
{
  std::uint64_t seen = recorded.load(std::memory_order_relaxed);
  while (seen < through && !recorded.compare_exchange_weak(seen, through, std::memory_order_release,
                                                            std::memory_order_relaxed)) {}
}

}  // namespace

cudaEvent_t vmm_pool_memory_resource::event_after_frees(unsigned i)
{
  stream_slot const& slot = slots_[i];
  if (progress_[i].recorded_through.load(std::memory_order_acquire) < slot.frees) {
    detail::get_backend().event_record(slot.event, slot.stream);  // after every free made on it so far
    note_recorded(progress_[i].recorded_through, slot.frees);
  }
  return slot.event;
}

void vmm_pool_memory_resource::plan_waits(std::uint64_t mask, cudaStream_t stream, stream_waits& waits)
{
  waits.streams = mask;
  waits.count = 0;
  // A block of our own stream needs no wait; a stream beyond the slots never has one.
  if (unsigned const own = find_slot(stream); own != no_slot) { mask &= ~(std::uint64_t{1} << own); }
  if (mask != 0) {
    ++cross_stream_takes_;
    cross_stream_waits_ += static_cast<std::size_t>(std::popcount(mask));
  }
  while (mask != 0) {
    auto const i = static_cast<unsigned>(std::countr_zero(mask));
    mask &= mask - 1;
    stream_slot const& slot = slots_[i];
    stream_progress& progress = progress_[i];
    // Frees counted after this read are of other blocks: a record made later follows ours as well.
    bool const record = progress.recorded_through.load(std::memory_order_acquire) < slot.frees;
    progress.holders.fetch_add(1, std::memory_order_relaxed);
    if (record) { progress.recorders.fetch_add(1, std::memory_order_relaxed); }
    waits.waits[waits.count++] = {slot.event, slot.stream, slot.frees, i, record};
  }
}

void vmm_pool_memory_resource::wait_for_frees(stream_waits const& waits, void* block, std::size_t heap_bytes,
                                              cudaStream_t stream)
{
  detail::backend& be = detail::get_backend();
  unsigned done = 0;
  try {
    for (; done < waits.count; ++done) {
      stream_waits::wait const& w = waits.waits[done];
      stream_progress& progress = progress_[w.slot];
      if (w.record) {
        struct leave_recorders {
          std::atomic<unsigned>& recorders;
          ~leave_recorders() { recorders.fetch_sub(1, std::memory_order_release); }
        } const leaving{progress.recorders};
        be.event_record(w.event, w.stream);
        note_recorded(progress.recorded_through, w.through);
      }
      be.stream_wait_event(stream, w.event);  // the event's latest record: ours or a later one
      progress.holders.fetch_sub(1, std::memory_order_release);
    }
  } catch (...) {
    // The recorders go first: a stream's destruction waits for them while it holds the mutex.
    for (unsigned i = done + 1; i < waits.count; ++i) {
      if (waits.waits[i].record) { progress_[waits.waits[i].slot].recorders.fetch_sub(1, std::memory_order_release); }
    }
    {
      detail::lock_guard lock{mutex_};
      auto const address = reinterpret_cast<std::uintptr_t>(block);
      if (heap_bytes == 0) {
        free_into_page(address, waits.streams);
      } else {
        retire_empty_pages();
        heap_->give_back(address, heap_bytes, waits.streams);
        bytes_in_use_ -= heap_bytes;
      }
      // Holders last: until the block is back with its streams, their slots keep their meaning.
      for (unsigned i = done; i < waits.count; ++i) {
        progress_[waits.waits[i].slot].holders.fetch_sub(1, std::memory_order_release);
      }
    }
    throw;
  }
}

void vmm_pool_memory_resource::wait_on_host(std::uint64_t mask)
{
  detail::backend& be = detail::get_backend();
  while (mask != 0) {
    auto const i = static_cast<unsigned>(std::countr_zero(mask));
    mask &= mask - 1;
    be.event_synchronize(event_after_frees(i));
  }
}

// ---- combining ------------------------------------------------------------------------------------------

namespace {

/// The calling thread's combining slot in the pool it used last (checked against the slot's owner).
struct combining_memo {
  void const* pool;
  unsigned slot;
};
constinit thread_local combining_memo tls_combining{nullptr, 0};

/// Spins of a waiter before it takes its operation back and sleeps on the mutex (each a pause, every 16th a try).
constexpr unsigned spin_limit = 1024;

inline void spin_pause() noexcept
{
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

}  // namespace

vmm_pool_memory_resource::combined_op* vmm_pool_memory_resource::combining_slot() noexcept
{
  detail::thread_cache* const mine = caches_.local();
  if (mine == nullptr) { return nullptr; }
  detail::block_cache const* const me = &mine->cache;  // this thread's, for this pool, until the thread exits
  if (tls_combining.pool == this && combined_[tls_combining.slot].owner.load(std::memory_order_relaxed) == me) {
    return &combined_[tls_combining.slot];
  }
  unsigned const claimed = combined_claimed_.load(std::memory_order_acquire);
  for (unsigned i = 0; i < claimed; ++i) {
    if (combined_[i].owner.load(std::memory_order_relaxed) == me) {
      tls_combining = {this, i};
      return &combined_[i];
    }
  }
  for (unsigned i = 0; i < combining_slots; ++i) {
    detail::block_cache const* expected = nullptr;
    if (combined_[i].owner.compare_exchange_strong(expected, me, std::memory_order_acq_rel)) {
      unsigned seen = combined_claimed_.load(std::memory_order_relaxed);
      while (seen < i + 1 && !combined_claimed_.compare_exchange_weak(seen, i + 1, std::memory_order_release)) {}
      tls_combining = {this, i};
      return &combined_[i];
    }
  }
  return nullptr;
}

std::uint32_t vmm_pool_memory_resource::run_op(combined_op& op, bool own) noexcept
{
  try {
    if (!op.is_free) {
      op.block = try_take(op.rounded, op.size, cuda_stream_view{op.stream}, 0, *op.waits);
      return combined_op::done;
    }
    if (!own) {
      // A new slot creates an event, and some streams record theirs at every free: driver calls that belong
      // on the freeing thread (its current device).
      unsigned const slot = find_slot(op.stream);
      if (slot == no_slot || slots_[slot].record_at_free) { return combined_op::declined; }
    }
    free_into_heap(op.address, op.rounded, op.size != 0, op.stream);
  } catch (...) {
    op.error = std::current_exception();
  }
  return combined_op::done;
}

void vmm_pool_memory_resource::run_published_ops() noexcept
{
  // Passes over the slots, so that the operations threads publish while this holder runs others' are run on
  // this core too, until a pass finds none or the budget is spent (it bounds how long the holder's own call
  // waits).
  unsigned budget = combining_budget;
  while (budget > 0 && combined_waiting_.load(std::memory_order_acquire) != 0) {
    unsigned ran = 0;
    unsigned const claimed = combined_claimed_.load(std::memory_order_acquire);
    for (unsigned i = 0; i < claimed && budget > 0; ++i) {
      combined_op& op = combined_[i];
      // Claimed before it runs: a waiter that takes its operation back (run_locked) and this holder never both
      // succeed.
      std::uint32_t expected = combined_op::published;
      if (op.state.load(std::memory_order_relaxed) != expected ||
          !op.state.compare_exchange_strong(expected, combined_op::running, std::memory_order_acquire)) {
        continue;
      }
      combined_waiting_.fetch_sub(1, std::memory_order_relaxed);
      std::uint32_t const result = run_op(op, false);
      if (result == combined_op::done) { ++combined_operations_; }
      op.state.store(result, std::memory_order_release);
      ++ran;
      --budget;
    }
    if (ran == 0) { return; }  // counted but not claimable yet (being published, or taken back)
  }
}

void vmm_pool_memory_resource::run_locked(combined_op& op) noexcept
{
  if (mutex_.try_lock()) {  // uncontended: run it here
    (void)run_op(op, true);
    run_published();
    mutex_.unlock();
    return;
  }
  op.state.store(combined_op::published, std::memory_order_release);
  combined_waiting_.fetch_add(1, std::memory_order_acq_rel);
  // Takes the operation back, so that no holder runs it: false when a holder has claimed it first.
  auto const take_back = [&]() noexcept {
    std::uint32_t expected = combined_op::published;
    if (!op.state.compare_exchange_strong(expected, combined_op::idle, std::memory_order_acquire)) { return false; }
    combined_waiting_.fetch_sub(1, std::memory_order_relaxed);
    return true;
  };
  // With the mutex held (which it releases): runs the operation unless a holder ran it, then the others'.
  auto const finish_holding = [&]() GPUMEM_RELEASE(mutex_) {
    if (op.state.load(std::memory_order_acquire) != combined_op::done) { (void)run_op(op, true); }
    run_published();
    mutex_.unlock();
  };
  for (unsigned spin = 1;; ++spin) {
    std::uint32_t const state = op.state.load(std::memory_order_acquire);
    if (state == combined_op::done) { break; }
    if (state == combined_op::declined) {  // no longer published: blocking on the mutex is safe
      mutex_.lock();
      finish_holding();
      break;
    }
    if (state == combined_op::published) {
      if (spin % 16 == 0 && mutex_.try_lock()) {
        (void)take_back();  // no holder but this thread now: it cannot fail to be ours
        finish_holding();
        break;
      }
      // A thread blocks on the mutex only with its operation taken back: a holder that ran it could plan an
      // event record that this thread makes after the call, and the next holder may be a stream's
      // destruction that waits, holding the mutex, for that record.
      if (spin >= spin_limit && take_back()) {
        mutex_.lock();
        finish_holding();
        break;
      }
    }
    spin_pause();  // published, or running on the holder's thread (one operation: it ends soon)
  }
  op.state.store(combined_op::idle, std::memory_order_relaxed);
}

void* vmm_pool_memory_resource::do_allocate(std::size_t bytes, cuda_stream_view stream)
{
  checked_call const check{*this, invariant_sampler_, checked_name, "allocate"};
  auto const rounded = detail::checked_align_up(bytes, detail::allocation_alignment);
  std::size_t const size = rounded ? small_class(*rounded) : 0;  // the block size of a small request, else 0
  if (size != 0 && size <= thread_cache_limit_) {
    if (detail::thread_cache* const mine = caches_.local()) {  // the thread's cache: no mutex, no event
      detail::lock_guard cache_lock{mine->lock};
      if (!mine->detached) {
        if (auto const address = mine->cache.pop(cache_key(stream), size)) { return reinterpret_cast<void*>(*address); }
      }
    }
  }
  stream_waits waits;
  void* block = nullptr;
  if (rounded) {
    if (mutex_.try_lock()) {  // uncontended: run here, without looking up a combining slot
      try {
        block = try_take(*rounded, size, stream, 0, waits);
      } catch (...) {
        run_published();
        mutex_.unlock();
        throw;
      }
      run_published();
      mutex_.unlock();
    } else if (combined_op* const op = combinable(stream) ? combining_slot() : nullptr) {
      op->is_free = false;
      op->rounded = *rounded;
      op->size = size;
      op->stream = stream.value();
      op->waits = &waits;
      op->block = nullptr;
      run_locked(*op);
      if (op->error) { std::rethrow_exception(std::exchange(op->error, nullptr)); }
      block = op->block;
    } else {
      detail::lock_guard lock{mutex_};
      block = try_take(*rounded, size, stream, 0, waits);
    }
  }
  if (block == nullptr) {
    drain_thread_caches();  // before growing or failing: cached blocks first
    detail::lock_guard lock{mutex_};  // before fail(), which describes the heap
    if (!rounded) { fail(bytes, "the size overflows when rounded up to 256 bytes"); }
    // A new page's size follows the pool's: taken before a growth, so that the growth makes room for it.
    std::size_t const page = size != 0 ? pages_->page_bytes_for(size, heap_->backed_bytes()) : 0;
    block = try_take(*rounded, size, stream, page, waits);
    if (block == nullptr) {
      grow(bytes, size != 0 ? page : *rounded);
      block = try_take(*rounded, size, stream, page, waits);
      if (block == nullptr) { fail(bytes, "internal error: no block after growing"); }
    }
  }
  if (waits.count != 0) { wait_for_frees(waits, block, size != 0 ? 0 : *rounded, stream.value()); }
  return block;
}

void* vmm_pool_memory_resource::try_take(std::size_t rounded, std::size_t size, cuda_stream_view stream,
                                         std::size_t new_page, stream_waits& waits)
{
  if (size == 0) {
    retire_empty_pages();
    auto const taken = heap_->take(rounded);
    if (!taken) { return nullptr; }
    if (taken->streams != 0) { plan_waits(taken->streams, stream.value(), waits); }
    bytes_in_use_ += rounded;
    return reinterpret_cast<void*>(taken->address);
  }
  if (auto const block = pages_->take(rounded)) {
    if (block->streams != 0) { plan_waits(block->streams, stream.value(), waits); }
    return reinterpret_cast<void*>(block->address);
  }
  if (new_page == 0) { return nullptr; }
  std::size_t const page = new_page;
  retire_empty_pages();
  auto const taken = heap_->take(page);
  if (!taken) { return nullptr; }
  detail::small_pages::block block{};
  try {
    block = pages_->add_page(taken->address, rounded, page, taken->streams);
  } catch (...) {
    heap_->give_back(taken->address, page, taken->streams);
    throw;
  }
  bytes_in_use_ += page;  // the heap's view: the whole page is in use
  if (block.streams != 0) { plan_waits(block.streams, stream.value(), waits); }
  return reinterpret_cast<void*>(block.address);
}

void vmm_pool_memory_resource::free_into_page(std::uintptr_t address, std::uint64_t mask)
{
  if (auto const retired = pages_->give_back(address, mask)) {  // more empty pages than small_pages keeps
    heap_->give_back(retired->address, retired->bytes, retired->streams);
    bytes_in_use_ -= retired->bytes;
  }
}

void vmm_pool_memory_resource::retire_empty_pages()
{
  if (!pages_) { return; }
  while (auto const retired = pages_->retire_empty_page()) {
    heap_->give_back(retired->address, retired->bytes, retired->streams);
    bytes_in_use_ -= retired->bytes;
  }
}

// Not analysed: class_of reads only the page shape, fixed at construction.
std::size_t vmm_pool_memory_resource::small_class(std::size_t rounded) const noexcept GPUMEM_NO_THREAD_SAFETY_ANALYSIS
{
  return rounded != 0 && rounded <= small_block_limit_ ? pages_->class_of(rounded) : 0;
}

void vmm_pool_memory_resource::do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept
{
  checked_call const check{*this, invariant_sampler_, checked_name, "deallocate"};
  std::size_t const rounded = detail::checked_align_up(bytes, detail::allocation_alignment).value_or(bytes);
  auto const address = reinterpret_cast<std::uintptr_t>(ptr);
  // Only a block inside the reservation, whole and aligned, may enter a cache: anything else goes to the
  // heap, which refuses it with a message.
  std::size_t const size = small_class(rounded);
  if (size != 0 && size <= thread_cache_limit_ && address % detail::allocation_alignment == 0 && address >= reservation_ &&
      address - reservation_ < reservation_size_ && size <= reservation_size_ - (address - reservation_)) {
    try {
      if (cache_freed_block(stream, size, address)) { return; }
    } catch (logic_error const& e) {  // a double free of a block in this thread's cache (cache unchanged)
      detail::report_deallocation_misuse(std::string{"vmm_pool_memory_resource::deallocate("} + format_pointer(ptr) +
                                         ", " + std::to_string(bytes) + " bytes): " + e.what());
      return;
    }
  }
  std::exception_ptr error;
  if (mutex_.try_lock()) {  // uncontended: run here, without looking up a combining slot
    try {
      free_into_heap(address, rounded, size != 0, stream.value());
    } catch (...) {
      error = std::current_exception();
    }
    run_published();
    mutex_.unlock();
  } else if (combined_op* const op = combinable(stream) ? combining_slot() : nullptr) {
    op->is_free = true;
    op->rounded = rounded;
    op->size = size;
    op->stream = stream.value();
    op->address = address;
    run_locked(*op);
    error = std::exchange(op->error, nullptr);
  } else {
    detail::lock_guard lock{mutex_};
    try {
      free_into_heap(address, rounded, size != 0, stream.value());
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (!error) { return; }
  try {
    std::rethrow_exception(error);
  } catch (logic_error const& e) {  // a double free or a foreign pointer (virtual_heap::give_back); unchanged
    detail::report_deallocation_misuse(std::string{"vmm_pool_memory_resource::deallocate("} + format_pointer(ptr) +
                                       ", " + std::to_string(bytes) + " bytes): " + e.what());
  } catch (std::exception const& e) {
    detail::log(log_level::error, std::string{"vmm_pool_memory_resource::deallocate("} + format_pointer(ptr) +
                                            ", " + std::to_string(bytes) + " bytes) ignored: " + e.what());
  }
}

void vmm_pool_memory_resource::free_into_heap(std::uintptr_t address, std::size_t rounded, bool small,
                                              cudaStream_t stream)
{
  unsigned const slot = slot_of(stream);
  std::uint64_t mask = 0;
  if (slot != no_slot) {
    stream_slot& s = slots_[slot];
    mask = std::uint64_t{1} << slot;
    ++s.frees;
    if (s.record_at_free) { (void)event_after_frees(slot); }
  } else {
    detail::get_backend().stream_synchronize(stream);  // beyond the slots: safe for every stream now
  }
  if (small) {
    free_into_page(address, mask);
  } else {
    retire_empty_pages();
    heap_->give_back(address, rounded, mask);
    bytes_in_use_ -= rounded;
  }
  // O(1) test first: only when the free bytes could hold more than the threshold in whole slabs.
  if (release_threshold_ && heap_->free_bytes() >= *release_threshold_ &&
      heap_->free_bytes() - *release_threshold_ >= heap_->slab_size()) {
    release_over_threshold();
  }
}

// ---- thread caches ----------------------------------------------------------------------------------------

std::uintptr_t vmm_pool_memory_resource::cache_key(cuda_stream_view stream) noexcept
{
  return stream.is_default() ? 0 : reinterpret_cast<std::uintptr_t>(stream.value());
}

bool vmm_pool_memory_resource::cache_freed_block(cuda_stream_view stream, std::size_t size, std::uintptr_t address)
{
  // Only the default streams (which outlive every call): a block cached for an explicit stream serves only
  // that stream on this thread, and programs that spread work over explicit streams allocate on one and free
  // on another.
  if (!stream.is_default() && !stream.is_per_thread_default()) { return false; }
  detail::thread_cache* const mine = caches_.local();
  if (mine == nullptr) { return false; }
  detail::lock_guard cache_lock{mine->lock};
  if (mine->detached) { return false; }
  mine->cache.push(cache_key(stream), size, address,
                   [this](detail::block_cache::spill_batch const& batch) noexcept { spill(batch, true); });
  return true;
}

void vmm_pool_memory_resource::spill(detail::block_cache::spill_batch const& batch, bool own_thread) noexcept
{
  auto const handle = reinterpret_cast<cudaStream_t>(batch.stream);  // NOLINT(performance-no-int-to-ptr)
  cudaStream_t const stream = (handle == cudaStreamPerThread && !own_thread) ? cudaStream_t{} : handle;
  detail::lock_guard lock{mutex_};
  for (std::uintptr_t const address : batch.addresses) {
    try {
      free_into_heap(address, batch.block_size, true, stream);
    } catch (logic_error const& e) {  // a block freed twice, once into a cache and once into the heap
      detail::report_deallocation_misuse(std::string{"vmm_pool_memory_resource::deallocate("} +
                                         format_pointer(reinterpret_cast<void*>(address)) + ", " +  // NOLINT(performance-no-int-to-ptr)
                                         std::to_string(batch.block_size) + " bytes): " + e.what());
    } catch (std::exception const& e) {
      detail::log(log_level::error, std::string{"vmm_pool_memory_resource: a block leaving a thread cache was lost: "} + e.what());
    }
  }
}

void vmm_pool_memory_resource::drain_thread_caches() noexcept
{
  if (thread_cache_limit_ == 0) { return; }
  caches_.for_each([this](detail::block_cache& cache) {
    cache.spill_all(std::nullopt, [this](detail::block_cache::spill_batch const& batch) noexcept { spill(batch, false); });
  });
}

void vmm_pool_memory_resource::flush_thread_caches() noexcept
{
  checked_call const check{*this, invariant_sampler_, checked_name, "flush_thread_caches"};
  drain_thread_caches();
}

void vmm_pool_memory_resource::thread_exiting(detail::block_cache& cache) noexcept
{
  // Not own_thread: the exiting thread's per-thread default stream may be gone already.
  cache.spill_all(std::nullopt, [this](detail::block_cache::spill_batch const& batch) noexcept { spill(batch, false); });
  // Its combining slot comes free (the thread is in no call of this pool, so nothing of it is published).
  unsigned const claimed = combined_claimed_.load(std::memory_order_acquire);
  for (unsigned i = 0; i < claimed; ++i) {
    detail::block_cache const* expected = &cache;
    if (combined_[i].owner.compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel)) { break; }
  }
}

std::pair<std::size_t, std::size_t> vmm_pool_memory_resource::cached_totals() const noexcept
{
  std::size_t bytes = 0;
  std::size_t largest = 0;
  if (thread_cache_limit_ == 0) { return {0, 0}; }
  caches_.for_each([&](detail::block_cache const& cache) {
    bytes += cache.cached_bytes();
    largest = std::max(largest, cache.largest());
  });
  return {bytes, largest};
}

std::size_t vmm_pool_memory_resource::bytes_in_thread_caches() const noexcept { return cached_totals().first; }

void vmm_pool_memory_resource::stream_destroying(cudaStream_t stream) noexcept
{
  detail::lock_guard lock{mutex_};
  for (unsigned i = 0; i < slots_.size(); ++i) {
    stream_slot& slot = slots_[i];
    if (!slot.in_use || slot.stream != stream || slot.thread != 0) { continue; }
    try {
      (void)event_after_frees(i);
      slot.stream = nullptr;  // the blocks keep the slot's bit; its event stays valid for waiters
      slot.thread = retired;  // matches no stream any more; reused once no free range carries its bit
    } catch (std::exception const& e) {
      detail::log(log_level::error, std::string{"vmm_pool_memory_resource: recording before a stream's destruction failed: "} + e.what());
    }
    // A taker that planned a record on this stream makes it after releasing the mutex: the stream lives until
    // this call returns. Recorders take no lock, so they finish while we wait.
    while (progress_[i].recorders.load(std::memory_order_acquire) != 0) { std::this_thread::yield(); }
  }
}

void vmm_pool_memory_resource::grow(std::size_t requested, std::size_t bytes)
{
  auto const start = std::chrono::steady_clock::now();
  auto plan = heap_->plan_growth(bytes);
  if (!plan) { fail(requested, "the reserved address range has no room for it"); }
  std::size_t const slab = heap_->slab_size();
  std::size_t const physical = heap_->backed_bytes();
  std::size_t movable_slabs = 0;
  for (auto const& m : plan->movable) { movable_slabs += m.slabs; }
  std::size_t const still_needed = plan->slabs - movable_slabs;
  if (physical + still_needed * slab > device_total_) {  // would fail after creating all the device has
    fail(requested, "the device has no memory for it: the pool would hold " +
                      format_bytes(physical + still_needed * slab) + ", more than the device's total memory");
  }
  if (maximum_physical_ && physical + still_needed * slab > *maximum_physical_) {
    fail(requested, "it would take the physical memory to " + format_bytes(physical + still_needed * slab) +
                      ", over the maximum_physical_size of " + format_bytes(*maximum_physical_));
  }
  // Move wholly free mappings: take them out of the heap and map their physical memory here (move_out).
  // Every wholly free mapping outside the ranges the growth extends that fits is in plan->movable, so
  // when a creation below fails, the pool holds little other memory it could give back first.
  struct spare_piece {
    physical_handle handle;
    std::size_t slabs;
    std::uint64_t streams;  // whose work may still use its memory (move_out)
  };
  std::vector<spare_piece> spare;
  std::vector<std::uintptr_t> backed_here;
  // On failure: the mappings backed here go back to the device (nothing uses them yet), and so do the
  // spare handles; the pool is as before minus the moved mappings' physical memory.
  auto undo = [&]() GPUMEM_REQUIRES(mutex_) noexcept {
    for (std::uintptr_t const address : backed_here) {
      try {
        auto const taken = heap_->unback(address);
        provider_->unmap(address, taken.slabs * slab);
        release_piece(taken.handle);
        released_ += taken.slabs;
      } catch (...) {  // NOLINT(bugprone-empty-catch): the mapping stays as free memory of the pool
      }
    }
    for (auto const& [handle, slabs, streams] : spare) {
      release_piece(handle);
      released_ += slabs;
    }
    spare.clear();
  };
  std::size_t const piece_slabs =  // the most slabs one new mapping covers
    mapping_divisor_ == 0
      ? max_mapping_slabs_
      : std::clamp<std::size_t>(std::max(heap_->slab_count() / mapping_divisor_,
                                         (still_needed + vmm_pool_options::max_pieces_per_growth - 1) /
                                           vmm_pool_options::max_pieces_per_growth),
                                1, max_mapping_slabs_);
  std::size_t mappings = 0;
  std::size_t spare_slabs = 0;  // the slabs in `spare`
  try {
    unmap_moved(false);  // what earlier moves left mapped and is done now: its addresses may be needed
    for (auto const& m : plan->movable) {
      auto const [handle, streams] = move_out(m.address);
      spare.push_back({handle, m.slabs, streams});
      spare_slabs += m.slabs;
    }
    std::uintptr_t address = plan->address;
    std::size_t remaining = plan->slabs;
    while (remaining > 0) {
      bool const moved = !spare.empty();
      physical_handle handle = 0;
      std::size_t slabs = 0;
      std::uint64_t streams = 0;
      if (moved) {
        handle = spare.back().handle;
        slabs = spare.back().slabs;
        streams = spare.back().streams;
        spare.pop_back();
        spare_slabs -= slabs;
      } else {
        slabs = std::min(remaining, piece_slabs);
        handle = provider_->create(slabs * slab);
        if (handle == 0) {
          fail(requested, "the device has no memory for another " + format_bytes(slabs * slab) + " (" +
                            std::to_string(slabs) + " slabs of " + format_bytes(slab) + ")");
        }
        created_ += slabs;
      }
      try {
        unmap_moved(true, address, slabs * slab);  // an old mapping still there: after its streams' work
        provider_->map(address, slabs * slab, handle);
      } catch (...) {
        release_piece(handle);
        released_ += slabs;
        throw;
      }
      try {
        heap_->back(address, handle, slabs, streams);
      } catch (...) {
        provider_->unmap(address, slabs * slab);
        release_piece(handle);
        released_ += slabs;
        throw;
      }
      backed_here.push_back(address);
      ++mappings;
      if (moved) { moved_ += slabs; }
      address += slabs * slab;
      remaining -= slabs;
      peak_physical_ = std::max(peak_physical_, heap_->backed_bytes() + spare_slabs * slab);
    }
  } catch (...) {
    undo();
    throw;
  }
  detail::log(log_level::debug, [&, physical_now = heap_->backed_bytes()] {
    auto const us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    return "vmm_pool_memory_resource: grew by " + std::to_string(plan->slabs) + " slabs in " +
           std::to_string(mappings) + " mappings for " + std::to_string(requested) + " bytes (" +
           std::to_string(movable_slabs) + " slabs moved) in " + std::to_string(us) + " us; physical " +
           std::to_string(physical_now);
  });
}

void vmm_pool_memory_resource::release_over_threshold() noexcept
{
  try {
    retire_empty_pages();
    std::vector<detail::virtual_heap::mapping> candidates = heap_->wholly_free_mappings();
    std::size_t const slab = heap_->slab_size();
    std::size_t const keep = *release_threshold_ / slab;  // wholly free slabs that may stay
    std::size_t wholly_free = 0;
    for (auto const& m : candidates) { wholly_free += m.slabs; }
    // The highest addresses go first, until what stays is within the threshold.
    std::vector<detail::virtual_heap::mapping> excess;
    for (auto const& m : candidates) {
      if (wholly_free <= keep) { break; }
      excess.push_back(m);
      wholly_free -= m.slabs;
    }
    (void)release_mappings(excess);  // waits for the streams that freed memory there
  } catch (std::exception const& e) {
    detail::log(log_level::warn, std::string{"vmm_pool_memory_resource: releasing over the threshold failed: "} + e.what());
  }
}

std::pair<physical_handle, std::uint64_t> vmm_pool_memory_resource::move_out(std::uintptr_t address)
{
  moved_mappings_.reserve(moved_mappings_.size() + 1);  // nothing below throws after the heap changed
  auto const taken = heap_->unback(address);
  std::size_t const bytes = taken.slabs * heap_->slab_size();
  try {
    if (taken.streams == 0 || streams_done(taken.streams)) {
      provider_->unmap(address, bytes);
      return {taken.handle, 0};
    }
    for (std::uint64_t mask = taken.streams; mask != 0; mask &= mask - 1) {  // records follow the frees here
      (void)event_after_frees(static_cast<unsigned>(std::countr_zero(mask)));
    }
  } catch (...) {
    heap_->back(address, taken.handle, taken.slabs, taken.streams);  // as it was, with its streams
    throw;
  }
  for (std::uint64_t mask = taken.streams; mask != 0; mask &= mask - 1) {
    progress_[static_cast<unsigned>(std::countr_zero(mask))].holders.fetch_add(1, std::memory_order_relaxed);
  }
  moved_mappings_.push_back({address, bytes, taken.streams});
  return {taken.handle, taken.streams};
}

bool vmm_pool_memory_resource::streams_done(std::uint64_t mask)
{
  detail::backend& be = detail::get_backend();
  for (; mask != 0; mask &= mask - 1) {
    auto const i = static_cast<unsigned>(std::countr_zero(mask));
    // Frees since the latest record happen only on a stream gpumem may still use (the legacy default stream
    // or an announced one): its idleness answers; else the event, recorded after every free, does.
    bool const recorded = progress_[i].recorded_through.load(std::memory_order_acquire) >= slots_[i].frees;
    if (!(recorded ? be.event_query(slots_[i].event) : be.stream_query(slots_[i].stream))) { return false; }
  }
  return true;
}

void vmm_pool_memory_resource::unmap_moved(bool wait, std::uintptr_t address, std::size_t bytes)
{
  for (std::size_t k = 0; k < moved_mappings_.size();) {
    moved_mapping const m = moved_mappings_[k];
    bool const overlaps = m.address < address + bytes && address < m.address + m.bytes;
    if (!overlaps || (!wait && !streams_done(m.streams))) {
      ++k;
      continue;
    }
    if (wait) { wait_on_host(m.streams); }  // throws with the mapping still listed
    provider_->unmap(m.address, m.bytes);
    for (std::uint64_t mask = m.streams; mask != 0; mask &= mask - 1) {
      progress_[static_cast<unsigned>(std::countr_zero(mask))].holders.fetch_sub(1, std::memory_order_release);
    }
    moved_mappings_[k] = moved_mappings_.back();
    moved_mappings_.pop_back();
  }
}

physical_handle vmm_pool_memory_resource::take_down(std::uintptr_t address)
{
  auto const taken = heap_->unback(address);
  try {
    wait_on_host(taken.streams);
  } catch (...) {
    heap_->back(address, taken.handle, taken.slabs, taken.streams);  // its next user still waits for them
    throw;
  }
  provider_->unmap(address, taken.slabs * heap_->slab_size());
  return taken.handle;
}

std::size_t vmm_pool_memory_resource::release_mappings(std::vector<detail::virtual_heap::mapping> const& mappings)
{
  std::size_t bytes = 0;
  for (auto const& m : mappings) {
    release_piece(take_down(m.address));
    released_ += m.slabs;
    bytes += m.slabs * heap_->slab_size();
  }
  return bytes;
}

void vmm_pool_memory_resource::release_piece(physical_handle handle) noexcept
{
  {
    detail::lock_guard lock{exports_mutex_};
    exported_pieces_.erase(handle);  // a later piece may get the same handle value
  }
  provider_->release(handle);
}

shareable_memory vmm_pool_memory_resource::do_shareable(void const* ptr, std::size_t bytes) const
{
  auto const address = reinterpret_cast<std::uintptr_t>(ptr);
  shareable_memory result;
  result.how = shareable_memory::mechanism::vmm_pieces;
  result.device = provider_->device();
  result.bytes = bytes;
  result.granularity = provider_->granularity();
  detail::lock_guard lock{mutex_};
  std::vector<detail::virtual_heap::mapping_piece> pieces;
  try {
    pieces = heap_->mappings_covering(address, bytes);
  } catch (logic_error const& e) {
    throw logic_error("vmm_pool_memory_resource on " + provider_->describe() + " cannot share " + format_pointer(ptr) +
                      ": " + e.what());
  }
  result.offset = address - pieces.front().address;
  result.pieces.reserve(pieces.size());
  detail::lock_guard exports_lock{exports_mutex_};
  for (auto const& piece : pieces) {
    // A piece that holds memory in use neither moves nor goes back while the pool's lock is held. Its
    // descriptor is made once and shared by every export of memory in it, until the piece goes back.
    std::shared_ptr<owned_fd const>& fd = exported_pieces_[piece.handle];
    if (!fd) { fd = std::make_shared<owned_fd const>(provider_->export_handle(piece.handle)); }
    result.pieces.push_back({fd, piece.bytes});
  }
  return result;
}

std::size_t vmm_pool_memory_resource::release_unused()
{
  checked_call const check{*this, invariant_sampler_, checked_name, "release_unused"};
  drain_thread_caches();
  detail::lock_guard lock{mutex_};
  retire_empty_pages();
  unmap_moved(true);  // the old places of moved pieces too, after their streams' work
  return release_mappings(heap_->wholly_free_mappings());
}

void vmm_pool_memory_resource::set_maximum_physical_size(std::optional<std::size_t> bytes)
{
  std::size_t const slab = slab_size();
  if (bytes) {
    expects(*bytes >= slab, "maximum_physical_size " + std::to_string(*bytes) + " is smaller than one slab (" +
                              std::to_string(slab) + " bytes)");
  }
  detail::lock_guard lock{mutex_};
  maximum_physical_ = bytes;
}

std::optional<std::size_t> vmm_pool_memory_resource::maximum_physical_size() const noexcept
{
  detail::lock_guard lock{mutex_};
  return maximum_physical_;
}

void vmm_pool_memory_resource::reset_peak_physical_bytes() noexcept
{
  detail::lock_guard lock{mutex_};
  peak_physical_ = heap_->backed_bytes();
}

void vmm_pool_memory_resource::fail(std::size_t bytes, std::string_view why)
{
  std::string details = std::string{why} + "; the pool holds " + format_bytes(heap_->backed_bytes()) + " in " +
                        std::to_string(heap_->slab_count()) + " slabs of " + format_bytes(heap_->slab_size()) + " (" +
                        std::to_string(heap_->mapping_count()) + " mappings), " +
                        format_bytes(heap_->free_bytes()) + " of them free in " +
                        std::to_string(heap_->free_range_count()) + " ranges (largest " +
                        format_bytes(heap_->largest_free_range()) + ")";
  memory_info const info = provider_->mem_info();
  throw out_of_memory("vmm_pool_memory_resource (" + provider_->describe() + "): cannot allocate " +
                      format_bytes(bytes) + ": " + details + "; device free " + format_bytes(info.free) +
                      ", total " + format_bytes(info.total));
}

// Not analysed: the slab size and the reservation are fixed when the heap is made, and read without the lock.
std::size_t vmm_pool_memory_resource::slab_size() const noexcept GPUMEM_NO_THREAD_SAFETY_ANALYSIS
{
  return heap_->slab_size();
}
std::size_t vmm_pool_memory_resource::reservation_size() const noexcept GPUMEM_NO_THREAD_SAFETY_ANALYSIS
{
  return heap_->size();
}
std::size_t vmm_pool_memory_resource::max_mapping_size() const noexcept GPUMEM_NO_THREAD_SAFETY_ANALYSIS
{
  return max_mapping_slabs_ * heap_->slab_size();
}

#define GPUMEM_VMM_POOL_GETTER(name, expression)                       \
  std::size_t vmm_pool_memory_resource::name() const noexcept         \
  {                                                                   \
    detail::lock_guard lock{mutex_};                                     \
    return expression;                                                \
  }
GPUMEM_VMM_POOL_GETTER(physical_bytes, heap_->backed_bytes())
GPUMEM_VMM_POOL_GETTER(peak_physical_bytes, peak_physical_)
GPUMEM_VMM_POOL_GETTER(slab_count, heap_->slab_count())
GPUMEM_VMM_POOL_GETTER(mapping_count, heap_->mapping_count())
GPUMEM_VMM_POOL_GETTER(slabs_created, created_)
GPUMEM_VMM_POOL_GETTER(slabs_moved, moved_)
GPUMEM_VMM_POOL_GETTER(slabs_released, released_)
GPUMEM_VMM_POOL_GETTER(cross_stream_takes, cross_stream_takes_)
GPUMEM_VMM_POOL_GETTER(cross_stream_waits, cross_stream_waits_)
GPUMEM_VMM_POOL_GETTER(combined_operations, combined_operations_)
#undef GPUMEM_VMM_POOL_GETTER

// The caches are read before the mutex is taken (lock order): a block moving between them meanwhile may be
// counted in neither or in both, as with any figure read while other threads allocate.
std::size_t vmm_pool_memory_resource::bytes_in_use() const noexcept
{
  std::size_t const cached = cached_totals().first;
  detail::lock_guard lock{mutex_};
  std::size_t const in_pages = pages_ ? pages_->page_bytes() - pages_->used_bytes() : 0;  // free blocks of pages
  std::size_t const out = bytes_in_use_ - in_pages;
  return out >= cached ? out - cached : 0;
}
std::size_t vmm_pool_memory_resource::free_bytes() const noexcept
{
  std::size_t const cached = cached_totals().first;
  detail::lock_guard lock{mutex_};
  return heap_->free_bytes() + (pages_ ? pages_->page_bytes() - pages_->used_bytes() : 0) + cached;
}
std::size_t vmm_pool_memory_resource::small_page_count() const noexcept
{
  detail::lock_guard lock{mutex_};
  return pages_ ? pages_->page_count() : 0;
}
std::size_t vmm_pool_memory_resource::largest_free_block() const noexcept
{
  std::size_t const cached = cached_totals().second;
  detail::lock_guard lock{mutex_};
  return std::max(heap_->largest_free_range(), cached);
}

void vmm_pool_memory_resource::check_invariants() const
{
  detail::lock_guard lock{mutex_};
  heap_->check_invariants();
  if (pages_) { pages_->check_invariants(); }
  if (heap_->free_bytes() + bytes_in_use_ != heap_->backed_bytes()) {
    throw logic_error("vmm_pool_memory_resource invariant violated: free " + std::to_string(heap_->free_bytes()) +
                      " + in use " + std::to_string(bytes_in_use_) + " != backed " +
                      std::to_string(heap_->backed_bytes()));
  }
}

}  // namespace gpumem::mr
