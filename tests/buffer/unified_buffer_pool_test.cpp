// unified_buffer_pool: a released buffer comes back as the very same object with the same memory, reused
// buffers are UNINITIALIZED, the "up to twice the size" rule, the statistics, max_cached_bytes (the oldest
// goes first), misuse, and many threads acquiring and releasing with their data checked.
#include <gpumem/backend/backend.hpp>
#include <gpumem/buffer/buffer_state.hpp>
#include <gpumem/buffer/unified_buffer.hpp>
#include <gpumem/buffer/unified_buffer_pool.hpp>
#include <gpumem/cuda_stream.hpp>
#include <gpumem/error.hpp>

#include "support/buffer_state_printer.hpp"
#include "support/counting_resource.hpp"
#include "support/device_bytes.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace gpumem {
namespace {

using test::counting_resource;
using test::device_read;
using test::pattern;
using u32 = std::uint32_t;

class UnifiedBufferPoolTest : public ::testing::TestWithParam<bool> {
 protected:
  void TearDown() override { device_.expect_everything_returned(); }

  [[nodiscard]] unified_options options() { return {.pinned = GetParam(), .device_resource = &device_}; }

  counting_resource device_;  // declared first: outlives the pools and buffers of a test
  cuda_stream stream_{cuda_stream::flags::non_blocking};
};

INSTANTIATE_TEST_SUITE_P(HostCopy, UnifiedBufferPoolTest, ::testing::Bool(),
                         [](auto const& param_info) { return param_info.param ? "pinned" : "pageable"; });

/// Gives `b` both copies, holding `data`.
void give_both_copies(unified_buffer<u32>& b, std::vector<u32> const& data, cuda_stream_view stream)
{
  std::ranges::copy(data, b.host().begin());
  b.sync_to_device(stream);
}

TEST_P(UnifiedBufferPoolTest, SameSizeGivesBackTheSameObjectAndMemory)
{
  unified_buffer_pool<u32> pool{options()};
  auto b = pool.acquire(1000);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->size(), 1000U);
  EXPECT_EQ(b->state(), buffer_state::UNINITIALIZED);
  give_both_copies(*b, pattern<u32>(1000, 1), stream_);
  auto const* object = b.get();
  auto const* host = b->host_view().data();
  auto const* device = b->device_view(stream_);
  pool.release(std::move(b));
  EXPECT_EQ(device_.deallocations(), 0U) << "a released buffer keeps its device copy";

  auto again = pool.acquire(1000);
  EXPECT_EQ(again.get(), object);
  EXPECT_EQ(again->size(), 1000U);
  EXPECT_EQ(again->state(), buffer_state::UNINITIALIZED);
  EXPECT_EQ(again->host().data(), host);
  EXPECT_EQ(again->device(stream_), device);
  EXPECT_EQ(device_.allocations(), 1U);
  EXPECT_EQ(again->is_pinned(), GetParam());
}

TEST_P(UnifiedBufferPoolTest, AReusedBufferHasNoData)
{
  unified_buffer_pool<u32> pool{options()};
  auto b = pool.acquire(500);
  b->copy_from(pattern<u32>(500, 2), stream_);
  (void)b->host_view();  // SYNCHRONIZED
  pool.release(std::move(b));
  auto again = pool.acquire(500);
  EXPECT_EQ(again->state(), buffer_state::UNINITIALIZED);
  std::vector<u32> out(500);
  EXPECT_THROW(again->copy_to(out, stream_), logic_error) << "the released contents are still readable";
  EXPECT_THROW(again->mark_device_dirty(), logic_error);
  auto const fresh = pattern<u32>(500, 3);
  again->copy_from(fresh, stream_);
  EXPECT_TRUE(device_is_current(again->state()) && !host_is_current(again->state()))
    << to_string(again->state());  // DEVICE_ONLY or DEVICE_DIRTY: the kept host memory holds no data
  EXPECT_TRUE(std::ranges::equal(again->host_view(), fresh));
  EXPECT_TRUE(std::ranges::equal(device_read(again->device_view(stream_), 500, stream_), fresh));
}

TEST_P(UnifiedBufferPoolTest, ALargerBufferUpToTwiceTheSizeIsShrunk)
{
  unified_buffer_pool<u32> pool{options()};
  auto b = pool.acquire(1000);
  give_both_copies(*b, pattern<u32>(1000, 4), stream_);
  auto const* object = b.get();
  auto const* host = b->host_view().data();
  pool.release(std::move(b));

  auto smaller = pool.acquire(500);  // exactly half: capacity is twice the request
  EXPECT_EQ(smaller.get(), object);
  EXPECT_EQ(smaller->size(), 500U);
  EXPECT_EQ(smaller->size_bytes(), 2000U);
  EXPECT_EQ(smaller->storage().capacity(), 4000U);
  EXPECT_EQ(smaller->state(), buffer_state::UNINITIALIZED);
  EXPECT_EQ(smaller->host().data(), host);
  auto const data = pattern<u32>(500, 5);
  std::ranges::copy(data, smaller->host().begin());
  smaller->sync_to_device(stream_);
  EXPECT_TRUE(std::ranges::equal(device_read(smaller->device_view(stream_), 500, stream_), data));
  std::vector<u32> out(500);
  smaller->copy_to(out, stream_);
  EXPECT_EQ(out, data);
  EXPECT_EQ(device_.allocations(), 1U);
  pool.release(std::move(smaller));
  EXPECT_EQ(pool.statistics().cached_bytes, 4000U) << "cached by capacity, not by size";
}

