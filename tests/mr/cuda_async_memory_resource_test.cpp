// cuda_async_memory_resource and cuda_async_view_memory_resource: the conformance battery over an owned pool
// and over the device's default pool, plus stream-ordered reuse, usage, trimming, thresholds and limits.
#include "conformance/resource_battery.hpp"
#include "support/gate.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/cuda_stream.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/cuda_async_memory_resource.hpp>
#include <gpumem/mr/cuda_async_view_memory_resource.hpp>

#include <gtest/gtest.h>

#include <array>
#include <thread>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace gpumem::test {
namespace {

struct cuda_async_factory {
  static std::unique_ptr<mr::device_memory_resource> make()
  {
    return std::make_unique<mr::cuda_async_memory_resource>();
  }
  static constexpr char const* name = "cuda_async_memory_resource";
  static constexpr bool oversubscription_safe = true;
};

struct default_pool_factory {
  static std::unique_ptr<mr::device_memory_resource> make()
  {
    return std::make_unique<mr::cuda_async_view_memory_resource>(
      mr::default_memory_pool(get_current_cuda_device()), get_current_cuda_device());
  }
  static constexpr char const* name = "cuda_async_view_memory_resource";
  static constexpr bool oversubscription_safe = true;
};

}  // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(cuda_async_memory_resource, resource_battery, cuda_async_factory);
INSTANTIATE_TYPED_TEST_SUITE_P(cuda_async_view_memory_resource, resource_battery, default_pool_factory);

namespace {

constexpr std::size_t mib = std::size_t{1} << 20;

std::vector<std::uint8_t> read_back(void const* device, std::size_t bytes, cuda_stream_view stream)
{
  std::vector<std::uint8_t> host(bytes);
  detail::get_backend().memcpy_async(host.data(), device, bytes, stream.value());
  stream.synchronize();
  return host;
}

TEST(cuda_async_memory_resource, memory_freed_on_a_stream_with_pending_work_is_safe_for_another_stream)
{
  // Stream A's memset into p is held back by a gate; p is freed on A, then B allocates and writes. Whatever
  // the pool does (a different block, or the same block behind a dependency on A's free), B's write must
  // be the last one: a pool that handed p to B without waiting would let A's late memset overwrite it.
  mr::cuda_async_memory_resource resource;
  cuda_stream a{cuda_stream::flags::non_blocking};
  cuda_stream b{cuda_stream::flags::non_blocking};
  gate held;
  void* p = resource.allocate(mib, a);
  held.hold(a.value());
  detail::get_backend().memset_async(p, 0xAA, mib, a.value());
  resource.deallocate(p, mib, a);
  void* q = resource.allocate(mib, b);
  if (on_host_backend()) {
    EXPECT_NE(q, p) << "the emulated pool reused a block whose free had not completed on another stream";
  }
  detail::get_backend().memset_async(q, 0xBB, mib, b.value());
  held.release();
  a.synchronize();
  EXPECT_EQ(read_back(q, mib, b), std::vector<std::uint8_t>(mib, 0xBB));
  resource.deallocate(q, mib, b);
  b.synchronize();
}

TEST(cuda_async_memory_resource, same_stream_reuse_and_usage)
{
  mr::cuda_async_memory_resource resource;
  cuda_stream s;
  void* p = resource.allocate(4 * mib, s);
  mempool_usage const during = resource.usage();
  EXPECT_GE(during.used_current, 4 * mib);
  EXPECT_GE(during.reserved_current, during.used_current);
  resource.deallocate(p, 4 * mib, s);
  void* again = resource.allocate(4 * mib, s);
  if (on_host_backend()) { EXPECT_EQ(again, p) << "a block freed on a stream is reused at once on that stream"; }
  resource.deallocate(again, 4 * mib, s);
  s.synchronize();
  mempool_usage const after = resource.usage();
  EXPECT_EQ(after.used_current, 0U);
  EXPECT_GE(after.used_high, 4 * mib);
  EXPECT_GE(after.reserved_current, 4 * mib) << "the default release threshold keeps freed memory cached";
}

TEST(cuda_async_memory_resource, trim_returns_cached_memory_through_the_owner_or_a_view_of_its_pool)
{
  mr::cuda_async_memory_resource owner;
  mr::cuda_async_view_memory_resource view{owner.pool_handle(), get_current_cuda_device()};
  cuda_stream s;
  std::array<mr::cuda_async_view_memory_resource*, 2> const trimmers{&owner, &view};
  for (mr::cuda_async_view_memory_resource* const trimmer : trimmers) {
    SCOPED_TRACE(trimmer == &view ? "the view" : "the owner");
    void* p = trimmer->allocate(8 * mib, s);
    trimmer->deallocate(p, 8 * mib, s);
    s.synchronize();
    EXPECT_GE(owner.usage().reserved_current, 8 * mib);
    trimmer->trim(0);
    EXPECT_EQ(owner.usage().reserved_current, 0U);
  }
}

TEST(cuda_async_memory_resource, zero_release_threshold_returns_memory_at_synchronisation)
{
  mr::cuda_async_memory_resource resource{std::nullopt, std::size_t{0}};
  cuda_stream s;
  memory_info const before = detail::get_backend().mem_info(get_current_cuda_device().value());
  void* p = resource.allocate(64 * mib, s);
  resource.deallocate(p, 64 * mib, s);
  s.synchronize();
  resource.trim(0);  // CUDA releases at synchronisation points; trim makes the point explicit on both backends
  EXPECT_EQ(resource.usage().reserved_current, 0U);
  memory_info const after = detail::get_backend().mem_info(get_current_cuda_device().value());
  EXPECT_GE(after.free + 32 * mib, before.free) << "the memory did not go back to the device";
}

TEST(cuda_async_memory_resource, a_zero_threshold_keeps_completed_frees_until_a_synchronisation)
{
  if (!on_host_backend()) { GTEST_SKIP() << "the emulation's timing; CUDA documents the same rule"; }
  // CUDA: memory beyond the release threshold goes back "on the next call to stream, event or context
  // synchronize", never at a free; so a free's memory stays for the next allocation on its stream.
  mr::cuda_async_memory_resource resource{std::nullopt, std::size_t{0}};
  cuda_stream s;
  void* a = resource.allocate(8 * mib, s);
  void* b = resource.allocate(4 * mib, s);
  resource.deallocate(a, 8 * mib, s);
  while (!cuda_stream_view{s}.is_idle()) { std::this_thread::yield(); }  // a's free has completed: a query, no sync
  resource.deallocate(b, 4 * mib, s);  // a free: releases nothing, though a's free completed and the threshold is 0
  EXPECT_GE(resource.usage().reserved_current, 12 * mib);
  void* again = resource.allocate(8 * mib, s);
  EXPECT_EQ(again, a) << "a block freed on a stream is reused by that stream's next allocation";
  resource.deallocate(again, 8 * mib, s);
  s.synchronize();  // the synchronisation gives back what is beyond the threshold
  EXPECT_EQ(resource.usage().reserved_current, 0U);
}

TEST(cuda_async_memory_resource, initial_pool_size_is_reserved_up_front)
{
  mr::cuda_async_memory_resource resource{64 * mib};
  EXPECT_GE(resource.usage().reserved_current, 64 * mib);
  EXPECT_EQ(resource.usage().used_current, 0U);
}

TEST(cuda_async_memory_resource, maximum_pool_size_is_enforced_with_a_clear_message)
{
  mr::cuda_async_memory_resource resource{std::nullopt, std::nullopt, std::nullopt, 32 * mib};
  cuda_stream s;
  void* p = resource.allocate(16 * mib, s);
  try {
    void* q = resource.allocate(32 * mib, s);
    resource.deallocate(q, 32 * mib, s);
    ADD_FAILURE() << "an allocation beyond the pool's maximum succeeded";
  } catch (out_of_memory const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find("cuda_async_memory_resource"), std::string::npos) << what;
    EXPECT_NE(what.find("pool reserves"), std::string::npos) << what;
  }
  resource.deallocate(p, 16 * mib, s);
  s.synchronize();
}

