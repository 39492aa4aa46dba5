/**
 * @file failure_callback_resource_adaptor.hpp
 * An adaptor that, when its upstream runs out of memory, calls back into the application (which may free
 * memory: drop caches, spill to host, collect garbage) and retries while the callback says so (RMM's
 * failure_callback_resource_adaptor).
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/resource_adaptor_base.hpp>

#include <cstddef>
#include <functional>

namespace gpumem::mr {

/**
 * @brief The callback of failure_callback_resource_adaptor: called with the failed request's size and the
 * argument given at construction; returns true to have the allocation retried, false to let it fail.
 */
using failure_callback_t = std::function<bool(std::size_t bytes, void* arg)>;

/**
 * @brief Forwards to an upstream resource; when the upstream throws gpumem::out_of_memory, calls the
 * callback and retries as long as it returns true (it is called again after each failed retry, so a
 * callback that always returns true without freeing memory loops forever: count attempts in `arg`).
 *
 * Thread-safety: as the upstream's and the callback's: the adaptor has no state of its own, and the
 * callback may run on several threads at once.
 * Stream-ordering: as the upstream's.
 * Equality: equal to another failure_callback_resource_adaptor whose upstream is equal to this one's.
 */
class GPUMEM_EXPORT failure_callback_resource_adaptor final : public resource_adaptor_base {
 public:
  /**
   * @param upstream the resource to forward to.
   * @param callback called on each out_of_memory (see the class comment).
   * @param arg      passed to the callback as is.
   * @throws gpumem::logic_error if `upstream` is null or `callback` is empty.
   */
  failure_callback_resource_adaptor(device_memory_resource* upstream, failure_callback_t callback, void* arg);

 private:
  /**
   * @throws gpumem::out_of_memory (the upstream's last one) when the callback returns false;
   *         whatever the upstream or the callback throws otherwise.
   */
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;

  failure_callback_t callback_;
  void* arg_;
};

}  // namespace gpumem::mr
