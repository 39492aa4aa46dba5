// arena_memory_resource (arena_memory_resource.hpp): the locking, the arena lookup and the stream-ordering
// rules around the pure algorithms of mr/detail/arena/ (global_arena, local_arena) and arena_slot.
//
// Locks, always taken in this order: registry_mutex (to find or create an arena; never held while a slot's
// mutex is waited for) -> one slot's mutex -> global_mutex. No path holds two slot mutexes, except
// check_invariants, which takes all of them in one fixed order before global_mutex.
//
// Fast path of a small request on a default stream: the thread-local cache names the calling thread's
// arena (one compare), then one uncontended mutex and a best-fit lookup in that arena's free ranges
// (O(log n)); no backend call, no shared cache line with other threads. The slow paths, when neither the
// arena nor a new superblock has room, are impl::allocate's (arena_memory_resource.hpp, "Out of memory").
#include "mr/arena/arena_slot.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/detail/thread_annotations.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/arena_memory_resource.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/detail/arena/address_range.hpp>
#include <gpumem/mr/detail/arena/arena_policy.hpp>
#include <gpumem/mr/detail/arena/global_arena.hpp>
#include <gpumem/mr/detail/invariant_checks.hpp>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gpumem::mr {
namespace {

using detail::address_range;
using detail::arena_slot;

constexpr char const* resource_name = "arena_memory_resource";

std::uintptr_t to_address(void const* ptr) noexcept { return reinterpret_cast<std::uintptr_t>(ptr); }
void* to_pointer(std::uintptr_t address) noexcept { return reinterpret_cast<void*>(address); }  // NOLINT

bool uses_thread_arena(cuda_stream_view stream) noexcept
{
  return stream.is_default() || stream.is_per_thread_default();
}

/// Each resource gets an id that is never reused, so a thread-local cache entry of a destroyed resource
/// can never match a new resource at the same address.
std::atomic<std::uint64_t> next_resource_id{1};

/// The calling thread's arena of the resource it used last (one entry: a thread rarely alternates).
struct thread_arena_cache {
  std::uint64_t resource_id{};
  arena_slot* slot{};
};
thread_local thread_arena_cache cached_thread_arena;

std::size_t chosen_arena_size(std::optional<std::size_t> requested)
{
  std::size_t bytes = 0;
  if (requested) {
    bytes = *requested;
  } else {
    detail::backend& backend = detail::get_backend();
    bytes = backend.mem_info(backend.current_device()).free / 2;
  }
  bytes = detail::align_down(bytes, detail::allocation_alignment);
  expects(bytes >= detail::arena_policy::minimum_arena_size,
          "the arena size " + std::to_string(bytes) + " is below the minimum of " +
            std::to_string(detail::arena_policy::minimum_arena_size) + " bytes" +
            (requested ? "" : " (half the device's free memory)"));
  return bytes;
}

}  // namespace

struct arena_memory_resource::impl {
  impl(device_memory_resource* up, std::size_t size, bool dump)
    : upstream{up},
      arena_size{size},
      policy{detail::arena_policy::for_arena(size)},
      dump_log_on_failure{dump},
      device{detail::get_backend().current_device()},
      base{take_arena(up, size, device)},
      global{address_range{to_address(base), size}, policy.superblock_size}
  {
  }
  ~impl()
  {
    // Slots first (they destroy their events), then the arena goes back to the upstream.
    thread_arenas.clear();
    stream_arenas.clear();
    upstream->deallocate(base, arena_size, cuda_stream_default);
  }
  impl(impl const&) = delete;
  impl& operator=(impl const&) = delete;
  impl(impl&&) = delete;
  impl& operator=(impl&&) = delete;

  static void* take_arena(device_memory_resource* up, std::size_t size, int device)
  {
    try {
      return up->allocate(size, cuda_stream_default);
    } catch (out_of_memory const& e) {
      throw_out_of_memory(resource_name, size, device,
                          std::string{"the upstream could not provide the arena in one allocation: "} + e.what());
    }
  }

  // ---- arena lookup -------------------------------------------------------------------------------------

