/**
 * @file resource_adaptor_base.hpp
 * What every adaptor shares, written once: it holds a non-null upstream, names it, cannot be copied or
 * moved, forwards allocate and deallocate to it, and is equal to an adaptor of the same type whose upstream
 * is equal to its own. An adaptor derives from it and overrides only the calls its one concern changes.
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <cstddef>

namespace gpumem::mr {

/**
 * @brief The base of gpumem's adaptors (and of an application's own): a device_memory_resource that forwards
 * every call to an upstream resource, which must outlive it.
 *
 * The non-blocking calls (try_allocate_without_blocking, try_deallocate_without_blocking) are not forwarded:
 * an adaptor that did so would bypass its own concern (a lock, a count, a log row), so they keep the default
 * of device_memory_resource (nothing is done without blocking) unless an adaptor overrides them itself.
 *
 * Cost: what the base forwards costs one virtual call into the upstream, no lock.
 * Thread-safety: the base has no state besides the upstream pointer, fixed at construction; a derived
 * adaptor states its own.
 * Stream-ordering: as the upstream's (the stream is passed on as given).
 * Equality: equal to an adaptor of the same dynamic type whose upstream is equal to this one's; an adaptor
 * with parameters of its own extends do_is_equal to compare them too.
 */
class GPUMEM_EXPORT resource_adaptor_base : public device_memory_resource {
 public:
  ~resource_adaptor_base() override = default;
  resource_adaptor_base(resource_adaptor_base const&) = delete;
  resource_adaptor_base(resource_adaptor_base&&) = delete;
  resource_adaptor_base& operator=(resource_adaptor_base const&) = delete;
  resource_adaptor_base& operator=(resource_adaptor_base&&) = delete;

  /** @return the resource this adaptor forwards to. */
  [[nodiscard]] device_memory_resource* upstream_resource() const noexcept { return upstream_; }

 protected:
  /**
   * @param upstream the resource to forward to; it must outlive the adaptor.
   * @throws gpumem::logic_error if `upstream` is null.
   */
  explicit resource_adaptor_base(device_memory_resource* upstream);

  /** @brief upstream_resource()->allocate(bytes, stream). @throws what the upstream throws. */
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  /** @brief upstream_resource()->deallocate(ptr, bytes, stream). */
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;
  /** @brief upstream_resource()->shareable(ptr, bytes): the memory is the upstream's. */
  [[nodiscard]] shareable_memory do_shareable(void const* ptr, std::size_t bytes) const override;
  /** @return whether `other` has this adaptor's dynamic type and an upstream equal to this one's. */
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override;

 private:
  device_memory_resource* const upstream_;
};

}  // namespace gpumem::mr
