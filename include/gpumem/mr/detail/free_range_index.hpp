/**
 * @file free_range_index.hpp
 * The free ranges of virtual_heap.hpp, indexed twice: by address (neighbours, containment) and by
 * (size, address) (best fit). Pure bookkeeping: addresses and sizes, no CUDA.
 *
 * Why not two std::maps keyed by value: a block cut from a range's start, or merged into a neighbour,
 * changes the range's address without changing its place among the other ranges (they never overlap).
 * Here each range is one record that both indexes point to, and the address index orders records by
 * their current start, so such a change is a store, not a re-insertion. The size index is re-keyed (one
 * extraction and one insertion, reusing the node) only when the new (size, start) leaves the place between
 * its neighbours there; a cut from the largest range, or a merge that stays below the next size, is a store
 * too. A best-fit cut costs one lower_bound and at most one re-key; docs/PERFORMANCE.md ("Fragmentation")
 * has what this bought on the PyTorch logs.
 *
 *     free_range_index ranges;
 *     auto const* r = ranges.best_fit(bytes);           // the smallest range that holds bytes
 *     ranges.reshape(r, r->start + bytes, r->size - bytes, r->streams);   // or erase(r) when exact
 *
 * Invariants (check()): both indexes hold the same records; the address index is ordered by start with no
 * two ranges overlapping; the size index by (size, start); bytes() is the sum of the sizes.
 * Costs: best_fit, around, containing O(log n); insert O(log n) and allocates only when no spare node or
 * record is left; reshape O(log n), erase O(log n), both without allocating.
 * Thread-safety: none (a value type; virtual_heap's owner holds its lock).
 */
#pragma once

#include <gpumem/export.hpp>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <set>
#include <utility>
#include <vector>

namespace gpumem::detail {

/** @brief See the file comment. */
class GPUMEM_EXPORT free_range_index {
 public:
  /** @brief A free range: [start, start + size), freed on the stream slots in `streams` (a mask). */
  struct range {
    std::uintptr_t start{};
    std::size_t size{};
    std::uint64_t streams{};
    [[nodiscard]] std::uintptr_t end() const noexcept { return start + size; }
  };

  /** @brief The ranges next to an address: the last starting before it, the first starting at or after it. */
  struct neighbours {
    range const* before;  ///< nullptr when none
    range const* after;   ///< nullptr when none
  };

  free_range_index();
  free_range_index(free_range_index const&) = delete;
  free_range_index& operator=(free_range_index const&) = delete;
  /// Moves keep every record and node where it is (a deque's and a set's moves do), so handles stay valid.
  free_range_index(free_range_index&&) noexcept = default;
  free_range_index& operator=(free_range_index&&) noexcept = default;
  ~free_range_index() = default;

  /** @return the range with the smallest (size, start) whose size is at least `bytes`, or nullptr. */
  [[nodiscard]] range const* best_fit(std::size_t bytes) const noexcept;
  /** @return the ranges around `address` (see neighbours). */
  [[nodiscard]] neighbours around(std::uintptr_t address) const noexcept;
  /** @return the range that holds [address, address + bytes) whole, or nullptr. */
  [[nodiscard]] range const* containing(std::uintptr_t address, std::size_t bytes) const noexcept;

  /**
   * @brief Adds a range. @pre it overlaps no range, and size > 0.
   * @throws std::bad_alloc when the host heap is exhausted; nothing changes then.
   */
  range const* insert(std::uintptr_t start, std::size_t size, std::uint64_t streams);
  /**
   * @brief Gives `r` a new extent and streams without re-inserting it in the address index.
   * @pre the new extent is not empty and overlaps no other range (so the address order is unchanged).
   */
  void reshape(range const* r, std::uintptr_t start, std::size_t size, std::uint64_t streams) noexcept;
  /** @brief Removes `r`; its record and nodes are kept for later insertions. */
  void erase(range const* r) noexcept;

  /** @brief Calls visit(range const&) for every range, in address order. */
  template <class Visitor>
  void for_each(Visitor&& visit) const
  {
    for (record const* r : by_address_) { visit(static_cast<range const&>(*r)); }
  }
  /** @brief Calls visit(range const&) for every range of at least `bytes`, smallest first. */
  template <class Visitor>
  void for_each_at_least(std::size_t bytes, Visitor&& visit) const
  {
    for (auto it = by_size_.lower_bound(fit_key{bytes, 0}); it != by_size_.end(); ++it) {
      visit(static_cast<range const&>(**it));
    }
  }
  /** @brief Clears `mask` from every range's streams. */
  void clear_streams(std::uint64_t mask) noexcept;

  [[nodiscard]] std::size_t count() const noexcept { return by_address_.size(); }
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  [[nodiscard]] std::size_t largest() const noexcept { return by_size_.empty() ? 0 : (*by_size_.rbegin())->size; }

  /** @brief Checks the invariants of the file comment. @throws gpumem::logic_error naming the first violation. */
  void check() const;

 private:
  struct record;
  struct fit_key {
    std::size_t size;
    std::uintptr_t start;
  };
  struct start_less {
    using is_transparent = void;
    bool operator()(record const* a, record const* b) const noexcept;
    bool operator()(record const* a, std::uintptr_t b) const noexcept;
    bool operator()(std::uintptr_t a, record const* b) const noexcept;
  };
  struct fit_less {
    using is_transparent = void;
    bool operator()(record const* a, record const* b) const noexcept;
    bool operator()(record const* a, fit_key b) const noexcept;
    bool operator()(fit_key a, record const* b) const noexcept;
  };
  // The address index orders records by their start, which reshape() changes in place: allowed because
  // the order among the records it holds never changes (ranges do not overlap). The size index's key is
  // changed in place only when the record's neighbours there still bracket it (reshape() checks).
  using address_set = std::set<record*, start_less>;
  using size_set = std::set<record*, fit_less>;
  struct record : range {
    address_set::iterator in_address;
    size_set::iterator in_size;
  };

  [[nodiscard]] static record* mutable_record(range const* r) noexcept
  {
    return static_cast<record*>(const_cast<range*>(r));  // NOLINT: every range handed out is a record of ours
  }
  [[nodiscard]] record* new_record();

  std::deque<record> records_;                 // storage; addresses stay valid as it grows
  std::vector<record*> spare_records_;         // erased records (capacity: one per record, so pushing never allocates)
  std::vector<address_set::node_type> spare_address_nodes_;
  std::vector<size_set::node_type> spare_size_nodes_;
  address_set by_address_;
  size_set by_size_;
  std::size_t bytes_{};
};

}  // namespace gpumem::detail
