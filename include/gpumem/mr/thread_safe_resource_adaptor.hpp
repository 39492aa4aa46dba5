/**
 * @file thread_safe_resource_adaptor.hpp
 * An adaptor that makes any resource safe to share between threads by holding one mutex around every call
 * to it (RMM's thread_safe_resource_adaptor). All of gpumem's own resources are thread-safe already: this
 * is for an application's resource that is not.
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/resource_adaptor_base.hpp>

#include <cstddef>
#include <mutex>

namespace gpumem::mr {

/**
 * @brief Forwards to an upstream resource with one mutex held around each allocate and deallocate.
 * Thread-safety: all members may be called concurrently; the upstream sees one call at a time.
 * Stream-ordering: as the upstream's.
 * Equality: equal to another thread_safe_resource_adaptor whose upstream is equal to this one's.
 */
class GPUMEM_EXPORT thread_safe_resource_adaptor final : public resource_adaptor_base {
 public:
  /** @throws gpumem::logic_error if `upstream` is null. */
  explicit thread_safe_resource_adaptor(device_memory_resource* upstream);

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;

  std::mutex mutex_;  // held around every call to the upstream
};

}  // namespace gpumem::mr
