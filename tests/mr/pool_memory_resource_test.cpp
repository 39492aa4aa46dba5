// pool_memory_resource: the conformance battery (over cuda_memory_resource), then its own behaviour:
// construction rules, the growth policy, reclaiming before failing, release, random sequences at 80 GiB scale
// on a simulated upstream (invariants at every step), stream ordering (held back by a gate), the per-thread
// default stream, failure injection, the out-of-memory message, and a 16-thread stress.
#include "conformance/resource_battery.hpp"
#include "support/gate.hpp"
#include "support/memory_checks.hpp"
#include "support/sub_allocator_checks.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/cuda_stream.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace gpumem::test {
namespace {


struct pool_factory {
  static std::unique_ptr<mr::device_memory_resource> make()
  {
    return std::make_unique<mr::pool_memory_resource>(&cuda_upstream());
  }
  static constexpr char const* name = "pool_memory_resource";
  static constexpr bool oversubscription_safe = true;
};

struct pool_with_initial_chunk_factory {
  static std::unique_ptr<mr::device_memory_resource> make()
  {
    return std::make_unique<mr::pool_memory_resource>(&cuda_upstream(), 32 * MiB, 2 * GiB);
  }
  static constexpr char const* name = "pool_memory_resource";
  static constexpr bool oversubscription_safe = true;
};

}  // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(pool_memory_resource, resource_battery, pool_factory);
INSTANTIATE_TYPED_TEST_SUITE_P(pool_memory_resource_bounded, resource_battery, pool_with_initial_chunk_factory);

namespace {

std::size_t pool_block_bytes(std::size_t bytes) { return detail::align_up(bytes, detail::allocation_alignment); }

// ---- construction -----------------------------------------------------------------------------------------

TEST(pool_memory_resource, initial_above_maximum_is_a_logic_error_naming_both)
{
  mr::simulated_memory_resource upstream;
  try {
    mr::pool_memory_resource pool{&upstream, 2 * MiB, 1 * MiB};
    FAIL() << "an initial pool size above the maximum was accepted";
  } catch (logic_error const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find(format_bytes(2 * MiB)), std::string::npos) << what;
    EXPECT_NE(what.find(format_bytes(1 * MiB)), std::string::npos) << what;
  }
  EXPECT_EQ(upstream.bytes_in_use(), 0U);
  EXPECT_THROW(mr::pool_memory_resource(nullptr), logic_error);
}

TEST(pool_memory_resource, initial_pool_is_one_chunk_and_zero_grows_on_demand)
{
  mr::simulated_memory_resource upstream;
  {
    mr::pool_memory_resource pool{&upstream, 10 * MiB + 1};
    EXPECT_EQ(pool.pool_size(), 10 * MiB + 256);
    EXPECT_EQ(pool.chunk_count(), 1U);
    EXPECT_EQ(pool.free_block_count(), 1U);
    EXPECT_EQ(pool.largest_free_block(), 10 * MiB + 256);
    EXPECT_EQ(upstream.bytes_in_use(), 10 * MiB + 256);
    EXPECT_EQ(pool.upstream_resource(), &upstream);
    pool.check_invariants();
  }
  EXPECT_EQ(upstream.bytes_in_use(), 0U) << "the destructor did not return the initial chunk";
  mr::pool_memory_resource lazy{&upstream};
  EXPECT_EQ(lazy.pool_size(), 0U);
  EXPECT_EQ(upstream.allocation_count(), 0U);
  void* p = lazy.allocate(1000);
  EXPECT_EQ(lazy.pool_size(), 1024U);
  EXPECT_EQ(lazy.bytes_in_use(), 1024U);
  EXPECT_EQ(lazy.used_bytes(), 1024U);
  lazy.deallocate(p, 1000);
  EXPECT_EQ(lazy.bytes_in_use(), 0U);
  EXPECT_EQ(lazy.bytes_cached(), 1024U);
  lazy.check_invariants();
}

TEST(pool_memory_resource, initial_allocation_failure_propagates_and_leaks_nothing)
{
  mr::simulated_memory_resource upstream{64 * MiB};
  EXPECT_THROW(mr::pool_memory_resource(&upstream, 128 * MiB), out_of_memory);
  EXPECT_EQ(upstream.bytes_in_use(), 0U);
}

// ---- growth ------------------------------------------------------------------------------------------------

