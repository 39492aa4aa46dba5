/**
 * @file block_cache.hpp
 * One thread's cache of recently freed blocks, in front of a stream-ordered sub-allocator's shared free
 * lists: a few slots, each a bounded LIFO stack of blocks of one size freed on one stream. A block freed on
 * stream S is handed out again for the same size on S without a lock on the shared lists and without an
 * event: work on S is ordered after the work that used the block, by stream order alone.
 *
 * Pure algorithm: addresses, sizes and stream handles as numbers, no CUDA (DESIGN.md, mr/detail). The owner
 * (stream_ordered_memory_resource.hpp) does the locking, and decides where blocks go when they leave
 * (spill): into the shared list of their stream, with that stream's event recorded once per batch.
 *
 * Capacity: slot_count slots; a slot holds at most capacity_for(block size) blocks: slot_capacity
 * blocks, but never more than bytes_per_slot bytes (at least one block). The owner caches no block larger
 * than largest_cached_block, so a thread hides at most slot_count * bytes_per_slot bytes per resource. When a slot is full, the older
 * half of its blocks spills; when every slot is taken and a new (stream, size) arrives, the slots are
 * evicted round robin, each spilling all its blocks.
 *
 * Invariants (check_invariants()):
 *   a slot is free iff its block size is 0, and then holds no block;
 *   a slot holds at most its capacity, no address twice, every address a multiple of 256;
 *   no two used slots have the same (stream, size);
 *   cached_bytes() == sum over slots of count * block size.
 */
#pragma once

#include <gpumem/export.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace gpumem::detail {

/**
 * @brief A thread's cache of freed blocks, keyed by (stream, block size).
 * Costs: pop, push O(slot_count + slot_capacity) compares, no allocation ever (the storage is inline).
 * Thread-safety: none (a value type); its owner locks around every call.
 */
class GPUMEM_EXPORT block_cache {
 public:
  static constexpr std::size_t slot_count = 8;
  static constexpr std::size_t slot_capacity = 32;
  static constexpr std::size_t bytes_per_slot = std::size_t{64} << 20;  // 64 MiB
  /// Larger blocks are never cached: one held by a thread would hide too much from the others.
  static constexpr std::size_t largest_cached_block = std::size_t{16} << 20;  // 16 MiB

  /// The blocks that leave the cache at once: all of one stream and one size.
  struct spill_batch {
    std::uintptr_t stream;
    std::size_t block_size;
    std::span<std::uintptr_t const> addresses;
  };

  /** @return how many blocks of `block_size` (> 0) bytes one slot may hold. */
  [[nodiscard]] static constexpr std::size_t capacity_for(std::size_t block_size) noexcept
  {
    std::size_t const by_bytes = bytes_per_slot / block_size;
    return by_bytes == 0 ? 1 : (by_bytes < slot_capacity ? by_bytes : slot_capacity);
  }

  /** @return the most recently cached block of (stream, block_size), removed from the cache; or nullopt. */
  [[nodiscard]] std::optional<std::uintptr_t> pop(std::uintptr_t stream, std::size_t block_size) noexcept
  {
    slot* const s = find(stream, block_size);
    if (s == nullptr || s->count == 0) { return std::nullopt; }
    cached_bytes_ -= block_size;
    return s->blocks[--s->count];
  }

  /**
   * @brief Caches a freed block. When its slot is full, the older half of the slot is first handed to
   * `spill` (one call); when no slot is free, a victim slot is first emptied into `spill`.
   * @param spill called as spill(spill_batch const&) noexcept; the addresses are valid during the call.
   * @throws gpumem::logic_error if the address is already cached in its slot (a double free), or
   *         misaligned; the cache is unchanged then.
   */
  template <class Spill>
  void push(std::uintptr_t stream, std::size_t block_size, std::uintptr_t address, Spill&& spill)
  {
    if (push_to_slot(stream, block_size, address, spill)) { return; }
    check_alignment(address);
    slot* const s = claim(stream, block_size, spill);
    s->blocks[s->count++] = address;
    cached_bytes_ += block_size;
  }