  /// The arena for requests on `stream`, created on first use. @throws cuda_error, std::bad_alloc
  arena_slot& arena_for(cuda_stream_view stream)
  {
    if (arena_slot* found = find_arena(stream)) { return *found; }
    bool const per_thread = uses_thread_arena(stream);
    auto created = std::make_unique<arena_slot>(per_thread ? arena_slot::kind::per_thread : arena_slot::kind::per_stream,
                                                stream.value());
    detail::lock_guard lock{registry_mutex};
    arena_slot* slot = nullptr;
    if (per_thread) {
      slot = thread_arenas.try_emplace(std::this_thread::get_id(), std::move(created)).first->second.get();
      cached_thread_arena = {id, slot};
    } else {
      slot = stream_arenas.try_emplace(stream.value(), std::move(created)).first->second.get();
    }
    return *slot;
  }

  /// The arena for requests on `stream` if it exists, else nullptr. Never allocates.
  arena_slot* find_arena(cuda_stream_view stream) noexcept
  {
    if (uses_thread_arena(stream)) {
      if (cached_thread_arena.resource_id == id) { return cached_thread_arena.slot; }
      detail::shared_lock lock{registry_mutex};
      auto const found = thread_arenas.find(std::this_thread::get_id());
      if (found == thread_arenas.end()) { return nullptr; }
      cached_thread_arena = {id, found->second.get()};
      return found->second.get();
    }
    detail::shared_lock lock{registry_mutex};
    auto const found = stream_arenas.find(stream.value());
    return found == stream_arenas.end() ? nullptr : found->second.get();
  }

  /// Every arena, in a fixed order (per-thread ones, then per-stream ones). Slots live as long as the
  /// resource, so the pointers stay valid after the lock is dropped.
  std::vector<arena_slot*> all_arenas() const
  {
    detail::shared_lock lock{registry_mutex};
    std::vector<arena_slot*> slots;
    slots.reserve(thread_arenas.size() + stream_arenas.size());
    for (auto const& entry : thread_arenas) { slots.push_back(entry.second.get()); }
    for (auto const& entry : stream_arenas) { slots.push_back(entry.second.get()); }
    return slots;
  }

  // ---- allocation ---------------------------------------------------------------------------------------

  /// A small block from `slot`, fetching one superblock from the global arena when the slot has no room.
  std::optional<std::uintptr_t> try_allocate_small(arena_slot& slot, std::size_t bytes)
  {
    detail::lock_guard lock{slot.mutex};
    if (auto const address = slot.arena.allocate(bytes)) { return address; }
    std::optional<address_range> superblock;
    {
      detail::lock_guard global_lock{global_mutex};
      superblock = global.acquire_superblock();
      if (!superblock) { return std::nullopt; }
      try {
        owner_of.emplace(superblock->begin, &slot);
      } catch (...) {
        (void)global.release_superblock(*superblock);
        throw;
      }
    }
    try {
      slot.arena.add_superblock(*superblock);
    } catch (...) {
      detail::lock_guard global_lock{global_mutex};
      owner_of.erase(superblock->begin);
      (void)global.release_superblock(*superblock);
      throw;
    }
    return slot.arena.allocate(bytes);  // cannot fail: bytes <= large_threshold < superblock_size
  }

  /// A block of the global arena's own (any size): its free space is safe for every stream.
  std::optional<std::uintptr_t> try_allocate_global(std::size_t bytes)
  {
    detail::lock_guard lock{global_mutex};
    return global.allocate_block(bytes);
  }

  std::optional<std::uintptr_t> try_allocate(std::size_t bytes, cuda_stream_view stream)
  {
    if (bytes > policy.large_threshold) { return try_allocate_global(bytes); }
    return try_allocate_small(arena_for(stream), bytes);
  }