TEST(pool_memory_resource, grows_by_the_larger_of_the_request_and_the_pool_capped_by_the_maximum)
{
  mr::simulated_memory_resource upstream;
  mr::pool_memory_resource pool{&upstream, 0, 20 * MiB};
  void* a = pool.allocate(1 * MiB);  // max(1, 0): a 1 MiB chunk
  EXPECT_EQ(pool.pool_size(), 1 * MiB);
  void* b = pool.allocate(1 * MiB);  // max(1, 1)
  EXPECT_EQ(pool.pool_size(), 2 * MiB);
  void* c = pool.allocate(3 * MiB);  // max(3, 2)
  EXPECT_EQ(pool.pool_size(), 5 * MiB);
  void* d = pool.allocate(1 * MiB);  // max(1, 5): 4 MiB of the new chunk stay free
  EXPECT_EQ(pool.pool_size(), 10 * MiB);
  EXPECT_EQ(pool.largest_free_block(), 4 * MiB);
  void* e = pool.allocate(5 * MiB);  // max(5, 10), and the 10 MiB left under the maximum allow it
  EXPECT_EQ(pool.pool_size(), 20 * MiB);
  EXPECT_EQ(pool.chunk_count(), 5U);
  EXPECT_EQ(upstream.bytes_in_use(), 20 * MiB);
  pool.check_invariants();
  // Free: 4 MiB and 5 MiB, in different chunks; the pool is at its maximum and nothing is wholly free.
  EXPECT_THROW((void)pool.allocate(8 * MiB), out_of_memory);
  pool.check_invariants();
  for (auto [p, bytes] : {std::pair{a, 1 * MiB}, {b, 1 * MiB}, {c, 3 * MiB}, {d, 1 * MiB}, {e, 5 * MiB}}) {
    pool.deallocate(p, bytes);
  }
  EXPECT_EQ(pool.bytes_in_thread_caches(), 11 * MiB) << "the freed blocks wait in this thread's cache";
  pool.flush_thread_caches();
  EXPECT_EQ(pool.bytes_in_thread_caches(), 0U);
  EXPECT_EQ(pool.free_block_count(), 5U) << "all freed: the pool must coalesce back to its chunks";
  EXPECT_EQ(pool.bytes_in_use(), 0U);
  pool.release();
  EXPECT_EQ(pool.pool_size(), 0U);
  EXPECT_EQ(upstream.bytes_in_use(), 0U);
  pool.check_invariants();
}

TEST(pool_memory_resource, a_request_above_the_maximum_fails_at_once)
{
  mr::simulated_memory_resource upstream;
  mr::pool_memory_resource pool{&upstream, 0, 1 * GiB};
  try {
    (void)pool.allocate(1 * GiB + 1);
    FAIL() << "a request above the maximum pool size was served";
  } catch (out_of_memory const& e) {
    EXPECT_NE(std::string{e.what()}.find("largest allocation"), std::string::npos) << e.what();
  }
  EXPECT_EQ(upstream.total_allocations(), 0U);
  void* p = pool.allocate(1 * GiB);  // exactly the maximum is fine
  pool.deallocate(p, 1 * GiB);
}

TEST(pool_memory_resource, halves_the_growth_when_the_upstream_refuses)
{
  mr::simulated_memory_resource upstream{10 * MiB};
  mr::pool_memory_resource pool{&upstream};
  void* a = pool.allocate(4 * MiB);
  void* b = pool.allocate(4 * MiB);  // the pool is now 8 MiB; 2 MiB are left upstream
  void* c = pool.allocate(1 * MiB);  // wants max(1, 8) = 8: refused; 4: refused; 2: granted
  EXPECT_EQ(pool.pool_size(), 10 * MiB);
  EXPECT_EQ(pool.chunk_count(), 3U);
  EXPECT_EQ(pool.largest_free_block(), 1 * MiB);
  void* d = pool.allocate(1 * MiB);  // the rest of the 2 MiB chunk
  EXPECT_EQ(pool.chunk_count(), 3U);
  pool.check_invariants();
  for (auto [p, bytes] : {std::pair{a, 4 * MiB}, {b, 4 * MiB}, {c, 1 * MiB}, {d, 1 * MiB}}) { pool.deallocate(p, bytes); }
}

