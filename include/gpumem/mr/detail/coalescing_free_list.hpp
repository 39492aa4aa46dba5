/**
 * @file coalescing_free_list.hpp
 * The free list of pool_memory_resource: free blocks indexed twice, by address (to coalesce a freed block
 * with both neighbours in O(log n)) and by (size, address) (best fit in O(log n)). RMM's
 * coalescing_free_list keeps one address-ordered std::list and finds the best fit by scanning it, O(n)
 * per allocation; this list answers the same question with one std::set::lower_bound.
 *
 * Pure algorithm: addresses and sizes only, no CUDA (DESIGN.md, mr/detail).
 *
 * Invariants (checked by check_invariants()):
 *   by_address_ and by_size_ hold the same blocks:  (a -> {s, h}) in by_address_  <=>  (s, a) in by_size_
 *   every block: size > 0, address and size multiples of `alignment`
 *   blocks do not overlap, and two address-adjacent blocks are never both in the list unless the second is
 *   a head (starts another chunk): every other adjacency is merged on insertion
 *   total_bytes_ == sum of the sizes
 */
#pragma once

#include <gpumem/export.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/detail/free_block.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace gpumem::detail {

/**
 * @brief Free blocks of device address space, coalesced on insertion, with best-fit lookup.
 *
 * Costs: insert, get_block, remove O(log n); merge_from O(m log(n + m)) and allocates nothing (it moves
 * the other list's nodes); largest() O(1); check_invariants() O(n log n).
 * Thread-safety: none (a value type); the owning resource holds its lock around every call.
 */
class GPUMEM_EXPORT coalescing_free_list {
 public:
  /** @brief Blocks carry is_head, so the owner can check it against its chunks. */
  static constexpr bool tracks_heads = true;
  /** @brief Blocks have any size: a thread cache takes one block at a time. */
  static constexpr bool one_block_size = false;

  /** @param alignment every address and size must be a multiple of it (a power of two). */
  explicit coalescing_free_list(std::size_t alignment = allocation_alignment) noexcept : alignment_{alignment} {}

  /**
   * @brief Adds a free block, merging it with a free neighbour on either side (never across a head).
   * @post the block's bytes are free in the list; the merged block keeps the head flag of its first part.
   * @throws gpumem::logic_error if the block is empty, misaligned or overlaps a free block (a double free);
   *         the list is unchanged.
   * @throws std::bad_alloc when a new node is needed and the host heap is exhausted (list unchanged).
   */
  void insert(free_block block);

  /** @brief Adds a whole upstream chunk: insert({address, size, true}). @throws as insert. */
  void insert_chunk(std::uintptr_t address, std::size_t size) { insert(free_block{address, size, true}); }

  /**
   * @brief Removes and returns the best fit: the smallest block of at least `size` bytes (the lowest address
   * among blocks of that size), or nullopt when none is large enough. The caller splits it.
   */
  [[nodiscard]] std::optional<free_block> get_block(std::size_t size) noexcept;

  /**
   * @brief Removes exactly `block`, which must be one free block of the list (same address and size).
   * @throws gpumem::logic_error naming the block otherwise (the list is unchanged).
   */
  void remove(free_block const& block);

  /**
   * @brief Moves every block of `other` into this list, coalescing across the two.
   * @post other.empty(). Allocates nothing.
   * @throws gpumem::logic_error if a block of `other` overlaps one of this list (the blocks moved so far
   *         stay here, the rest stay in `other`).
   */
  void merge_from(coalescing_free_list&& other);

  /**
   * @brief Removes and returns every block that is a whole chunk of `chunks` (a head whose size is the
   * chunk's): the chunks that can go back to the upstream. O(n log c).
   */
  [[nodiscard]] std::vector<free_block> remove_whole_chunks(chunk_map const& chunks);

  /** @return whether any free block shares a byte with [address, address + size). O(log n). */
  [[nodiscard]] bool overlaps(std::uintptr_t address, std::size_t size) const noexcept;

  /** @return the number of free blocks. */
  [[nodiscard]] std::size_t size() const noexcept { return by_address_.size(); }
  [[nodiscard]] bool empty() const noexcept { return by_address_.empty(); }
  /** @return the size of the largest free block, 0 when empty. O(1). */
  [[nodiscard]] std::size_t largest() const noexcept { return by_size_.empty() ? 0 : by_size_.rbegin()->first; }
  /** @return the sum of the block sizes. */
  [[nodiscard]] std::size_t total_bytes() const noexcept { return total_bytes_; }

  /** @brief Calls visit(free_block) for every block, in address order. */
  template <class Visitor>
  void for_each(Visitor&& visit) const
  {
    for (auto const& [address, e] : by_address_) { visit(free_block{address, e.size, e.is_head}); }
  }

  /** @brief Checks the invariants of the file comment. O(n log n). @throws gpumem::logic_error naming the first violation. */
  void check_invariants() const;

 private:
  struct extent {
    std::size_t size;
    bool is_head;
  };
  using address_index = std::map<std::uintptr_t, extent>;
  using size_index = std::set<std::pair<std::size_t, std::uintptr_t>>;

  /// insert() with optional spare nodes: when the block needs new index entries they are made from the
  /// spares (no allocation) if they are not empty; spares that are not needed are left to the caller.
  void insert_with(free_block block, address_index::node_type& address_node, size_index::node_type& size_node);
  /// Changes the size of the block at `where` in both indexes, reusing its size-index node (no allocation).
  void resize(address_index::iterator where, std::size_t new_size) noexcept;
  /// Removes the block at `where` from both indexes.
  void erase(address_index::iterator where) noexcept;

  std::size_t alignment_;
  address_index by_address_;  // address -> {size, is_head}; the coalescing index
  size_index by_size_;        // (size, address); the best-fit index; same blocks as by_address_
  std::size_t total_bytes_{};  // == sum of the sizes
};

}  // namespace gpumem::detail
