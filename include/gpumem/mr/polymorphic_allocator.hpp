/**
 * @file polymorphic_allocator.hpp
 * Typed, stream-ordered allocation from any device_memory_resource (RMM's polymorphic_allocator), and
 * stream_allocator_adaptor, which binds a stream to it so that it meets the standard Allocator
 * requirements (allocate(n) / deallocate(p, n)) for containers and libraries that take one.
 *
 * The memory is device memory: a container that constructs elements on the host (std::vector) may use it
 * only when the resource's memory is host-accessible (managed memory, or the host backend). Use it for
 * raw storage, Thrust-style containers, or libraries that take an Allocator and only pass pointers to
 * device code.
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/per_device_resource.hpp>

#include <cstddef>
#include <limits>
#include <memory>
#include <string>

namespace gpumem::mr {

/**
 * @brief Allocates arrays of T from a device_memory_resource on a given stream.
 * Thread-safety: as the resource's. Stream-ordering: as device_memory_resource.hpp says, for the stream
 * given to each call.
 * Equality: two allocators are equal when their resources are (memory from one may be freed by the other).
 */
template <class T>
class polymorphic_allocator {
 public:
  using value_type = T;

  /** @brief Uses the current device's resource at the time of construction. */
  polymorphic_allocator() : resource_{get_current_device_resource()} {}

  /**
   * @brief Allocates from `resource`, which must outlive the allocator and its copies. Implicit, as RMM's
   * (which converts from a resource reference), so a resource can be passed where an allocator is taken.
   * @throws gpumem::logic_error if `resource` is null.
   */
  polymorphic_allocator(device_memory_resource* resource) : resource_{resource}  // NOLINT(google-explicit-constructor)
  {
    if (resource_ == nullptr) { throw logic_error("gpumem::mr::polymorphic_allocator: the resource must not be null"); }
  }

  /** @brief As the pointer constructor: allocates from `resource`, which must outlive the allocator. */
  polymorphic_allocator(device_memory_resource& resource) noexcept  // NOLINT(google-explicit-constructor)
    : resource_{&resource}
  {
  }

  template <class U>
  polymorphic_allocator(polymorphic_allocator<U> const& other) noexcept  // NOLINT(google-explicit-constructor)
    : resource_{other.resource()}
  {
  }

  /**
   * @return storage for `n` objects of T, 256-byte aligned (nullptr when n == 0).
   * Only for a T aligned to at most 256 bytes, the alignment every resource keeps: for a more aligned T
   * it does not compile (use an aligned_resource_adaptor's memory and place the objects yourself).
   * @throws gpumem::bad_alloc when n * sizeof(T) overflows (naming n); what the resource throws otherwise.
   */
  [[nodiscard]] T* allocate(std::size_t n, cuda_stream_view stream)
    requires(alignof(T) <= detail::allocation_alignment)
  {
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) {
      throw bad_alloc("gpumem::mr::polymorphic_allocator: " + std::to_string(n) + " objects of " +
                      std::to_string(sizeof(T)) + " bytes overflow size_t");
    }
    return static_cast<T*>(resource_->allocate(n * sizeof(T), stream));
  }

  /** @pre `p` came from allocate(n, ...) of an equal allocator. Stream-ordering: reusable at once on `stream`. */
  void deallocate(T* p, std::size_t n, cuda_stream_view stream) noexcept
  {
    resource_->deallocate(p, n * sizeof(T), stream);
  }

  /** @return the resource (never null). */
  [[nodiscard]] device_memory_resource* resource() const noexcept { return resource_; }
  /** @brief RMM's name for resource(). */
  [[nodiscard]] device_memory_resource* get_upstream_resource() const noexcept { return resource_; }

 private:
  device_memory_resource* resource_;
};

template <class T, class U>
[[nodiscard]] bool operator==(polymorphic_allocator<T> const& a, polymorphic_allocator<U> const& b) noexcept
{
  return a.resource()->is_equal(*b.resource());
}

/**
 * @brief A standard Allocator over a stream-ordered one (such as polymorphic_allocator): every
 * allocate(n) and deallocate(p, n) goes to the underlying allocator with the bound stream.
 * Equality: equal underlying allocators and the same stream.
 */
template <class Allocator>
class stream_allocator_adaptor {
 public:
  using value_type = typename std::allocator_traits<Allocator>::value_type;

  template <class U>
  struct rebind {
    using other = stream_allocator_adaptor<typename std::allocator_traits<Allocator>::template rebind_alloc<U>>;
  };

  stream_allocator_adaptor(Allocator const& allocator, cuda_stream_view stream) : allocator_{allocator}, stream_{stream} {}

  template <class Other>
  stream_allocator_adaptor(stream_allocator_adaptor<Other> const& other)  // NOLINT(google-explicit-constructor)
    : allocator_{other.underlying_allocator()}, stream_{other.stream()}
  {
  }

  /**
   * @return storage for n objects, allocated on the bound stream (for a type the underlying allocator can
   * align). @throws as the underlying allocator.
   */
  [[nodiscard]] value_type* allocate(std::size_t n)
    requires requires(Allocator a, std::size_t count, cuda_stream_view s) { a.allocate(count, s); }
  {
    return allocator_.allocate(n, stream_);
  }
  void deallocate(value_type* p, std::size_t n) noexcept { allocator_.deallocate(p, n, stream_); }

  [[nodiscard]] cuda_stream_view stream() const noexcept { return stream_; }
  [[nodiscard]] Allocator underlying_allocator() const noexcept { return allocator_; }

 private:
  Allocator allocator_;
  cuda_stream_view stream_;
};

template <class A, class B>
[[nodiscard]] bool operator==(stream_allocator_adaptor<A> const& a, stream_allocator_adaptor<B> const& b) noexcept
{
  return a.underlying_allocator() == b.underlying_allocator() && a.stream().value() == b.stream().value();
}

/** @return a stream_allocator_adaptor binding `stream` to `allocator`. */
template <class Allocator>
[[nodiscard]] stream_allocator_adaptor<Allocator> make_stream_allocator_adaptor(Allocator const& allocator,
                                                                                cuda_stream_view stream)
{
  return stream_allocator_adaptor<Allocator>{allocator, stream};
}

}  // namespace gpumem::mr