TEST(pool_memory_resource, returns_free_chunks_to_the_upstream_before_failing)
{
  mr::simulated_memory_resource upstream{8 * MiB};
  mr::pool_memory_resource pool{&upstream};
  void* a = pool.allocate(4 * MiB);
  pool.deallocate(a, 4 * MiB);  // the pool caches 4 MiB; the upstream has 4 MiB left
  // 6 MiB: nothing fits, the upstream cannot give 6 MiB, so the cached chunk goes back and the retry succeeds.
  void* b = pool.allocate(6 * MiB);
  EXPECT_EQ(pool.pool_size(), 6 * MiB);
  EXPECT_EQ(pool.chunk_count(), 1U);
  EXPECT_EQ(upstream.bytes_in_use(), 6 * MiB);
  pool.check_invariants();
  pool.deallocate(b, 6 * MiB);
}

TEST(pool_memory_resource, out_of_memory_message_describes_the_pool)
{
  mr::simulated_memory_resource upstream;
  mr::pool_memory_resource pool{&upstream, 0, 1 * GiB};
  void* a = pool.allocate(512 * MiB);
  void* b = pool.allocate(256 * MiB);
  pool.deallocate(a, 512 * MiB);
  try {
    (void)pool.allocate(768 * MiB);
    FAIL() << "served more than the maximum pool size allows";
  } catch (out_of_memory const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find("pool_memory_resource"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(768 * MiB)), std::string::npos) << what;
    EXPECT_NE(what.find("cached in 1 free blocks"), std::string::npos) << what;
    EXPECT_NE(what.find("largest free block " + format_bytes(256 * MiB)), std::string::npos) << what;
    EXPECT_NE(what.find("maximum pool size " + format_bytes(1 * GiB)), std::string::npos) << what;
    EXPECT_NE(what.find(format_bytes(256 * MiB) + " in use"), std::string::npos) << what;
  }
  pool.check_invariants();
  pool.deallocate(b, 256 * MiB);
}

TEST(pool_memory_resource, release_returns_only_wholly_free_chunks)
{
  mr::simulated_memory_resource upstream;
  mr::pool_memory_resource pool{&upstream};
  backend_stream s1;
  backend_stream s2;
  void* a = pool.allocate(1 * MiB, s1.get());
  void* b = pool.allocate(2 * MiB, s2.get());  // a second chunk
  void* c = pool.allocate(3 * MiB, s1.get());  // a third
  pool.deallocate(a, 1 * MiB, s2.get());
  pool.deallocate(c, 3 * MiB, s1.get());
  pool.release();
  EXPECT_EQ(pool.chunk_count(), 1U);
  EXPECT_EQ(pool.pool_size(), 2 * MiB);
  EXPECT_EQ(upstream.bytes_in_use(), 2 * MiB);
  pool.check_invariants();
  pool.deallocate(b, 2 * MiB, s2.get());
  pool.release();
  EXPECT_EQ(upstream.bytes_in_use(), 0U);
  EXPECT_EQ(pool.pool_size(), 0U);
  pool.check_invariants();
  void* d = pool.allocate(100, s1.get());  // still usable
  pool.deallocate(d, 100, s1.get());
}

TEST(pool_memory_resource, destructor_returns_every_chunk_even_with_outstanding_allocations)
{
  mr::simulated_memory_resource upstream;
  {
    mr::pool_memory_resource pool{&upstream, 1 * MiB};
    (void)pool.allocate(3 * MiB);  // outstanding on purpose (the caller's bug)
    (void)pool.allocate(1000);
    EXPECT_GT(upstream.bytes_in_use(), 0U);
  }
  EXPECT_EQ(upstream.bytes_in_use(), 0U);
  EXPECT_EQ(upstream.invalid_deallocations(), 0U);
}

// ---- random sequences at 80 GiB scale -----------------------------------------------------------------------