TEST_P(UnifiedBufferPoolTest, ABufferMoreThanTwiceTheSizeIsNotReused)
{
  unified_buffer_pool<u32> pool{options()};
  auto b = pool.acquire(1000);
  auto const* object = b.get();
  pool.release(std::move(b));
  auto small = pool.acquire(499);  // 4000 > 2 * 1996 bytes
  EXPECT_NE(small.get(), object);
  EXPECT_EQ(small->size(), 499U);
  EXPECT_EQ(small->storage().capacity(), 499U * sizeof(u32));
  auto larger = pool.acquire(1001);  // never a smaller one
  EXPECT_NE(larger.get(), object);
  EXPECT_EQ(pool.statistics().cached_buffers, 1U);
  EXPECT_EQ(pool.statistics().hits, 0U);
  EXPECT_EQ(pool.statistics().misses, 3U);
}

TEST_P(UnifiedBufferPoolTest, TheSmallestFittingBufferIsChosen)
{
  unified_buffer_pool<u32> pool{options()};
  auto big = pool.acquire(1500);
  auto mid = pool.acquire(1000);
  auto exact = pool.acquire(800);
  auto const* big_object = big.get();
  auto const* mid_object = mid.get();
  auto const* exact_object = exact.get();
  pool.release(std::move(big));
  pool.release(std::move(mid));
  pool.release(std::move(exact));
  auto first = pool.acquire(800);
  EXPECT_EQ(first.get(), exact_object);
  auto second = pool.acquire(800);
  EXPECT_EQ(second.get(), mid_object);
  auto third = pool.acquire(800);
  EXPECT_EQ(third.get(), big_object);
  EXPECT_EQ(third->size(), 800U);
}

TEST_P(UnifiedBufferPoolTest, StatisticsCountHitsMissesAndTheCache)
{
  unified_buffer_pool<u32> pool{options()};
  EXPECT_EQ(pool.statistics().hits, 0U);
  EXPECT_EQ(pool.statistics().misses, 0U);
  auto a = pool.acquire(100);
  auto b = pool.acquire(200);
  EXPECT_EQ(pool.statistics().misses, 2U);
  EXPECT_EQ(pool.statistics().cached_buffers, 0U);
  pool.release(std::move(a));
  pool.release(std::move(b));
  auto s = pool.statistics();
  EXPECT_EQ(s.cached_buffers, 2U);
  EXPECT_EQ(s.cached_bytes, 1200U);
  auto c = pool.acquire(150);  // the 200 one
  s = pool.statistics();
  EXPECT_EQ(s.hits, 1U);
  EXPECT_EQ(s.misses, 2U);
  EXPECT_EQ(s.cached_buffers, 1U);
  EXPECT_EQ(s.cached_bytes, 400U);
  pool.release(nullptr);  // ignored
  auto moved_from = pool.acquire(100);
  auto taker = std::move(*moved_from);
  pool.release(std::move(moved_from));  // moved-from: ignored
  s = pool.statistics();
  EXPECT_EQ(s.hits, 2U);
  EXPECT_EQ(s.cached_buffers, 0U);
  EXPECT_EQ(s.releases, 2U) << "null and moved-from buffers are not counted";
  pool.release(std::move(c));
  EXPECT_EQ(pool.statistics().releases, 3U);
  pool.clear();
  s = pool.statistics();
  EXPECT_EQ(s.cached_buffers, 0U);
  EXPECT_EQ(s.cached_bytes, 0U);
}

TEST_P(UnifiedBufferPoolTest, LoweringMaxCachedBytesEvictsTheOldestNow)
{
  unified_buffer_pool<u32> pool{options()};
  EXPECT_EQ(pool.max_cached_bytes(), 0U);
  std::vector<std::unique_ptr<unified_buffer<u32>>> buffers;
  for (int i = 0; i < 3; ++i) {
    buffers.push_back(pool.acquire(1000));
    buffers.back()->zeros(stream_);
  }
  auto const* newest = buffers.back().get();
  for (auto& b : buffers) { pool.release(std::move(b)); }
  EXPECT_EQ(pool.statistics().cached_bytes, 12000U);
  pool.set_max_cached_bytes(5000);
  EXPECT_EQ(pool.max_cached_bytes(), 5000U);
  EXPECT_EQ(pool.statistics().cached_buffers, 1U);
  EXPECT_EQ(device_.deallocations(), 2U) << "the two oldest free their memory at once";
  auto again = pool.acquire(1000);
  EXPECT_EQ(again.get(), newest);
  pool.set_max_cached_bytes(0);  // no limit
  pool.release(std::move(again));
  pool.release(pool.acquire(3000));
  EXPECT_EQ(pool.statistics().cached_buffers, 2U);
}

