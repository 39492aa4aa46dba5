// The per-thread caches of the stream-ordered sub-allocators (stream_ordered_memory_resource.hpp), for pool
// and fixed_size: same-stream reuse from the cache, the books and queries with cached blocks, an exiting
// thread's cache emptied into the shared lists, an idle thread's cache reclaimed before out_of_memory,
// blocks cached for a destroyed gpumem stream, a resource destroyed while threads that used it live on,
// and the stream ordering of blocks that leave a cache (held back by a gate).
#include "support/gate.hpp"
#include "support/memory_checks.hpp"
#include "support/sub_allocator_checks.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/cuda_stream.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/fixed_size_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace gpumem::test {
namespace {

constexpr std::size_t block = 64 * KiB;

/// A pool or a fixed-size resource that holds exactly `blocks` blocks of `block` bytes.
template <class Resource>
std::unique_ptr<Resource> make_bounded(mr::device_memory_resource* upstream, std::size_t blocks)
{
  if constexpr (std::is_same_v<Resource, mr::pool_memory_resource>) {
    return std::make_unique<Resource>(upstream, blocks * block, blocks * block);
  } else {
    return std::make_unique<Resource>(upstream, block, blocks, 1);
  }
}

template <class Resource>
class thread_cache : public ::testing::Test {};
using cached_resources = ::testing::Types<mr::pool_memory_resource, mr::fixed_size_memory_resource>;
TYPED_TEST_SUITE(thread_cache, cached_resources);

TYPED_TEST(thread_cache, a_block_freed_on_a_stream_comes_back_from_the_cache_on_that_stream)
{
  mr::simulated_memory_resource upstream;
  auto r = make_bounded<TypeParam>(&upstream, 4);
  cuda_stream s;
  void* p = r->allocate(block, s);
  r->deallocate(p, block, s);
  EXPECT_EQ(r->bytes_in_thread_caches(), block);
  EXPECT_EQ(r->bytes_in_use(), 0U) << "a cached block is free";
  EXPECT_EQ(r->bytes_cached(), r->pool_size());
  EXPECT_GE(r->free_block_count(), 1U);
  EXPECT_EQ(r->largest_free_block() >= block, true);
  r->check_invariants();
  EXPECT_EQ(r->allocate(block, s), p) << "same thread, same stream, same size: the cached block";
  EXPECT_EQ(r->bytes_in_thread_caches(), 0U);
  EXPECT_EQ(r->bytes_in_use(), block);
  r->deallocate(p, block, s);
  r->check_invariants();
}

TYPED_TEST(thread_cache, flush_moves_every_cached_block_to_the_shared_lists)
{
  mr::simulated_memory_resource upstream;
  auto r = make_bounded<TypeParam>(&upstream, 8);
  cuda_stream s;
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) { blocks.push_back(r->allocate(block, s)); }
  for (void* p : blocks) { r->deallocate(p, block, s); }
  EXPECT_EQ(r->bytes_in_thread_caches(), 8 * block);
  r->flush_thread_caches();
  EXPECT_EQ(r->bytes_in_thread_caches(), 0U);
  EXPECT_EQ(r->bytes_in_use(), 0U);
  r->check_invariants();
  r->release();
  EXPECT_EQ(upstream.bytes_in_use(), 0U) << "release() must see the blocks that were cached";
}

TYPED_TEST(thread_cache, an_exiting_thread_leaves_its_cached_blocks_to_the_shared_lists)
{
  mr::simulated_memory_resource upstream;
  auto r = make_bounded<TypeParam>(&upstream, 4);
  cuda_stream s;
  std::thread worker{[&] {
    void* a = r->allocate(block, s);
    void* b = r->allocate(block, cuda_stream_per_thread);
    r->deallocate(a, block, s);
    r->deallocate(b, block, cuda_stream_per_thread);
    EXPECT_EQ(r->bytes_in_thread_caches(), 2 * block);
  }};
  worker.join();
  EXPECT_EQ(r->bytes_in_thread_caches(), 0U) << "the exited thread's cache still holds blocks";
  EXPECT_EQ(r->bytes_in_use(), 0U);
  r->check_invariants();
  // All four blocks are reachable from this thread again (the pool is at its maximum).
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) { blocks.push_back(r->allocate(block, s)); }
  for (void* p : blocks) { r->deallocate(p, block, s); }
  s.synchronize();
}

