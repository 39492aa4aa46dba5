/**
 * @file global_arena.hpp
 * The global arena: one address range taken from the upstream at construction, handed out as superblocks
 * (to local arenas) and as blocks of its own (requests above the policy's threshold, and smaller ones when
 * no whole superblock is left), coalesced on return.
 * Pure algorithm, no CUDA (DESIGN.md, mr/detail): arena_memory_resource adds the lock and the rule that
 * nothing comes back here while a stream may still use it.
 *
 * Superblocks are carved by best fit from the coalesced free ranges, so they are not aligned to their size
 * and two adjacent ones merge back into one free range when both return: the global arena never fragments
 * into superblock-sized pieces, and a large request after many small ones finds its space once the local
 * arenas give their empty superblocks back (arena_memory_resource's defragment).
 *
 * Invariants (check_invariants):
 *   free_bytes() + superblocks_out_ * superblock_size_ + block_bytes_out_ == whole_.size;
 *   every free range lies inside whole_, and touching free ranges are merged.
 */
#pragma once

#include <gpumem/mr/detail/arena/address_range.hpp>
#include <gpumem/mr/detail/arena/free_range_set.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace gpumem::detail {

/**
 * @brief The global arena of superblocks and blocks (file comment).
 * Thread-safety: none; arena_memory_resource guards it with one mutex.
 * Stream-ordering: none here; ranges must come back only once no stream's work uses them.
 */
class global_arena {
 public:
  /**
   * @brief An arena over `whole`, all free, handing out superblocks of `superblock_size` bytes.
   * @pre whole.size >= superblock_size > 0; both multiples of allocation_alignment.
   * @throws std::bad_alloc if a tree node cannot be allocated.
   */
  global_arena(address_range whole, std::size_t superblock_size) : whole_{whole}, superblock_size_{superblock_size}
  {
    (void)free_.insert(whole);
  }

  /** @return a superblock of superblock_size() bytes (best fit), or nullopt when none is free. Never allocates. */
  [[nodiscard]] std::optional<address_range> acquire_superblock() noexcept
  {
    auto const begin = free_.take_best_fit(superblock_size_);
    if (!begin) { return std::nullopt; }
    ++superblocks_out_;
    return address_range{*begin, superblock_size_};
  }

  /**
   * @brief Takes back a superblock from acquire_superblock(), merged with its free neighbours.
   * @return false (and changes nothing) when `superblock` is not the size of a superblock, lies outside
   *         the arena, or overlaps free space (returned twice).
   * @throws std::bad_alloc only when it touches no free range and a tree node cannot be allocated.
   */
  [[nodiscard]] bool release_superblock(address_range superblock)
  {
    if (superblock.size != superblock_size_ || superblocks_out_ == 0 || !give_back(superblock)) { return false; }
    --superblocks_out_;
    return true;
  }

  /**
   * @brief A block (best fit) of `bytes`, carved from the free ranges without a superblock. Never allocates.
   * @pre bytes > 0, a multiple of allocation_alignment.
   * @return its address, or nullopt when no free range holds it.
   */
  [[nodiscard]] std::optional<std::uintptr_t> allocate_block(std::size_t bytes) noexcept
  {
    auto const begin = free_.take_best_fit(bytes);
    if (begin) { block_bytes_out_ += bytes; }
    return begin;
  }

  /**
   * @brief Takes back a block from allocate_block() (size rounded up to allocation_alignment).
   * @return false (and changes nothing) when it lies outside the arena, overlaps free space, or is larger
   *         than the blocks outstanding.
   * @throws std::bad_alloc only when it touches no free range and a tree node cannot be allocated.
   */
  [[nodiscard]] bool deallocate_block(address_range block)
  {
    if (block.size > block_bytes_out_ || !give_back(block)) { return false; }
    block_bytes_out_ -= block.size;
    return true;
  }

  /** @return the arena's whole address range. */
  [[nodiscard]] address_range whole() const noexcept { return whole_; }
  /** @return bytes per superblock. */
  [[nodiscard]] std::size_t superblock_size() const noexcept { return superblock_size_; }
  /** @return free bytes in the global arena (not counting free space inside local arenas). */
  [[nodiscard]] std::size_t free_bytes() const noexcept { return free_.total_bytes(); }
  /** @return the largest free range: the largest request the global arena can serve now. */
  [[nodiscard]] std::size_t largest_free() const noexcept { return free_.largest(); }
  /** @return the number of free ranges (1 when everything has come back: they coalesce). */
  [[nodiscard]] std::size_t free_range_count() const noexcept { return free_.range_count(); }
  /** @return superblocks handed out and not yet released. */
  [[nodiscard]] std::size_t superblocks_out() const noexcept { return superblocks_out_; }
  /** @return bytes of blocks (not superblocks) handed out and not yet deallocated. */
  [[nodiscard]] std::size_t block_bytes_out() const noexcept { return block_bytes_out_; }
  /** @return true when `range` shares a byte with the global arena's free space. */
  [[nodiscard]] bool overlaps_free(address_range range) const noexcept { return free_.overlaps(range); }

  /**
   * @brief Checks the invariants of the file comment. O(free ranges).
   * @throws std::logic_error describing the first violation.
   */
  void check_invariants() const
  {
    free_.check_invariants();
    std::size_t const out = superblocks_out_ * superblock_size_ + block_bytes_out_;
    if (free_.total_bytes() + out != whole_.size) {
      throw std::logic_error("global_arena invariant: free " + std::to_string(free_.total_bytes()) +
                             " + superblocks and blocks out " + std::to_string(out) + " != arena size " +
                             std::to_string(whole_.size));
    }
    free_.for_each([this](address_range range) {
      if (!whole_.contains(range)) {
        throw std::logic_error("global_arena invariant: free range " + std::to_string(range.begin) +
                               " lies outside the arena");
      }
    });
  }

 private:
  [[nodiscard]] bool give_back(address_range range)
  {
    return range.size > 0 && whole_.contains(range) && free_.insert(range).has_value();
  }

  address_range const whole_;          // the upstream allocation
  std::size_t const superblock_size_;  // every superblock handed out has exactly this size
  free_range_set free_;                // coalesced everywhere
  std::size_t superblocks_out_{};      // superblocks in local arenas
  std::size_t block_bytes_out_{};      // bytes of live blocks (not superblocks)
};

}  // namespace gpumem::detail
