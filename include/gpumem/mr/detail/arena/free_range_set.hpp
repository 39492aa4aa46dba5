/**
 * @file free_range_set.hpp
 * A set of free address ranges with coalescing and best fit, both O(log n): the free list of every arena
 * (local and global) in arena_memory_resource. Pure algorithm, no CUDA (DESIGN.md, mr/detail).
 *
 * Two indices over the same ranges: by address (to find and merge the neighbours of a freed range) and by
 * (size, address) (best fit is a lower_bound, ties go to the lowest address, so the result is
 * deterministic). STYLE.md asks for no best fit by linear scan; this is the balanced-tree answer.
 *
 * Coalescing is the caller's policy: insert() takes a predicate `may_join(boundary)` that says whether two
 * free ranges meeting at `boundary` may merge. The global arena merges everywhere; a local arena never
 * merges across the start of a superblock, so that each superblock can be handed back on its own.
 *
 * Invariants (check_invariants):
 *   by_address_ and by_size_ hold the same ranges; sum(sizes) == total_bytes_;
 *   ranges are non-empty, disjoint, and two ranges touch only where may_join(boundary) is false.
 *
 * Allocation of tree nodes: take_best_fit() never allocates (it re-keys the extracted nodes); insert()
 * allocates two nodes only when the range joins no neighbour, and none otherwise.
 */
#pragma once

#include <gpumem/mr/detail/arena/address_range.hpp>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

namespace gpumem::detail {

/**
 * @brief Free address ranges, coalesced by a caller-given rule, with O(log n) best fit (file comment).
 * Thread-safety: none; the owner (an arena) locks.
 * Stream-ordering: none; the set sees addresses only. Its owner decides when a range may be inserted.
 */
class free_range_set {
 public:
  /** @brief A may_join predicate that merges every pair of touching ranges. */
  struct join_always {
    [[nodiscard]] constexpr bool operator()(std::uintptr_t /*boundary*/) const noexcept { return true; }
  };

  /**
   * @brief Adds `range` to the set, merged with each touching neighbour for which may_join(boundary) holds.
   * @pre range.size > 0.
   * @return the free range that now holds `range` (after merging), or nullopt when `range` overlaps a range
   *         already in the set (a double free, for the caller to report): then nothing changes.
   * @throws std::bad_alloc only when `range` joins no neighbour and a tree node cannot be allocated
   *         (strong guarantee).
   */
  template <class MayJoin = join_always>
  std::optional<address_range> insert(address_range range, MayJoin may_join = {})
  {
    auto next = by_address_.lower_bound(range.begin);  // first range starting at or after range.begin
    auto prev = next == by_address_.begin() ? by_address_.end() : std::prev(next);
    if (next != by_address_.end() && next->first < range.end()) { return std::nullopt; }
    if (prev != by_address_.end() && prev->first + prev->second > range.begin) { return std::nullopt; }

    bool const join_prev = prev != by_address_.end() && prev->first + prev->second == range.begin &&
                           may_join(range.begin);
    bool const join_next = next != by_address_.end() && next->first == range.end() && may_join(range.end());
    address_range merged = range;
    if (join_prev) { merged = {prev->first, prev->second + merged.size}; }
    if (join_next) { merged.size += next->second; }

    if (join_prev) {
      rekey_size(prev->second, prev->first, merged);
      if (join_next) {
        by_size_.erase({next->second, next->first});
        by_address_.erase(next);
      }
      prev->second = merged.size;
    } else if (join_next) {
      rekey_size(next->second, next->first, merged);
      rekey_address(by_address_.extract(next), merged);
    } else {
      auto const placed = by_address_.emplace_hint(next, merged.begin, merged.size);
      try {
        by_size_.emplace(merged.size, merged.begin);
      } catch (...) {
        by_address_.erase(placed);
        throw;
      }
    }
    total_bytes_ += range.size;
    return merged;
  }

  /**
   * @brief Best fit: takes `bytes` from the start of the smallest free range that holds them (the lowest
   * addressed among equal sizes); the rest of that range stays free. Never allocates.
   * @pre bytes > 0.
   * @return the first address taken, or nullopt when no range is large enough.
   */
  [[nodiscard]] std::optional<std::uintptr_t> take_best_fit(std::size_t bytes) noexcept
  {
    auto const fit = by_size_.lower_bound({bytes, std::uintptr_t{0}});
    if (fit == by_size_.end()) { return std::nullopt; }
    auto const [size, begin] = *fit;
    auto const where = by_address_.find(begin);
    if (size == bytes) {
      by_size_.erase(fit);
      by_address_.erase(where);
    } else {
      address_range const rest{begin + bytes, size - bytes};
      rekey_size(size, begin, rest);
      rekey_address(by_address_.extract(where), rest);
    }
    total_bytes_ -= bytes;
    return begin;
  }