TYPED_TEST(thread_cache, an_idle_threads_cached_blocks_are_reclaimed_before_out_of_memory)
{
  mr::simulated_memory_resource upstream{2 * block};  // a fixed-size resource has no maximum: cap the upstream
  auto r = make_bounded<TypeParam>(&upstream, 2);
  std::mutex m;
  std::condition_variable cv;
  bool cached = false;
  bool done = false;
  std::thread idle{[&] {
    void* a = r->allocate(block);
    void* b = r->allocate(block);
    r->deallocate(a, block);
    r->deallocate(b, block);
    {
      std::lock_guard lock{m};
      cached = true;
    }
    cv.notify_all();
    std::unique_lock lock{m};
    cv.wait(lock, [&] { return done; });  // stays alive, its cache full
  }};
  {
    std::unique_lock lock{m};
    cv.wait(lock, [&] { return cached; });
  }
  EXPECT_EQ(r->bytes_in_thread_caches(), 2 * block);
  void* a = nullptr;
  void* b = nullptr;
  EXPECT_NO_THROW(a = r->allocate(block)) << "the idle thread's cache must be reclaimed before failing";
  EXPECT_NO_THROW(b = r->allocate(block));
  EXPECT_THROW((void)r->allocate(block), out_of_memory) << "now everything is really in use";
  r->check_invariants();
  r->deallocate(a, block);
  r->deallocate(b, block);
  {
    std::lock_guard lock{m};
    done = true;
  }
  cv.notify_all();
  idle.join();
  r->check_invariants();
}

TYPED_TEST(thread_cache, destroying_a_gpumem_stream_moves_its_cached_blocks_out_of_every_cache)
{
  mr::simulated_memory_resource upstream;
  auto r = make_bounded<TypeParam>(&upstream, 4);
  {
    cuda_stream s;
    void* p = r->allocate(block, s);
    r->deallocate(p, block, s);
    std::thread other{[&] {
      void* q = r->allocate(block, s);
      r->deallocate(q, block, s);
    }};
    other.join();
    EXPECT_EQ(r->bytes_in_thread_caches(), block) << "this thread's cache holds one block for s";
    s.synchronize();
  }  // ~cuda_stream: before_stream_destroy
  EXPECT_EQ(r->bytes_in_thread_caches(), 0U);
  r->check_invariants();
}

TYPED_TEST(thread_cache, a_stream_gpumem_did_not_create_is_never_cached)
{
  // Its blocks could leave the cache only by an event record on it after it may have been destroyed: they
  // go to its shared list at once, with the event recorded during the deallocation.
  mr::simulated_memory_resource upstream;
  auto r = make_bounded<TypeParam>(&upstream, 4);
  backend_stream foreign;
  cuda_stream_view const s{foreign.get()};
  void* p = r->allocate(block, s);
  r->deallocate(p, block, s);
  EXPECT_EQ(r->bytes_in_thread_caches(), 0U);
  void* const again = r->allocate(block, s);
  EXPECT_FALSE(r->try_deallocate_without_blocking(again, block, s))
    << "no slot for the stream: the non-blocking path must decline";
  r->deallocate(again, block, s);
  r->check_invariants();
  cuda_stream own;
  void* q = r->allocate(block, own);
  r->deallocate(q, block, own);
  EXPECT_EQ(r->bytes_in_thread_caches(), block) << "a gpumem stream is cached";
  own.synchronize();
}

