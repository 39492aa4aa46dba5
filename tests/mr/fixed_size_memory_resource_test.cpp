// fixed_size_memory_resource: the conformance battery (over cuda_memory_resource), then its own behaviour:
// block sizes and batches, requests above the block size, LIFO reuse, smaller batches when the upstream
// refuses, release of wholly free batches only, random sequences at 80 GiB scale on a simulated upstream,
// failure injection, stream ordering (held back by a gate) and a 16-thread stress.
#include "conformance/resource_battery.hpp"
#include "support/gate.hpp"
#include "support/memory_checks.hpp"
#include "support/sub_allocator_checks.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/fixed_size_memory_resource.hpp>
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
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace gpumem::test {
namespace {


// The battery asks for up to 16 MiB + 17 bytes, so the blocks are that large; 4 blocks per batch.
struct fixed_size_factory {
  static std::unique_ptr<mr::device_memory_resource> make()
  {
    return std::make_unique<mr::fixed_size_memory_resource>(&cuda_upstream(), 16 * MiB + 256, 4, 0);
  }
  static constexpr char const* name = "fixed_size_memory_resource";
  static constexpr bool oversubscription_safe = true;
};

}  // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(fixed_size_memory_resource, resource_battery, fixed_size_factory);

namespace {

TEST(fixed_size_memory_resource, construction_rounds_the_block_size_and_checks_its_arguments)
{
  mr::simulated_memory_resource upstream;
  {
    mr::fixed_size_memory_resource r{&upstream, 1000, 8, 2};
    EXPECT_EQ(r.block_size(), 1024U);
    EXPECT_EQ(r.blocks_per_batch(), 8U);
    EXPECT_EQ(r.pool_size(), 2 * 8 * 1024U);
    EXPECT_EQ(r.chunk_count(), 2U);
    EXPECT_EQ(r.free_block_count(), 16U);
    EXPECT_EQ(r.largest_free_block(), 1024U);
    r.check_invariants();
    mr::fixed_size_memory_resource defaults{&upstream};
    EXPECT_EQ(defaults.block_size(), mr::fixed_size_memory_resource::default_block_size);
    EXPECT_EQ(defaults.blocks_per_batch(), 128U);
    EXPECT_EQ(defaults.pool_size(), 128 * MiB) << "one batch is preallocated by default, as RMM does";
  }
  EXPECT_EQ(upstream.bytes_in_use(), 0U);
  EXPECT_THROW(mr::fixed_size_memory_resource(&upstream, 0), logic_error);
  EXPECT_THROW(mr::fixed_size_memory_resource(&upstream, 256, 0), logic_error);
  EXPECT_THROW(mr::fixed_size_memory_resource(&upstream, std::size_t{1} << 40, std::size_t{1} << 30), logic_error);
  EXPECT_THROW(mr::fixed_size_memory_resource(nullptr), logic_error);
  mr::fixed_size_memory_resource tiny{&upstream, 1, 1, 0};
  EXPECT_EQ(tiny.block_size(), 256U);
}

TEST(fixed_size_memory_resource, every_request_up_to_the_block_size_gets_a_whole_distinct_block)
{
  mr::simulated_memory_resource upstream;
  mr::fixed_size_memory_resource r{&upstream, 4 * KiB, 4, 0};
  std::set<void*> seen;
  std::vector<std::pair<void*, std::size_t>> live;
  for (std::size_t const bytes : {std::size_t{1}, std::size_t{255}, std::size_t{256}, std::size_t{4095},
                                  std::size_t{4096}, std::size_t{3000}}) {
    void* p = r.allocate(bytes);
    EXPECT_TRUE(seen.insert(p).second);
    live.emplace_back(p, bytes);
  }
  EXPECT_EQ(r.bytes_in_use(), 6 * 4 * KiB);
  EXPECT_EQ(r.chunk_count(), 2U) << "refilled in batches of 4";
  EXPECT_EQ(r.pool_size(), 8 * 4 * KiB);
  r.check_invariants();
  for (auto [p, bytes] : live) { r.deallocate(p, bytes); }
  EXPECT_EQ(r.bytes_in_use(), 0U);
  EXPECT_EQ(r.free_block_count(), 8U);
  r.check_invariants();
}

TEST(fixed_size_memory_resource, a_request_above_the_block_size_is_out_of_memory_naming_both_sizes)
{
  mr::simulated_memory_resource upstream;
  mr::fixed_size_memory_resource r{&upstream, 4 * KiB, 4, 0};
  try {
    (void)r.allocate(4 * KiB + 1);
    FAIL() << "a request above the block size was served";
  } catch (out_of_memory const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find("fixed_size_memory_resource"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(4 * KiB + 1)), std::string::npos) << what;
    EXPECT_NE(what.find("block size " + format_bytes(4 * KiB)), std::string::npos) << what;
  }
  EXPECT_EQ(upstream.total_allocations(), 0U);
}

TEST(fixed_size_memory_resource, the_last_block_freed_on_a_stream_is_the_next_one_handed_out)
{
  mr::simulated_memory_resource upstream;
  mr::fixed_size_memory_resource r{&upstream, 4 * KiB, 16, 1};
  backend_stream s;
  void* a = r.allocate(100, s.get());
  void* b = r.allocate(100, s.get());
  EXPECT_LT(a, b) << "a new batch is handed out from its lowest address";
  r.deallocate(a, 100, s.get());
  EXPECT_EQ(r.allocate(100, s.get()), a);
  r.deallocate(b, 100, s.get());
  r.deallocate(a, 100, s.get());
}

TEST(fixed_size_memory_resource, asks_for_fewer_blocks_when_the_upstream_refuses_then_reclaims)
{
  mr::simulated_memory_resource upstream{3 * 4 * KiB};  // room for 3 blocks
  mr::fixed_size_memory_resource r{&upstream, 4 * KiB, 4, 0};
  void* a = r.allocate(1);  // 4 blocks refused, 2 granted
  EXPECT_EQ(r.pool_size(), 2 * 4 * KiB);
  void* b = r.allocate(1);
  void* c = r.allocate(1);  // 4 refused, 2 refused, 1 granted
  EXPECT_EQ(r.pool_size(), 3 * 4 * KiB);
  EXPECT_EQ(r.chunk_count(), 2U);
  EXPECT_THROW((void)r.allocate(1), out_of_memory);
  r.check_invariants();
  r.deallocate(a, 1);
  r.deallocate(b, 1);
  r.deallocate(c, 1);
  r.check_invariants();
  EXPECT_EQ(r.free_block_count(), 3U);
  r.release();
  EXPECT_EQ(upstream.bytes_in_use(), 0U);
}

TEST(fixed_size_memory_resource, release_returns_only_batches_whose_every_block_is_free)
{
  mr::simulated_memory_resource upstream;
  mr::fixed_size_memory_resource r{&upstream, 4 * KiB, 2, 0};
  backend_stream s1;
  backend_stream s2;
  void* a = r.allocate(1, s1.get());  // batch 1
  void* b = r.allocate(1, s1.get());  // batch 1
  void* c = r.allocate(1, s2.get());  // batch 2
  r.deallocate(a, 1, s2.get());  // the two blocks of batch 1 come back on different streams
  r.deallocate(b, 1, s1.get());
  r.release();
  EXPECT_EQ(r.chunk_count(), 1U);
  EXPECT_EQ(upstream.bytes_in_use(), 2 * 4 * KiB) << "RMM's release would also free the batch in use";
  r.check_invariants();
  r.deallocate(c, 1, s2.get());
  r.release();
  EXPECT_EQ(upstream.bytes_in_use(), 0U);
  EXPECT_EQ(r.free_block_count(), 0U);
}

// 3 seeds x 30,000 operations; the block size is 64 MiB and a batch 16 blocks, so the live set spans tens
// of GiB of the 80. check_invariants() (a sort of every free block, ~1,000 of them) every 8 steps, the books
// at every step: the walk dominates the run time, and 8 still places a broken step within 8 operations.
TEST(fixed_size_memory_resource, random_sequences_on_80_gib_keep_the_invariants)
{
  backend_stream s1;
  backend_stream s2;
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    mr::simulated_memory_resource upstream{80 * GiB};
    mr::fixed_size_memory_resource r{&upstream, 64 * MiB, 16, 0};
    std::map<std::uintptr_t, live_block> live;
    random_sequence_options options;
    options.seed = seed;
    options.operations = 30'000;
    options.check_every = 8;
    options.max_log2_size = 26.0;  // 1 B .. 64 MiB
    options.max_live = 600;
    options.streams = seed == 1 ? std::vector<cuda_stream_view>{cuda_stream_default}
                                : std::vector<cuda_stream_view>{s1.get(), s2.get(), cuda_stream_per_thread};
    options.block_bytes = [](std::size_t) { return 64 * MiB; };
    random_sequence_result result;
    run_random_sequence(r, upstream, options, live, result);
    if (HasFatalFailure()) { return; }
    free_all(r, live, s1.get());
    r.check_invariants();
    EXPECT_EQ(r.free_block_count() * 64 * MiB, r.pool_size());
    r.release();
    EXPECT_EQ(upstream.bytes_in_use(), 0U) << "seed " << seed;
  }
}

