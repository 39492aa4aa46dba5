/**
 * @file counting_resource.hpp
 * Benchmark-local adaptor that counts the bytes a sub-allocator takes from its upstream: current, peak,
 * and the number of upstream calls. It sits between a pool-type resource and its cuda_memory_resource so
 * the benchmarks can report "peak bytes taken from upstream / peak live bytes" (fragmentation) without
 * depending on a statistics adaptor in the library.
 *
 * Cost: two relaxed atomic updates per upstream call. Sub-allocators call their upstream only to grow or
 * shrink, so this never sits on the measured fast path of a pool; for `cuda` itself it is not used.
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <atomic>
#include <cstddef>

namespace gpumem::bench {

/**
 * @brief Forwards to `upstream` and counts bytes and calls.
 * Thread-safety: as the upstream's; the counters are atomics.
 * Stream-ordering: as the upstream's (the stream is passed through).
 * Invariant: current_bytes() == sum of bytes of upstream allocations not yet deallocated <= peak_bytes().
 */
class counting_resource final : public mr::device_memory_resource {
 public:
  /** @pre upstream != nullptr and outlives this adaptor. */
  explicit counting_resource(mr::device_memory_resource* upstream) noexcept : upstream_{upstream} {}

  [[nodiscard]] mr::device_memory_resource* upstream() const noexcept { return upstream_; }
  [[nodiscard]] std::size_t current_bytes() const noexcept { return current_.load(std::memory_order_relaxed); }
  [[nodiscard]] std::size_t peak_bytes() const noexcept { return peak_.load(std::memory_order_relaxed); }
  [[nodiscard]] std::size_t allocations() const noexcept { return allocations_.load(std::memory_order_relaxed); }
  [[nodiscard]] std::size_t deallocations() const noexcept
  {
    return deallocations_.load(std::memory_order_relaxed);
  }

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    void* const ptr = upstream_->allocate(bytes, stream);
    allocations_.fetch_add(1, std::memory_order_relaxed);
    std::size_t const now = current_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    std::size_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {}
    return ptr;
  }

  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override
  {
    upstream_->deallocate(ptr, bytes, stream);
    deallocations_.fetch_add(1, std::memory_order_relaxed);
    current_.fetch_sub(bytes, std::memory_order_relaxed);
  }

  [[nodiscard]] bool do_is_equal(mr::device_memory_resource const& other) const noexcept override
  {
    return this == &other;
  }

  mr::device_memory_resource* upstream_;
  std::atomic<std::size_t> current_{0};
  std::atomic<std::size_t> peak_{0};
  std::atomic<std::size_t> allocations_{0};
  std::atomic<std::size_t> deallocations_{0};
};

}  // namespace gpumem::bench
