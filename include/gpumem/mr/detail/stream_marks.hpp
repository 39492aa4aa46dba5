/**
 * @file stream_marks.hpp
 * Which streams each piece of a free range was freed on, for virtual_heap.hpp: disjoint address intervals
 * (marks), each with a nonzero mask of the resource's stream slots. Bytes under no mark carry no stream.
 * Pure bookkeeping: addresses, sizes and masks, no CUDA.
 *
 * Why: a free range merges the pieces freed next to each other, and the union of their streams is all a
 * range can carry. A block cut from it would then wait for every stream that freed any piece of the range,
 * though it overlaps only some of them. The marks keep each piece's own streams, so a block waits only for
 * the streams of the pieces it is cut from.
 *
 *     stream_marks marks;
 *     marks.add(address, bytes, streams);                 // a piece freed on `streams`
 *     std::uint64_t const wait_for = marks.remove(start, start + bytes);  // the streams of a block cut there
 *
 * Invariants (check()): marks are nonempty, do not overlap, and carry a nonzero mask. add() merges a mark
 * with touching marks of the same mask, so the marks of pieces freed on one stream stay one.
 * Costs: add, remove O(log k + j) for k marks and j marks overlapping the interval; add allocates one node
 * unless it merges into a neighbour; remove allocates only to split one mark in two (nothing for a cut at
 * a mark's start); clear and erase_if O(k).
 * Thread-safety: none (a value type; virtual_heap's owner holds its lock).
 */
#pragma once

#include <gpumem/export.hpp>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace gpumem::detail {

/** @brief See the file comment. */
class GPUMEM_EXPORT stream_marks {
 public:
  /**
   * @brief Marks [start, start + size) with `streams`, merging it with touching marks of the same mask.
   * @pre size > 0, streams != 0, and the interval overlaps no mark.
   * @throws std::bad_alloc (nothing changes then).
   */
  void add(std::uintptr_t start, std::size_t size, std::uint64_t streams);

  /**
   * @brief Unmarks [begin, end): marks inside it go, marks across its edges are trimmed to what lies
   * outside. @return the union of the masks of the marks that overlapped it.
   * @throws std::bad_alloc when one mark spans the whole interval and more on both sides (nothing changes
   *         then).
   */
  std::uint64_t remove(std::uintptr_t begin, std::uintptr_t end);

  /** @brief Clears `mask` from every mark; marks left with no stream go. */
  void clear(std::uint64_t mask) noexcept;

  /** @brief Removes every mark for which drop(start, size, streams) is true. */
  template <class Predicate>
  void erase_if(Predicate&& drop) noexcept
  {
    for (auto it = marks_.begin(); it != marks_.end();) {
      it = drop(it->first, it->second.size, it->second.streams) ? marks_.erase(it) : std::next(it);
    }
  }

  /** @brief Calls visit(start, size, streams) for every mark, in address order. */
  template <class Visitor>
  void for_each(Visitor&& visit) const
  {
    for (auto const& [start, m] : marks_) { visit(start, m.size, m.streams); }
  }

  [[nodiscard]] std::size_t count() const noexcept { return marks_.size(); }

  stream_marks();
  ~stream_marks();
  /// A moved-from stream_marks may only be destroyed or assigned to.
  stream_marks(stream_marks&&) noexcept;
  stream_marks& operator=(stream_marks&& other) noexcept;
  stream_marks(stream_marks const&) = delete;
  stream_marks& operator=(stream_marks const&) = delete;

  /** @brief Checks the invariants of the file comment. @throws gpumem::logic_error naming the first violation. */
  void check() const;

 private:
  struct mark {
    std::size_t size;
    std::uint64_t streams;
  };
  /// The nodes of marks that went, for the next marks: a mark costs the host heap nothing once the marks have
  /// been as many. A node is freed by whichever thread holds the owner's lock, so the host heap's per-thread
  /// caches would otherwise hand it between threads.
  class spare_nodes {
   public:
    spare_nodes() = default;
    spare_nodes(spare_nodes const&) = delete;
    spare_nodes& operator=(spare_nodes const&) = delete;
    ~spare_nodes();
    [[nodiscard]] void* take(std::size_t bytes);
    void give(void* node, std::size_t bytes) noexcept;

   private:
    struct spare {
      spare* next;
    };
    spare* first_{nullptr};
    std::size_t bytes_{0};  // of every node (one map's nodes are of one size)
  };
  template <class T>
  struct node_allocator {
    using value_type = T;
    using propagate_on_container_move_assignment = std::true_type;
    using propagate_on_container_swap = std::true_type;
    spare_nodes* spares;
    explicit node_allocator(spare_nodes* s) noexcept : spares{s} {}
    template <class U>
    node_allocator(node_allocator<U> const& other) noexcept : spares{other.spares}  // NOLINT: rebinding
    {
    }
    [[nodiscard]] T* allocate(std::size_t n)
    {
      return static_cast<T*>(n == 1 ? spares->take(sizeof(T)) : ::operator new(n * sizeof(T)));
    }
    void deallocate(T* p, std::size_t n) noexcept
    {
      if (n == 1) {
        spares->give(p, sizeof(T));
      } else {
        ::operator delete(p);
      }
    }
    template <class U>
    bool operator==(node_allocator<U> const& other) const noexcept { return spares == other.spares; }
  };
  using map = std::map<std::uintptr_t, mark, std::less<>, node_allocator<std::pair<std::uintptr_t const, mark>>>;
  std::unique_ptr<spare_nodes> spares_;  // before marks_: destroyed after it (a move keeps its address)
  map marks_;                            // start -> mark
};

}  // namespace gpumem::detail
