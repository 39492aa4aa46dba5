// prefetch (prefetch.hpp): managed memory stays usable after a prefetch to its device, the prefetch is ordered
// on its stream and does not wait for it (held back by a gate: host backend), and bad arguments are
// logic errors naming what is wrong.
#include "support/gate.hpp"
#include "support/memory_checks.hpp"

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/cuda_stream.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/managed_memory_resource.hpp>
#include <gpumem/prefetch.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <string>

namespace gpumem::test {
namespace {

constexpr std::size_t bytes = std::size_t{1} << 20;

TEST(prefetch, managed_memory_is_usable_after_a_prefetch_to_its_device)
{
  mr::managed_memory_resource managed;
  cuda_stream stream;
  void* const p = managed.allocate(bytes, stream);
  write_pattern(p, bytes, 5, stream.value());
  prefetch(p, bytes, get_current_cuda_device(), stream);
  EXPECT_TRUE(has_pattern(p, bytes, 5, stream.value()));
  prefetch(p, 0, get_current_cuda_device(), stream);  // nothing to move
  prefetch(nullptr, 0, get_current_cuda_device(), stream);
  stream.synchronize();
  managed.deallocate(p, bytes, stream);
}

TEST(prefetch, is_ordered_on_its_stream_and_does_not_wait_for_it)
{
  if (!on_host_backend()) { GTEST_SKIP() << "a gate on a GPU stream would also hold the prefetch; host only"; }
  mr::managed_memory_resource managed;
  cuda_stream stream;
  void* const p = managed.allocate(bytes, stream);
  gate held;
  held.hold(stream.value());
  prefetch(p, bytes, get_current_cuda_device(), stream);  // returns at once: the prefetch is queued
  EXPECT_FALSE(stream.is_idle()) << "the gate and the prefetch are still pending";
  held.release();
  stream.synchronize();
  EXPECT_TRUE(stream.is_idle());
  managed.deallocate(p, bytes, stream);
}

TEST(prefetch, bad_arguments_are_logic_errors)
{
  mr::managed_memory_resource managed;
  cuda_stream stream;
  void* const p = managed.allocate(256, stream);
  try {
    prefetch(p, 256, cuda_device_id{get_num_cuda_devices()}, stream);
    ADD_FAILURE() << "a device that does not exist was accepted";
  } catch (logic_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("does not exist"), std::string::npos) << e.what();
  }
  EXPECT_THROW(prefetch(nullptr, 256, get_current_cuda_device(), stream), logic_error);
  stream.synchronize();
  managed.deallocate(p, 256, stream);
}

}  // namespace
}  // namespace gpumem::test
