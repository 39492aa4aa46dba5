/**
 * @file simulated_memory_resource.hpp
 * A device resource that hands out *addresses only*: no memory stands behind them. It lets the algorithm
 * tests (pools, arenas, adaptors) run at "80 GiB" scale on a laptop, lets a recorded allocation trace be
 * replayed (`gpumem replay --simulate`), and injects failures on demand.
 *
 *     !!! NEVER DEREFERENCE A POINTER RETURNED BY THIS RESOURCE. !!!
 *     The pointers are integers dressed as pointers: reading or writing through them (including memcpy,
 *     memset, or a kernel launch) is undefined behaviour and will usually crash. Only compare them, do
 *     arithmetic on them, and give them back to deallocate.
 *
 * Allocation is first-fit over an ordered map of free address ranges that are coalesced on every
 * deallocation: allocate costs O(free ranges) (the scan starts at the lowest address), deallocate
 * O(log n). Invariants (checked by check_invariants()):
 *   sum(free ranges) + sum(live allocations, rounded up to 256) == capacity()
 *   free ranges and live allocations tile [base, base + capacity) without overlap, and no two free ranges
 *   touch (every free neighbour is merged).
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/detail/thread_annotations.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/detail/invariant_checks.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <random>
#include <string>

namespace gpumem::mr {

/**
 * @brief A device_memory_resource over a simulated address space: returns 256-byte aligned addresses in
 * [base, base + capacity) that are never backed by memory (see the file comment: never dereference them).
 *
 * Failure injection: fail_after(n), fail_every(k) and fail_randomly(p, seed) make chosen allocate calls
 * throw gpumem::out_of_memory, as a real upstream would when the device runs out; the rules combine (a call
 * fails when any rule says so) until clear_failures(). Every call that reaches the resource counts, whether
 * it succeeds or not (allocate(0) does not reach it: it returns nullptr in device_memory_resource).
 *
 * deallocate is noexcept, so misuse cannot throw: a deallocation of an address that is not a live
 * allocation, or with a size other than the one allocated, changes nothing and is counted in
 * invalid_deallocations(), which tests assert on.
 *
 * Thread-safety: all members may be called concurrently (one mutex guards all state).
 * Stream-ordering: none is needed, as no memory is touched: freed addresses are reusable at once by any
 * stream. The stream arguments are ignored.
 *
 * Equality: a simulated resource equals only itself.
 */
class GPUMEM_EXPORT simulated_memory_resource final : public device_memory_resource {
 public:
  /** @brief The default simulated capacity: 1 TiB. */
  static constexpr std::size_t default_capacity = std::size_t{1} << 40;
  /** @brief The default first address: 2^44 (16 TiB), far from where real host or device memory lives. */
  static constexpr std::uintptr_t default_base = std::uintptr_t{1} << 44;

  /**
   * @brief A simulated address space [base, base + capacity), all free.
   * @param capacity bytes; a positive multiple of 256.
   * @param base     the first address; non-zero and a multiple of 256.
   * @throws gpumem::logic_error if `capacity` or `base` breaks the rules above, or base + capacity
   *         overflows the address space (the message names the values).
   */
  explicit simulated_memory_resource(std::size_t capacity = default_capacity, std::uintptr_t base = default_base);
  ~simulated_memory_resource() override = default;
  simulated_memory_resource(simulated_memory_resource const&) = delete;
  simulated_memory_resource(simulated_memory_resource&&) = delete;
  simulated_memory_resource& operator=(simulated_memory_resource const&) = delete;
  simulated_memory_resource& operator=(simulated_memory_resource&&) = delete;

  // ---- failure injection ----------------------------------------------------------------------------

  /** @brief The next `n` allocate calls are served as usual; the (n+1)-th and all later ones fail. */
  void fail_after(std::size_t n);
  /**
   * @brief Every k-th allocate call from now on fails (calls k, 2k, 3k, ...).
   * @throws gpumem::logic_error if k == 0.
   */
  void fail_every(std::size_t k);
  /**
   * @brief Each allocate call from now on fails with `probability`, drawn from a generator seeded with
   * `seed` (the same seed gives the same sequence of failures on every platform).
   * @throws gpumem::logic_error if `probability` is not within [0, 1].
   */
  void fail_randomly(double probability, std::uint64_t seed);
  /** @brief Removes every failure rule. */
  void clear_failures() noexcept;

