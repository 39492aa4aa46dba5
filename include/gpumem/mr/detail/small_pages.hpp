/**
 * @file small_pages.hpp
 * Small blocks in pages of their own: each page is one block of the virtual heap (virtual_heap.hpp), cut
 * into equal blocks of one size class, and goes back to the heap once its last block is freed: the owner
 * retires the empty pages (retire_empty_page) before its next operation on the heap, so a page emptied and
 * refilled between two heap operations (a block of one size allocated and freed in a loop) stays, and the heap
 * sees the same free ranges as if every empty page had gone back at once. At most empty_limit pages are kept
 * empty; one more retires the oldest.
 *
 * Why: a small block placed among large free ranges splits them, and while it lives the pool must grow for
 * a large request that the range would have held. Kept in pages, small blocks pin at most their pages, and
 * an empty page coalesces with its neighbours in the heap at once. Measured on real PyTorch logs (host
 * replays): caching small blocks in place raised the peak over live bytes from 3.4 % to 13 %; in pages of
 * their own it stayed at 3.4 %.
 *
 * Pure algorithm: addresses, sizes and stream masks as numbers, no CUDA (DESIGN.md, mr/detail). The owner
 * takes pages from the heap (add_page) and gives retired pages back to it, with their stream masks.
 *
 * Size classes: a request of `bytes` (a multiple of the alignment, at most small_limit) is served by the
 * block size class_of(bytes): the request rounded up to the alignment while that is at most alignment *
 * classes_per_doubling, else rounded up to one of classes_per_doubling equal steps of its power of two (less
 * than 1 / classes_per_doubling of the block wasted).
 * Pages grow with the pool: a page of class c added while the pool holds `pool_bytes` spans
 * page_bytes_for(c, pool_bytes) = max(clamp(bit_floor(pool_bytes / pool_divisor), min_page_bytes, max_page_bytes),
 * min_blocks_per_page * c) rounded up to c (whole blocks only). With the default options, the 32 classes with
 * one page of max_page_bytes each would pin 16 MiB however little the program allocates; in a pool of
 * max_page_bytes * pool_divisor (64 MiB) or more, every new page has the largest size, and as many blocks per
 * heap operation as before.
 *
 * Streams: each block carries the 64-bit mask of the streams (the owner's slots) of its last free (a block
 * never used yet: the mask of the heap range its page came from); a block taken carries its mask, so the
 * owner orders the new user after that free. A retired page hands the union of its blocks' masks to the heap.
 *
 * Invariants (check_invariants()):
 *   pages do not overlap; a page's size is a multiple of its class, between page_bytes_for(its class, 0) and
 *   page_bytes_for(its class, any pool);
 *   a page's free blocks are exactly the carved blocks not in use, each once (a bitmap);
 *   used + free + uncarved == capacity; a page has used == 0 iff it is kept empty, and then it is in the list
 *   of kept empty pages, which holds at most empty_limit pages;
 *   a page is in its class's list of pages with room (a doubly linked list) iff it has room;
 *   used_bytes() == sum of used * class, page_bytes() == sum of page sizes.
 *
 * Costs: take O(1) (the class's list of pages with room is found by the class's index, its head by pointer);
 * give_back O(1) when the block is in the page a block was last taken from or given back to, else O(log p) for
 * p pages. add_page O(log p + capacity / 64), and no heap allocation when
 * one of the last retired pages (up to 16 are kept as spare nodes, without memory of the heap) had at least as
 * many blocks; retiring a page O(log p + carved blocks). Thread-safety: none; the owner locks around every call.
 */
#pragma once

#include <gpumem/export.hpp>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace gpumem::detail {

/** @brief See the file comment. */
class GPUMEM_EXPORT small_pages {
 public:
  /// Empty pages kept until the owner's next heap operation.
  static constexpr std::size_t empty_limit = 4;

