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
 * Deallocations the adaptor cannot match, as RMM: deallocate is noexcept, so they cannot throw.
 * - A pointer the adaptor did not hand out (memory allocated from the upstream directly, or through another
 *   adaptor over it, before tracking began; or a pointer already taken back) is forwarded to the upstream
 *   as given, so memory freed through a wrapping adaptor is not leaked. It is counted in
 *   untracked_deallocations() and described in the log (warning level) the first time only; whether the
 *   upstream accepts it is the upstream's business (a double free is the upstream's to detect).
 * - A known pointer given back with a size other than its allocation's is taken back and forwarded with
 *   the size it was allocated with; it is counted in invalid_deallocations() and described in the log
 *   (error level) the first time only.
 * checked_deallocate() (the strict form, which the Python package uses) forwards neither: each throws
 * gpumem::logic_error and changes nothing, since the adaptor cannot tell a double free from the upstream's
 * own memory (both count in invalid_deallocations()).
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
  /** @return deallocations with a wrong size, and those checked_deallocate() refused (see the class comment). */
  [[nodiscard]] std::size_t invalid_deallocations() const noexcept;
  /** @return deallocations of pointers the adaptor did not hand out, forwarded to the upstream. */
  [[nodiscard]] std::size_t untracked_deallocations() const noexcept;
  /**
   * @return a human-readable list of the outstanding allocations: a summary line, then one line per
   * allocation (pointer, size, stream) followed by its stack, if captured. "no outstanding allocations"
   * when there are none.
   */
  [[nodiscard]] std::string report() const;
  /** @brief RMM's name for allocated_bytes(). */
  [[nodiscard]] std::size_t get_allocated_bytes() const noexcept { return allocated_bytes(); }
  /** @brief RMM's name for report() (the text differs from RMM's: see report()). */
  [[nodiscard]] std::string get_outstanding_allocations_str() const { return report(); }
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
  std::size_t untracked_deallocations_ GPUMEM_GUARDED_BY(mutex_){0};
};

}  // namespace gpumem::mr