TEST(fixed_size_memory_resource, random_upstream_failures_surface_as_out_of_memory_and_leak_nothing)
{
  backend_stream s1;
  for (std::uint64_t seed = 31; seed <= 33; ++seed) {
    mr::simulated_memory_resource upstream{80 * GiB};
    random_sequence_result result;
    {
      mr::fixed_size_memory_resource r{&upstream, 256 * MiB, 1, 0};  // 1 block per batch: fewer retries to hide a failure
      upstream.fail_randomly(0.6, seed);
      std::map<std::uintptr_t, live_block> live;
      for (std::uint64_t round = 0; round < 20; ++round) {
        random_sequence_options options;
        options.seed = seed * 100 + round;
        options.operations = 250;
        options.max_log2_size = 28.0;
        options.streams = {s1.get(), cuda_stream_default};
        options.failures_expected = true;
        options.block_bytes = [](std::size_t) { return 256 * MiB; };
        run_random_sequence(r, upstream, options, live, result);
        if (HasFatalFailure()) { return; }
        if (round % 2 == 1) { free_all(r, live, s1.get()); }
        r.release();
        r.check_invariants();
        EXPECT_EQ(r.pool_size(), upstream.bytes_in_use());
      }
      upstream.clear_failures();
      free_all(r, live, s1.get());
      r.release();
      EXPECT_EQ(upstream.bytes_in_use(), 0U) << "seed " << seed;
      (void)r.allocate(1, s1.get());  // outstanding: the destructor returns its batch
    }
    EXPECT_GT(result.failures, 5U) << "seed " << seed << ": the injected failures never reached the caller";
    EXPECT_GT(result.allocations, 1000U) << "seed " << seed;
    EXPECT_EQ(upstream.bytes_in_use(), 0U) << "seed " << seed;
    EXPECT_EQ(upstream.invalid_deallocations(), 0U);
  }
}