TEST(cuda_async_memory_resource, initial_above_maximum_is_a_logic_error)
{
  try {
    mr::cuda_async_memory_resource resource{64 * mib, std::nullopt, std::nullopt, 32 * mib};
    FAIL() << "accepted an initial size above the maximum";
  } catch (logic_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("exceeds the maximum pool size"), std::string::npos) << e.what();
  }
}

TEST(cuda_async_view_memory_resource, equality_follows_the_pool)
{
  cudaMemPool_t const pool = mr::default_memory_pool(get_current_cuda_device());
  mr::cuda_async_view_memory_resource a{pool, get_current_cuda_device()};
  mr::cuda_async_view_memory_resource b{pool, get_current_cuda_device()};
  mr::cuda_async_memory_resource own;
  EXPECT_TRUE(a.is_equal(b));
  EXPECT_FALSE(a.is_equal(own));
  EXPECT_FALSE(own.is_equal(a));
  EXPECT_THROW((mr::cuda_async_view_memory_resource{nullptr, get_current_cuda_device()}), logic_error);
}

TEST(cuda_async_view_memory_resource, default_pool_with_maximum_release_threshold)
{
  cudaMemPool_t const pool = mr::default_memory_pool(get_current_cuda_device());
  std::uint64_t const original = detail::get_backend().mempool_release_threshold(pool);
  mr::set_release_threshold(pool, std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(detail::get_backend().mempool_release_threshold(pool), std::numeric_limits<std::uint64_t>::max());
  mr::set_release_threshold(pool, original);
  EXPECT_THROW(mr::set_release_threshold(nullptr, 0), logic_error);
}

TEST(cuda_async_memory_resource, the_fabric_handle_type_is_refused_clearly_where_the_device_lacks_it)
{
  using handle = mr::cuda_async_memory_resource::allocation_handle_type;
  detail::backend& backend = detail::get_backend();
  int const device = backend.current_device();
  if (backend.properties(device).fabric_handles_supported) {
    try {
      mr::cuda_async_memory_resource r{std::nullopt, std::nullopt, handle::fabric};
      void* const p = r.allocate(4096);
      r.deallocate(p, 4096);
    } catch (cuda_error const& e) {  // the device has fabric handles, but the system may not serve them
      std::string const what = e.what();
      EXPECT_NE(what.find("device " + std::to_string(device)), std::string::npos) << what;
      EXPECT_NE(what.find("fabric"), std::string::npos) << what;
    }
    return;
  }
  try {
    mr::cuda_async_memory_resource r{std::nullopt, std::nullopt, handle::fabric};
    FAIL() << "a fabric pool was made on a device without fabric handles";
  } catch (cuda_error const& e) {
    EXPECT_EQ(e.code(), cudaErrorNotSupported);
    std::string const what = e.what();
    EXPECT_NE(what.find("device " + std::to_string(device)), std::string::npos) << what;
    EXPECT_NE(what.find("fabric"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace gpumem::test
