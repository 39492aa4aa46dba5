/**
 * @file virtual_heap.hpp
 * The algorithm of vmm_pool_memory_resource: one range of virtual addresses, backed by physical memory in
 * slabs of one size, handed out as best-fit blocks. Free ranges coalesce across slab boundaries, so the
 * pool never splits into separate chunks the way a pool over cudaMalloc does.
 *
 * Pure algorithm: addresses, sizes and opaque handles only, no CUDA (DESIGN.md, mr/detail). The resource
 * turns its decisions into provider calls (map, unmap, create, release) and stream waits.
 *
 * State:
 *   slabs: the unit of placement, `slab_size` bytes at a multiple of slab_size from base, backed or not;
 *   mappings: address -> (physical handle, slab count); one piece of physical memory backs one or more
 *   consecutive slabs (the driver cannot map a piece in parts, so a mapping moves and goes back whole);
 *   free ranges: maximal runs of free backed bytes, each with the set of streams (a 64-bit mask) on which
 *   some of its bytes were freed since the resource last made them safe for every stream;
 *   stream marks (stream_marks.hpp): in a free range of several streams, the streams of each piece, so that
 *   a block cut from it waits only for the streams of the pieces it overlaps. A range of one stream (or
 *   none) has no marks: all its bytes carry its stream. When a range of one stream joins others, its bytes
 *   get a mark of that stream.
 *
 * Placement (measured on real PyTorch logs, docs/PERFORMANCE.md "Fragmentation"):
 *   take(bytes): best fit (the smallest free range that holds the block, the lowest address among equals);
 *   the block is cut from the range's start.
 *   plan_growth(bytes), when nothing fits: among the gaps of unbacked addresses (between slabs, and above
 *   the last one), the place that needs the fewest new slabs: a gap whose start touches a free range of
 *   `left` bytes needs ceil((bytes - left) / slab_size) slabs there; a gap filled completely may also use
 *   the free range touching its end. Ties go to the lowest address. The plan also names wholly free
 *   mappings elsewhere (highest addresses first, each only if it fits in what the growth still needs),
 *   whose physical memory the resource moves to the new place instead of creating more: so the physical
 *   memory grows only when no mapping small enough is wholly free. The resource creates what is still
 *   missing, in mappings of its chosen size.
 *
 * Invariants (check_invariants()):
 *   free ranges lie inside backed slabs, do not overlap and never touch (touching ranges are merged);
 *   the free-range index's own (free_range_index.hpp);
 *   every stream mark lies inside a free range of several streams and names only streams of that range;
 *   mappings are aligned to slab_size, inside [base, base + size), do not overlap, and their slabs are
 *   exactly the backed ones.
 *
 * Costs: take, give_back O(log n) for n free ranges (free_range_index.hpp: a cut or a merge re-keys only
 * the size index), with no heap allocation but for a block that touches no free range; in a range of
 * several streams, plus O(log k + j) for k marks of which j overlap the block, and a mark's node for a
 * give_back that does not join a touching mark of the same streams; back,
 * unback O(log n + log m + k) for m mappings of k slabs; plan_growth O(m log n); wholly_free_mappings
 * O(r log m + w log w) for r free ranges of at least a slab and w results.
 * Thread-safety: none; the resource holds its lock around every call. Movable, not copyable.
 */
#pragma once

#include <gpumem/export.hpp>
#include <gpumem/mr/detail/free_range_index.hpp>
#include <gpumem/mr/detail/stream_marks.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace gpumem::detail {

/** @brief See the file comment. */
class GPUMEM_EXPORT virtual_heap {
 public:
  /** @brief A block cut from a free range, and the streams whose frees it may still be subject to: those of
   *  the pieces it overlaps (see the file comment). */
  struct block {
    std::uintptr_t address;
    std::uint64_t streams;  ///< mask of the resource's stream slots
  };

  /** @brief One mapping: `slabs` consecutive slabs from `address`, backed by one piece of physical memory. */
  struct mapping {
    std::uintptr_t address;
    std::size_t slabs;
    bool operator==(mapping const&) const = default;
  };

  /** @brief Where to grow (plan_growth). */
  struct growth_plan {
    std::uintptr_t address;           ///< the first new slab
    std::size_t slabs;                ///< how many slabs to back from `address` upward
    std::vector<mapping> movable;     ///< wholly free mappings elsewhere whose memory may move there (their
                                      ///< slabs add up to at most `slabs`)
  };

  /** @brief What unback() took out. */
  struct unbacked {
    std::uint64_t handle;
    std::size_t slabs;       ///< of the mapping
    std::uint64_t streams;   ///< whose frees its bytes carry
  };

  /**
   * @param base       the reservation's first address (a multiple of slab_size)
   * @param size       the reservation's size (a multiple of slab_size)
   * @param slab_size  bytes of physical memory per slab (a multiple of alignment)
   * @param alignment  every block address and size is a multiple of it (a power of two)
   * @throws gpumem::logic_error naming the argument that breaks these rules.
   */
  virtual_heap(std::uintptr_t base, std::size_t size, std::size_t slab_size, std::size_t alignment);

  /**
   * @brief Best fit for `bytes` (a positive multiple of alignment) among the free ranges.
   * @return the block, or nullopt when no free range is large enough (nothing changes then).
   * @throws std::bad_alloc when the host heap is exhausted (nothing changes then).
   */
  [[nodiscard]] std::optional<block> take(std::size_t bytes);