// 4 seeds x 30,000 operations on one stream. The books (bytes in use, pool size against the upstream's)
// are checked after every step; check_invariants(), an O(n log n) walk of a few hundred free blocks that
// costs ~40 us in a Debug build, after every 4th step: that keeps the file within its time budget while a
// broken step is still caught within 4 operations of where it happened. Then the pool must coalesce back
// to exactly its chunks.
TEST(pool_memory_resource, random_sequences_on_80_gib_keep_the_invariants_and_coalesce_back)
{
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    mr::simulated_memory_resource upstream{80 * GiB};
    mr::pool_memory_resource pool{&upstream};
    std::map<std::uintptr_t, live_block> live;
    random_sequence_options options;
    options.seed = seed;
    options.operations = 30'000;
    options.check_every = 4;
    options.max_log2_size = 30.0;  // 1 B .. 1 GiB
    options.streams = {cuda_stream_default};
    options.block_bytes = pool_block_bytes;
    random_sequence_result result;
    run_random_sequence(pool, upstream, options, live, result);
    if (HasFatalFailure()) { return; }
    free_all(pool, live, cuda_stream_default);
    pool.check_invariants();
    EXPECT_EQ(pool.bytes_in_use(), 0U);
    pool.flush_thread_caches();  // cached blocks coalesce only in the shared lists
    pool.check_invariants();
    EXPECT_EQ(pool.free_block_count(), pool.chunk_count()) << "seed " << seed << ": not coalesced back to the chunks";
    pool.release();
    EXPECT_EQ(upstream.bytes_in_use(), 0U) << "seed " << seed;
    EXPECT_EQ(upstream.invalid_deallocations(), 0U) << "seed " << seed;
  }
}

// Several streams (created, legacy default, per-thread default): blocks move between streams through
// waits and merges. check_invariants() every 10 steps: the walk is the same, but each step may also merge
// lists, and 10 keeps the file's run time well under the budget while a broken step is still found within
// 10 operations of where it happened.
TEST(pool_memory_resource, random_sequences_across_streams_keep_the_invariants)
{
  backend_stream s1;
  backend_stream s2;
  backend_stream s3{0};  // a blocking stream
  for (std::uint64_t seed = 11; seed <= 13; ++seed) {
    mr::simulated_memory_resource upstream{80 * GiB};
    mr::pool_memory_resource pool{&upstream, 4 * GiB};
    std::map<std::uintptr_t, live_block> live;
    random_sequence_options options;
    options.seed = seed;
    options.operations = 15'000;
    options.check_every = 10;
    options.max_log2_size = 30.0;
    options.streams = {s1.get(), s2.get(), s3.get(), cuda_stream_default, cuda_stream_per_thread};
    options.block_bytes = pool_block_bytes;
    random_sequence_result result;
    run_random_sequence(pool, upstream, options, live, result);
    if (HasFatalFailure()) { return; }
    free_all(pool, live, s2.get());
    pool.check_invariants();
    pool.release();  // merges every stream's list: everything is wholly free
    EXPECT_EQ(pool.free_block_count(), 0U);
    EXPECT_EQ(upstream.bytes_in_use(), 0U) << "seed " << seed;
  }
}

// ---- failure injection ----------------------------------------------------------------------------------------

// The simulated upstream refuses 60% of the requests at random. Every 250 operations everything is freed
// and released, so that the pool keeps growing from nothing and going back to the upstream (the pool's own
// retries, halving and reclaiming, hide most single failures). Every failure must reach the caller as
// out_of_memory, the invariants must hold after every step, and nothing may leak.
TEST(pool_memory_resource, random_upstream_failures_surface_as_out_of_memory_and_leak_nothing)
{
  cuda_stream s1;  // a gpumem stream: its frees go through the thread cache
  for (std::uint64_t seed = 21; seed <= 24; ++seed) {
    mr::simulated_memory_resource upstream{80 * GiB};
    random_sequence_result result;
    {
      mr::pool_memory_resource pool{&upstream};
      upstream.fail_randomly(0.6, seed);
      std::map<std::uintptr_t, live_block> live;
      for (std::uint64_t round = 0; round < 20; ++round) {
        random_sequence_options options;
        options.seed = seed * 100 + round;
        options.operations = 250;
        options.max_log2_size = 32.0;  // up to 4 GiB: the 80 GiB run out too
        options.streams = {s1.value(), cuda_stream_default};
        options.failures_expected = true;
        options.block_bytes = pool_block_bytes;
        run_random_sequence(pool, upstream, options, live, result);
        if (HasFatalFailure()) { return; }
        if (round % 2 == 1) { free_all(pool, live, s1.value()); }
        pool.release();
        pool.check_invariants();
        EXPECT_EQ(pool.pool_size(), upstream.bytes_in_use());
      }
      upstream.clear_failures();
      free_all(pool, live, s1.value());
      pool.check_invariants();
      EXPECT_EQ(pool.bytes_in_use(), 0U);
      pool.release();
      EXPECT_EQ(upstream.bytes_in_use(), 0U) << "seed " << seed;
      // Leave a chunk with an outstanding allocation for the destructor.
      (void)pool.allocate(7 * MiB, s1.value());
    }
    EXPECT_GT(result.failures, 10U) << "seed " << seed << ": the injected failures never reached the caller";
    EXPECT_GT(upstream.injected_failures(), 10U) << "seed " << seed;
    EXPECT_GT(result.allocations, 1000U) << "seed " << seed;
    EXPECT_EQ(upstream.bytes_in_use(), 0U) << "seed " << seed;
    EXPECT_EQ(upstream.invalid_deallocations(), 0U);
  }
}