  /// A block from the free space of any local arena that holds it: the caller's own at once, another one
  /// after the work of its streams up to its latest free has completed (the wait that precedes a
  /// superblock's return to the global arena). The block stays in that arena's superblock, so its free
  /// comes back there (deallocate_elsewhere). @throws cuda_error if a wait fails.
  std::optional<std::uintptr_t> try_borrow(std::size_t bytes, cuda_stream_view stream)
  {
    arena_slot* const own = find_arena(stream);
    for (arena_slot* slot : all_arenas()) {
      detail::lock_guard lock{slot->mutex};
      if (slot->arena.largest_free() < bytes) { continue; }
      if (slot != own) { slot->wait_for_streams(std::nullopt); }
      if (auto const address = slot->arena.allocate(bytes)) { return address; }
    }
    return std::nullopt;
  }

  /// do_allocate's algorithm (arena_memory_resource.hpp, "Out of memory"). @pre size is a multiple of 256.
  void* allocate(std::size_t size, std::size_t requested, cuda_stream_view stream)
  {
    if (auto const address = try_allocate(size, stream)) { return to_pointer(*address); }
    defragment();
    if (auto const address = try_allocate(size, stream)) { return to_pointer(*address); }
    if (auto const address = try_allocate_global(size)) { return to_pointer(*address); }
    if (auto const address = try_borrow(size, stream)) { return to_pointer(*address); }
    report_out_of_memory(requested);
  }

  [[noreturn]] void report_out_of_memory(std::size_t bytes)
  {
    if (dump_log_on_failure) {
      std::string const state = dump_state();
      std::fprintf(stderr, "gpumem %s: allocation of %zu bytes failed; arena state:\n%s", resource_name, bytes,
                   state.c_str());
    }
    throw_out_of_memory(resource_name, bytes, device, summary());
  }

  // ---- giving memory back -------------------------------------------------------------------------------

  /// @pre slot.mutex is held, `superblock` is an empty superblock of the slot and the slot's streams are done
  /// with it. Moves it to the global arena. @return false (nothing moved) if the arena refuses to give it up,
  /// which only a broken invariant can cause.
  [[nodiscard]] bool give_back(arena_slot& slot, address_range superblock) noexcept GPUMEM_REQUIRES(slot.mutex)
  {
    if (!slot.arena.remove_empty_superblock(superblock)) { return false; }
    detail::lock_guard lock{global_mutex};
    owner_of.erase(superblock.begin);
    return global.release_superblock(superblock);
  }

  /// @pre slot.mutex is held. Moves the slot's empty superblocks to the global arena while the slot keeps at
  /// least `keep_free` free bytes, after waiting for the slot's streams. @throws cuda_error from the wait.
  void release_empty_superblocks(arena_slot& slot, std::optional<cudaStream_t> freeing_stream, std::size_t keep_free)
    GPUMEM_REQUIRES(slot.mutex)
  {
    auto superblock = slot.arena.first_empty_superblock();
    if (!superblock || slot.arena.free_bytes() < superblock->size + keep_free) { return; }
    slot.wait_for_streams(freeing_stream);
    while (superblock && slot.arena.free_bytes() >= superblock->size + keep_free && give_back(slot, *superblock)) {
      superblock = slot.arena.first_empty_superblock();
    }
  }

  void defragment()
  {
    for (arena_slot* slot : all_arenas()) {
      detail::lock_guard lock{slot->mutex};
      release_empty_superblocks(*slot, std::nullopt, 0);
    }
  }

  // ---- deallocation (never throws) ----------------------------------------------------------------------

  void report_invalid(void const* ptr, std::size_t bytes, char const* why) noexcept
  {
    invalid_deallocations.fetch_add(1, std::memory_order_relaxed);
    try {
      detail::report_deallocation_misuse(std::string{"gpumem "} + resource_name + ": deallocate(" + format_pointer(ptr) +
                                         ", " + std::to_string(bytes) + "): " + why + "; ignored");
    } catch (...) {  // NOLINT(bugprone-empty-catch): std::bad_alloc building the message; the count stands
    }
  }

  /// Waits for `stream`'s work so that a block freed on it may go to another stream. @return success.
  static bool wait_for_stream(cuda_stream_view stream) noexcept
  {
    try {
      detail::get_backend().stream_synchronize(stream.value());
      return true;
    } catch (...) {
      return false;
    }
  }

