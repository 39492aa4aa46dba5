/**
 * @file aligned_resource_adaptor.hpp
 * An adaptor that serves allocations aligned beyond the 256 bytes every resource guarantees (RMM's
 * aligned_resource_adaptor): for requests of at least a threshold size, it over-allocates from its
 * upstream and returns the first suitably aligned address inside.
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/detail/thread_annotations.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/resource_adaptor_base.hpp>

#include <cstddef>
#include <mutex>
#include <unordered_map>

namespace gpumem::mr {

/**
 * @brief Forwards to an upstream resource; a request of `bytes >= alignment_threshold` is served
 * `alignment`-aligned, from an upstream allocation of `bytes + alignment - 256` bytes (enough, since the
 * upstream's pointer is 256-aligned, so the aligned address is at most alignment - 256 bytes above it).
 * Requests below the threshold, and all requests when alignment <= 256, pass through unchanged.
 *
 * When the aligned address differs from the upstream's pointer, the pair is kept in a map (aligned ->
 * original) so that deallocate gives the upstream its own pointer and size back.
 *
 * Thread-safety: all members may be called concurrently (one mutex guards the map; the upstream is called
 * outside it).
 * Stream-ordering: as the upstream's.
 * Equality: equal to another aligned_resource_adaptor with the same alignment and threshold whose upstream
 * is equal to this one's.
 */
class GPUMEM_EXPORT aligned_resource_adaptor final : public resource_adaptor_base {
 public:
  /** @brief The default threshold: every request is aligned. */
  static constexpr std::size_t default_alignment_threshold = 0;

  /**
   * @param upstream            the resource to forward to.
   * @param alignment           the alignment of the returned pointers; a power of two.
   * @param alignment_threshold requests of fewer bytes are not aligned beyond 256.
   * @throws gpumem::logic_error if `upstream` is null or `alignment` is not a power of two.
   */
  explicit aligned_resource_adaptor(device_memory_resource* upstream,
                                    std::size_t alignment = detail::allocation_alignment,
                                    std::size_t alignment_threshold = default_alignment_threshold);

  /** @return the alignment of requests at or above the threshold. */
  [[nodiscard]] std::size_t alignment() const noexcept { return alignment_; }
  /** @return the smallest request that is aligned. */
  [[nodiscard]] std::size_t alignment_threshold() const noexcept { return alignment_threshold_; }

 private:
  /**
   * @throws gpumem::bad_alloc if bytes + alignment - 256 overflows.
   * @throws gpumem::out_of_memory naming the request and its alignment, then the upstream's message, when the
   *         upstream is out of memory; whatever else the upstream throws.
   */
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override;

  [[nodiscard]] bool passes_through(std::size_t bytes) const noexcept
  {
    return alignment_ <= detail::allocation_alignment || bytes < alignment_threshold_;
  }

  std::size_t const alignment_;
  std::size_t const alignment_threshold_;
  gpumem::detail::mutex mutex_;
  std::unordered_map<void*, void*> originals_ GPUMEM_GUARDED_BY(mutex_);  // aligned pointer -> upstream pointer,
                                                // only where the two differ
};

}  // namespace gpumem::mr