// ---- stream ordering (real memory) ------------------------------------------------------------------------------

// Memory freed on stream A while A's earlier work (a memset held back by a gate) is pending must not be
// used by stream B before that work completes: B's memset must wait, so B's value is the one that stays.
// Here the block is still in the freeing thread's cache when B asks: the pool is at its maximum, so B's
// request empties the thread caches into the shared lists (recording A's event) before it would fail.
TEST(pool_memory_resource, a_block_freed_on_a_busy_stream_reaches_another_stream_only_after_that_work)
{
  mr::pool_memory_resource pool{&cuda_upstream(), 64 * KiB, 64 * KiB};  // one block: B can only get A's
  expect_block_reaches_another_stream_only_after_pending_work(pool, 64 * KiB);
  pool.check_invariants();
}

// The same after an explicit flush_thread_caches(): the block waits in A's shared list under A's event.
TEST(pool_memory_resource, a_flushed_block_freed_on_a_busy_stream_reaches_another_stream_only_after_that_work)
{
  mr::pool_memory_resource pool{&cuda_upstream(), 64 * KiB, 64 * KiB};
  expect_block_reaches_another_stream_only_after_pending_work(pool, 64 * KiB, [&pool] {
    pool.flush_thread_caches();
    EXPECT_EQ(pool.bytes_in_thread_caches(), 0U);
  });
  pool.check_invariants();
}

// The transitive case that RMM's merge misses: A frees x (pending work), B merges A's list to serve a
// larger request and keeps the rest of x in its own list, then D takes that rest from B's list. D must be
// ordered after A's work too, which holds only if B's event is recorded after B's wait on A.
TEST(pool_memory_resource, blocks_merged_into_another_stream_keep_their_ordering_for_a_third_stream)
{
  constexpr std::size_t n = 1 * MiB;
  detail::backend& backend = detail::get_backend();
  mr::pool_memory_resource pool{&cuda_upstream(), 3 * n, 3 * n};  // one chunk, no growth
  backend_stream a;
  backend_stream b;
  backend_stream c;
  backend_stream d;
  void* y = pool.allocate(n, a.get());
  void* x = pool.allocate(n, a.get());
  void* z = pool.allocate(n, a.get());
  ASSERT_EQ(static_cast<char*>(x), static_cast<char*>(y) + n);
  ASSERT_EQ(static_cast<char*>(z), static_cast<char*>(x) + n);
  gate held;
  held.hold(a.get());
  backend.memset_async(x, 0xAA, n, a.get());
  pool.deallocate(x, n, a.get());  // pending behind the gate
  pool.deallocate(y, n, c.get());  // never used: idle
  void* w = pool.allocate(n + n / 2, b.get());  // fits only once A's and C's lists are merged into B's
  ASSERT_EQ(w, y);
  void* v = pool.allocate(n / 2, d.get());  // the rest of x, from B's list
  ASSERT_EQ(v, static_cast<char*>(x) + n / 2);
  backend.memset_async(v, 0xDD, n / 2, d.get());
  std::atomic<bool> d_ran{false};
  auto mark = [&d_ran] { d_ran.store(true); };
  on_stream(d.get(), mark);
  std::this_thread::sleep_for(std::chrono::milliseconds{50});
  EXPECT_FALSE(d_ran.load()) << "D used memory that A's held-back work still writes";
  held.release();
  for (auto const* s : {&a, &b, &c, &d}) { backend.stream_synchronize(s->get()); }
  EXPECT_TRUE(is_filled_with(v, n / 2, 0xDD, d.get())) << "A's pending memset ran after D's";
  pool.deallocate(v, n / 2, d.get());
  pool.deallocate(w, n + n / 2, b.get());
  pool.deallocate(z, n, a.get());
  pool.check_invariants();
}

