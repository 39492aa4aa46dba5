// pinned_memory_pool: pinned chunks from the backend, carved by a coalescing best-fit free list; blocks freed
// with deallocate_async wait in a queue, each with an event recorded on its stream, until that event has
// completed. The queue is looked at only when the free list cannot serve a request (then before growing).
#include <gpumem/backend/backend.hpp>
#include <gpumem/cuda_device_id.hpp>
#include <gpumem/detail/thread_annotations.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/detail/coalescing_free_list.hpp>
#include <gpumem/mr/pinned_memory_pool.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <exception>
#include <iterator>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gpumem::mr {
namespace {

constexpr std::size_t block_alignment = detail::allocation_alignment;  // 256
constexpr std::size_t chunk_granularity = std::size_t{2} << 20U;       // 2 MiB

/// The block for a request of `bytes`. @throws out_of_memory when the chunk it needs (the block rounded up to
/// chunk_granularity) would overflow size_t, so that growing never has to check.
[[nodiscard]] std::size_t block_size_for(std::size_t bytes)
{
  if (!detail::checked_align_up(bytes, chunk_granularity)) {
    throw out_of_memory("pinned_memory_pool: cannot allocate " + std::to_string(bytes) +
                        " bytes: the size overflows when rounded up to a chunk of " +
                        std::to_string(chunk_granularity) + " bytes");
  }
  return detail::align_up(bytes == 0 ? 1 : bytes, block_alignment);
}

/// An event of `device` (made current for the call; none known: the current one). @throws cuda_error.
[[nodiscard]] cudaEvent_t create_event_on(int device)
{
  std::optional<cuda_set_device_raii> on_device;
  if (device >= 0) { on_device.emplace(cuda_device_id{device}); }
  return detail::get_backend().event_create(cudaEventDisableTiming);
}

}  // namespace

struct pinned_memory_pool::impl {
  struct pending_block {
    detail::free_block block;
    cudaEvent_t event;
    int device;  // the event's: CUDA records an event only on a stream of its own device
  };
  struct spare_event {
    cudaEvent_t event;
    int device;
  };

  mutable detail::mutex mutex;
  detail::coalescing_free_list free_list GPUMEM_GUARDED_BY(mutex){block_alignment};
  detail::chunk_map chunks GPUMEM_GUARDED_BY(mutex);                                // chunk start -> size
  std::unordered_map<std::uintptr_t, std::size_t> in_use GPUMEM_GUARDED_BY(mutex);  // block start -> block size
  std::deque<pending_block> pending GPUMEM_GUARDED_BY(mutex);                       // in deallocate_async order
  std::vector<spare_event> spare_events GPUMEM_GUARDED_BY(mutex);
  std::size_t reserved GPUMEM_GUARDED_BY(mutex){};
  std::size_t in_use_bytes GPUMEM_GUARDED_BY(mutex){};
  std::size_t pending_bytes GPUMEM_GUARDED_BY(mutex){};

  /// Takes a block of `size` bytes from the free list, splitting off the rest.
  [[nodiscard]] void* take(std::size_t size) GPUMEM_REQUIRES(mutex)
  {
    auto block = free_list.get_block(size);
    if (!block) { return nullptr; }
    if (block->size > size) {
      free_list.insert(detail::free_block{block->address + size, block->size - size, false});
    }
    in_use.emplace(block->address, size);
    in_use_bytes += size;
    return reinterpret_cast<void*>(block->address);  // NOLINT(performance-no-int-to-ptr)
  }

  /// Moves every pending block whose event has completed to the free list.
  void reclaim_completed() noexcept GPUMEM_REQUIRES(mutex)
  {
    auto& backend = detail::get_backend();
    for (auto it = pending.begin(); it != pending.end();) {
      bool done = false;
      try {
        done = backend.event_query(it->event);
      } catch (...) {  // a failed stream: its work will never run, so nothing reads the block any more
        done = true;
      }
      if (!done) {
        ++it;
        continue;
      }
      give_back(it->block, {it->event, it->device});
      it = pending.erase(it);
    }
  }

  /// Returns a pending block's bytes to the free list and its event (if any) to the spares.
  void give_back(detail::free_block const& block, spare_event event) noexcept GPUMEM_REQUIRES(mutex)
  {
    pending_bytes -= block.size;
    if (event.event != nullptr) {
      try {
        spare_events.push_back(event);
      } catch (...) {  // bad_alloc: the event is destroyed instead of kept
        detail::get_backend().event_destroy(event.event);
      }
    }
    try {
      free_list.insert(block);
    } catch (...) {  // bad_alloc of a list node: the block is lost to the pool, never handed out twice
      std::fprintf(stderr, "gpumem: pinned_memory_pool: out of host memory while freeing %zu bytes; block dropped\n",
                   block.size);
    }
  }

