/**
 * @file failure_callback_resource_adaptor.hpp
 * An adaptor that, when its upstream fails with a chosen exception type (by default: runs out of memory),
 * calls back into the application (which may free memory: drop caches, spill to host, collect garbage) and
 * retries while the callback says so (RMM's failure_callback_resource_adaptor).
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/error.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/resource_adaptor_base.hpp>

#include <cstddef>
#include <functional>
#include <type_traits>
#include <utility>

namespace gpumem::mr {

/**
 * @brief The callback of failure_callback_resource_adaptor: called with the failed request's size and the
 * argument given at construction; returns true to have the allocation retried, false to let it fail.
 */
using failure_callback_t = std::function<bool(std::size_t bytes, void* arg)>;

/**
 * @brief Forwards to an upstream resource; when the upstream throws an `ExceptionType` (or a type derived
 * from it), calls the callback and retries as long as it returns true (it is called again after each failed
 * retry, so a callback that always returns true without freeing memory loops forever: count attempts in
 * `arg`). Any other exception passes through without calling the callback.
 *
 * `ExceptionType` is RMM's second template parameter: gpumem::out_of_memory by default (the memory is not
 * there); gpumem::bad_alloc or std::bad_alloc to retry on any failed allocation; std::exception on anything.
 *
 * Thread-safety: as the upstream's and the callback's: the adaptor has no state of its own, and the
 * callback may run on several threads at once.
 * Stream-ordering: as the upstream's.
 * Equality: equal to another adaptor of the same exception type whose upstream is equal to this one's.
 *
 * @tparam ExceptionType the type caught (by const reference); not a reference type.
 */
template <class ExceptionType = out_of_memory>
  requires(!std::is_reference_v<ExceptionType>)
class GPUMEM_EXPORT basic_failure_callback_resource_adaptor final : public resource_adaptor_base {
 public:
  using exception_type = ExceptionType;  ///< what the adaptor catches and, when the callback gives up, rethrows

  /**
   * @param upstream the resource to forward to.
   * @param callback called on each `ExceptionType` (see the class comment).
   * @param arg      passed to the callback as is.
   * @throws gpumem::logic_error if `upstream` is null or `callback` is empty.
   */
  basic_failure_callback_resource_adaptor(device_memory_resource* upstream, failure_callback_t callback, void* arg)
    : resource_adaptor_base{upstream}, callback_{std::move(callback)}, arg_{arg}
  {
    expects(static_cast<bool>(callback_), "the failure callback must not be empty");
  }

 private:
  /**
   * @throws ExceptionType (the upstream's last one) when the callback returns false; whatever the upstream
   *         or the callback throws otherwise.
   */
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    while (true) {
      try {
        return upstream_resource()->allocate(bytes, stream);
      } catch (exception_type const&) {
        if (!callback_(bytes, arg_)) { throw; }
      }
    }
  }

  failure_callback_t callback_;
  void* arg_;
};

/** @brief The adaptor that retries on gpumem::out_of_memory (RMM's default exception type). */
using failure_callback_resource_adaptor = basic_failure_callback_resource_adaptor<out_of_memory>;

}  // namespace gpumem::mr