// The per-thread default stream names a different stream on each thread: a block freed on thread 1's
// (held back) must not be used by thread 2's before thread 1's work completes.
TEST(pool_memory_resource, per_thread_default_streams_of_two_threads_are_two_streams)
{
  constexpr std::size_t bytes = 64 * KiB;
  detail::backend& backend = detail::get_backend();
  // At its maximum: thread 2 gets thread 1's block only by emptying thread 1's cache, which moves it to
  // the legacy default stream's list (ordered after every blocking stream's earlier work).
  mr::pool_memory_resource pool{&cuda_upstream(), bytes, bytes};
  gate held;
  void* p = nullptr;
  std::atomic<bool> freed{false};
  std::atomic<bool> finish{false};
  std::thread first{[&] {
    p = pool.allocate(bytes, cuda_stream_per_thread);
    held.hold(cudaStreamPerThread);
    backend.memset_async(p, 0xAA, bytes, cudaStreamPerThread);
    pool.deallocate(p, bytes, cuda_stream_per_thread);
    freed.store(true);
    while (!finish.load()) { std::this_thread::sleep_for(std::chrono::milliseconds{1}); }
    backend.stream_synchronize(cudaStreamPerThread);
  }};
  while (!freed.load()) { std::this_thread::sleep_for(std::chrono::milliseconds{1}); }
  void* q = nullptr;
  std::atomic<bool> second_ran{false};
  auto mark = [&second_ran] { second_ran.store(true); };
  std::thread second{[&] {
    q = pool.allocate(bytes, cuda_stream_per_thread);
    backend.memset_async(q, 0xBB, bytes, cudaStreamPerThread);
    on_stream(cudaStreamPerThread, mark);
    while (!finish.load()) { std::this_thread::sleep_for(std::chrono::milliseconds{1}); }
    backend.stream_synchronize(cudaStreamPerThread);
  }};
  std::this_thread::sleep_for(std::chrono::milliseconds{50});
  EXPECT_FALSE(second_ran.load()) << "thread 2's stream used the block before thread 1's work completed";
  held.release();
  finish.store(true);
  first.join();
  second.join();
  ASSERT_EQ(q, p) << "the test needs thread 2 to receive thread 1's block";
  backend_stream s;
  EXPECT_TRUE(is_filled_with(q, bytes, 0xBB, s.get()));
  pool.deallocate(q, bytes, s.get());
}

// ---- threads ---------------------------------------------------------------------------------------------------

// 16 threads, each on its own stream (some on the per-thread default stream), mixed sizes; every block is
// written on its allocating stream, then handed to a random other thread, which checks it and frees it on
// its own stream. The pattern check finds any block handed out twice.
/// A simulated upstream whose allocations take a while, so that concurrent misses overlap.
class slow_upstream final : public mr::device_memory_resource {
 public:
  mr::simulated_memory_resource inner;

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    std::this_thread::sleep_for(std::chrono::milliseconds{30});
    return inner.allocate(bytes, stream);
  }
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override
  {
    inner.deallocate(ptr, bytes, stream);
  }
};

TEST(pool_memory_resource, concurrent_misses_wait_for_one_growth_instead_of_each_growing)
{
  // Eight threads on eight streams miss at once in an empty pool. Had each grown by the pool's size (as
  // it stood plus what was being grown), the pool would hold 1+1+2+4+...+64 = 128 MiB for 8 MiB live.
  slow_upstream upstream;
  constexpr int threads = 8;
  std::vector<cudaStream_t> streams;
  for (int i = 0; i < threads; ++i) { streams.push_back(detail::get_backend().stream_create(cudaStreamNonBlocking, 0)); }
  {
    mr::pool_memory_resource pool{&upstream};
    std::vector<void*> blocks(threads);
    std::atomic<int> ready{0};
    std::vector<std::thread> workers;
    for (int i = 0; i < threads; ++i) {
      workers.emplace_back([&, i] {
        ++ready;
        while (ready.load() < threads) { std::this_thread::yield(); }
        blocks[static_cast<std::size_t>(i)] = pool.allocate(MiB, cuda_stream_view{streams[static_cast<std::size_t>(i)]});
      });
    }
    for (auto& w : workers) { w.join(); }
    EXPECT_LE(pool.pool_size(), 16 * MiB) << "concurrent growths multiplied the pool";
    pool.check_invariants();
    for (int i = 0; i < threads; ++i) {
      pool.deallocate(blocks[static_cast<std::size_t>(i)], MiB, cuda_stream_view{streams[static_cast<std::size_t>(i)]});
    }
  }
  EXPECT_EQ(upstream.inner.bytes_in_use(), 0U);
  for (auto s : streams) {
    mr::before_stream_destroy(cuda_stream_view{s});
    detail::get_backend().stream_destroy(s);
  }
}