  /// Waits for every pending block (without the lock) and reclaims them.
  void wait_all() GPUMEM_REQUIRES(mutex)
  {
    while (!pending.empty()) {
      auto const front = pending.front();
      {
        detail::unlock_guard const unlocked{mutex};
        try {
          detail::get_backend().event_synchronize(front.event);
        } catch (...) {  // NOLINT(bugprone-empty-catch): a failed stream's work never runs; the block is free
        }
      }
      reclaim_completed();  // the front's event has completed, so this reclaims at least the front
    }
  }

  /// Adds a chunk for a block of `size` bytes, within options.maximum_bytes. The slow cudaMallocHost runs
  /// without the lock. @return false when the limit leaves no room or no pinned memory came.
  bool grow(std::size_t size, pinned_pool_options const& options) GPUMEM_REQUIRES(mutex)
  {
    std::size_t chunk = std::max(options.chunk_size, *detail::checked_align_up(size, chunk_granularity));
    if (options.maximum_bytes != 0) {
      if (reserved >= options.maximum_bytes) { return false; }
      chunk = std::min(chunk, options.maximum_bytes - reserved);
      if (chunk < size) { return false; }
    }
    void* memory = nullptr;
    {
      detail::unlock_guard const unlocked{mutex};
      memory = detail::get_backend().malloc_pinned(chunk);
    }
    if (memory == nullptr) { return false; }
    auto const address = reinterpret_cast<std::uintptr_t>(memory);
    chunks.emplace(address, chunk);
    reserved += chunk;
    free_list.insert_chunk(address, chunk);
    return true;
  }

  /// Removes and returns the chunks that are wholly free.
  [[nodiscard]] std::vector<detail::free_block> take_free_chunks() GPUMEM_REQUIRES(mutex)
  {
    auto whole = free_list.remove_whole_chunks(chunks);
    for (auto const& chunk : whole) {
      chunks.erase(chunk.address);
      reserved -= chunk.size;
    }
    return whole;
  }

  [[nodiscard]] std::string describe() const GPUMEM_REQUIRES(mutex)
  {
    return "pinned pool: " + format_bytes(reserved) + " reserved in " + std::to_string(chunks.size()) +
           " chunks, " + format_bytes(in_use_bytes) + " in use, " + format_bytes(pending_bytes) +
           " pending, largest free block " + format_bytes(free_list.largest());
  }
};

pinned_memory_pool::pinned_memory_pool(pinned_pool_options options)
  : options_{options}, impl_{std::make_unique<impl>()}
{
  expects(options_.chunk_size > 0, "chunk_size must be positive");
  expects(options_.maximum_bytes == 0 || options_.maximum_bytes >= block_alignment,
          "maximum_bytes " + std::to_string(options_.maximum_bytes) + " cannot hold one " +
            std::to_string(block_alignment) + "-byte block (0 means no limit)");
}

pinned_memory_pool::~pinned_memory_pool()
{
  detail::lock_guard lock{impl_->mutex};
  try {
    impl_->wait_all();
  } catch (...) {  // NOLINT(bugprone-empty-catch): destruction goes on
  }
  auto& backend = detail::get_backend();
  if (!impl_->in_use.empty()) {
    std::fprintf(stderr,
                 "gpumem: pinned_memory_pool destroyed with %zu blocks (%zu bytes) still in use; their memory "
                 "is freed\n",
                 impl_->in_use.size(), impl_->in_use_bytes);
  }
  for (auto const& spare : impl_->spare_events) { backend.event_destroy(spare.event); }
  for (auto const& [address, size] : impl_->chunks) {
    backend.free_pinned(reinterpret_cast<void*>(address));  // NOLINT(performance-no-int-to-ptr)
  }
}

void* pinned_memory_pool::do_allocate(std::size_t bytes, std::size_t alignment)
{
  expects(alignment <= block_alignment && detail::is_pow2(alignment),
          "alignment " + std::to_string(alignment) + " is not a power of two up to 256");
  std::size_t const size = block_size_for(bytes);
  detail::unique_lock lock{impl_->mutex};
  if (void* p = impl_->take(size)) { return p; }
  impl_->reclaim_completed();
  if (void* p = impl_->take(size)) { return p; }

  // Grow: a new chunk, within maximum_bytes.
  if (impl_->grow(size, options_)) {
    if (void* p = impl_->take(size)) { return p; }
  }
  // No new memory: wait for the blocks still in flight, then give back wholly free chunks so that one
  // chunk of the right size may fit under the limit, and try once more.
  impl_->wait_all();
  if (void* p = impl_->take(size)) { return p; }
  auto freed = impl_->take_free_chunks();
  for (auto const& chunk : freed) {
    detail::get_backend().free_pinned(reinterpret_cast<void*>(chunk.address));  // NOLINT(performance-no-int-to-ptr)
  }
  if (!freed.empty() && impl_->grow(size, options_)) {
    if (void* p = impl_->take(size)) { return p; }
  }
  std::string const details = impl_->describe() +
                              (options_.maximum_bytes != 0 ? ", limit " + format_bytes(options_.maximum_bytes)
                                                           : std::string{});
  lock.unlock();
  throw_out_of_memory("pinned_memory_pool", bytes, detail::get_backend().current_device(), details);
}