  /**
   * @brief As push(), but only into an existing slot of (stream, block_size); a full slot first hands its
   * older half to `spill`. No other slot is touched.
   * @return false (and nothing changed) when there is no such slot.
   * @throws as push().
   */
  template <class Spill>
  bool push_to_slot(std::uintptr_t stream, std::size_t block_size, std::uintptr_t address, Spill&& spill)
  {
    slot* const s = find(stream, block_size);
    if (s == nullptr) { return false; }
    check_new(*s, address);
    if (s->count == s->capacity) {
      std::size_t const half = (s->count + 1) / 2;
      spill(spill_batch{s->stream, s->block_size, std::span<std::uintptr_t const>{s->blocks.data(), half}});
      remove_oldest(*s, half);
    }
    s->blocks[s->count++] = address;
    cached_bytes_ += block_size;
    return true;
  }

  /** @return whether some slot holds blocks of `stream` (or is reserved for it). */
  [[nodiscard]] bool has_stream(std::uintptr_t stream) const noexcept
  {
    return std::any_of(slots_.begin(), slots_.end(),
                       [stream](slot const& s) { return s.block_size != 0 && s.stream == stream; });
  }

  /**
   * @brief As push(), but only into an existing slot of (stream, block_size) with room: nothing leaves the
   * cache. @return false (and nothing changed) when there is no such slot or it is full.
   */
  bool try_push(std::uintptr_t stream, std::size_t block_size, std::uintptr_t address)
  {
    slot* const s = find(stream, block_size);
    if (s == nullptr || s->count == s->capacity) { return false; }
    check_new(*s, address);
    s->blocks[s->count++] = address;
    cached_bytes_ += block_size;
    return true;
  }

  /** @brief Empties every slot whose stream is `stream` (all slots when `stream` is nullopt) into `spill`. */
  template <class Spill>
  void spill_all(std::optional<std::uintptr_t> stream, Spill&& spill) noexcept
  {
    for (slot& s : slots_) {
      if (s.block_size == 0 || (stream && s.stream != *stream)) { continue; }
      empty_slot(s, spill);
    }
  }

  /** @brief Calls visit(stream, block_size, address) for every cached block. */
  template <class Visitor>
  void for_each(Visitor&& visit) const
  {
    for (slot const& s : slots_) {
      for (std::size_t i = 0; i < s.count; ++i) { visit(s.stream, s.block_size, s.blocks[i]); }
    }
  }

  /** @return the bytes of every cached block. */
  [[nodiscard]] std::size_t cached_bytes() const noexcept { return cached_bytes_; }
  /** @return the number of cached blocks. */
  [[nodiscard]] std::size_t cached_blocks() const noexcept;
  /** @return the size of the largest cached block (0 when none). */
  [[nodiscard]] std::size_t largest() const noexcept;

  /** @brief Checks the invariants of the file comment. @throws gpumem::logic_error naming the first violation. */
  void check_invariants() const;

 private:
  struct slot {
    std::uintptr_t stream{};
    std::size_t block_size{};  // 0: the slot is free
    std::size_t capacity{};
    std::size_t count{};
    std::array<std::uintptr_t, slot_capacity> blocks{};  // [0, count): oldest first
  };

  [[nodiscard]] slot* find(std::uintptr_t stream, std::size_t block_size) noexcept
  {
    for (slot& s : slots_) {
      if (s.block_size == block_size && s.stream == stream) { return &s; }
    }
    return nullptr;
  }

  /// A free slot for (stream, block_size), emptying the round-robin victim when none is free.
  template <class Spill>
  slot* claim(std::uintptr_t stream, std::size_t block_size, Spill& spill) noexcept
  {
    slot* chosen = nullptr;
    for (slot& s : slots_) {
      if (s.block_size == 0) {
        chosen = &s;
        break;
      }
    }
    if (chosen == nullptr) {
      chosen = &slots_[next_victim_];
      next_victim_ = (next_victim_ + 1) % slot_count;
      empty_slot(*chosen, spill);
    }
    chosen->stream = stream;
    chosen->block_size = block_size;
    chosen->capacity = capacity_for(block_size);
    chosen->count = 0;
    return chosen;
  }

  template <class Spill>
  void empty_slot(slot& s, Spill& spill) noexcept
  {
    if (s.count > 0) {
      spill(spill_batch{s.stream, s.block_size, std::span<std::uintptr_t const>{s.blocks.data(), s.count}});
      cached_bytes_ -= s.count * s.block_size;
    }
    s = slot{};
  }

  void remove_oldest(slot& s, std::size_t n) noexcept;
  static void check_new(slot const& s, std::uintptr_t address);
  static void check_alignment(std::uintptr_t address);

  std::array<slot, slot_count> slots_{};
  std::size_t next_victim_{};
  std::size_t cached_bytes_{};
};

}  // namespace gpumem::detail
