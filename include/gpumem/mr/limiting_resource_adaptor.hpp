/**
 * @file limiting_resource_adaptor.hpp
 * An adaptor that caps the bytes its upstream may hand out through it (RMM's limiting_resource_adaptor):
 * a way to run a workload as if the device were smaller, or to keep one component within a budget.
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/resource_adaptor_base.hpp>

#include <atomic>
#include <cstddef>

namespace gpumem::mr {

/**
 * @brief Forwards to an upstream resource while the bytes allocated through the adaptor, each request
 * rounded up to `alignment`, stay within `allocation_limit`; a request that would go past the limit throws
 * gpumem::out_of_memory without reaching the upstream.
 *
 * The count is reserved (compare-and-swap) before the upstream call and given back if the upstream throws,
 * so concurrent requests never exceed the limit together, and a request never fails because of another
 * request that fails.
 *
 * Thread-safety: all members may be called concurrently (the count is one atomic).
 * Stream-ordering: as the upstream's.
 * Equality: equal to another limiting_resource_adaptor whose upstream is equal to this one's (as RMM; the
 * two counts then only balance if each adaptor frees what it allocated).
 */
class GPUMEM_EXPORT limiting_resource_adaptor final : public resource_adaptor_base {
 public:
  /**
   * @param upstream         the resource to forward to.
   * @param allocation_limit the most bytes (rounded up as below) that may be allocated at once.
   * @param alignment        each request counts as its size rounded up to this; a power of two.
   * @throws gpumem::logic_error if `upstream` is null or `alignment` is not a power of two.
   */
  limiting_resource_adaptor(device_memory_resource* upstream, std::size_t allocation_limit,
                            std::size_t alignment = detail::allocation_alignment);

  /** @return the bytes allocated through the adaptor now, each request rounded up to the alignment. */
  [[nodiscard]] std::size_t get_allocated_bytes() const noexcept { return allocated_bytes_.load(); }
  /** @return the cap given at construction. */
  [[nodiscard]] std::size_t get_allocation_limit() const noexcept { return allocation_limit_; }
  /** @return whether a request of `bytes` (rounded up to the alignment) would fit under the limit now. */
  [[nodiscard]] bool has_room_for(std::size_t bytes) const noexcept;
  /** @return the alignment that requests are rounded up to. */
  [[nodiscard]] std::size_t alignment() const noexcept { return alignment_; }

 private:
  /**
   * @throws gpumem::out_of_memory naming "limiting_resource_adaptor", the request, the limit and the bytes
   *         in use when the request would exceed the limit; whatever the upstream throws otherwise.
   * @throws gpumem::bad_alloc if the request overflows when rounded up to the alignment.
   */
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;

  [[nodiscard]] std::size_t counted_size(std::size_t bytes) const;

  std::size_t const allocation_limit_;
  std::size_t const alignment_;
  std::atomic<std::size_t> allocated_bytes_{0};  // invariant: <= allocation_limit_
};

}  // namespace gpumem::mr