void pinned_memory_pool::do_deallocate(void* ptr, std::size_t bytes, std::size_t /*alignment*/)
{
  std::size_t const size = block_size_for(bytes);
  detail::lock_guard lock{impl_->mutex};
  auto const it = impl_->in_use.find(reinterpret_cast<std::uintptr_t>(ptr));
  expects(it != impl_->in_use.end(), "pointer " + format_pointer(ptr) +
                                       " is not a block in use of this pinned_memory_pool (double free, or "
                                       "memory from elsewhere)");
  expects(it->second == size, "pointer " + format_pointer(ptr) + " was allocated with " +
                                std::to_string(it->second) + " bytes (rounded), deallocated with " +
                                std::to_string(bytes));
  detail::free_block const block{it->first, it->second, impl_->chunks.contains(it->first)};
  impl_->in_use.erase(it);
  impl_->in_use_bytes -= size;
  impl_->free_list.insert(block);
}

void pinned_memory_pool::deallocate_async(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept
{
  auto& backend = detail::get_backend();
  detail::free_block block{};
  int device = -1;
  try {
    device = backend.stream_device(stream.value());
  } catch (...) {  // NOLINT(bugprone-empty-catch): an unknown stream; recording below fails and falls back
  }
  cudaEvent_t event = nullptr;
  {
    detail::lock_guard lock{impl_->mutex};
    auto const it = impl_->in_use.find(reinterpret_cast<std::uintptr_t>(ptr));
    std::size_t const size = bytes == 0 ? block_alignment : detail::align_up(bytes, block_alignment);
    if (it == impl_->in_use.end() || it->second != size) {
      std::fprintf(stderr,
                   "gpumem: pinned_memory_pool::deallocate_async(%p, %zu): not a block in use of this pool "
                   "with that size; ignored\n",
                   ptr, bytes);
      return;
    }
    block = detail::free_block{it->first, it->second, impl_->chunks.contains(it->first)};
    impl_->in_use.erase(it);
    impl_->in_use_bytes -= block.size;
    impl_->pending_bytes += block.size;
    // A spare event of the stream's device (events of other devices stay for their own streams).
    auto& spares = impl_->spare_events;
    auto const mine = std::find_if(spares.rbegin(), spares.rend(), [device](auto const& e) { return e.device == device; });
    if (mine != spares.rend()) {
      event = mine->event;
      spares.erase(std::next(mine).base());
    }
  }
  try {
    if (event == nullptr) { event = create_event_on(device); }
    backend.event_record(event, stream.value());
  } catch (...) {
    // No event: wait for the stream here instead, then the block is free at once. An event that could not
    // be recorded is not kept.
    if (event != nullptr) { backend.event_destroy(event); }
    try {
      backend.stream_synchronize(stream.value());
    } catch (...) {  // NOLINT(bugprone-empty-catch): a failed stream's work never runs
    }
    detail::lock_guard lock{impl_->mutex};
    impl_->give_back(block, {nullptr, device});
    return;
  }
  detail::lock_guard lock{impl_->mutex};
  impl_->pending.push_back({block, event, device});
}

void pinned_memory_pool::release_free_chunks() noexcept
{
  std::vector<detail::free_block> freed;
  {
    detail::lock_guard lock{impl_->mutex};
    impl_->reclaim_completed();
    try {
      freed = impl_->take_free_chunks();
    } catch (...) {  // NOLINT(bugprone-empty-catch): nothing released; the pool is unchanged
    }
  }
  for (auto const& chunk : freed) {
    detail::get_backend().free_pinned(reinterpret_cast<void*>(chunk.address));  // NOLINT(performance-no-int-to-ptr)
  }
}

void pinned_memory_pool::wait_pending()
{
  detail::lock_guard lock{impl_->mutex};
  impl_->wait_all();
}

pinned_pool_usage pinned_memory_pool::usage() const
{
  detail::lock_guard lock{impl_->mutex};
  return {impl_->reserved, impl_->in_use_bytes, impl_->pending_bytes, impl_->free_list.total_bytes(),
          impl_->chunks.size()};
}

bool pinned_memory_pool::do_is_equal(std::pmr::memory_resource const& other) const noexcept { return this == &other; }

pinned_memory_pool& get_default_pinned_pool()
{
  static auto* const pool = new pinned_memory_pool{};  // never destroyed: see the header
  return *pool;
}

}  // namespace gpumem::mr
