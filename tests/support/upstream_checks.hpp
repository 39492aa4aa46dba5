// Checks shared by the tests of the upstream resources (cuda, managed, pinned), which return memory to the
// runtime at once and therefore must wait for the deallocation stream's work first.
#pragma once

#include "support/gate.hpp"
#include "support/memory_checks.hpp"

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace gpumem::test {

/// deallocate(p, bytes, stream) must not return (and free) while work submitted to `stream` is pending.
/// The stream is held back by a gate and deallocate runs on another thread: it must still be blocked 100 ms
/// later, and return once the gate opens. (The pending work does not touch p, so a failing resource makes
/// this test fail cleanly instead of corrupting the heap.)
inline void expect_deallocate_waits_for_stream_work(mr::device_memory_resource& resource)
{
  constexpr std::size_t bytes = 1U << 16;
  backend_stream stream;
  cuda_stream_view const s{stream.get()};
  void* p = resource.allocate(bytes, s);
  gate held;
  held.hold(stream.get());
  std::atomic<bool> returned{false};
  std::thread deallocating{[&] {
    resource.deallocate(p, bytes, s);
    returned.store(true);
  }};
  std::this_thread::sleep_for(std::chrono::milliseconds{100});
  EXPECT_FALSE(returned.load()) << "deallocate returned while work on its stream was still pending";
  held.release();
  deallocating.join();
  EXPECT_TRUE(returned.load());
}

}  // namespace gpumem::test
