// cuda_async_managed_memory_resource: the conformance battery over the device's default managed pool (skipped
// with the reason where CUDA 13 or concurrent managed access is missing), then what makes it managed: the
// memory migrates (prefetch() and the prefetch adaptor accept it), is shared by every such resource of the
// device (equality), is reused stream-ordered, and a missing capability is a clear cuda_error.
#include "conformance/resource_battery.hpp"
#include "support/gate.hpp"
#include "support/memory_checks.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/cuda_stream.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/cuda_async_managed_memory_resource.hpp>
#include <gpumem/mr/cuda_async_memory_resource.hpp>
#include <gpumem/mr/prefetch_resource_adaptor.hpp>
#include <gpumem/prefetch.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

namespace gpumem::test {
namespace {

/// Why the current device has no managed memory pool, or "" when it has one.
std::string managed_pool_unsupported()
{
  try {
    (void)mr::default_managed_memory_pool(get_current_cuda_device());
    return {};
  } catch (cuda_error const& e) {
    if (e.code() != cudaErrorNotSupported) { throw; }
    return e.what();
  }
}

struct managed_async_factory {
  static std::unique_ptr<mr::device_memory_resource> make()
  {
    return std::make_unique<mr::cuda_async_managed_memory_resource>();
  }
  static std::optional<std::string> unsupported()
  {
    std::string why = managed_pool_unsupported();
    return why.empty() ? std::nullopt : std::optional<std::string>{std::move(why)};
  }
  static constexpr char const* name = "cuda_async_managed_memory_resource";
  static constexpr bool oversubscription_safe = false;  // managed memory may page instead of failing
};

}  // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(cuda_async_managed_memory_resource, resource_battery, managed_async_factory);

namespace {

class CudaAsyncManagedTest : public ::testing::Test {
 protected:
  void SetUp() override
  {
    std::string const why = managed_pool_unsupported();
    if (!why.empty()) { GTEST_SKIP() << why; }
  }
};

TEST_F(CudaAsyncManagedTest, the_memory_is_managed_and_migrates)
{
  mr::cuda_async_managed_memory_resource managed;
  cuda_stream stream;
  constexpr std::size_t bytes = std::size_t{1} << 20;
  void* const p = managed.allocate(bytes, stream);
  detail::backend& backend = detail::get_backend();
  EXPECT_TRUE(backend.is_migratable(p, backend.current_device()));
  EXPECT_TRUE(backend.is_migratable(p, cudaCpuDeviceId));
  write_pattern(p, bytes, 4, stream.value());
  prefetch(p, bytes, get_current_cuda_device(), stream);
  EXPECT_NO_THROW(backend.mem_prefetch_async(p, bytes, backend.current_device(), stream.value()))
    << "the backend call itself accepts it: it is managed memory";
  prefetch(p, bytes, cuda_device_id{cudaCpuDeviceId}, stream);
  EXPECT_TRUE(has_pattern(p, bytes, 4, stream.value()));
  managed.deallocate(p, bytes, stream);
  stream.synchronize();
}

TEST_F(CudaAsyncManagedTest, under_the_prefetch_adaptor)
{
  mr::cuda_async_managed_memory_resource managed;
  mr::prefetch_resource_adaptor prefetching{&managed};
  cuda_stream stream;
  void* const p = prefetching.allocate(65536, stream);
  write_pattern(p, 65536, 8, stream.value());
  EXPECT_TRUE(has_pattern(p, 65536, 8, stream.value()));
  prefetching.deallocate(p, 65536, stream);
  stream.synchronize();
}

TEST_F(CudaAsyncManagedTest, every_resource_of_a_device_shares_the_default_managed_pool)
{
  mr::cuda_async_managed_memory_resource a;
  mr::cuda_async_managed_memory_resource b;
  EXPECT_EQ(a.pool_handle(), b.pool_handle());
  EXPECT_EQ(a.pool_handle(), mr::default_managed_memory_pool(get_current_cuda_device()));
  EXPECT_TRUE(a.is_equal(b));
  mr::cuda_async_view_memory_resource view{a.pool_handle(), get_current_cuda_device()};
  EXPECT_TRUE(a.is_equal(view));
  mr::cuda_async_memory_resource device_pool;
  EXPECT_FALSE(a.is_equal(device_pool));
  EXPECT_NE(a.pool_handle(), mr::default_memory_pool(get_current_cuda_device())) << "not the device-memory pool";
  void* const p = a.allocate(4096);
  b.deallocate(p, 4096);  // equal resources free each other's memory
  cuda_stream_default.synchronize();
}

TEST_F(CudaAsyncManagedTest, memory_freed_on_a_stream_is_reused_on_that_stream)
{
  mr::cuda_async_managed_memory_resource managed;
  cuda_stream stream;
  void* const first = managed.allocate(8192, stream);
  managed.deallocate(first, 8192, stream);
  void* const second = managed.allocate(8192, stream);
  EXPECT_EQ(second, first) << "stream-ordered reuse on the freeing stream";
  // While the block is held: once it is freed, a pool whose release threshold is 0 (CUDA's default) may give
  // its memory back to the system at any synchronisation.
  EXPECT_GE(managed.usage().reserved_current, std::size_t{8192});
  managed.deallocate(second, 8192, stream);
  stream.synchronize();
}

TEST(cuda_async_managed_memory_resource, a_device_that_does_not_exist_is_a_logic_error)
{
  EXPECT_THROW((void)mr::default_managed_memory_pool(cuda_device_id{get_num_cuda_devices()}), logic_error);
}

TEST(cuda_async_managed_memory_resource, missing_support_is_a_clear_cuda_error)
{
  std::string const why = managed_pool_unsupported();
  if (why.empty()) {
    EXPECT_NO_THROW(mr::cuda_async_managed_memory_resource{});
    if (on_host_backend()) { SUCCEED() << "the host backend emulates the managed pool"; }
    return;
  }
  try {
    mr::cuda_async_managed_memory_resource managed;
    ADD_FAILURE() << "constructed without support";
  } catch (cuda_error const& e) {
    EXPECT_EQ(e.code(), cudaErrorNotSupported);
    EXPECT_NE(std::string{e.what()}.find("managed memory pool"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gpumem::test
