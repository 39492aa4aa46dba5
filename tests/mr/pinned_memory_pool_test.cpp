// pinned_memory_pool: reuse, alignment, zero bytes, coalescing, stream-ordered frees (a block freed on a held
// stream is not handed out again until the stream has passed the free), maximum_bytes (waits for pending
// blocks, then out_of_memory, and the pool still works after it), misuse, release of free chunks, that the
// memory is pinned, many threads, and std::pmr containers. Chunks are 2 MiB (the growth granularity), so
// "the chunk is full" is known exactly.
#include <gpumem/backend/backend.hpp>
#include <gpumem/cuda_stream.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/per_device_resource.hpp>
#include <gpumem/mr/pinned_memory_pool.hpp>

#include "support/device_bytes.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <future>
#include <memory>
#include <memory_resource>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace gpumem {
namespace {

using namespace std::chrono_literals;
using test::stream_hold;

constexpr std::size_t KiB = std::size_t{1} << 10U;
constexpr std::size_t MiB = std::size_t{1} << 20U;
constexpr std::size_t chunk = 2 * MiB;

[[nodiscard]] mr::pinned_pool_options small_chunks(std::size_t maximum = 0)
{
  return {.chunk_size = chunk, .maximum_bytes = maximum};
}

[[nodiscard]] bool aligned_256(void const* p) { return reinterpret_cast<std::uintptr_t>(p) % 256 == 0; }

TEST(PinnedMemoryPool, AFreedBlockIsReusedForTheSameSize)
{
  mr::pinned_memory_pool pool{small_chunks()};
  void* a = pool.allocate(1000);
  void* b = pool.allocate(3000);
  pool.deallocate(a, 1000);
  void* c = pool.allocate(1000);
  EXPECT_EQ(c, a);
  EXPECT_EQ(pool.usage().chunks, 1U);
  EXPECT_EQ(pool.usage().reserved, chunk);
  pool.deallocate(b, 3000);
  pool.deallocate(c, 1000);
  EXPECT_EQ(pool.usage().in_use, 0U);
  EXPECT_EQ(pool.usage().free, chunk);
}

TEST(PinnedMemoryPool, BlocksAre256ByteAlignedAndDoNotOverlap)
{
  mr::pinned_memory_pool pool{small_chunks()};
  std::vector<std::size_t> const sizes{1, 3, 255, 256, 257, 1000, 4097, 100000, 3 * MiB};
  std::vector<void*> blocks;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    void* p = pool.allocate(sizes[i], i % 2 == 0 ? 256 : alignof(std::max_align_t));
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(aligned_256(p)) << sizes[i] << " bytes at " << p;
    std::memset(p, static_cast<int>(i + 1), sizes[i]);
    blocks.push_back(p);
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    auto const* bytes = static_cast<unsigned char const*>(blocks[i]);
    EXPECT_TRUE(std::all_of(bytes, bytes + std::min<std::size_t>(sizes[i], 4096),
                            [i](unsigned char v) { return v == i + 1; }))
      << "block " << i << " was overwritten by another";
    EXPECT_EQ(bytes[sizes[i] - 1], i + 1);
    pool.deallocate(blocks[i], sizes[i], i % 2 == 0 ? 256 : alignof(std::max_align_t));
  }
  EXPECT_EQ(pool.usage().in_use, 0U);
  EXPECT_THROW((void)pool.allocate(100, 512), logic_error) << "alignments above 256 are refused";
}

TEST(PinnedMemoryPool, ZeroBytesGiveUniqueValidPointers)
{
  mr::pinned_memory_pool pool{small_chunks()};
  void* a = pool.allocate(0);
  void* b = pool.allocate(0);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  EXPECT_GT(pool.usage().in_use, 0U);
  pool.deallocate(a, 0);
  pool.deallocate(b, 0);
  EXPECT_EQ(pool.usage().in_use, 0U);
  EXPECT_THROW(pool.deallocate(a, 0), logic_error);
}

