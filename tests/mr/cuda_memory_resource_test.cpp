// cuda_memory_resource: the conformance battery, plus its own behaviour (equality by type, the current
// device, the out-of-memory message, waiting for the stream before cudaFree).
#include "conformance/resource_battery.hpp"
#include "support/memory_checks.hpp"
#include "support/upstream_checks.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/cuda_device_id.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/managed_memory_resource.hpp>
#include <gpumem/mr/pinned_host_memory_resource.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace gpumem::test {
namespace {

struct cuda_resource_factory {
  static std::unique_ptr<mr::device_memory_resource> make() { return std::make_unique<mr::cuda_memory_resource>(); }
  static constexpr char const* name = "cuda_memory_resource";
  static constexpr bool oversubscription_safe = true;
};

#ifdef GPUMEM_HAS_CUDA_MR
static_assert(cuda::mr::async_resource_with<mr::cuda_memory_resource, cuda::mr::device_accessible>);
static_assert(!cuda::mr::async_resource_with<mr::cuda_memory_resource, cuda::mr::host_accessible>,
              "device memory must not claim to be host-accessible");
#endif

}  // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(cuda_memory_resource, resource_battery, cuda_resource_factory);

namespace {

TEST(cuda_memory_resource, any_two_instances_are_equal_and_free_each_others_memory)
{
  mr::cuda_memory_resource a;
  mr::cuda_memory_resource b;
  EXPECT_TRUE(a.is_equal(b));
  EXPECT_TRUE(a == b);
  void* p = a.allocate(1000);
  b.deallocate(p, 1000);  // equal resources may free each other's memory

  mr::managed_memory_resource managed;
  mr::pinned_host_memory_resource pinned;
  mr::simulated_memory_resource simulated;
  EXPECT_FALSE(a.is_equal(managed));
  EXPECT_FALSE(a.is_equal(pinned));
  EXPECT_FALSE(a.is_equal(simulated));
  EXPECT_FALSE(managed.is_equal(a));
}

TEST(cuda_memory_resource, out_of_memory_message_names_resource_size_device_free_and_total)
{
  mr::cuda_memory_resource r;
  detail::backend& backend = detail::get_backend();
  int const device = backend.current_device();
  memory_info const before = backend.mem_info(device);
  std::size_t const request = before.total + 256;
  try {
    (void)r.allocate(request);
    FAIL() << "a request larger than the device's total memory was served";
  } catch (out_of_memory const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find("cuda_memory_resource"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(request)), std::string::npos) << what;
    EXPECT_NE(what.find("device " + std::to_string(device)), std::string::npos) << what;
    EXPECT_NE(what.find(format_bytes(before.total)), std::string::npos) << what;
    EXPECT_NE(what.find("free"), std::string::npos) << what;
  }
}

TEST(cuda_memory_resource, allocation_takes_memory_from_the_current_device_and_returns_it)
{
  mr::cuda_memory_resource r;
  detail::backend& backend = detail::get_backend();
  int const device = backend.current_device();
  constexpr std::size_t bytes = std::size_t{64} << 20;
  std::size_t const free_before = backend.mem_info(device).free;
  void* p = r.allocate(bytes);
  std::size_t const free_during = backend.mem_info(device).free;
  EXPECT_GE(free_before - std::min(free_before, free_during), bytes) << "the device's free memory did not drop";
  r.deallocate(p, bytes);
  if (backend.kind() == backend_kind::host) {  // exact accounting; a real GPU has other tenants
    EXPECT_EQ(backend.mem_info(device).free, free_before);
  }
}

TEST(cuda_memory_resource, allocates_on_whichever_device_is_current)
{
  detail::backend& backend = detail::get_backend();
  if (backend.device_count() < 2) { GTEST_SKIP() << "needs two devices (host backend: GPUMEM_HOST_DEVICES=2)"; }
  mr::cuda_memory_resource r;
  constexpr std::size_t bytes = std::size_t{32} << 20;
  std::size_t const free0 = backend.mem_info(0).free;
  std::size_t const free1 = backend.mem_info(1).free;
  cuda_set_device_raii const on_one{cuda_device_id{1}};
  void* p = r.allocate(bytes);
  EXPECT_GE(free1 - std::min(free1, backend.mem_info(1).free), bytes) << "device 1's free memory did not drop";
  if (backend.kind() == backend_kind::host) { EXPECT_EQ(backend.mem_info(0).free, free0); }
  r.deallocate(p, bytes);
}

TEST(cuda_memory_resource, deallocate_waits_for_the_work_on_its_stream)
{
  mr::cuda_memory_resource r;
  expect_deallocate_waits_for_stream_work(r);
}

}  // namespace
}  // namespace gpumem::test