  /**
   * @brief Removes exactly `range`, which must be a whole free range of the set. Never allocates.
   * @return false (and changes nothing) when `range` is not a whole free range.
   */
  [[nodiscard]] bool take_whole(address_range range) noexcept
  {
    auto const found = by_address_.find(range.begin);
    if (found == by_address_.end() || found->second != range.size) { return false; }
    by_size_.erase({range.size, range.begin});
    by_address_.erase(found);
    total_bytes_ -= range.size;
    return true;
  }

  /** @return the free range that contains `address`, if any. O(log n). */
  [[nodiscard]] std::optional<address_range> range_containing(std::uintptr_t address) const noexcept
  {
    auto after = by_address_.upper_bound(address);
    if (after == by_address_.begin()) { return std::nullopt; }
    auto const found = std::prev(after);
    address_range const range{found->first, found->second};
    if (address >= range.end()) { return std::nullopt; }
    return range;
  }

  /** @return true when `range` shares a byte with a free range. O(log n). */
  [[nodiscard]] bool overlaps(address_range range) const noexcept
  {
    auto const next = by_address_.lower_bound(range.begin);
    if (next != by_address_.end() && next->first < range.end()) { return true; }
    if (next == by_address_.begin()) { return false; }
    auto const prev = std::prev(next);
    return prev->first + prev->second > range.begin;
  }

  /** @return the sum of the free ranges' sizes. */
  [[nodiscard]] std::size_t total_bytes() const noexcept { return total_bytes_; }
  /** @return the size of the largest free range (0 when empty). */
  [[nodiscard]] std::size_t largest() const noexcept { return by_size_.empty() ? 0 : by_size_.rbegin()->first; }
  /** @return the number of free ranges. */
  [[nodiscard]] std::size_t range_count() const noexcept { return by_address_.size(); }
  /** @return true when no range is free. */
  [[nodiscard]] bool empty() const noexcept { return by_address_.empty(); }

  /** @brief Calls fn(address_range) for each free range in address order. */
  template <class Fn>
  void for_each(Fn&& fn) const
  {
    for (auto const& [begin, size] : by_address_) { fn(address_range{begin, size}); }
  }

  /**
   * @brief Walks both indices (O(n)) and checks the invariants of the file comment, with the same
   * may_join rule the ranges were inserted with.
   * @throws std::logic_error describing the first violation (std::, not gpumem::logic_error: this layer
   *         includes no CUDA header, and gpumem/error.hpp does; the resource re-throws it as gpumem's).
   */
  template <class MayJoin = join_always>
  void check_invariants(MayJoin may_join = {}) const
  {
    auto fail = [](std::string const& what) { throw std::logic_error("free_range_set invariant: " + what); };
    if (by_address_.size() != by_size_.size()) { fail("the two indices hold different numbers of ranges"); }
    std::size_t sum = 0;
    std::optional<address_range> previous;
    for (auto const& [begin, size] : by_address_) {
      address_range const range{begin, size};
      if (size == 0) { fail("an empty range at " + std::to_string(begin)); }
      if (!by_size_.contains({size, begin})) { fail("range " + std::to_string(begin) + " missing by size"); }
      if (previous && previous->end() > begin) { fail("ranges overlap at " + std::to_string(begin)); }
      if (previous && previous->end() == begin && may_join(begin)) {
        fail("touching ranges were not merged at " + std::to_string(begin));
      }
      sum += size;
      previous = range;
    }
    if (sum != total_bytes_) { fail("total_bytes " + std::to_string(total_bytes_) + " != sum " + std::to_string(sum)); }
  }

 private:
  /// Moves the by-size entry {size, begin} to `to` by re-keying its node: no allocation.
  void rekey_size(std::size_t size, std::uintptr_t begin, address_range to) noexcept
  {
    auto node = by_size_.extract({size, begin});
    if (node.empty()) { return; }  // cannot happen (the entry exists by invariant); says so to the compiler
    node.value() = {to.size, to.begin};
    by_size_.insert(std::move(node));
  }

  /// Re-inserts an extracted by-address node as `to`: no allocation.
  void rekey_address(std::map<std::uintptr_t, std::size_t>::node_type node, address_range to) noexcept
  {
    if (node.empty()) { return; }  // cannot happen (extracted from a valid iterator)
    node.key() = to.begin;
    node.mapped() = to.size;
    by_address_.insert(std::move(node));
  }

  std::map<std::uintptr_t, std::size_t> by_address_;      // begin -> size; disjoint ranges
  std::set<std::pair<std::size_t, std::uintptr_t>> by_size_;  // {size, begin}: the same ranges as by_address_
  std::size_t total_bytes_{};                              // == sum of the sizes in by_address_
};

}  // namespace gpumem::detail