TEST(PinnedMemoryPool, FreedNeighboursCoalesce)
{
  mr::pinned_memory_pool pool{small_chunks()};
  std::vector<void*> quarters;
  for (int i = 0; i < 4; ++i) { quarters.push_back(pool.allocate(chunk / 4)); }
  auto const full = pool.usage();
  ASSERT_EQ(full.reserved, chunk) << "four quarters should fill one chunk";
  ASSERT_EQ(full.free, 0U);
  // Free two neighbours (by address), then ask for their sum: only coalescing serves it without growing.
  std::ranges::sort(quarters);
  pool.deallocate(quarters[1], chunk / 4);
  pool.deallocate(quarters[2], chunk / 4);
  void* half = pool.allocate(chunk / 2);
  EXPECT_EQ(half, quarters[1]);
  EXPECT_EQ(pool.usage().reserved, chunk) << "the pool grew instead of coalescing";
  EXPECT_EQ(pool.usage().chunks, 1U);
  pool.deallocate(quarters[0], chunk / 4);
  pool.deallocate(half, chunk / 2);
  pool.deallocate(quarters[3], chunk / 4);
  void* whole = pool.allocate(chunk);
  EXPECT_EQ(whole, quarters[0]);
  EXPECT_EQ(pool.usage().reserved, chunk);
  pool.deallocate(whole, chunk);
}

TEST(PinnedMemoryPool, ABlockFreedOnAHeldStreamIsNotReusedUntilTheStreamPassesTheFree)
{
  cuda_stream stream{cuda_stream::flags::non_blocking};
  mr::pinned_memory_pool pool{small_chunks()};
  void* p = pool.allocate(chunk);  // the whole first chunk
  void* q = nullptr;
  {
    stream_hold hold{stream};
    pool.deallocate_async(p, chunk, stream);
    auto const u = pool.usage();
    EXPECT_EQ(u.pending, chunk);
    EXPECT_EQ(u.in_use, 0U);
    q = pool.allocate(chunk);
    EXPECT_NE(q, p) << "a block was handed out while a copy on its stream may still use it";
    EXPECT_EQ(pool.usage().chunks, 2U);
  }  // opens the gate and synchronises the stream
  void* r = pool.allocate(chunk);
  EXPECT_EQ(r, p) << "the pending block was not reused once its stream had passed the free";
  EXPECT_EQ(pool.usage().pending, 0U);
  EXPECT_EQ(pool.usage().chunks, 2U);
  pool.deallocate(q, chunk);
  pool.deallocate(r, chunk);
}

// CUDA records an event only on a stream of the event's own device. The pool keeps its spare events per
// device: a free on a stream of device 0, after frees on device 1 left only device-1 events, must still be
// asynchronous. (Recording a device-1 event failed, and the pool fell back to synchronising the stream:
// with the stream held by the calling thread, the 2-GPU suite hung in a shuffled order.)
TEST(PinnedMemoryPool, AsyncFreeOnAnotherDevicesStreamStaysAsynchronous)
{
  auto& backend = detail::get_backend();
  if (backend.device_count() < 2) { GTEST_SKIP() << "needs two devices"; }
  mr::pinned_memory_pool pool{small_chunks()};
  int const original = backend.current_device();
  backend.set_current_device(1);
  {
    cuda_stream on_one{cuda_stream::flags::non_blocking};
    pool.deallocate_async(pool.allocate(256), 256, on_one);
    pool.wait_pending();  // the pool now holds a spare event of device 1 only
  }
  backend.set_current_device(0);
  cuda_stream on_zero{cuda_stream::flags::non_blocking};
  void* p = pool.allocate(256);
  {
    stream_hold hold{on_zero};
    auto freeing = std::async(std::launch::async, [&] { pool.deallocate_async(p, 256, on_zero); });
    bool const returned = freeing.wait_for(2s) == std::future_status::ready;
    hold.release();
    freeing.get();
    EXPECT_TRUE(returned) << "deallocate_async waited for the held stream";
    EXPECT_EQ(pool.usage().pending, returned ? 256U : 0U);
  }
  pool.wait_pending();
  EXPECT_EQ(pool.usage().pending, 0U);
  // Frees on device 1's stream while device 0 is current still work, asynchronously.
  backend.set_current_device(1);
  cuda_stream on_one{cuda_stream::flags::non_blocking};
  backend.set_current_device(0);
  {
    stream_hold hold{on_one};
    void* q = pool.allocate(256);
    auto freeing = std::async(std::launch::async, [&] { pool.deallocate_async(q, 256, on_one); });
    bool const returned = freeing.wait_for(2s) == std::future_status::ready;
    hold.release();
    freeing.get();
    EXPECT_TRUE(returned) << "a free on another device's stream waited for it";
  }
  pool.wait_pending();
  backend.set_current_device(original);
}

