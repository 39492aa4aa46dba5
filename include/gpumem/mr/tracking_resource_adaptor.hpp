/**
 * @file tracking_resource_adaptor.hpp
 * An adaptor that remembers every allocation still outstanding (size, stream, and optionally the call
 * stack that made it), reports them on demand, and reports them to stderr as leaks when it is destroyed.
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/detail/thread_annotations.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/resource_adaptor_base.hpp>

#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace gpumem::mr {

/**
 * @brief Forwards to an upstream resource and tracks every outstanding allocation.
 *
 * Call stacks (capture_stacks = true) are captured with backtrace() (<execinfo.h>; C++23's <stacktrace> needs
 * a newer standard than gpumem's C++20) as raw return addresses, and symbolised only when they are asked for
 * (outstanding_allocations(), report(), the leak report): an allocation then costs a few microseconds (the
 * stack walk), so capture stacks to hunt a leak, not in production. Where <execinfo.h> is missing the stack is
 * empty.
 *
 * Invalid deallocations: deallocate is noexcept, so misuse cannot throw. A deallocation of a pointer the
 * adaptor did not hand out (or already took back), or with a size other than the allocation's, is counted
 * in invalid_deallocations(), described on stderr the first time only, and NOT forwarded: the upstream is
 * never given a pointer or size it could corrupt itself with (RMM forwards). A known pointer given back with
 * the wrong size therefore stays outstanding, and shows in the report.
 *
 * Thread-safety: all members may be called concurrently (one mutex guards the map; the upstream and stack
 * capture run outside it).
 * Stream-ordering: as the upstream's.
 * Equality: equal to another tracking_resource_adaptor whose upstream is equal to this one's.
 */
class GPUMEM_EXPORT tracking_resource_adaptor final : public resource_adaptor_base {
 public:
  /** @brief An outstanding allocation. */
  struct allocation_info {
    std::size_t bytes{};
    cuda_stream_view stream{};
    std::string stack;  ///< one frame a line; empty unless stacks are captured
  };

  /**
   * @param upstream       the resource to forward to.
   * @param capture_stacks capture the call stack of every allocation (see the class comment).
   * @throws gpumem::logic_error if `upstream` is null.
   */
  explicit tracking_resource_adaptor(device_memory_resource* upstream, bool capture_stacks = false);
  /** @brief Writes report() to stderr (a leak report) if any allocation is still outstanding. */
  ~tracking_resource_adaptor() override;

  /** @return the bytes of all outstanding allocations, as requested. */
  [[nodiscard]] std::size_t allocated_bytes() const noexcept;
  /** @return a copy of the outstanding allocations, by pointer. */
  [[nodiscard]] std::map<void*, allocation_info> outstanding_allocations() const;
  /** @return the number of outstanding allocations. */
  [[nodiscard]] std::size_t outstanding_count() const noexcept;
  /** @return deallocations that were not forwarded (see the class comment). */
  [[nodiscard]] std::size_t invalid_deallocations() const noexcept;
  /**
   * @return a human-readable list of the outstanding allocations: a summary line, then one line per
   * allocation (pointer, size, stream) followed by its stack, if captured. "no outstanding allocations"
   * when there are none.
   */
  [[nodiscard]] std::string report() const;
  /** @return whether stacks are captured. */
  [[nodiscard]] bool captures_stacks() const noexcept { return capture_stacks_; }

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;

  bool const capture_stacks_;
  /// What is kept per allocation: the stack as return addresses (symbolised on demand).
  struct record {
    std::size_t bytes{};
    cuda_stream_view stream{};
    std::vector<void*> frames;
  };

  mutable gpumem::detail::mutex mutex_;
  std::map<void*, record> outstanding_ GPUMEM_GUARDED_BY(mutex_);
  std::size_t allocated_bytes_ GPUMEM_GUARDED_BY(mutex_){0};  // sum of outstanding_'s bytes
  std::size_t invalid_deallocations_ GPUMEM_GUARDED_BY(mutex_){0};
};

}  // namespace gpumem::mr