  /// Where a block goes back is decided by its address: the arena whose superblock holds it, or the
  /// global arena for its own blocks (large ones, and those lent when no superblock was left).
  void deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept
  {
    std::optional<std::size_t> const size = detail::checked_align_up(bytes, detail::allocation_alignment);
    if (!size) {
      report_invalid(ptr, bytes, "the size overflows when rounded up to 256 bytes (wrong size?)");
      return;
    }
    address_range const block{to_address(ptr), *size};
    if (arena_slot* own = find_arena(stream)) {
      detail::lock_guard lock{own->mutex};
      if (own->arena.owns(block.begin)) {
        if (!own->note_free(stream.value())) {
          report_invalid(ptr, bytes, "the stream's fence event could not be recorded, so the block is leaked");
          return;
        }
        auto const result = own->arena.deallocate(block);
        switch (result.status) {
          case detail::local_arena::free_status::freed: return;
          case detail::local_arena::free_status::superblock_empty:
            try {
              release_empty_superblocks(*own, stream.value(), policy.keep_free);
            } catch (...) {  // NOLINT(bugprone-empty-catch): the superblock stays in the arena; defragment retries
            }
            return;
          case detail::local_arena::free_status::double_free:
            report_invalid(ptr, bytes, "the block overlaps free memory (freed twice?)");
            return;
          case detail::local_arena::free_status::not_owned:
            report_invalid(ptr, bytes, "the block does not fit in its superblock (wrong size?)");
            return;
        }
        return;
      }
    }
    deallocate_elsewhere(ptr, bytes, block, stream);
  }

  /// @pre global_mutex is held. @return the arena of the superblock that overlaps `block`, or nullptr.
  arena_slot* superblock_owner_locked(address_range block) const noexcept GPUMEM_REQUIRES(global_mutex)
  {
    auto const after = owner_of.lower_bound(block.end());  // first superblock starting at or after the end
    if (after == owner_of.begin()) { return nullptr; }
    auto const candidate = std::prev(after);
    return candidate->first + policy.superblock_size > block.begin ? candidate->second : nullptr;
  }

  /// A block that `stream`'s arena does not hold: another arena's, or the global arena's. Either may reuse
  /// it at once for another stream, so `stream`'s work is waited for first (arena_memory_resource.hpp,
  /// Stream-ordering).
  void deallocate_elsewhere(void* ptr, std::size_t bytes, address_range block, cuda_stream_view stream) noexcept
  {
    arena_slot* owner = nullptr;
    {
      detail::lock_guard lock{global_mutex};
      owner = superblock_owner_locked(block);
    }
    if (!wait_for_stream(stream)) {
      report_invalid(ptr, bytes, "waiting for the freeing stream failed, so the block is leaked");
      return;
    }
    if (owner == nullptr) {
      detail::lock_guard lock{global_mutex};
      if (!global.deallocate_block(block)) {
        report_invalid(ptr, bytes, "not a live block of this resource (freed twice, wrong size, never handed out?)");
      }
      return;
    }
    detail::lock_guard lock{owner->mutex};
    auto const result = owner->arena.deallocate(block);
    if (result.status == detail::local_arena::free_status::double_free) {
      report_invalid(ptr, bytes, "the block overlaps free memory (freed twice?)");
    } else if (result.status == detail::local_arena::free_status::not_owned) {
      report_invalid(ptr, bytes, "the block does not fit in its superblock (wrong size?)");
    }
  }

  // ---- state --------------------------------------------------------------------------------------------

  /// One line for out-of-memory messages: global free, largest free range, arenas and what they hold.
  std::string summary()
  {
    std::size_t owned = 0;
    std::size_t cached_free = 0;
    auto const slots = all_arenas();
    for (arena_slot* slot : slots) {
      detail::lock_guard lock{slot->mutex};
      owned += slot->arena.owned_bytes();
      cached_free += slot->arena.free_bytes();
    }
    detail::lock_guard lock{global_mutex};
    std::ostringstream text;
    text << resource_name << " state: arena " << format_bytes(arena_size) << ", global free "
         << format_bytes(global.free_bytes()) << " in " << global.free_range_count() << " ranges, largest free range "
         << format_bytes(global.largest_free()) << ", " << slots.size() << " arenas holding " << format_bytes(owned)
         << " in superblocks (" << format_bytes(cached_free) << " of it free), blocks of the global arena "
         << format_bytes(global.block_bytes_out()) << ", superblock " << format_bytes(policy.superblock_size)
         << ", large threshold " << format_bytes(policy.large_threshold);
    return text.str();
  }

