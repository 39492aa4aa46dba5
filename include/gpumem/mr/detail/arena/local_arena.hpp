/**
 * @file local_arena.hpp
 * A local arena: the superblocks that one thread (or one stream) owns, and best fit over their free space.
 * Pure algorithm, no CUDA (DESIGN.md, mr/detail): arena_memory_resource adds the locking and the
 * stream-ordering rules (when a superblock may leave the arena).
 *
 * One free_range_set holds the free space of all the arena's superblocks, so best fit over the whole arena
 * is one O(log n) lookup; free ranges never merge across the start of a superblock, so an empty superblock
 * is exactly one free range and can be taken out whole. Blocks are carved from the start of the best-fit
 * range; allocated blocks are not recorded (their size comes back with deallocate, as RMM's contract has
 * it), so the arena costs nothing per live block.
 *
 * Invariants (check_invariants):
 *   owned_bytes_ == sum over superblocks_ of size;
 *   superblocks are disjoint; every free range lies inside one superblock;
 *   for each superblock, free_bytes == the bytes of the free ranges inside it;
 *   free_.total_bytes() == sum over superblocks_ of free_bytes <= owned_bytes_.
 */
#pragma once

#include <gpumem/mr/detail/arena/address_range.hpp>
#include <gpumem/mr/detail/arena/free_range_set.hpp>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>

namespace gpumem::detail {

/**
 * @brief The superblocks of one thread or stream and their free space (file comment).
 * Thread-safety: none; arena_memory_resource guards each local arena with its own mutex.
 * Stream-ordering: none here; the resource decides which stream may reuse a freed block.
 */
class local_arena {
 public:
  /** @brief What deallocate() did. */
  enum class free_status {
    freed,            ///< the block is free again; its superblock still has live blocks
    superblock_empty, ///< the block is free again and its superblock is now wholly free
    not_owned,        ///< the block is not inside one of this arena's superblocks; nothing changed
    double_free,      ///< the block overlaps free space of the arena; nothing changed
  };

  /** @brief The result of deallocate(): the status and the block's superblock (when owned). */
  struct free_result {
    free_status status{};
    address_range superblock{};
  };

  /**
   * @brief Takes ownership of `superblock` (wholly free).
   * @pre superblock.size > 0 and it overlaps no superblock of this arena.
   * @throws std::bad_alloc if a tree node cannot be allocated (strong guarantee).
   */
  void add_superblock(address_range superblock)
  {
    auto const placed = superblocks_.emplace(superblock.begin, state{superblock.size, superblock.size}).first;
    try {
      (void)free_.insert(superblock, boundary_rule{this});
    } catch (...) {
      superblocks_.erase(placed);
      throw;
    }
    owned_bytes_ += superblock.size;
  }

  /**
   * @brief Best fit over the arena's free space. Never allocates.
   * @pre bytes > 0, a multiple of allocation_alignment.
   * @return the block's address, or nullopt when no free range holds `bytes`.
   */
  [[nodiscard]] std::optional<std::uintptr_t> allocate(std::size_t bytes) noexcept
  {
    auto const address = free_.take_best_fit(bytes);
    if (address) { superblock_at(*address)->second.free_bytes -= bytes; }
    return address;
  }

  /**
   * @brief Returns `block` to the free space of its superblock (merged with free neighbours inside it).
   * @pre block.size > 0.
   * @throws std::bad_alloc only when the block has no free neighbour and a tree node cannot be allocated.
   */
  free_result deallocate(address_range block)
  {
    auto const sb = superblock_at(block.begin);
    if (sb == superblocks_.end()) { return {free_status::not_owned, {}}; }
    address_range const superblock{sb->first, sb->second.size};
    if (!superblock.contains(block)) { return {free_status::not_owned, {}}; }
    if (!free_.insert(block, boundary_rule{this})) { return {free_status::double_free, superblock}; }
    sb->second.free_bytes += block.size;
    bool const empty = sb->second.free_bytes == sb->second.size;
    return {empty ? free_status::superblock_empty : free_status::freed, superblock};
  }

  /** @return true when `address` lies inside one of this arena's superblocks. */
  [[nodiscard]] bool owns(std::uintptr_t address) const noexcept { return superblock_at(address) != superblocks_.end(); }

  /** @return true when `superblock` is one of this arena's and is wholly free. */
  [[nodiscard]] bool is_empty_superblock(address_range superblock) const noexcept
  {
    auto const found = superblocks_.find(superblock.begin);
    return found != superblocks_.end() && found->second.size == superblock.size &&
           found->second.free_bytes == found->second.size;
  }