  // ---- queries (each a consistent snapshot) -------------------------------------------------------------

  /** @return bytes reserved by live allocations (each rounded up to 256). */
  [[nodiscard]] std::size_t bytes_in_use() const noexcept;
  /** @return the largest bytes_in_use() seen so far. */
  [[nodiscard]] std::size_t peak_bytes_in_use() const noexcept;
  /** @return the number of live allocations. */
  [[nodiscard]] std::size_t allocation_count() const noexcept;
  /** @return the number of successful allocations ever made. */
  [[nodiscard]] std::size_t total_allocations() const noexcept;
  /** @return the number of allocate calls failed by an injected rule. */
  [[nodiscard]] std::size_t injected_failures() const noexcept;
  /** @return deallocations of an unknown address or with a wrong size (ignored, see the class comment). */
  [[nodiscard]] std::size_t invalid_deallocations() const noexcept;
  /** @return the simulated capacity in bytes. */
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  /** @return the first simulated address. */
  [[nodiscard]] std::uintptr_t base_address() const noexcept { return base_; }
  /** @return the number of free ranges (1 when nothing is allocated: the ranges are coalesced). */
  [[nodiscard]] std::size_t free_range_count() const noexcept;
  /** @return the size of the largest free range (what the largest allocation could be). */
  [[nodiscard]] std::size_t largest_free_range() const noexcept;
  /** @return true when `ptr` lies inside a live allocation (any byte of its rounded-up size). */
  [[nodiscard]] bool owns(void const* ptr) const noexcept;

  /**
   * @brief Walks all ranges (O(n)) and checks the invariants of the file comment.
   * @throws gpumem::logic_error describing the first violation found.
   */
  void check_invariants() const;

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;

  /// @return why this call must fail, or "" when no rule fires.
  std::string injected_failure_locked() GPUMEM_REQUIRES(mutex_);
  [[nodiscard]] std::size_t largest_free_range_locked() const noexcept GPUMEM_REQUIRES(mutex_);

  // Free ranges and live allocations use the same map type so that a node moves between them without
  // allocating: deallocation (noexcept) never allocates.
  using range_map = std::map<std::uintptr_t, std::size_t>;

  std::size_t const capacity_;
  std::uintptr_t const base_;

  mutable detail::mutex mutex_;
  range_map free_ranges_ GPUMEM_GUARDED_BY(mutex_);  // start -> length (multiple of 256); never adjacent
  range_map live_ GPUMEM_GUARDED_BY(mutex_);  // start -> requested bytes (reserved: rounded to 256)
  std::size_t bytes_in_use_ GPUMEM_GUARDED_BY(mutex_){};  // sum over live_ of the reserved sizes
  std::size_t peak_bytes_in_use_ GPUMEM_GUARDED_BY(mutex_){};
  std::size_t total_allocations_ GPUMEM_GUARDED_BY(mutex_){};
  std::size_t invalid_deallocations_ GPUMEM_GUARDED_BY(mutex_){};
  std::size_t injected_failures_ GPUMEM_GUARDED_BY(mutex_){};

  // Failure rules. Each counts the allocate calls made since it was set.
  bool fail_after_set_ GPUMEM_GUARDED_BY(mutex_){false};
  std::size_t fail_after_n_ GPUMEM_GUARDED_BY(mutex_){};
  std::size_t fail_after_calls_ GPUMEM_GUARDED_BY(mutex_){};
  std::size_t fail_every_k_ GPUMEM_GUARDED_BY(mutex_){};  // 0: rule not set
  std::size_t fail_every_calls_ GPUMEM_GUARDED_BY(mutex_){};
  double fail_probability_ GPUMEM_GUARDED_BY(mutex_){};  // 0: rule not set
  std::mt19937_64 fail_rng_ GPUMEM_GUARDED_BY(mutex_){};
  detail::invariant_sampler invariant_sampler_;  // which calls check_invariants() after them (debug builds)
};

}  // namespace gpumem::mr