  std::string dump_state()
  {
    std::ostringstream text;
    text << summary() << "\n";
    std::size_t index = 0;
    for (arena_slot* slot : all_arenas()) {
      detail::lock_guard lock{slot->mutex};
      text << "  arena " << index++ << " ("
           << (slot->arena_kind() == arena_slot::kind::per_thread ? "per-thread" : "per-stream");
      if (slot->arena_kind() == arena_slot::kind::per_stream) { text << " " << cuda_stream_view{slot->stream()}; }
      text << "): " << slot->arena.superblock_count() << " superblocks, " << format_bytes(slot->arena.owned_bytes())
           << ", free " << format_bytes(slot->arena.free_bytes()) << ", largest free range "
           << format_bytes(slot->arena.largest_free()) << "\n";
    }
    return text.str();
  }

  /// Not analysed: it holds every slot's lock at once, taken in a loop, which the analysis cannot follow.
  void check_invariants() const GPUMEM_NO_THREAD_SAFETY_ANALYSIS
  {
    detail::shared_lock registry_lock{registry_mutex};
    std::vector<arena_slot*> slots;
    for (auto const& entry : thread_arenas) { slots.push_back(entry.second.get()); }
    for (auto const& entry : stream_arenas) { slots.push_back(entry.second.get()); }
    std::vector<std::unique_ptr<detail::lock_guard<detail::mutex>>> slot_locks;
    for (arena_slot* slot : slots) { slot_locks.push_back(std::make_unique<detail::lock_guard<detail::mutex>>(slot->mutex)); }
    detail::lock_guard global_lock{global_mutex};
    auto fail = [](std::string const& what) { throw std::logic_error(what); };
    try {
      global.check_invariants();
      std::size_t superblocks = 0;
      for (arena_slot* slot : slots) {
        slot->arena.check_invariants();
        slot->arena.for_each_superblock([&](address_range superblock) {
          global_mutex.assert_held();  // taken above; the analysis does not follow it into a callback
          ++superblocks;
          auto const found = owner_of.find(superblock.begin);
          if (found == owner_of.end() || found->second != slot) {
            fail("superblock " + std::to_string(superblock.begin) + " is not recorded as its arena's");
          }
          if (superblock.size != policy.superblock_size) { fail("a superblock has the wrong size"); }
          if (!global.whole().contains(superblock)) { fail("a superblock lies outside the arena"); }
          if (global.overlaps_free(superblock)) { fail("a superblock overlaps the global arena's free space"); }
        });
      }
      if (superblocks != owner_of.size() || superblocks != global.superblocks_out()) {
        fail("local arenas hold " + std::to_string(superblocks) + " superblocks, the owner map " +
             std::to_string(owner_of.size()) + ", the global arena counts " + std::to_string(global.superblocks_out()));
      }
      std::optional<std::uintptr_t> previous;
      for (auto const& entry : owner_of) {
        if (previous && *previous + policy.superblock_size > entry.first) { fail("two superblocks overlap"); }
        previous = entry.first;
      }
    } catch (std::logic_error const& e) {
      throw logic_error(std::string{"gpumem::mr::arena_memory_resource::check_invariants: "} + e.what());
    }
  }

  // ---- members ------------------------------------------------------------------------------------------

  device_memory_resource* const upstream;
  std::size_t const arena_size;
  detail::arena_policy const policy;
  bool const dump_log_on_failure;
  int const device;                                   // current at construction; named in out-of-memory errors
  std::uint64_t const id{next_resource_id.fetch_add(1, std::memory_order_relaxed)};
  void* const base;                                   // the upstream allocation: arena_size bytes

