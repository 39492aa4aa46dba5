// pinned_host_memory_resource: the conformance battery, plus host access, equality and its out-of-memory
// message.
#include "conformance/resource_battery.hpp"
#include "support/memory_checks.hpp"
#include "support/upstream_checks.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/pinned_host_memory_resource.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>

namespace gpumem::test {
namespace {

/// Pinned memory is bounded by the host's physical memory, not the device's, so twice the device total
/// could succeed (and pin a large part of the host). One PiB cannot.
constexpr std::size_t impossible_pinned_request = std::size_t{1} << 50;

struct pinned_resource_factory {
  static std::unique_ptr<mr::device_memory_resource> make()
  {
    return std::make_unique<mr::pinned_host_memory_resource>();
  }
  static constexpr char const* name = "pinned_host_memory_resource";
  static constexpr bool oversubscription_safe = true;
  static std::size_t oom_request_bytes() { return impossible_pinned_request; }
};

#ifdef GPUMEM_HAS_CUDA_MR
static_assert(cuda::mr::async_resource_with<mr::pinned_host_memory_resource, cuda::mr::device_accessible,
                                            cuda::mr::host_accessible>);
#endif

}  // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(pinned_host_memory_resource, resource_battery, pinned_resource_factory);

namespace {

TEST(pinned_host_memory_resource, memory_is_host_memory_that_copies_reach)
{
  mr::pinned_host_memory_resource r;
  backend_stream stream;
  constexpr std::size_t bytes = 3 * 4096 + 5;
  auto* p = static_cast<unsigned char*>(r.allocate(bytes, stream.get()));
  ASSERT_NE(p, nullptr);
  std::memset(p, 0xC3, bytes);
  EXPECT_TRUE(is_filled_with(p, bytes, 0xC3, stream.get()));
  write_pattern(p, bytes, 21, stream.get());
  for (std::size_t i = 0; i < bytes; ++i) {
    ASSERT_EQ(p[i], pattern_byte(21, i)) << "byte " << i;
  }
  r.deallocate(p, bytes, stream.get());
}

TEST(pinned_host_memory_resource, instances_are_equal_to_each_other_only)
{
  mr::pinned_host_memory_resource a;
  mr::pinned_host_memory_resource b;
  mr::cuda_memory_resource device;
  EXPECT_TRUE(a == b);
  EXPECT_FALSE(a == device);
}

TEST(pinned_host_memory_resource, out_of_memory_says_pinned_memory_is_host_memory)
{
  mr::pinned_host_memory_resource r;
  try {
    (void)r.allocate(impossible_pinned_request);
    FAIL() << "one PiB of pinned memory was served";
  } catch (out_of_memory const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find("pinned_host_memory_resource"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(impossible_pinned_request)), std::string::npos) << what;
    EXPECT_NE(what.find("physical memory"), std::string::npos) << what;
  }
}

TEST(pinned_host_memory_resource, deallocate_waits_for_the_work_on_its_stream)
{
  mr::pinned_host_memory_resource r;
  expect_deallocate_waits_for_stream_work(r);
}

}  // namespace
}  // namespace gpumem::test
