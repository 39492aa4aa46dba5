/**
 * @file statistics_resource_adaptor.hpp
 * An adaptor that counts what goes through it: bytes and allocations in use, their peaks and totals, and
 * the same for nested scopes (push_counters / pop_counters), with RMM's semantics. gpumem's one counting
 * adaptor: under a sub-allocator, it measures the bytes taken from the upstream (current and peak) for the
 * benchmarks and `gpumem replay`, and the tests' recording double counts with it.
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/detail/thread_annotations.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/resource_adaptor_base.hpp>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace gpumem::mr {

/**
 * @brief Forwards every call to an upstream resource and keeps statistics of the calls.
 *
 * Counters form a stack: push_counters() opens a scope whose counters start at zero; allocations and
 * deallocations count in the innermost scope only (so a scope that frees memory allocated before it was
 * opened sees its `current` go below zero, hence the signed counters); pop_counters() closes the scope and
 * folds it into its parent:
 *   parent.current += child.current;  parent.total += child.total;
 *   parent.peak = max(parent.peak, parent.current_before_the_push + child.peak).
 * Sizes are counted as requested (not rounded up).
 *
 * Cost: one lock of one mutex per allocate and per deallocate, besides the upstream's call.
 * Thread-safety: all members may be called concurrently (one mutex guards the counters; the upstream is
 * called outside it). Scopes are the adaptor's, not a thread's: a push on one thread opens a scope for all.
 * Stream-ordering: as the upstream's.
 * Equality: equal to another statistics_resource_adaptor whose upstream is equal to this one's.
 */
class GPUMEM_EXPORT statistics_resource_adaptor final : public resource_adaptor_base {
 public:
  /** @brief One statistic: its current value, the highest it reached, and the sum of everything added. */
  struct counter {
    std::int64_t current{0};
    std::int64_t peak{0};
    std::int64_t total{0};

    /** @brief current += n, total += n, and the peak follows. */
    void add(std::int64_t n) noexcept;
    /** @brief current -= n. */
    void subtract(std::int64_t n) noexcept;
    /** @brief Folds a closed child scope into this one (see the class comment). */
    void fold(counter const& child) noexcept;

    friend bool operator==(counter const&, counter const&) = default;
  };

  /** @brief The counters of one scope: bytes, and the number of allocations. */
  struct counters {
    counter bytes;
    counter allocations;

    friend bool operator==(counters const&, counters const&) = default;
  };

  /** @throws gpumem::logic_error if `upstream` is null. */
  explicit statistics_resource_adaptor(device_memory_resource* upstream);

  /** @return the innermost scope's byte counter. */
  [[nodiscard]] counter get_bytes_counter() const noexcept;
  /** @return the innermost scope's allocation counter. */
  [[nodiscard]] counter get_allocations_counter() const noexcept;
  /** @return both counters of the innermost scope, as one consistent snapshot. */
  [[nodiscard]] counters get_counters() const noexcept;
  /** @return the number of scopes open above the outermost one (0 before any push). */
  [[nodiscard]] std::size_t scope_depth() const noexcept;

  /**
   * @brief Opens a scope whose counters start at zero.
   * @return the counters of the scope that was innermost before the call.
   */
  counters push_counters();
  /**
   * @brief Closes the innermost scope and folds it into its parent (see the class comment).
   * @return the closed scope's counters.
   * @throws gpumem::logic_error if no scope was pushed.
   */
  counters pop_counters();

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;

  mutable gpumem::detail::mutex mutex_;
  std::vector<counters> stack_ GPUMEM_GUARDED_BY(mutex_);  // never empty; back() is the innermost scope
};

}  // namespace gpumem::mr