TEST(pool_memory_resource, sixteen_threads_with_cross_thread_frees)
{
  mr::pool_memory_resource pool{&cuda_upstream(), 16 * MiB};
  EXPECT_EQ(run_cross_thread_stress(pool, 16, 150, 100, [](std::mt19937_64& rng) { return log_uniform_size(rng, 21.0); }), 0);
  EXPECT_EQ(pool.bytes_in_use(), 0U);
  pool.check_invariants();
  pool.release();
  EXPECT_EQ(pool.pool_size(), 0U);
}

// The same on a simulated upstream, without touching memory: many more operations, random streams, and
// the books checked once all threads are done.
TEST(pool_memory_resource, sixteen_threads_on_a_simulated_upstream_keep_the_books)
{
  constexpr int thread_count = 16;
  mr::simulated_memory_resource upstream{80 * GiB};
  mr::pool_memory_resource pool{&upstream, 1 * GiB};
  std::vector<std::thread> threads;
  std::atomic<int> overlaps{0};
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([&pool, &overlaps, t] {
      backend_stream own;
      std::mt19937_64 rng{static_cast<std::uint64_t>(t) + 7};
      std::map<std::uintptr_t, std::size_t> live;
      for (int i = 0; i < 2000; ++i) {
        cuda_stream_view const stream = rng() % 3 == 0 ? cuda_stream_per_thread : cuda_stream_view{own.get()};
        if (live.empty() || (live.size() < 64 && rng() % 2 == 0)) {
          std::size_t const bytes = log_uniform_size(rng, 26.0);
          auto const address = reinterpret_cast<std::uintptr_t>(pool.allocate(bytes, stream));
          auto const next = live.lower_bound(address);
          if (next != live.end() && address + pool_block_bytes(bytes) > next->first) { overlaps.fetch_add(1); }
          live.emplace(address, bytes);
        } else {
          auto it = live.begin();
          std::advance(it, static_cast<std::ptrdiff_t>(rng() % live.size()));
          pool.deallocate(reinterpret_cast<void*>(it->first), it->second, stream);  // NOLINT
          live.erase(it);
        }
      }
      for (auto const& [address, bytes] : live) {
        pool.deallocate(reinterpret_cast<void*>(address), bytes, own.get());  // NOLINT
      }
    });
  }
  for (auto& thread : threads) { thread.join(); }
  EXPECT_EQ(overlaps.load(), 0);
  pool.check_invariants();
  EXPECT_EQ(pool.bytes_in_use(), 0U);
  EXPECT_EQ(pool.pool_size(), upstream.bytes_in_use());
  pool.release();
  EXPECT_EQ(upstream.bytes_in_use(), 0U);
}

}  // namespace
}  // namespace gpumem::test