TEST_P(UnifiedBufferPoolTest, MaxCachedBytesEvictsTheOldest)
{
  unified_buffer_pool<u32> pool{options(), 3 * 4000};
  std::vector<std::unique_ptr<unified_buffer<u32>>> buffers;
  for (int i = 0; i < 4; ++i) {
    buffers.push_back(pool.acquire(1000));
    buffers.back()->zeros(stream_);  // each holds a device copy
  }
  std::vector<unified_buffer<u32> const*> objects;
  for (auto& b : buffers) { objects.push_back(b.get()); }
  for (auto& b : buffers) { pool.release(std::move(b)); }
  auto const s = pool.statistics();
  EXPECT_EQ(s.cached_buffers, 3U);
  EXPECT_EQ(s.cached_bytes, 12000U);
  EXPECT_EQ(device_.deallocations(), 1U) << "the evicted buffer frees its memory";

  std::set<unified_buffer<u32> const*> const newest{objects[1], objects[2], objects[3]};
  std::vector<std::unique_ptr<unified_buffer<u32>>> again;
  for (int i = 0; i < 3; ++i) {
    again.push_back(pool.acquire(1000));
    EXPECT_TRUE(newest.contains(again.back().get())) << "acquire " << i << " did not return a newest buffer";
  }
  EXPECT_EQ(pool.statistics().hits, 3U);
  for (auto& b : again) { pool.release(std::move(b)); }
  EXPECT_EQ(pool.statistics().cached_buffers, 3U);

  pool.release(pool.acquire(4000));  // larger than the whole cache: freed at once, evicting nothing
  EXPECT_EQ(pool.statistics().cached_buffers, 3U);
  EXPECT_EQ(pool.statistics().cached_bytes, 12000U);
}

TEST_P(UnifiedBufferPoolTest, ReleasingABufferWithOtherOptionsThrows)
{
  unified_buffer_pool<u32> pool{options()};
  unified_options other = options();
  other.pinned = !other.pinned;
  EXPECT_THROW(pool.release(std::make_unique<unified_buffer<u32>>(100, other)), logic_error);
  counting_resource elsewhere;
  unified_options other_resource = options();
  other_resource.device_resource = &elsewhere;
  auto b = std::make_unique<unified_buffer<u32>>(100, other_resource);
  b->zeros(stream_);
  EXPECT_THROW(pool.release(std::move(b)), logic_error);
  EXPECT_EQ(pool.statistics().cached_buffers, 0U);
  EXPECT_EQ(elsewhere.outstanding(), 0U) << "a refused buffer is destroyed";
}

TEST_P(UnifiedBufferPoolTest, ManyThreadsAcquireAndReleaseWithTheirOwnData)
{
  constexpr int threads = 8;
  constexpr int rounds = 40;
  std::vector<cuda_stream> streams(threads);  // outlive the pool: cached buffers keep their streams
  unified_buffer_pool<u32> pool{options()};
  std::atomic<int> failures{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937 rng{static_cast<unsigned>(t) + 1U};
      std::uniform_int_distribution<std::size_t> size{200, 700};
      auto const stream = streams[static_cast<std::size_t>(t)].view();
      for (int i = 0; i < rounds; ++i) {
        std::size_t const n = size(rng) / 100 * 100;  // few sizes, so buffers are shared between threads
        auto b = pool.acquire(n);
        if (b->size() != n || b->state() != buffer_state::UNINITIALIZED) { ++failures; }
        auto const data = pattern<u32>(n, static_cast<std::uint64_t>(t * 1000 + i));
        if (i % 2 == 0) {
          std::ranges::copy(data, b->host().begin());
          b->sync_to_device(stream);
          if (device_read(b->device_view(stream), n, stream) != data) { ++failures; }
        } else {
          b->copy_from(data, stream);
          if (!std::ranges::equal(b->host_view(), data)) { ++failures; }
        }
        std::vector<u32> out(n);
        b->copy_to(out, stream);
        if (out != data) { ++failures; }
        pool.release(std::move(b));
      }
    });
  }
  for (auto& w : workers) { w.join(); }
  EXPECT_EQ(failures.load(), 0);
  auto const s = pool.statistics();
  EXPECT_EQ(s.hits + s.misses, static_cast<std::uint64_t>(threads * rounds));
  EXPECT_GT(s.hits, 0U);
  EXPECT_EQ(s.cached_buffers, s.misses) << "every buffer made was released into the cache";
  pool.clear();
  EXPECT_EQ(device_.outstanding(), 0U);
}

}  // namespace
}  // namespace gpumem
