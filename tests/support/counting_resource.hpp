// A test double: a device_memory_resource that forwards to an upstream resource (by default the current
// device's resource) and records every call, so tests can check that a container returns every allocation,
// with the size it was allocated with, on the stream it should. The counts of calls and bytes are the
// library's statistics_resource_adaptor's, which sits between the double and the upstream. It also fails on
// request (an allocation larger than a limit throws gpumem::out_of_memory before reaching the upstream) so
// that out-of-memory paths can be exercised at small sizes.
#pragma once

#include <gpumem/backend/backend.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/per_device_resource.hpp>
#include <gpumem/mr/statistics_resource_adaptor.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace gpumem::test {

/**
 * @brief Forwards to an upstream resource, counts allocations and deallocations (calls and bytes) and records
 * each call. Equal only to itself.
 * Thread-safety: all members may be called concurrently (one mutex guards the records).
 */
class counting_resource final : public mr::device_memory_resource {
 public:
  /** @brief One deallocate call as it was made, and the device that was current during it. */
  struct deallocation {
    void* ptr;
    std::size_t bytes;
    cuda_stream_view stream;
    int device;
  };

  explicit counting_resource(mr::device_memory_resource* upstream = mr::get_current_device_resource())
    : counted_{upstream}
  {
  }

  /** @brief Allocations above `bytes` throw gpumem::out_of_memory without reaching the upstream. */
  void set_limit(std::size_t bytes)
  {
    std::lock_guard const lock{mutex_};
    limit_ = bytes;
  }

  [[nodiscard]] std::size_t allocations() const { return total(counted_.get_allocations_counter()); }
  [[nodiscard]] std::size_t deallocations() const { return returned(counted_.get_allocations_counter()); }
  [[nodiscard]] std::size_t bytes_allocated() const { return total(counted_.get_bytes_counter()); }
  [[nodiscard]] std::size_t bytes_deallocated() const { return returned(counted_.get_bytes_counter()); }
  /** @return allocations not yet returned (0 when everything was given back). */
  [[nodiscard]] std::size_t outstanding() const { return locked([this] { return live_.size(); }); }
  /** @return every deallocate call so far, in order. */
  [[nodiscard]] std::vector<deallocation> deallocation_log() const { return locked([this] { return deallocations_; }); }
  /** @return the device that was current during each allocate call, in order. */
  [[nodiscard]] std::vector<int> allocation_devices() const { return locked([this] { return allocation_devices_; }); }
  /** @return deallocate calls whose pointer was not outstanding or whose size differed from the allocation's. */
  [[nodiscard]] std::vector<std::string> errors() const { return locked([this] { return errors_; }); }

  /// Expects that everything allocated was returned, with the size it was allocated with, and nothing
  /// twice (the fixtures of the container tests call this after every test).
  void expect_everything_returned() const
  {
    EXPECT_EQ(outstanding(), 0U);
    EXPECT_EQ(allocations(), deallocations());
    EXPECT_EQ(bytes_allocated(), bytes_deallocated());
    EXPECT_TRUE(errors().empty()) << errors().front();
  }

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    {
      std::lock_guard const lock{mutex_};
      if (bytes > limit_) {
        throw out_of_memory("counting_resource: " + std::to_string(bytes) + " bytes exceed the test limit of " +
                            std::to_string(limit_));
      }
    }
    void* const ptr = counted_.allocate(bytes, stream);
    int const device = current_device();
    std::lock_guard const lock{mutex_};
    allocation_devices_.push_back(device);
    live_[ptr] = bytes;
    return ptr;
  }

  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override
  {
    int const device = current_device();
    {
      std::lock_guard const lock{mutex_};
      deallocations_.push_back({ptr, bytes, stream, device});
      auto const it = live_.find(ptr);
      if (it == live_.end()) {
        errors_.push_back("deallocate of a pointer that is not outstanding");
      } else {
        if (it->second != bytes) {
          errors_.push_back("deallocate of " + std::to_string(bytes) + " bytes for an allocation of " +
                            std::to_string(it->second));
        }
        live_.erase(it);
      }
    }
    counted_.deallocate(ptr, bytes, stream);
  }

  /// The calling thread's current device, or -1 if the backend cannot say (deallocate must not throw).
  static int current_device() noexcept
  {
    try {
      return detail::get_backend().current_device();
    } catch (...) {
      return -1;
    }
  }

  using counter = mr::statistics_resource_adaptor::counter;
  static std::size_t total(counter const& c) noexcept { return static_cast<std::size_t>(c.total); }
  static std::size_t returned(counter const& c) noexcept { return static_cast<std::size_t>(c.total - c.current); }

  template <class F>
  auto locked(F f) const -> decltype(f())
  {
    std::lock_guard const lock{mutex_};
    return f();
  }

  mr::statistics_resource_adaptor counted_;  // over the upstream: the counts of calls and bytes
  mutable std::mutex mutex_;
  std::size_t limit_{std::numeric_limits<std::size_t>::max()};  // guarded by mutex_
  std::map<void*, std::size_t> live_;                           // guarded by mutex_: ptr -> bytes
  std::vector<deallocation> deallocations_;                     // guarded by mutex_
  std::vector<int> allocation_devices_;                         // guarded by mutex_
  std::vector<std::string> errors_;                             // guarded by mutex_
};

}  // namespace gpumem::test