namespace gpumem::test {
namespace {

TEST(pool_memory_resource, non_blocking_attempts_use_only_the_threads_cache)
{
  mr::simulated_memory_resource upstream;
  mr::pool_memory_resource pool{&upstream, 4 * MiB};
  EXPECT_EQ(pool.try_allocate_without_blocking(1000), nullptr) << "an empty thread cache must not serve";
  EXPECT_EQ(pool.try_allocate_without_blocking(0), nullptr);
  void* const p = pool.allocate(1000);
  void* const q = pool.allocate(1000);
  pool.deallocate(p, 1000);  // the slot of 1024-byte blocks now exists in this thread's cache
  EXPECT_TRUE(pool.try_deallocate_without_blocking(q, 1000)) << "a slot with room must take the block";
  void* const again = pool.try_allocate_without_blocking(1000);
  EXPECT_EQ(again, q) << "the most recently cached block comes back";
  EXPECT_EQ(pool.bytes_in_use(), 1024U);
  EXPECT_FALSE(pool.try_deallocate_without_blocking(again, 1000, cuda_stream_view{cudaStreamPerThread}))
    << "no slot for that stream: nothing may leave the cache, so the attempt must refuse";
  EXPECT_TRUE(pool.try_deallocate_without_blocking(nullptr, 1000));
  pool.deallocate(again, 1000);
  EXPECT_EQ(pool.try_allocate_without_blocking(64 * MiB), nullptr) << "above the cached sizes";
  pool.flush_thread_caches();
  EXPECT_EQ(pool.bytes_in_use(), 0U);
  pool.check_invariants();
}

// RMM's PoolTest.DeletedStream: a stream made with cudaStreamCreate, used, and destroyed without telling
// the pool; then the pool serves the default stream, flushes and releases. The host backend aborts if the
// pool ever touches the destroyed stream again.
TEST(pool_memory_resource, a_stream_destroyed_after_use_is_never_touched_again)
{
  mr::pool_memory_resource pool{&cuda_upstream(), 4 * MiB};
  detail::backend& backend = detail::get_backend();
  cudaStream_t const stream = backend.stream_create(cudaStreamNonBlocking, 0);
  void* const p = pool.allocate(1000, cuda_stream_view{stream});
  pool.deallocate(p, 1000, cuda_stream_view{stream});
  backend.stream_destroy(stream);
  void* const q = pool.allocate(1000);
  pool.deallocate(q, 1000);
  pool.flush_thread_caches();
  pool.check_invariants();
  pool.release();
  EXPECT_EQ(pool.bytes_in_use(), 0U);
}

TEST(pool_memory_resource, a_double_free_found_in_a_shared_list_is_dropped_and_the_books_stay_balanced)
{
  mr::simulated_memory_resource upstream;
  mr::pool_memory_resource pool{&upstream, 4 * MiB};
  backend_stream foreign;  // not cached: every free goes to the shared list at once
  cuda_stream_view const s{foreign.get()};
  void* const p = pool.allocate(1000, s);
  void* const q = pool.allocate(1000, s);
  pool.deallocate(p, 1000, s);
  EXPECT_THROW(pool.checked_deallocate(p, 1000, s), logic_error) << "p overlaps a free block of the list";
  pool.deallocate(p, 1000, s);  // logged and dropped, never std::terminate
  pool.check_invariants();
  EXPECT_EQ(pool.bytes_in_use(), 1024U) << "only q is in use";
  void* const a = pool.allocate(1000, s);
  void* const b = pool.allocate(1000, s);
  EXPECT_NE(a, b) << "the block freed twice must not be handed out twice";
  for (void* x : {q, a, b}) { pool.deallocate(x, 1000, s); }
  pool.check_invariants();
  EXPECT_EQ(pool.bytes_in_use(), 0U);
}

TEST(pool_memory_resource, a_pointer_it_never_handed_out_is_refused_and_never_handed_out)
{
  mr::simulated_memory_resource upstream;
  mr::pool_memory_resource pool{&upstream, 4 * MiB};
  void* const mine = pool.allocate(1000);
  void* const foreign = upstream.allocate(4096);  // not from the pool
  EXPECT_THROW(pool.checked_deallocate(foreign, 4096), logic_error);
  EXPECT_THROW(pool.checked_deallocate(static_cast<char*>(mine) + 4 * MiB, 1000), logic_error) << "past its chunk";
  backend_stream other;  // not cached: the block reaches a shared list during the call
  pool.deallocate(foreign, 4096, cuda_stream_view{other.get()});  // logged and ignored
  pool.flush_thread_caches();
  pool.check_invariants();
  for (int i = 0; i < 64; ++i) {
    void* p = pool.allocate(4096);
    EXPECT_NE(p, foreign) << "a pointer the pool never owned was handed out";
    pool.deallocate(p, 4096);
  }
  pool.deallocate(mine, 1000);
  upstream.deallocate(foreign, 4096);
  pool.check_invariants();
}

TEST(pool_memory_resource, resources_without_a_non_blocking_path_refuse)
{
  mr::simulated_memory_resource upstream;
  EXPECT_EQ(upstream.try_allocate_without_blocking(256), nullptr);
  void* const p = upstream.allocate(256);
  EXPECT_FALSE(upstream.try_deallocate_without_blocking(p, 256));
  upstream.deallocate(p, 256);
  EXPECT_EQ(upstream.bytes_in_use(), 0U);
}

}  // namespace
}  // namespace gpumem::test