  /** @brief The shape of the pages. */
  struct options {
    std::size_t small_limit{std::size_t{128} << 10};     ///< the largest request served from pages
    std::size_t min_page_bytes{std::size_t{64} << 10};   ///< the smallest page (before min_blocks_per_page)
    std::size_t max_page_bytes{std::size_t{512} << 10};  ///< the largest page (before min_blocks_per_page)
    std::size_t pool_divisor{128};                       ///< pages span about 1 / pool_divisor of the pool
    std::size_t min_blocks_per_page{4};                  ///< a page holds at least this many blocks
    unsigned classes_per_doubling{4};                    ///< size classes per power of two (1, 2, 4, 8, 16)
    std::size_t alignment{256};                          ///< every block size and address is a multiple
  };

  /** @brief A block handed out, with the streams whose frees in its page the new user must follow. */
  struct block {
    std::uintptr_t address;
    std::uint64_t streams;
  };

  /** @brief A page whose last block was freed: give it back to the heap with its streams. */
  struct retired_page {
    std::uintptr_t address;
    std::size_t bytes;
    std::uint64_t streams;
  };

  /** @throws gpumem::logic_error naming an option out of range (alignment not a power of two, ...). */
  explicit small_pages(options const& o);

  /** @return whether requests of `bytes` are served from pages (0 < bytes <= small_limit). */
  [[nodiscard]] bool serves(std::size_t bytes) const noexcept { return bytes > 0 && bytes <= options_.small_limit; }
  /** @return the block size that serves `bytes` (a multiple of the alignment, at least `bytes`). @pre serves(bytes) */
  [[nodiscard]] std::size_t class_of(std::size_t bytes) const noexcept
  {
    // On every allocation and free, inline: masks and shifts, no division (the alignment and
    // classes_per_doubling are powers of two, checked at construction).
    std::size_t const a = options_.alignment;
    auto const shift = std::countr_zero(options_.classes_per_doubling);  // log2 of it
    std::size_t const rounded = (bytes + a - 1) & ~(a - 1);
    // Below alignment * classes_per_doubling every multiple of the alignment is a class of its own.
    if (rounded <= a << shift) { return rounded; }
    std::size_t const step = std::bit_floor(rounded) >> shift;  // a power of two and a multiple of a
    return (rounded + step - 1) & ~(step - 1);
  }
  /** @return the bytes of a page of class `block_size` added while the pool holds `pool_bytes` (file comment). */
  [[nodiscard]] std::size_t page_bytes_for(std::size_t block_size, std::size_t pool_bytes) const noexcept;

  /**
   * @brief A block of class_of(bytes) from the page that most recently gained room (a new page, or a full
   * one a block was freed in): blocks are reused where they were freed, and other pages may drain and retire.
   * On the PyTorch logs this order kept the peak lower than taking the lowest address.
   * @return nullopt when no page of that class has room: take page_bytes_for(class_of(bytes), the pool's
   *         bytes) from the heap and call add_page with that size.
   */
  [[nodiscard]] std::optional<block> take(std::size_t bytes);

  /**
   * @brief Adds a page of `page_bytes` at `address` for requests of `bytes`, and takes its first block (returned).
   * @param page_bytes page_bytes_for(class_of(bytes), some pool size).
   * @param streams the mask of the heap's free range the page came from (the first user follows it).
   * @throws gpumem::logic_error if the page would overlap another, is misaligned or has a size that
   *         page_bytes_for gives for no pool; std::bad_alloc.
   */
  block add_page(std::uintptr_t address, std::size_t bytes, std::size_t page_bytes, std::uint64_t streams);

  /**
   * @brief Frees the block at `address`, freed on the streams of `streams`. When this was the page's last
   * block, the page is kept empty (the file comment), and when that makes more than empty_limit, the oldest
   * kept page is retired.
   * @return the retired page, if any: it is forgotten, give it back to the heap.
   * @throws gpumem::logic_error if no page holds `address`, it is not a block's start, or the block is
   *         already free (a double free); nothing changes then.
   */
  [[nodiscard]] std::optional<retired_page> give_back(std::uintptr_t address, std::uint64_t streams);

  /**
   * @brief Retires one kept empty page (the owner calls it until it returns nullopt before every operation on
   * the heap, so that empty pages coalesce with their neighbours first).
   * @return the retired page (forgotten here: give it back to the heap), or nullopt when none is kept.
   */
  [[nodiscard]] std::optional<retired_page> retire_empty_page() noexcept;
  /** @return how many empty pages are kept (at most empty_limit). */
  [[nodiscard]] std::size_t empty_page_count() const noexcept { return empty_.size(); }