TEST(PinnedMemoryPool, AsyncFreeWaitsForWorkSubmittedBeforeIt)
{
  // A copy from the block is submitted, then the block is freed on the same stream: a later allocation must
  // not be able to overwrite the block before the copy has read it.
  cuda_stream stream{cuda_stream::flags::non_blocking};
  mr::pinned_memory_pool pool{small_chunks()};
  auto& device = *mr::get_current_device_resource();
  void* d = device.allocate(chunk, stream);
  auto* p = static_cast<unsigned char*>(pool.allocate(chunk));
  std::memset(p, 0x5A, chunk);
  {
    stream_hold hold{stream};
    detail::get_backend().memcpy_async(d, p, chunk, stream.value());
    pool.deallocate_async(p, chunk, stream);
    auto* other = static_cast<unsigned char*>(pool.allocate(chunk));
    std::memset(other, 0xA5, chunk);  // would corrupt the copy if it were the same block
    pool.deallocate(other, chunk);
  }
  auto const back = test::device_read(static_cast<unsigned char const*>(d), chunk, stream);
  EXPECT_TRUE(std::ranges::all_of(back, [](unsigned char v) { return v == 0x5A; }));
  device.deallocate(d, chunk, stream);
}

TEST(PinnedMemoryPool, WaitPendingReturnsOnceTheStreamHasPassed)
{
  cuda_stream stream{cuda_stream::flags::non_blocking};
  mr::pinned_memory_pool pool{small_chunks()};
  void* p = pool.allocate(4 * KiB);
  stream_hold hold{stream};
  pool.deallocate_async(p, 4 * KiB, stream);
  EXPECT_EQ(pool.usage().pending, 4 * KiB);
  auto waiter = std::async(std::launch::async, [&pool] { pool.wait_pending(); });
  EXPECT_EQ(waiter.wait_for(50ms), std::future_status::timeout) << "wait_pending returned with a pending block";
  hold.release();
  ASSERT_EQ(waiter.wait_for(5s), std::future_status::ready);
  waiter.get();
  EXPECT_EQ(pool.usage().pending, 0U);
  EXPECT_EQ(pool.usage().free, chunk);
}

TEST(PinnedMemoryPool, AtTheLimitAnAllocationWaitsForPendingBlocks)
{
  cuda_stream stream{cuda_stream::flags::non_blocking};
  mr::pinned_memory_pool pool{small_chunks(chunk)};
  void* p = pool.allocate(chunk);
  stream_hold hold{stream};
  pool.deallocate_async(p, chunk, stream);
  std::thread opener{[&hold] {
    std::this_thread::sleep_for(50ms);
    hold.release();
  }};
  void* q = nullptr;
  EXPECT_NO_THROW(q = pool.allocate(chunk)) << "out of memory although a pending block was about to return";
  opener.join();
  EXPECT_EQ(q, p);
  EXPECT_EQ(pool.usage().reserved, chunk);
  if (q != nullptr) { pool.deallocate(q, chunk); }
}

TEST(PinnedMemoryPool, BeyondTheLimitIsOutOfMemoryNamingSizeAndPinned)
{
  mr::pinned_memory_pool pool{small_chunks(2 * chunk)};
  std::size_t const too_much = 2 * chunk + 1;
  try {
    (void)pool.allocate(too_much);
    FAIL() << "the pool went past maximum_bytes";
  } catch (out_of_memory const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find(std::to_string(too_much)), std::string::npos) << what;
    EXPECT_NE(what.find("pinned"), std::string::npos) << what;
  }
  EXPECT_EQ(pool.usage().reserved, 0U) << "a failed allocation changed the pool";

  void* big = pool.allocate(3 * MiB);  // one 4 MiB chunk: the whole limit
  EXPECT_EQ(pool.usage().reserved, 2 * chunk);
  EXPECT_THROW((void)pool.allocate(2 * MiB), out_of_memory);  // 1 MiB is left
  auto const u = pool.usage();
  EXPECT_EQ(u.in_use, 3 * MiB);
  EXPECT_EQ(u.free, MiB);
  EXPECT_EQ(u.reserved, 2 * chunk);
  EXPECT_EQ(u.pending, 0U);
  void* rest = pool.allocate(MiB);  // the pool still works after a failure
  std::memset(big, 1, 3 * MiB);
  std::memset(rest, 2, MiB);
  EXPECT_EQ(static_cast<unsigned char*>(big)[3 * MiB - 1], 1);
  pool.deallocate(big, 3 * MiB);
  pool.deallocate(rest, MiB);
  EXPECT_EQ(pool.usage().in_use, 0U);
  void* whole = pool.allocate(2 * chunk);  // the freed chunk serves the whole limit again
  pool.deallocate(whole, 2 * chunk);
}

