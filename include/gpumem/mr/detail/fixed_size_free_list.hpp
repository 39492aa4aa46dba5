/**
 * @file fixed_size_free_list.hpp
 * The free list of fixed_size_memory_resource: a LIFO stack of block addresses, all blocks one size. The
 * most recently freed block is handed out first (it is the most likely to be in the device's caches).
 * Blocks never coalesce: a fixed-size resource never splits or joins them.
 *
 * Pure algorithm: addresses and sizes only, no CUDA (DESIGN.md, mr/detail).
 *
 * Invariants (checked by check_invariants()):
 *   every address is a multiple of 256, no address appears twice
 *   total_bytes() == size() * block_size()
 */
#pragma once

#include <gpumem/export.hpp>
#include <gpumem/mr/detail/free_block.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace gpumem::detail {

/**
 * @brief Free blocks of one size, as a stack of addresses.
 * Costs: insert and get_block O(1) amortised (a vector push or pop); merge_from O(m);
 * remove_whole_chunks O(n log c); check_invariants() O(n log n).
 * Thread-safety: none (a value type); the owning resource holds its lock around every call.
 */
class GPUMEM_EXPORT fixed_size_free_list {
 public:
  /** @brief Blocks carry no head flag: blocks never merge, so chunk boundaries need no marking. */
  static constexpr bool tracks_heads = false;
  /** @brief Every block has one size: a thread cache may take several at once (the resource's refill). */
  static constexpr bool one_block_size = true;

  /** @param block_size the size of every block; a positive multiple of 256. @throws gpumem::logic_error otherwise. */
  explicit fixed_size_free_list(std::size_t block_size);

  /** @return the size of every block. */
  [[nodiscard]] std::size_t block_size() const noexcept { return block_size_; }

  /**
   * @brief Pushes a free block. Cost: O(1) amortised; O(n) in debug builds, which look for the block first.
   * @throws gpumem::logic_error if block.size != block_size() or the address is misaligned, or (in debug
   *         builds only) the block is already in the list (a double free); the list is unchanged then.
   * @throws std::bad_alloc when the stack must grow and the host heap is exhausted (list unchanged).
   */
  void insert(free_block block);

  /**
   * @brief Pushes every block of a new chunk, so that the lowest address is handed out first.
   * @throws gpumem::logic_error if `size` is not a positive multiple of block_size(); std::bad_alloc.
   */
  void insert_chunk(std::uintptr_t address, std::size_t size);

  /** @return the most recently freed block when `size` <= block_size(), else (or when empty) nullopt. */
  [[nodiscard]] std::optional<free_block> get_block(std::size_t size) noexcept;

  /** @brief Moves every block of `other` here. @post other.empty(). @throws gpumem::logic_error if the block sizes differ. */
  void merge_from(fixed_size_free_list&& other);

  /**
   * @brief Removes and returns the chunks of `chunks` whose every block is in this list (the chunks that
   * can go back to the upstream), each as one block with is_head set.
   */
  [[nodiscard]] std::vector<free_block> remove_whole_chunks(chunk_map const& chunks);

  /** @return whether any free block shares a byte with [address, address + size). O(n). */
  [[nodiscard]] bool overlaps(std::uintptr_t address, std::size_t size) const noexcept;

  [[nodiscard]] std::size_t size() const noexcept { return blocks_.size(); }
  [[nodiscard]] bool empty() const noexcept { return blocks_.empty(); }
  /** @return block_size() when not empty, else 0. */
  [[nodiscard]] std::size_t largest() const noexcept { return blocks_.empty() ? 0 : block_size_; }
  [[nodiscard]] std::size_t total_bytes() const noexcept { return blocks_.size() * block_size_; }

  /** @brief Calls visit(free_block) for every block (in stack order, the next to be handed out last). */
  template <class Visitor>
  void for_each(Visitor&& visit) const
  {
    for (std::uintptr_t const address : blocks_) { visit(free_block{address, block_size_, false}); }
  }

  /** @brief Checks the invariants of the file comment. @throws gpumem::logic_error naming the first violation. */
  void check_invariants() const;

 private:
  std::size_t block_size_;
  std::vector<std::uintptr_t> blocks_;  // the stack; back() is handed out next
};

}  // namespace gpumem::detail