  mutable detail::mutex global_mutex;
  detail::global_arena global GPUMEM_GUARDED_BY(global_mutex);
  // Superblock start -> the arena holding it. Its keys are exactly the superblocks of all local arenas
  // (== global.superblocks_out()); an entry changes only with the owning slot's mutex held too, so a holder
  // of either lock sees a superblock's owner.
  std::map<std::uintptr_t, arena_slot*> owner_of GPUMEM_GUARDED_BY(global_mutex);

  // Slots are never removed before the resource dies: owner_of and the thread caches point at them.
  mutable detail::shared_mutex registry_mutex;
  std::unordered_map<std::thread::id, std::unique_ptr<arena_slot>> thread_arenas GPUMEM_GUARDED_BY(registry_mutex);
  std::unordered_map<cudaStream_t, std::unique_ptr<arena_slot>> stream_arenas GPUMEM_GUARDED_BY(registry_mutex);

  std::atomic<std::size_t> invalid_deallocations{0};
  detail::invariant_sampler invariant_sampler;  // which calls check_invariants() after them (debug builds)
};

// ---- the public class -------------------------------------------------------------------------------------

namespace {
/// Checks the invariants at the end of a call, in debug builds (mr/detail/invariant_checks.hpp).
using checked_call = detail::invariant_check_at_exit<arena_memory_resource>;
constexpr std::string_view checked_name = "arena_memory_resource";
}  // namespace

arena_memory_resource::arena_memory_resource(device_memory_resource* upstream, std::optional<std::size_t> arena_size,
                                             bool dump_log_on_failure)
{
  expects(upstream != nullptr, "the upstream resource must not be null");
  impl_ = std::make_unique<impl>(upstream, chosen_arena_size(arena_size), dump_log_on_failure);
}

arena_memory_resource::~arena_memory_resource() = default;

device_memory_resource* arena_memory_resource::upstream_resource() const noexcept { return impl_->upstream; }
std::size_t arena_memory_resource::arena_size() const noexcept { return impl_->arena_size; }
std::size_t arena_memory_resource::superblock_size() const noexcept { return impl_->policy.superblock_size; }
std::size_t arena_memory_resource::large_allocation_threshold() const noexcept { return impl_->policy.large_threshold; }

std::size_t arena_memory_resource::global_free_bytes() const noexcept
{
  detail::lock_guard lock{impl_->global_mutex};
  return impl_->global.free_bytes();
}

std::size_t arena_memory_resource::global_largest_free_range() const noexcept
{
  detail::lock_guard lock{impl_->global_mutex};
  return impl_->global.largest_free();
}

std::size_t arena_memory_resource::global_free_range_count() const noexcept
{
  detail::lock_guard lock{impl_->global_mutex};
  return impl_->global.free_range_count();
}

std::size_t arena_memory_resource::arena_count() const noexcept
{
  detail::shared_lock lock{impl_->registry_mutex};
  return impl_->thread_arenas.size() + impl_->stream_arenas.size();
}

std::size_t arena_memory_resource::invalid_deallocations() const noexcept
{
  return impl_->invalid_deallocations.load(std::memory_order_relaxed);
}

std::string arena_memory_resource::dump_state() const { return impl_->dump_state(); }

void arena_memory_resource::defragment()
{
  checked_call const check{*this, impl_->invariant_sampler, checked_name, "defragment"};
  impl_->defragment();
}

void arena_memory_resource::check_invariants() const { impl_->check_invariants(); }

void* arena_memory_resource::do_allocate(std::size_t bytes, cuda_stream_view stream)
{
  checked_call const check{*this, impl_->invariant_sampler, checked_name, "allocate"};
  std::size_t const size = detail::align_up(bytes, detail::allocation_alignment);  // no overflow: checked by allocate
  return impl_->allocate(size, bytes, stream);
}

void arena_memory_resource::do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept
{
  checked_call const check{*this, impl_->invariant_sampler, checked_name, "deallocate"};
  impl_->deallocate(ptr, bytes, stream);
}

}  // namespace gpumem::mr