// Memory freed on stream A while A's work on it is held back must reach stream B only after that work.
TEST(fixed_size_memory_resource, a_block_freed_on_a_busy_stream_reaches_another_stream_only_after_that_work)
{
  mr::fixed_size_memory_resource r{&cuda_upstream(), 64 * KiB, 1, 1};  // one block
  // The resource has no maximum (B would grow): flush A's cached block to A's shared list first.
  expect_block_reaches_another_stream_only_after_pending_work(r, 64 * KiB, [&r] { r.flush_thread_caches(); });
  r.check_invariants();
}

// 16 threads, own streams (a quarter on the per-thread default stream), blocks written on the allocating
// stream and freed by a random other thread on its stream; the pattern check finds a block handed out twice.
TEST(fixed_size_memory_resource, sixteen_threads_with_cross_thread_frees)
{
  constexpr std::size_t block = 64 * KiB;
  mr::fixed_size_memory_resource r{&cuda_upstream(), block, 32, 1};
  EXPECT_EQ(run_cross_thread_stress(r, 16, 150, 200, [](std::mt19937_64& rng) { return 1 + rng() % block; }), 0);
  EXPECT_EQ(r.bytes_in_use(), 0U);
  r.check_invariants();
  r.release();
  EXPECT_EQ(r.pool_size(), 0U);
}

}  // namespace
}  // namespace gpumem::test