TEST(PinnedMemoryPool, AtTheLimitFreeChunksMakeRoomForALargerOne)
{
  // Two free 2 MiB chunks (blocks never coalesce across chunks) cannot serve 3 MiB, and the limit forbids a
  // third chunk; giving the free chunks back lets one 4 MiB chunk serve it.
  mr::pinned_memory_pool pool{small_chunks(2 * chunk)};
  void* a = pool.allocate(chunk);
  void* b = pool.allocate(chunk);
  ASSERT_EQ(pool.usage().chunks, 2U);
  pool.deallocate(a, chunk);
  pool.deallocate(b, chunk);
  void* big = nullptr;
  EXPECT_NO_THROW(big = pool.allocate(3 * MiB));
  EXPECT_LE(pool.usage().reserved, 2 * chunk);
  if (big != nullptr) {
    std::memset(big, 3, 3 * MiB);
    pool.deallocate(big, 3 * MiB);
  }
}

TEST(PinnedMemoryPool, MisuseIsALogicError)
{
  mr::pinned_memory_pool pool{small_chunks()};
  void* p = pool.allocate(1000);
  EXPECT_THROW(pool.deallocate(p, 2000), logic_error) << "wrong size";
  EXPECT_EQ(pool.usage().in_use, 1024U) << "a refused deallocate changed the pool";
  pool.deallocate(p, 1000);
  EXPECT_THROW(pool.deallocate(p, 1000), logic_error) << "double free";
  int on_stack = 0;
  EXPECT_THROW(pool.deallocate(&on_stack, sizeof on_stack), logic_error) << "foreign pointer";
  mr::pinned_memory_pool other{small_chunks()};
  void* theirs = other.allocate(64);
  EXPECT_THROW(pool.deallocate(theirs, 64), logic_error) << "another pool's block";
  other.deallocate(theirs, 64);
  // deallocate_async never throws; misuse is reported and ignored.
  pool.deallocate_async(&on_stack, sizeof on_stack, cuda_stream_default);
  EXPECT_EQ(pool.usage().pending, 0U);
  EXPECT_EQ(pool.usage().in_use, 0U);
  void* again = pool.allocate(1000);
  EXPECT_EQ(again, p);
  pool.deallocate(again, 1000);
}

TEST(PinnedMemoryPool, ReleaseFreeChunksLowersReserved)
{
  mr::pinned_memory_pool pool{small_chunks()};
  void* a = pool.allocate(chunk);
  void* b = pool.allocate(chunk);
  EXPECT_EQ(pool.usage().reserved, 2 * chunk);
  pool.deallocate(b, chunk);
  pool.release_free_chunks();
  EXPECT_EQ(pool.usage().reserved, chunk) << "the free chunk is given back, the used one kept";
  EXPECT_EQ(pool.usage().chunks, 1U);
  std::memset(a, 7, chunk);  // still valid
  EXPECT_TRUE(detail::get_backend().is_pinned_host(a));
  pool.deallocate(a, chunk);
  pool.release_free_chunks();
  EXPECT_EQ(pool.usage().reserved, 0U);
  EXPECT_EQ(pool.usage().chunks, 0U);
  EXPECT_EQ(pool.usage().free, 0U);
  void* c = pool.allocate(100);  // grows again
  EXPECT_EQ(pool.usage().reserved, chunk);
  pool.deallocate(c, 100);
}

TEST(PinnedMemoryPool, ReleaseFreeChunksReclaimsCompletedPendingBlocks)
{
  cuda_stream stream{cuda_stream::flags::non_blocking};
  mr::pinned_memory_pool pool{small_chunks()};
  void* a = pool.allocate(4 * KiB);
  pool.deallocate_async(a, 4 * KiB, stream);
  stream.synchronize();
  pool.release_free_chunks();
  EXPECT_EQ(pool.usage().pending, 0U);
  EXPECT_EQ(pool.usage().reserved, 0U);
}

TEST(PinnedMemoryPool, MemoryIsPinnedAndPageableMemoryIsNot)
{
  mr::pinned_memory_pool pool{small_chunks()};
  auto* p = static_cast<char*>(pool.allocate(5000));
  auto& backend = detail::get_backend();
  EXPECT_TRUE(backend.is_pinned_host(p));
  EXPECT_TRUE(backend.is_pinned_host(p + 4999));
  auto pageable = std::make_unique<char[]>(5000);
  EXPECT_FALSE(backend.is_pinned_host(pageable.get()));
  EXPECT_FALSE(backend.is_pinned_host(nullptr));
  pool.deallocate(p, 5000);
  auto& shared = mr::get_default_pinned_pool();
  EXPECT_EQ(&shared, &mr::get_default_pinned_pool());
  void* q = shared.allocate(100);
  EXPECT_TRUE(backend.is_pinned_host(q));
  shared.deallocate(q, 100);
}