TYPED_TEST(thread_cache, a_slot_evicted_for_another_stream_never_touches_a_destroyed_stream)
{
  // Fill every slot of this thread's cache with blocks of announced streams, destroy them (their slots are
  // emptied first), then evict with frees on new streams: no event may be recorded on a destroyed stream
  // (the host backend aborts on one).
  mr::simulated_memory_resource upstream;
  auto r = make_bounded<TypeParam>(&upstream, 64);
  for (int round = 0; round < 3; ++round) {
    std::vector<cuda_stream> streams(detail::block_cache::slot_count + 2);
    for (auto& s : streams) {
      void* p = r->allocate(block, s);
      r->deallocate(p, block, s);
    }
    for (auto& s : streams) { s.synchronize(); }
  }  // each ~cuda_stream empties its slots
  backend_stream foreign;
  for (int i = 0; i < 16; ++i) {
    void* p = r->allocate(block, cuda_stream_view{foreign.get()});
    r->deallocate(p, block, cuda_stream_view{foreign.get()});
  }
  r->flush_thread_caches();
  EXPECT_EQ(r->bytes_in_use(), 0U);
  r->check_invariants();
}

TYPED_TEST(thread_cache, a_double_free_is_refused_and_reported_by_checked_deallocate)
{
  mr::simulated_memory_resource upstream;
  auto r = make_bounded<TypeParam>(&upstream, 4);
  cuda_stream s;
  void* p = r->allocate(block, s);
  r->deallocate(p, block, s);
  EXPECT_THROW(r->checked_deallocate(p, block, s), logic_error) << "the block is in this thread's cache";
  r->deallocate(p, block, s);  // logged, ignored: never std::terminate
  r->check_invariants();
  EXPECT_EQ(r->bytes_in_thread_caches(), block) << "the cache holds the block once";
  EXPECT_EQ(r->allocate(block, s), p);
  void* q = r->allocate(block, s);
  EXPECT_NE(q, p) << "the block must not be handed out twice";
  r->deallocate(p, block, s);
  r->deallocate(q, block, s);
  EXPECT_THROW(r->checked_deallocate(static_cast<char*>(q) + 8, block, s), logic_error) << "misaligned";
  r->check_invariants();
  s.synchronize();
}

TYPED_TEST(thread_cache, a_resource_may_die_before_the_threads_that_used_it)
{
  mr::simulated_memory_resource upstream;
  std::mutex m;
  std::condition_variable cv;
  int phase = 0;
  auto r = make_bounded<TypeParam>(&upstream, 4);
  std::thread user{[&] {
    void* p = r->allocate(block);
    r->deallocate(p, block);  // cached in this thread
    {
      std::lock_guard lock{m};
      phase = 1;
    }
    cv.notify_all();
    std::unique_lock lock{m};
    cv.wait(lock, [&] { return phase == 2; });
    // The first resource is gone; a new one (perhaps at the same address) must get a new cache.
    auto again = make_bounded<TypeParam>(&upstream, 4);
    void* q = again->allocate(block);
    again->deallocate(q, block);
    again->check_invariants();
  }};
  {
    std::unique_lock lock{m};
    cv.wait(lock, [&] { return phase == 1; });
  }
  r.reset();  // destroyed while `user` still holds its (now detached) cache
  EXPECT_EQ(upstream.bytes_in_use(), 0U);
  {
    std::lock_guard lock{m};
    phase = 2;
  }
  cv.notify_all();
  user.join();
  EXPECT_EQ(upstream.bytes_in_use(), 0U);
  EXPECT_EQ(upstream.invalid_deallocations(), 0U);
}

// A block freed on busy stream A by a thread that has ended, reclaimed by this thread's request on
// stream B (the pool is at its limit): B's work must wait for A's pending work. (The pool only: a
// fixed-size resource over cuda_upstream() has no limit, so B would grow instead.)
TEST(thread_cache_pool, a_block_from_an_ended_threads_cache_keeps_its_stream_ordering)
{
  auto r = make_bounded<mr::pool_memory_resource>(&cuda_upstream(), 1);
  expect_block_reaches_another_stream_only_after_pending_work(*r, block, {}, true);
  r->check_invariants();
}

}  // namespace
}  // namespace gpumem::test
