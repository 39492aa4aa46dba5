// managed_memory_resource: the conformance battery (out-of-memory on the host backend only, see
// oversubscription_safe), plus host access and equality.
#include "conformance/resource_battery.hpp"
#include "support/memory_checks.hpp"
#include "support/upstream_checks.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/managed_memory_resource.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <memory>

namespace gpumem::test {
namespace {

struct managed_resource_factory {
  static std::unique_ptr<mr::device_memory_resource> make()
  {
    return std::make_unique<mr::managed_memory_resource>();
  }
  static constexpr char const* name = "managed_memory_resource";
  // cudaMallocManaged beyond the free device memory can page until the GPU stalls: never on a real GPU.
  static constexpr bool oversubscription_safe = false;
};

#ifdef GPUMEM_HAS_CUDA_MR
static_assert(cuda::mr::async_resource_with<mr::managed_memory_resource, cuda::mr::device_accessible,
                                            cuda::mr::host_accessible>);
static_assert(cuda::mr::resource_with<mr::managed_memory_resource, cuda::mr::host_accessible>);
#endif

}  // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(managed_memory_resource, resource_battery, managed_resource_factory);

namespace {

TEST(managed_memory_resource, memory_is_usable_from_the_host_and_through_the_backend)
{
  mr::managed_memory_resource r;
  backend_stream stream;
  constexpr std::size_t bytes = 10'000;
  auto* p = static_cast<unsigned char*>(r.allocate(bytes, stream.get()));
  ASSERT_NE(p, nullptr);
  // Host writes, stream reads.
  std::memset(p, 0x5A, bytes);
  EXPECT_TRUE(is_filled_with(p, bytes, 0x5A, stream.get()));
  // Stream writes, host reads (after synchronising the stream).
  write_pattern(p, bytes, 9, stream.get());
  for (std::size_t i = 0; i < bytes; ++i) {
    ASSERT_EQ(p[i], pattern_byte(9, i)) << "byte " << i;
  }
  r.deallocate(p, bytes, stream.get());
}

TEST(managed_memory_resource, instances_are_equal_to_each_other_only)
{
  mr::managed_memory_resource a;
  mr::managed_memory_resource b;
  mr::cuda_memory_resource device;
  EXPECT_TRUE(a == b);
  EXPECT_FALSE(a == device);
  EXPECT_FALSE(device == a);
}

TEST(managed_memory_resource, deallocate_waits_for_the_work_on_its_stream)
{
  mr::managed_memory_resource r;
  expect_deallocate_waits_for_stream_work(r);
}

}  // namespace
}  // namespace gpumem::test