TEST(PinnedMemoryPool, EqualOnlyToItself)
{
  mr::pinned_memory_pool a{small_chunks()};
  mr::pinned_memory_pool b{small_chunks()};
  EXPECT_TRUE(a.is_equal(a));
  EXPECT_FALSE(a.is_equal(b));
  EXPECT_FALSE(a.is_equal(*std::pmr::new_delete_resource()));
  EXPECT_EQ(a.options().chunk_size, chunk);
}

TEST(PinnedMemoryPool, ManyThreadsAllocateAndFree)
{
  constexpr int threads = 8;
  constexpr int rounds = 300;
  mr::pinned_memory_pool pool{small_chunks()};
  std::vector<cuda_stream> streams(threads);
  std::atomic<int> corrupted{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      struct block {
        unsigned char* p;
        std::size_t bytes;
        unsigned char value;
      };
      std::mt19937 rng{static_cast<unsigned>(t) * 7919U + 1U};
      std::uniform_int_distribution<std::size_t> size{0, 16 * KiB};
      std::vector<block> live;
      std::vector<unsigned char> expected(16 * KiB);
      auto const stream = streams[static_cast<std::size_t>(t)].view();
      auto free_one = [&](std::size_t index, bool async) {
        auto const b = live[index];
        std::memset(expected.data(), b.value, b.bytes);
        if (b.bytes != 0 && std::memcmp(b.p, expected.data(), b.bytes) != 0) { ++corrupted; }
        if (async) {
          pool.deallocate_async(b.p, b.bytes, stream);
        } else {
          pool.deallocate(b.p, b.bytes);
        }
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(index));
      };
      for (int i = 0; i < rounds; ++i) {
        std::size_t const bytes = size(rng);
        auto const value = static_cast<unsigned char>(t * 31 + i);
        auto* p = static_cast<unsigned char*>(pool.allocate(bytes));
        if (!aligned_256(p)) { ++corrupted; }
        std::memset(p, value, bytes);
        live.push_back({p, bytes, value});
        if (live.size() > 8) { free_one(rng() % live.size(), rng() % 2 == 0); }
      }
      while (!live.empty()) { free_one(live.size() - 1, false); }
    });
  }
  for (auto& w : workers) { w.join(); }
  EXPECT_EQ(corrupted.load(), 0) << "blocks were handed out twice or misaligned";
  pool.wait_pending();
  auto const u = pool.usage();
  EXPECT_EQ(u.in_use, 0U);
  EXPECT_EQ(u.pending, 0U);
  EXPECT_EQ(u.free, u.reserved);
}

TEST(PinnedMemoryPool, WorksAsAPmrResource)
{
  mr::pinned_memory_pool pool{small_chunks()};
  {
    std::pmr::vector<int> v{&pool};
    for (int i = 0; i < 10000; ++i) { v.push_back(i); }
    EXPECT_TRUE(detail::get_backend().is_pinned_host(v.data()));
    EXPECT_GE(pool.usage().in_use, 10000 * sizeof(int));
    for (int i = 0; i < 10000; ++i) { ASSERT_EQ(v[static_cast<std::size_t>(i)], i); }
    std::pmr::vector<std::pmr::string> strings{&pool};
    strings.emplace_back("a string long enough to need its own allocation, also from the pool");
    EXPECT_TRUE(detail::get_backend().is_pinned_host(strings.back().data()));
  }
  EXPECT_EQ(pool.usage().in_use, 0U);
}

TEST(PinnedMemoryPool, DestructionWaitsForPendingBlocks)
{
  cuda_stream stream{cuda_stream::flags::non_blocking};
  auto pool = std::make_unique<mr::pinned_memory_pool>(small_chunks());
  void* p = pool->allocate(4 * KiB);
  stream_hold hold{stream};
  pool->deallocate_async(p, 4 * KiB, stream);
  auto destroy = std::async(std::launch::async, [&pool] { pool.reset(); });
  EXPECT_EQ(destroy.wait_for(50ms), std::future_status::timeout)
    << "the pool freed its chunks while a copy could still use a pending block";
  hold.release();
  EXPECT_EQ(destroy.wait_for(5s), std::future_status::ready);
}

}  // namespace
}  // namespace gpumem