  /** @return whether some page holds `address`. */
  [[nodiscard]] bool owns(std::uintptr_t address) const noexcept;
  /** @brief Removes the bits of `mask` from every block's streams (their frees are safe for all now). O(blocks) */
  void forget_streams(std::uint64_t mask) noexcept;
  /** @return the union of every block's streams. O(blocks) */
  [[nodiscard]] std::uint64_t streams_in_use() const noexcept;

  [[nodiscard]] std::size_t page_count() const noexcept { return pages_.size(); }
  /** @return bytes of all pages (what the heap sees as in use). */
  [[nodiscard]] std::size_t page_bytes() const noexcept { return page_bytes_; }
  /** @return bytes of the blocks in use (class sizes). */
  [[nodiscard]] std::size_t used_bytes() const noexcept { return used_bytes_; }
  [[nodiscard]] options const& shape() const noexcept { return options_; }

  /** @brief Checks the invariants of the file comment. @throws gpumem::logic_error naming the first violation. */
  void check_invariants() const;

 private:
  struct page {
    std::uintptr_t address{};
    std::size_t bytes{};
    std::size_t block_size{};
    std::size_t capacity{};
    std::size_t carved{};  // blocks [0, carved) have been handed out at least once
    std::size_t used{};
    std::uint64_t first_streams{};         // the streams of the heap range the page came from
    std::vector<std::uint64_t> streams;   // per carved block: the streams of its last free
    std::vector<std::uint32_t> free;       // indices of free carved blocks (a stack)
    std::vector<std::uint64_t> is_free;    // bitmap over [0, capacity): carved and free
    page* newer{};                         // neighbours in its class's list of pages with room (none: null);
    page* older{};                         // map nodes keep their address, extracted or not
  };

  [[nodiscard]] bool has_room(page const& p) const noexcept { return !p.free.empty() || p.carved < p.capacity; }
  /// The union of the streams of p's blocks (first_streams for the uncarved ones).
  [[nodiscard]] static std::uint64_t streams_of(page const& p) noexcept;
  /// Forgets the kept empty page at `it` (already out of the list of empty pages). @return it, to retire.
  retired_page retire(std::map<std::uintptr_t, page>::iterator it) noexcept;
  /// A block of `p` (which has room); unlists `p` when that fills it.
  block take_from(page& p);
  /// Puts `p` first in its class's list of pages with room.
  void list(page& p) noexcept;
  /// Removes `p` from its class's list of pages with room.
  void unlist(page& p) noexcept;
  /// The position of class `block_size` among the classes, from 0 (a, 2a, ... in order): its list's index.
  [[nodiscard]] std::size_t class_index(std::size_t block_size) const noexcept;
  /// `target` bytes raised to min_blocks_per_page blocks of `block_size`, rounded up to whole blocks.
  [[nodiscard]] std::size_t whole_page(std::size_t block_size, std::size_t target) const noexcept;
  /// Whether page_bytes_for(block_size, some pool size) is `bytes`. O(log(max_page_bytes / min_page_bytes))
  [[nodiscard]] bool is_page_size(std::size_t block_size, std::size_t bytes) const noexcept;
  /// The page that holds `address`, or null: a search of the pages by address.
  [[nodiscard]] page const* find_page(std::uintptr_t address) const noexcept;
  /// The same, trying the page used last first.
  [[nodiscard]] page* page_of(std::uintptr_t address) noexcept;

  options options_;
  std::map<std::uintptr_t, page> pages_;  // by address
  std::vector<page*> newest_with_room_;   // by class_index: the head of the class's pages with room (none: null)
  page* last_page_{};                     // the page a block was last taken from or given back to (none: null)
  static constexpr std::size_t spare_limit = 16;
  std::vector<std::uintptr_t> empty_;  // kept empty pages, oldest first
  std::vector<std::map<std::uintptr_t, page>::node_type> spare_;  // retired pages' nodes, kept for reuse
  std::size_t page_bytes_{};
  std::size_t used_bytes_{};
};

}  // namespace gpumem::detail
