/**
 * @file invariant_checks.hpp
 * The sub-allocators' check_invariants() after their own calls, in debug builds (as mimalloc's MI_DEBUG):
 * a free list or a counter broken by a bug stops the program at the call that broke it, with the resource,
 * the call and the broken invariant named, instead of surfacing later as memory handed out twice.
 *
 * Switch: GPUMEM_DEBUG_CHECKS=1 turns the checks on, 0 off; when it is not defined they follow NDEBUG (on in
 * Debug builds). The CMake option GPUMEM_DEBUG_CHECKS (ON/OFF) defines it for the library and for every
 * program that links it. Off, every check is compiled out: a resource keeps one unused counter, so that its
 * layout does not depend on the switch.
 *
 * Cost when on: a check takes the resource's locks and walks its free lists (O(n log n) in free blocks), so
 * it is sampled per resource: after each of the first 127 calls, then after 64 calls per doubling of the
 * call count (every 2nd call from the 128th, every 4th from the 256th, ...). Short tests are checked at
 * every call; a long run (a replay of a million calls over thousands of live blocks) keeps being checked,
 * about 64 log2(calls) times, while the cost per call falls towards one relaxed atomic increment.
 * Calls that must not block (try_allocate_without_blocking, try_deallocate_without_blocking) are not checked.
 *
 * No CUDA here (DESIGN.md, mr/detail).
 */
#pragma once

#include <gpumem/export.hpp>

#include <atomic>
#include <bit>
#include <cstdint>
#include <string_view>

#ifndef GPUMEM_DEBUG_CHECKS
#ifdef NDEBUG
#define GPUMEM_DEBUG_CHECKS 0
#else
#define GPUMEM_DEBUG_CHECKS 1
#endif
#endif

namespace gpumem::detail {

/// Whether the resources check their invariants after their calls (see the file comment).
inline constexpr bool debug_checks = GPUMEM_DEBUG_CHECKS != 0;

/**
 * @brief Chooses the calls of one resource after which its invariants are checked (see the file comment).
 * Thread-safety: due() may be called concurrently (one relaxed atomic increment).
 */
class invariant_sampler {
 public:
  /// Checks in each range [2^k, 2^(k+1)) of calls; every call is checked below 2 * checks_per_doubling.
  static constexpr std::uint64_t checks_per_doubling = 64;

  /// @return whether the `call`-th call (counting from 1) is checked.
  [[nodiscard]] static constexpr bool is_sampled(std::uint64_t call) noexcept
  {
    if (call < 2 * checks_per_doubling) { return true; }
    return call % (std::bit_floor(call) / checks_per_doubling) == 0;
  }

  /// Counts a call. @return whether it is checked.
  [[nodiscard]] bool due() noexcept { return is_sampled(calls_.fetch_add(1, std::memory_order_relaxed) + 1); }

 private:
  std::atomic<std::uint64_t> calls_{0};
};

/**
 * @brief Runs `check(resource_ptr)`, a resource's check_invariants(). A gpumem::logic_error from it (a broken
 * invariant) prints "gpumem: <resource>::<call> broke an invariant: <what>" on stderr and aborts: the
 * resource's state is corrupt, and going on could hand out memory twice. Any other exception (std::bad_alloc
 * while listing the blocks) skips the check.
 * @param resource the resource's name, e.g. "pool_memory_resource"; @param call its call, e.g. "deallocate".
 */
GPUMEM_EXPORT void run_invariant_check(std::string_view resource, std::string_view call,
                                       void (*check)(void const* resource), void const* resource_ptr) noexcept;

/// @return how many invariant checks run_invariant_check() has run on the calling thread (for tests).
[[nodiscard]] GPUMEM_EXPORT std::uint64_t invariant_checks_on_this_thread() noexcept;

/**
 * @brief Checks `resource`'s invariants when it goes out of scope, if debug checks are on and the sampler
 * says so. Declare it first in a mutating call, before any lock is taken: it runs after they are released
 * (on the exceptional path too, when a failed call must leave the resource intact).
 * @tparam Resource has `void check_invariants() const`, throwing gpumem::logic_error on a violation.
 */
template <class Resource>
class invariant_check_at_exit {
 public:
  invariant_check_at_exit(Resource const& resource, invariant_sampler& sampler, std::string_view name,
                          std::string_view call) noexcept
    : resource_{resource}, sampler_{sampler}, name_{name}, call_{call}
  {
  }
  ~invariant_check_at_exit()
  {
    if constexpr (debug_checks) {
      if (sampler_.due()) {
        run_invariant_check(
          name_, call_, [](void const* r) { static_cast<Resource const*>(r)->check_invariants(); }, &resource_);
      }
    }
  }
  invariant_check_at_exit(invariant_check_at_exit const&) = delete;
  invariant_check_at_exit& operator=(invariant_check_at_exit const&) = delete;

 private:
  Resource const& resource_;
  invariant_sampler& sampler_;
  std::string_view name_;
  std::string_view call_;
};

}  // namespace gpumem::detail