  /**
   * @brief Gives up an empty superblock: it leaves the arena. Never allocates.
   * @return false (and changes nothing) when `superblock` is not an empty superblock of this arena.
   */
  [[nodiscard]] bool remove_empty_superblock(address_range superblock) noexcept
  {
    if (!is_empty_superblock(superblock) || !free_.take_whole(superblock)) { return false; }
    superblocks_.erase(superblock.begin);
    owned_bytes_ -= superblock.size;
    return true;
  }

  /** @return the lowest-addressed empty superblock, if any. O(superblocks): for the slow paths only. */
  [[nodiscard]] std::optional<address_range> first_empty_superblock() const noexcept
  {
    for (auto const& [begin, s] : superblocks_) {
      if (s.free_bytes == s.size) { return address_range{begin, s.size}; }
    }
    return std::nullopt;
  }

  /** @return bytes of all superblocks owned. */
  [[nodiscard]] std::size_t owned_bytes() const noexcept { return owned_bytes_; }
  /** @return free bytes inside the owned superblocks. */
  [[nodiscard]] std::size_t free_bytes() const noexcept { return free_.total_bytes(); }
  /** @return the largest free range (the largest request that would succeed without a new superblock). */
  [[nodiscard]] std::size_t largest_free() const noexcept { return free_.largest(); }
  /** @return the number of superblocks owned. */
  [[nodiscard]] std::size_t superblock_count() const noexcept { return superblocks_.size(); }

  /** @brief Calls fn(address_range) for each owned superblock in address order. */
  template <class Fn>
  void for_each_superblock(Fn&& fn) const
  {
    for (auto const& [begin, s] : superblocks_) { fn(address_range{begin, s.size}); }
  }

  /**
   * @brief Checks the invariants of the file comment. O(superblocks + free ranges).
   * @throws std::logic_error describing the first violation.
   */
  void check_invariants() const
  {
    auto fail = [](std::string const& what) { throw std::logic_error("local_arena invariant: " + what); };
    free_.check_invariants(boundary_rule{this});
    std::size_t owned = 0;
    std::size_t free_in_superblocks = 0;
    std::optional<address_range> previous;
    for (auto const& [begin, s] : superblocks_) {
      address_range const superblock{begin, s.size};
      if (previous && previous->end() > begin) { fail("superblocks overlap at " + std::to_string(begin)); }
      if (s.free_bytes > s.size) { fail("superblock " + std::to_string(begin) + " has more free than size"); }
      owned += s.size;
      free_in_superblocks += s.free_bytes;
      previous = superblock;
    }
    if (owned != owned_bytes_) { fail("owned_bytes " + std::to_string(owned_bytes_) + " != " + std::to_string(owned)); }
    if (free_in_superblocks != free_.total_bytes()) { fail("superblock free counts disagree with the free ranges"); }
    std::map<std::uintptr_t, std::size_t> free_per_superblock;
    free_.for_each([&](address_range range) {
      auto const sb = superblock_at(range.begin);
      if (sb == superblocks_.end() || !address_range{sb->first, sb->second.size}.contains(range)) {
        fail("free range " + std::to_string(range.begin) + " is not inside one superblock");
      }
      free_per_superblock[sb->first] += range.size;
    });
    for (auto const& [begin, s] : superblocks_) {
      auto const found = free_per_superblock.find(begin);
      std::size_t const counted = found == free_per_superblock.end() ? 0 : found->second;
      if (counted != s.free_bytes) { fail("superblock " + std::to_string(begin) + " free_bytes is stale"); }
    }
  }

 private:
  struct state {
    std::size_t size;        // bytes of the superblock
    std::size_t free_bytes;  // bytes of the free ranges inside it; == size when it is empty
  };
  using superblock_map = std::map<std::uintptr_t, state>;

  /// Free ranges merge except across the start of a superblock (file comment).
  struct boundary_rule {
    local_arena const* self;
    [[nodiscard]] bool operator()(std::uintptr_t boundary) const noexcept
    {
      return !self->superblocks_.contains(boundary);
    }
  };

  /// @return the superblock containing `address`, or end().
  [[nodiscard]] superblock_map::const_iterator superblock_at(std::uintptr_t address) const noexcept
  {
    auto after = superblocks_.upper_bound(address);
    if (after == superblocks_.begin()) { return superblocks_.end(); }
    auto const found = std::prev(after);
    return address < found->first + found->second.size ? found : superblocks_.end();
  }
  [[nodiscard]] superblock_map::iterator superblock_at(std::uintptr_t address) noexcept
  {
    auto after = superblocks_.upper_bound(address);
    if (after == superblocks_.begin()) { return superblocks_.end(); }
    auto const found = std::prev(after);
    return address < found->first + found->second.size ? found : superblocks_.end();
  }

  superblock_map superblocks_;  // begin -> state; disjoint
  free_range_set free_;         // free space of all superblocks; never merged across a superblock start
  std::size_t owned_bytes_{};   // == sum of superblocks_' sizes
};

}  // namespace gpumem::detail