  /**
   * @brief Returns a block to the free ranges, merging it with free neighbours; `streams` are the
   * stream slots it was freed on (merged ranges carry the union, and their pieces keep their own).
   * @throws std::bad_alloc when the host heap is exhausted (nothing changes then).
   * @throws gpumem::logic_error if the block is empty, misaligned, not inside backed slabs (its first and
   *         last slab are checked), or overlaps a
   *         free range (a double free); nothing changes then.
   */
  void give_back(std::uintptr_t address, std::size_t bytes, std::uint64_t streams);

  /** @brief A mapping with its handle and size in bytes (mappings_covering). */
  struct mapping_piece {
    std::uintptr_t address;
    std::uint64_t handle;
    std::size_t bytes;
  };
  /**
   * @brief The mappings that hold [address, address + bytes), in address order: memory in use, to be shared
   * with another process. O(log m + k) for k mappings.
   * @throws gpumem::logic_error when the range is empty, not inside backed slabs, or overlaps a free range
   *         (memory not handed out).
   */
  [[nodiscard]] std::vector<mapping_piece> mappings_covering(std::uintptr_t address, std::size_t bytes) const;

  /**
   * @brief Where `bytes` can go once backed (see the file comment), or nullopt when the reservation has no
   * room for it. Changes nothing.
   */
  [[nodiscard]] std::optional<growth_plan> plan_growth(std::size_t bytes) const;

  /**
   * @brief Adds a mapping of `slabs` slabs at `address` backed by `handle`; its bytes become free, freed on
   * `streams` (memory moved from elsewhere while work of those streams may still use it; new memory: none).
   * @throws gpumem::logic_error if `address` is misaligned, `slabs` is 0, or a slab is outside the
   *         reservation or already backed; nothing changes then.
   */
  void back(std::uintptr_t address, std::uint64_t handle, std::size_t slabs = 1, std::uint64_t streams = 0);

  /**
   * @brief Removes the wholly free mapping that starts at `address`: its bytes leave the free ranges.
   * @return its handle and slab count, and the streams whose frees its bytes carry (whose work must
   *         finish before it is unmapped).
   * @throws std::bad_alloc when the host heap is exhausted (nothing changes then).
   * @throws gpumem::logic_error if no mapping starts at `address` or it is not wholly free.
   */
  [[nodiscard]] unbacked unback(std::uintptr_t address);

  /** @return the mappings whose every byte is free, highest address first. */
  [[nodiscard]] std::vector<mapping> wholly_free_mappings() const;

  /** @return the union of every free range's streams. O(n). */
  [[nodiscard]] std::uint64_t streams_in_use() const noexcept;

  /** @brief Clears `mask` from every free range's and piece's streams (their frees are now safe for every stream). */
  void forget_streams(std::uint64_t mask) noexcept;

  /** @brief Calls visit(address, handle, bytes) for every mapping, in address order. */
  template <class Visitor>
  void for_each_mapping(Visitor&& visit) const
  {
    for (auto const& [address, m] : mappings_) { visit(address, m.handle, m.slabs * slab_size_); }
  }

  [[nodiscard]] std::uintptr_t base() const noexcept { return base_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::size_t slab_size() const noexcept { return slab_size_; }
  /** @return how many slabs are backed. */
  [[nodiscard]] std::size_t slab_count() const noexcept { return backed_slabs_; }
  [[nodiscard]] std::size_t mapping_count() const noexcept { return mappings_.size(); }
  /** @return slab_count() * slab_size(). */
  [[nodiscard]] std::size_t backed_bytes() const noexcept { return backed_slabs_ * slab_size_; }
  [[nodiscard]] std::size_t free_bytes() const noexcept { return free_.bytes(); }
  [[nodiscard]] std::size_t free_range_count() const noexcept { return free_.count(); }
  [[nodiscard]] std::size_t largest_free_range() const noexcept { return free_.largest(); }

  /** @brief Checks the invariants of the file comment. @throws gpumem::logic_error naming the first violation. */
  void check_invariants() const;

 private:
  /// Adds [address, address + bytes) to the free ranges, merging it with `previous` and `next` (the
  /// ranges around it) where they touch it. @throws std::bad_alloc (nothing changes then).
  void add_free(std::uintptr_t address, std::size_t bytes, std::uint64_t streams,
                free_range_index::range const* previous, free_range_index::range const* next);
  /// The size of the free range that ends at `address` (0 when none).
  [[nodiscard]] std::size_t free_ending_at(std::uintptr_t address) const;
  /// The size of the free range that starts at `address` (0 when none).
  [[nodiscard]] std::size_t free_starting_at(std::uintptr_t address) const;
  /// The address of the slab that holds `address` (backed or not).
  [[nodiscard]] std::uintptr_t slab_of(std::uintptr_t address) const noexcept;
  /// Whether [address, address + bytes) lies inside consecutive slabs.
  [[nodiscard]] bool backed(std::uintptr_t address, std::size_t bytes) const;
  std::uintptr_t base_;
  std::size_t size_;
  std::size_t slab_size_;
  std::size_t alignment_;
  /// Whether the slab at `address` (a slab address inside the reservation) is backed. O(1).
  [[nodiscard]] bool is_slab(std::uintptr_t address) const noexcept
  {
    return backed_[(address - base_) / slab_size_] != 0;
  }

  struct mapped {
    std::uint64_t handle;
    std::size_t slabs;
  };
  std::map<std::uintptr_t, mapped> mappings_;                   // address -> mapping (ordered: gaps, walks)
  std::vector<std::uint8_t> backed_;                            // per slab index: 1 when in a mapping (O(1) checks)
  std::size_t backed_slabs_{};
  free_range_index free_;                                       // the free ranges
  stream_marks marks_;                                          // the pieces' streams in ranges of several
};

}  // namespace gpumem::detail
