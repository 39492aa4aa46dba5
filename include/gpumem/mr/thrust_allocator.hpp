/**
 * @file thrust_allocator.hpp
 * A Thrust allocator over a gpumem device resource and a stream (RMM's thrust_allocator): thrust containers
 * (thrust::device_vector<T, thrust_allocator<T>>) and algorithms' temporary storage (exec_policy.hpp) then
 * come from gpumem, stream-ordered on that stream. Thrust comes from the CUDA toolkit's CCCL.
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/per_device_resource.hpp>

#include <thrust/device_malloc_allocator.h>
#include <thrust/device_ptr.h>

#include <cstddef>
#include <limits>
#include <string>

namespace gpumem::mr {

/**
 * @brief Allocates thrust::device_ptr<T> storage from `resource()` on `stream()`.
 * Thread-safety: as the resource's. Stream-ordering: every allocation and deallocation is on stream().
 * Equality: equal resources and the same stream.
 */
template <class T>
class thrust_allocator : public thrust::device_malloc_allocator<T> {
  using base = thrust::device_malloc_allocator<T>;

 public:
  using pointer = typename base::pointer;
  using size_type = typename base::size_type;

  template <class U>
  struct rebind {
    using other = thrust_allocator<U>;
  };

  /** @brief The default stream and the current device's resource (at construction). */
  thrust_allocator() : resource_{get_current_device_resource()} {}

  /** @throws gpumem::logic_error if `resource` is null. */
  explicit thrust_allocator(cuda_stream_view stream, device_memory_resource* resource = get_current_device_resource())
    : stream_{stream}, resource_{resource}
  {
    if (resource_ == nullptr) { throw logic_error("gpumem::mr::thrust_allocator: the resource must not be null"); }
  }

  template <class U>
  thrust_allocator(thrust_allocator<U> const& other)  // NOLINT(google-explicit-constructor)
    : stream_{other.stream()}, resource_{other.resource()}
  {
  }

  /**
   * @brief Storage for n objects of T, 256-byte aligned; only for a T aligned to at most 256 bytes (see
   * polymorphic_allocator::allocate).
   * @throws gpumem::bad_alloc when n * sizeof(T) overflows; what the resource throws otherwise.
   */
  [[nodiscard]] pointer allocate(size_type n)
    requires(alignof(T) <= detail::allocation_alignment)
  {
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) {
      throw bad_alloc("gpumem::mr::thrust_allocator: " + std::to_string(n) + " objects of " +
                      std::to_string(sizeof(T)) + " bytes overflow size_t");
    }
    return thrust::device_pointer_cast(static_cast<T*>(resource_->allocate(n * sizeof(T), stream_)));
  }

  void deallocate(pointer p, size_type n) noexcept
  {
    resource_->deallocate(thrust::raw_pointer_cast(p), n * sizeof(T), stream_);
  }

  [[nodiscard]] cuda_stream_view stream() const noexcept { return stream_; }
  [[nodiscard]] device_memory_resource* resource() const noexcept { return resource_; }

 private:
  cuda_stream_view stream_{};
  device_memory_resource* resource_;
};

template <class A, class B>
[[nodiscard]] bool operator==(thrust_allocator<A> const& a, thrust_allocator<B> const& b) noexcept
{
  return a.resource()->is_equal(*b.resource()) && a.stream().value() == b.stream().value();
}

}  // namespace gpumem::mr
