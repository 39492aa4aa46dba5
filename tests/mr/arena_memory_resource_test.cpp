// arena_memory_resource: the conformance battery (over cuda_memory_resource with a 1 GiB arena), plus its own
// behaviour: construction from the upstream, per-thread and per-stream arenas, superblocks going back, large
// blocks, out of memory with defragmentation, more threads and streams than superblocks (the global arena's
// remainder, other arenas' free space), random sequences at "80 GiB" scale on the simulated upstream, 16
// threads freeing each other's blocks, and the stream-ordering rules (held back with test::gate).
#include "conformance/resource_battery.hpp"
#include "support/gate.hpp"
#include "support/memory_checks.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/arena_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace gpumem::test {
namespace {

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t GiB = std::size_t{1} << 30;

struct arena_resource_factory {
  static std::unique_ptr<mr::device_memory_resource> make()
  {
    static mr::cuda_memory_resource upstream;  // stateless; outlives every arena made here
    return std::make_unique<mr::arena_memory_resource>(&upstream, GiB);
  }
  static constexpr char const* name = "arena_memory_resource";
  static constexpr bool oversubscription_safe = true;
};

#ifdef GPUMEM_HAS_CUDA_MR
static_assert(!cuda::mr::async_resource_with<mr::arena_memory_resource, cuda::mr::host_accessible>);
#endif

}  // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(arena_memory_resource, resource_battery, arena_resource_factory);

namespace {

std::uintptr_t address(void const* p) { return reinterpret_cast<std::uintptr_t>(p); }

/// Live blocks by address; insert() fails the test when a new block overlaps a live one.
class live_blocks {
 public:
  void insert(void* p, std::size_t bytes)
  {
    std::lock_guard lock{mutex_};
    std::uintptr_t const begin = address(p);
    std::uintptr_t const end = begin + detail::align_up(bytes, 256);
    auto const next = blocks_.lower_bound(begin);
    if (next != blocks_.end() && next->first < end) { ADD_FAILURE() << "block at " << begin << " overlaps a live one"; }
    if (next != blocks_.begin() && std::prev(next)->second > begin) {
      ADD_FAILURE() << "block at " << begin << " overlaps a live one";
    }
    blocks_[begin] = end;
  }
  void erase(void* p)
  {
    std::lock_guard lock{mutex_};
    blocks_.erase(address(p));
  }

 private:
  std::mutex mutex_;
  std::map<std::uintptr_t, std::uintptr_t> blocks_;  // begin -> end
};

/// Everything freed, the local arenas' empty superblocks given back: the global arena is whole again.
void expect_all_memory_back(mr::arena_memory_resource& r)
{
  r.check_invariants();
  r.defragment();
  r.check_invariants();
  EXPECT_EQ(r.global_free_bytes(), r.arena_size());
  EXPECT_EQ(r.global_free_range_count(), 1U) << r.dump_state();
  EXPECT_EQ(r.global_largest_free_range(), r.arena_size());
  EXPECT_EQ(r.invalid_deallocations(), 0U);
}

// ---- construction ---------------------------------------------------------------------------------------

TEST(arena_memory_resource, takes_the_whole_arena_from_the_upstream_in_one_allocation)
{
  mr::simulated_memory_resource upstream{80 * GiB};
  {
    mr::arena_memory_resource r{&upstream, 64 * GiB};
    EXPECT_EQ(upstream.allocation_count(), 1U);
    EXPECT_EQ(upstream.bytes_in_use(), 64 * GiB);
    EXPECT_EQ(r.arena_size(), 64 * GiB);
    EXPECT_EQ(r.global_free_bytes(), 64 * GiB);
    EXPECT_EQ(r.arena_count(), 0U);
    EXPECT_EQ(r.upstream_resource(), &upstream);
    EXPECT_EQ(r.superblock_size(), 4 * MiB);
    EXPECT_EQ(r.large_allocation_threshold(), MiB);
    void* p = r.allocate(1000);
    void* q = r.allocate(512 * MiB);
    EXPECT_EQ(upstream.total_allocations(), 1U) << "allocations never reach the upstream";
    r.deallocate(p, 1000);
    r.deallocate(q, 512 * MiB);
    r.check_invariants();
  }
  EXPECT_EQ(upstream.bytes_in_use(), 0U) << "the arena goes back at destruction";
  EXPECT_EQ(upstream.invalid_deallocations(), 0U);
}

TEST(arena_memory_resource, default_arena_size_is_half_the_free_memory_of_the_current_device)
{
  // The simulated upstream stands in for the device, so no real memory is taken on a GPU.
  mr::simulated_memory_resource upstream{std::size_t{1} << 40};
  detail::backend& backend = detail::get_backend();
  std::size_t const free = backend.mem_info(backend.current_device()).free;
  mr::arena_memory_resource r{&upstream};
  EXPECT_EQ(r.arena_size(), detail::align_down(free / 2, 256));
  EXPECT_EQ(upstream.bytes_in_use(), r.arena_size());
}

TEST(arena_memory_resource, rejects_a_null_upstream_and_a_tiny_arena_by_name)
{
  EXPECT_THROW(mr::arena_memory_resource(nullptr, GiB), logic_error);
  mr::simulated_memory_resource upstream{GiB};
  try {
    mr::arena_memory_resource r{&upstream, 4096};
    ADD_FAILURE() << "a 4 KiB arena was accepted";
  } catch (logic_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("4096"), std::string::npos) << e.what();
  }
  EXPECT_EQ(upstream.total_allocations(), 0U);
}

TEST(arena_memory_resource, upstream_failure_at_construction_is_out_of_memory_naming_the_arena_and_the_cause)
{
  mr::simulated_memory_resource upstream{80 * GiB};
  upstream.fail_after(0);
  try {
    mr::arena_memory_resource r{&upstream, 8 * GiB};
    ADD_FAILURE() << "construction succeeded although the upstream failed";
  } catch (out_of_memory const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find("arena_memory_resource"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(8 * GiB)), std::string::npos) << what;
    EXPECT_NE(what.find("injected failure"), std::string::npos) << "the upstream's own reason: " << what;
  }
  upstream.clear_failures();
  mr::simulated_memory_resource small{GiB};
  EXPECT_THROW(mr::arena_memory_resource(&small, 2 * GiB), out_of_memory) << "an arena larger than the upstream";
}

// ---- arenas, superblocks, large blocks --------------------------------------------------------------------

TEST(arena_memory_resource, small_requests_take_a_superblock_large_ones_go_to_the_global_arena)
{
  mr::simulated_memory_resource upstream{GiB};
  mr::arena_memory_resource r{&upstream, 256 * MiB};
  std::size_t const sb = r.superblock_size();
  void* small = r.allocate(r.large_allocation_threshold());  // the largest small request
  EXPECT_EQ(r.arena_count(), 1U);
  EXPECT_EQ(r.global_free_bytes(), 256 * MiB - sb);
  void* large = r.allocate(r.large_allocation_threshold() + 1);
  EXPECT_EQ(r.arena_count(), 1U);
  EXPECT_EQ(r.global_free_bytes(), 256 * MiB - sb - r.large_allocation_threshold() - 256);
  r.deallocate(large, r.large_allocation_threshold() + 1);
  EXPECT_EQ(r.global_free_bytes(), 256 * MiB - sb) << "a large block goes straight back";
  r.deallocate(small, r.large_allocation_threshold());
  EXPECT_EQ(r.global_free_bytes(), 256 * MiB - sb) << "the arena keeps its last superblock";
  expect_all_memory_back(r);
}

TEST(arena_memory_resource, one_arena_per_thread_for_both_default_streams_and_one_per_other_stream)
{
  mr::simulated_memory_resource upstream{GiB};
  mr::arena_memory_resource r{&upstream, 256 * MiB};
  void* a = r.allocate(100, cuda_stream_default);
  void* b = r.allocate(100, cuda_stream_per_thread);
  EXPECT_EQ(r.arena_count(), 1U) << "the legacy and per-thread default streams share the thread's arena";
  EXPECT_EQ(r.global_free_bytes(), 256 * MiB - r.superblock_size());
  std::thread other{[&] {
    void* c = r.allocate(100, cuda_stream_default);
    r.deallocate(c, 100, cuda_stream_default);
  }};
  other.join();
  EXPECT_EQ(r.arena_count(), 2U) << "another thread has its own arena";
  backend_stream s1;
  backend_stream s2;
  void* d = r.allocate(100, s1.get());
  void* e = r.allocate(100, s2.get());
  EXPECT_EQ(r.arena_count(), 4U) << "each other stream has its own arena";
  r.deallocate(a, 100, cuda_stream_default);
  r.deallocate(b, 100, cuda_stream_per_thread);
  r.deallocate(d, 100, s1.get());
  r.deallocate(e, 100, s2.get());
  expect_all_memory_back(r);
}

TEST(arena_memory_resource, an_arena_gives_emptied_superblocks_back_but_keeps_one_superblock_free)
{
  mr::simulated_memory_resource upstream{GiB};
  mr::arena_memory_resource r{&upstream, 256 * MiB};
  backend_stream stream;
  std::size_t const sb = r.superblock_size();
  std::size_t const block = r.large_allocation_threshold();
  std::vector<void*> blocks;
  for (std::size_t i = 0; i < 4 * (sb / block); ++i) { blocks.push_back(r.allocate(block, stream.get())); }
  EXPECT_EQ(r.global_free_bytes(), 256 * MiB - 4 * sb) << "four full superblocks";
  for (void* p : blocks) { r.deallocate(p, block, stream.get()); }
  EXPECT_EQ(r.global_free_bytes(), 256 * MiB - sb) << "three went back as they emptied; one stays cached";
  // The cached superblock serves the next request on that stream without the global arena.
  void* again = r.allocate(block, stream.get());
  EXPECT_EQ(r.global_free_bytes(), 256 * MiB - sb);
  r.deallocate(again, block, stream.get());
  expect_all_memory_back(r);
}

TEST(arena_memory_resource, invalid_deallocations_are_reported_and_change_nothing)
{
  mr::simulated_memory_resource upstream{GiB};
  mr::arena_memory_resource r{&upstream, 64 * MiB};
  void* p = r.allocate(1000);
  void* keep = r.allocate(1000);  // keeps the superblock from emptying
  void* large = r.allocate(2 * MiB);
  ::testing::internal::CaptureStderr();
  r.deallocate(p, 1000);
  r.deallocate(p, 1000);                                              // freed twice
  r.deallocate(reinterpret_cast<void*>(std::uintptr_t{1} << 50), 1000);  // never handed out
  r.deallocate(keep, 2 * MiB);                                        // a small block with a large size
  r.deallocate(keep, std::numeric_limits<std::size_t>::max());        // a size that overflows when rounded
  r.deallocate(large, 2 * MiB);
  r.deallocate(large, 2 * MiB);                                       // freed twice
  std::string const printed = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(r.invalid_deallocations(), 5U) << printed;
  EXPECT_THROW(r.checked_deallocate(p, 1000), logic_error) << "checked_deallocate reports a double free";
  EXPECT_EQ(r.invalid_deallocations(), 6U);
  EXPECT_NE(printed.find("arena_memory_resource"), std::string::npos) << printed;
  r.check_invariants();
  r.deallocate(keep, 1000);
  r.check_invariants();
  r.defragment();
  EXPECT_EQ(r.global_free_bytes(), r.arena_size());
}

// ---- out of memory ----------------------------------------------------------------------------------------

TEST(arena_memory_resource, out_of_memory_defragments_first_then_names_the_arena_state)
{
  mr::simulated_memory_resource upstream{GiB};
  std::size_t const arena = 64 * MiB;
  mr::arena_memory_resource r{&upstream, arena};
  std::size_t const sb = r.superblock_size();
  // Two streams each cache one empty superblock.
  backend_stream s1;
  backend_stream s2;
  for (auto const* s : {&s1, &s2}) {
    void* p = r.allocate(1000, s->get());
    r.deallocate(p, 1000, s->get());
  }
  EXPECT_EQ(r.global_free_bytes(), arena - 2 * sb);
  // Only the whole arena holds this: it succeeds once the cached superblocks are back and coalesced.
  void* whole = r.allocate(arena);
  EXPECT_EQ(r.global_free_bytes(), 0U);
  r.deallocate(whole, arena);

  try {
    void* p = r.allocate(arena + 256);
    r.deallocate(p, arena + 256);
    ADD_FAILURE() << "a request larger than the arena was served";
  } catch (out_of_memory const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find("arena_memory_resource"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(arena + 256)), std::string::npos) << what;
    EXPECT_NE(what.find("global free"), std::string::npos) << what;
    EXPECT_NE(what.find("largest free range"), std::string::npos) << what;
    EXPECT_NE(what.find("2 arenas"), std::string::npos) << what;
  }
  expect_all_memory_back(r);
}

TEST(arena_memory_resource, a_small_request_takes_what_the_global_arena_has_left_then_fails_cleanly)
{
  mr::simulated_memory_resource upstream{GiB};
  mr::arena_memory_resource r{&upstream, 16 * MiB, /*dump_log_on_failure=*/true};
  void* large = r.allocate(16 * MiB - 256);  // leaves 256 bytes: no superblock
  void* last = r.allocate(100);              // those 256 bytes, lent by the global arena itself
  EXPECT_EQ(r.global_free_bytes(), 0U);
  ::testing::internal::CaptureStderr();
  EXPECT_THROW((void)r.allocate(100), out_of_memory);
  std::string const dump = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(dump.find("arena state"), std::string::npos) << dump;
  EXPECT_NE(dump.find("arena 0 (per-thread)"), std::string::npos) << dump;
  r.deallocate(last, 100);
  r.deallocate(large, 16 * MiB - 256);
  void* p = r.allocate(100);
  r.deallocate(p, 100);
  expect_all_memory_back(r);
}

// ---- more threads and streams than superblocks ------------------------------------------------------------

TEST(arena_memory_resource, a_small_arena_serves_another_stream_while_a_thread_holds_a_block)
{
  mr::simulated_memory_resource upstream{GiB};
  mr::arena_memory_resource r{&upstream, 2 * MiB};
  EXPECT_GE(r.arena_size() / r.superblock_size(), 16U);
  void* held = r.allocate(256, cuda_stream_per_thread);
  backend_stream other;
  void* p = r.allocate(32 * KiB, other.get());
  r.deallocate(p, 32 * KiB, other.get());
  r.deallocate(held, 256, cuda_stream_per_thread);
  expect_all_memory_back(r);
}

/// Runs `count` threads that each allocate `bytes` on `stream` and hold the block until every thread has
/// one, then free it. @return the errors of the threads that got none.
std::vector<std::string> threads_each_holding_a_block(mr::arena_memory_resource& r, int count, std::size_t bytes,
                                                      cuda_stream_view stream)
{
  std::mutex mutex;
  std::condition_variable all_tried;
  int tried = 0;
  std::vector<std::string> errors;
  live_blocks overlap;
  std::vector<std::thread> threads;
  for (int t = 0; t < count; ++t) {
    threads.emplace_back([&] {
      void* p = nullptr;
      try {
        p = r.allocate(bytes, stream);
        overlap.insert(p, bytes);
      } catch (std::exception const& e) {
        std::lock_guard lock{mutex};
        errors.emplace_back(e.what());
      }
      {
        std::unique_lock lock{mutex};
        ++tried;
        all_tried.notify_all();
        all_tried.wait(lock, [&] { return tried == count; });
      }
      if (p != nullptr) {
        overlap.erase(p);
        r.deallocate(p, bytes, stream);
      }
    });
  }
  for (auto& thread : threads) { thread.join(); }
  return errors;
}

TEST(arena_memory_resource, five_threads_on_the_legacy_default_stream_each_hold_a_block_of_a_16_mib_arena)
{
  mr::simulated_memory_resource upstream{GiB};
  mr::arena_memory_resource r{&upstream, 16 * MiB};
  std::vector<std::string> const errors = threads_each_holding_a_block(r, 5, 256, cuda_stream_default);
  EXPECT_TRUE(errors.empty()) << errors.front();
  expect_all_memory_back(r);
}

TEST(arena_memory_resource, more_threads_than_superblocks_share_the_free_space_of_the_others)
{
  mr::simulated_memory_resource upstream{GiB};
  mr::arena_memory_resource r{&upstream, MiB};
  int const threads = static_cast<int>(r.arena_size() / r.superblock_size()) + 8;
  for (cuda_stream_view const stream : {cuda_stream_default, cuda_stream_per_thread}) {
    std::vector<std::string> const errors = threads_each_holding_a_block(r, threads, 256, stream);
    EXPECT_TRUE(errors.empty()) << errors.size() << " threads failed, the first: " << errors.front();
    r.check_invariants();
  }
  expect_all_memory_back(r);
}

TEST(arena_memory_resource, more_streams_than_superblocks_share_the_free_space_of_the_others)
{
  mr::simulated_memory_resource upstream{GiB};
  mr::arena_memory_resource r{&upstream, MiB};
  std::size_t const count = r.arena_size() / r.superblock_size() + 8;
  std::vector<std::unique_ptr<backend_stream>> streams;
  std::vector<void*> blocks;
  live_blocks overlap;
  for (std::size_t i = 0; i < count; ++i) {
    streams.push_back(std::make_unique<backend_stream>());
    void* p = r.allocate(256, streams.back()->get());
    overlap.insert(p, 256);
    blocks.push_back(p);
  }
  EXPECT_EQ(r.arena_count(), count);
  r.check_invariants();
  for (std::size_t i = 0; i < count; ++i) { r.deallocate(blocks[i], 256, streams[i]->get()); }
  expect_all_memory_back(r);
}

TEST(arena_memory_resource, a_large_request_is_served_from_a_local_arena_when_the_global_arena_is_empty)
{
  mr::simulated_memory_resource upstream{GiB};
  mr::arena_memory_resource r{&upstream, MiB};
  std::size_t const sb = r.superblock_size();
  std::size_t const block = r.large_allocation_threshold();
  backend_stream a;
  backend_stream b;
  // A takes every superblock, then keeps one block in each: the rest of each superblock is one free range.
  std::vector<void*> blocks;
  for (std::size_t i = 0; i < r.arena_size() / block; ++i) { blocks.push_back(r.allocate(block, a.get())); }
  ASSERT_EQ(r.global_free_bytes(), 0U);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (i % (sb / block) != 0) { r.deallocate(blocks[i], block, a.get()); }
  }
  std::size_t const large = sb - block;  // above the threshold, and only a local arena's free range holds it
  ASSERT_GT(large, r.large_allocation_threshold());
  void* p = r.allocate(large, b.get());
  r.check_invariants();
  r.deallocate(p, large, b.get());
  for (std::size_t i = 0; i < blocks.size(); i += sb / block) { r.deallocate(blocks[i], block, a.get()); }
  try {
    void* too_large = r.allocate(r.arena_size() + 256, b.get());
    r.deallocate(too_large, r.arena_size() + 256, b.get());
    ADD_FAILURE() << "a request larger than the arena was served";
  } catch (out_of_memory const&) {
  }
  expect_all_memory_back(r);
}

// ---- random sequences at 80 GiB scale ---------------------------------------------------------------------

TEST(arena_memory_resource, random_sequences_at_80_gib_keep_invariants_and_coalesce_back)
{
  mr::simulated_memory_resource upstream{80 * GiB};
  backend_stream s1;
  backend_stream s2;
  cuda_stream_view const streams[] = {cuda_stream_default, cuda_stream_per_thread, s1.get(), s2.get()};
  for (std::uint64_t const seed : {1U, 2U, 3U, 4U, 5U, 6U}) {
    mr::arena_memory_resource r{&upstream, 80 * GiB};
    std::mt19937_64 rng{seed};
    struct live {
      void* ptr;
      std::size_t bytes;
    };
    std::vector<live> blocks;
    live_blocks overlap;
    std::size_t out_of_memory_count = 0;
    for (int op = 0; op < 10000; ++op) {
      cuda_stream_view const stream = streams[rng() % 4];
      if (blocks.empty() || rng() % 100 < 55) {
        // Mostly small (1 B .. 1 MiB), sometimes large (up to 64 GiB): the arena fills and must say so.
        std::size_t const bytes = rng() % 8 == 0 ? log_uniform_size(rng, 36.0) : log_uniform_size(rng, 20.0);
        try {
          void* p = r.allocate(bytes, stream);
          overlap.insert(p, bytes);
          blocks.push_back({p, bytes});
        } catch (out_of_memory const&) {
          ++out_of_memory_count;
        }
      } else {
        std::size_t const index = rng() % blocks.size();
        live const b = blocks[index];
        blocks[index] = blocks.back();
        blocks.pop_back();
        overlap.erase(b.ptr);
        r.deallocate(b.ptr, b.bytes, stream);  // often another stream than the one it came from
      }
      if (op % 500 == 0) { r.check_invariants(); }
    }
    EXPECT_GT(out_of_memory_count, 0U) << "seed " << seed << ": the sequence should reach the limit of the arena";
    EXPECT_LT(out_of_memory_count, 1000U) << "seed " << seed;
    for (auto const& b : blocks) { r.deallocate(b.ptr, b.bytes, streams[rng() % 4]); }
    expect_all_memory_back(r);
  }
  EXPECT_EQ(upstream.bytes_in_use(), 0U);
}

// ---- threads --------------------------------------------------------------------------------------------

TEST(arena_memory_resource, sixteen_threads_with_mixed_sizes_free_each_others_blocks)
{
  mr::simulated_memory_resource upstream{80 * GiB};
  mr::arena_memory_resource r{&upstream, 8 * GiB};
  constexpr int thread_count = 16;
  constexpr int iterations = 600;
  live_blocks overlap;
  struct handoff {
    void* ptr;
    std::size_t bytes;
  };
  std::mutex exchange_mutex;
  std::vector<handoff> exchange;  // blocks that any thread may free
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([&, t] {
      backend_stream own;
      cuda_stream_view const streams[] = {cuda_stream_default, cuda_stream_per_thread, own.get()};
      std::mt19937_64 rng{static_cast<std::uint64_t>(t) + 100};
      std::vector<handoff> mine;
      for (int i = 0; i < iterations; ++i) {
        cuda_stream_view const stream = streams[rng() % 3];
        std::size_t const bytes = rng() % 16 == 0 ? log_uniform_size(rng, 26.0) : log_uniform_size(rng, 16.0);
        try {
          void* p = r.allocate(bytes, stream);
          overlap.insert(p, bytes);
          if (rng() % 3 == 0) {
            std::lock_guard lock{exchange_mutex};
            exchange.push_back({p, bytes});
          } else {
            mine.push_back({p, bytes});
          }
        } catch (std::exception const& e) {
          failures.fetch_add(1);
          ADD_FAILURE() << "thread " << t << ": " << e.what();
        }
        auto free_one = [&](handoff const& h) {
          overlap.erase(h.ptr);
          r.deallocate(h.ptr, h.bytes, streams[rng() % 3]);
        };
        if (!mine.empty() && rng() % 2 == 0) {
          free_one(mine.back());
          mine.pop_back();
        }
        std::optional<handoff> theirs;
        {
          std::lock_guard lock{exchange_mutex};
          if (!exchange.empty() && rng() % 2 == 0) {
            theirs = exchange.back();
            exchange.pop_back();
          }
        }
        if (theirs) { free_one(*theirs); }
      }
      for (auto const& h : mine) {
        overlap.erase(h.ptr);
        r.deallocate(h.ptr, h.bytes, own.get());
      }
    });
  }
  for (auto& thread : threads) { thread.join(); }
  for (auto const& h : exchange) {
    overlap.erase(h.ptr);
    r.deallocate(h.ptr, h.bytes);
  }
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(r.arena_count(), std::size_t{2 * thread_count}) << "one per thread and one per thread's stream";
  expect_all_memory_back(r);
}

// ---- stream ordering ----------------------------------------------------------------------------------------

/// Runs `fn` on a new thread and says whether it has returned; joins on destruction. What `fn` throws is a
/// failure of the test.
class background {
 public:
  template <class Fn>
  explicit background(Fn fn) : thread_{[this, fn = std::move(fn)]() mutable {
                                 try {
                                   fn();
                                 } catch (std::exception const& e) {
                                   ADD_FAILURE() << "the background thread threw: " << e.what();
                                 }
                                 done_.store(true);
                               }}
  {
  }
  ~background() { join(); }
  background(background const&) = delete;
  background& operator=(background const&) = delete;
  background(background&&) = delete;
  background& operator=(background&&) = delete;

  [[nodiscard]] bool done() const { return done_.load(); }
  void join()
  {
    if (thread_.joinable()) { thread_.join(); }
  }

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

constexpr auto held_for = std::chrono::milliseconds{150};

/// Allocates `bytes` blocks on `stream` until they fill every superblock of `r` (bytes divides them).
std::vector<void*> fill_every_superblock(mr::arena_memory_resource& r, std::size_t bytes, cuda_stream_view stream)
{
  std::vector<void*> blocks;
  for (std::size_t i = 0; i < r.arena_size() / bytes; ++i) { blocks.push_back(r.allocate(bytes, stream)); }
  EXPECT_EQ(r.global_free_bytes(), 0U);
  return blocks;
}

TEST(arena_memory_resource, a_block_freed_on_a_busy_stream_is_not_reused_by_another_stream_until_the_work_is_done)
{
  mr::simulated_memory_resource upstream{GiB};
  mr::arena_memory_resource r{&upstream, 4 * MiB};
  backend_stream a;
  backend_stream b;
  std::size_t const bytes = r.large_allocation_threshold();
  std::vector<void*> blocks = fill_every_superblock(r, bytes, a.get());  // B can only get A's free space
  void* p = blocks.back();
  blocks.pop_back();

  gate held;
  std::atomic<bool> a_done{false};
  auto mark_done = [&] { a_done.store(true); };
  held.hold(a.get());
  on_stream(a.get(), mark_done);  // "the work on A that uses p"
  r.deallocate(p, bytes, a.get());

  std::atomic<bool> a_done_when_served{false};
  void* q = nullptr;
  background other{[&] {
    q = r.allocate(bytes, b.get());  // needs A's free space: must wait for A's work
    a_done_when_served.store(a_done.load());
  }};
  std::this_thread::sleep_for(held_for);
  EXPECT_FALSE(other.done()) << "stream B got memory while the work on A that used it was still pending";
  held.release();
  other.join();
  EXPECT_TRUE(a_done_when_served.load());
  EXPECT_EQ(q, p) << "B got the block A freed";
  r.deallocate(q, bytes, b.get());
  for (void* block : blocks) { r.deallocate(block, bytes, a.get()); }
  expect_all_memory_back(r);
}

TEST(arena_memory_resource, a_per_thread_arena_is_not_reused_by_another_thread_until_its_default_stream_is_done)
{
  mr::simulated_memory_resource upstream{GiB};
  mr::arena_memory_resource r{&upstream, 4 * MiB};
  std::size_t const bytes = r.large_allocation_threshold();
  std::vector<void*> blocks = fill_every_superblock(r, bytes, cuda_stream_per_thread);
  void* p = blocks.back();
  blocks.pop_back();

  gate held;
  std::atomic<bool> done{false};
  auto mark_done = [&] { done.store(true); };
  held.hold(cudaStreamPerThread);  // this thread's per-thread default stream
  on_stream(cudaStreamPerThread, mark_done);
  r.deallocate(p, bytes, cuda_stream_per_thread);

  std::atomic<bool> done_when_served{false};
  void* q = nullptr;
  background other{[&] {
    q = r.allocate(bytes, cuda_stream_per_thread);  // another thread: can only get this thread's free space
    done_when_served.store(done.load());
    r.deallocate(q, bytes, cuda_stream_per_thread);
  }};
  std::this_thread::sleep_for(held_for);
  EXPECT_FALSE(other.done()) << "another thread got memory while this thread's default stream still used it";
  held.release();
  other.join();
  EXPECT_TRUE(done_when_served.load());
  EXPECT_EQ(q, p);
  detail::get_backend().stream_synchronize(cudaStreamPerThread);
  for (void* block : blocks) { r.deallocate(block, bytes, cuda_stream_per_thread); }
  expect_all_memory_back(r);
}

TEST(arena_memory_resource, a_block_freed_on_its_own_stream_is_reused_there_at_once_without_waiting)
{
  mr::simulated_memory_resource upstream{GiB};
  mr::arena_memory_resource r{&upstream, 64 * MiB};
  backend_stream a;
  void* p = r.allocate(64 * KiB, a.get());
  gate held;
  held.hold(a.get());
  r.deallocate(p, 64 * KiB, a.get());
  void* q = nullptr;
  background same{[&] { q = r.allocate(64 * KiB, a.get()); }};
  EXPECT_TRUE(eventually([&] { return same.done(); })) << "reuse on the same stream waited for the stream";
  held.release();
  same.join();
  EXPECT_EQ(q, p) << "stream order makes the block safe to reuse on its own stream";
  r.deallocate(q, 64 * KiB, a.get());
  expect_all_memory_back(r);
}

TEST(arena_memory_resource, freeing_on_another_stream_or_a_large_block_waits_for_the_freeing_stream)
{
  mr::simulated_memory_resource upstream{GiB};
  mr::arena_memory_resource r{&upstream, 64 * MiB};
  backend_stream a;
  backend_stream b;
  for (std::size_t const bytes : {64 * KiB, 8 * MiB}) {
    // The block belongs to A's arena (or is large); freed on B, it may be reused by A (or anyone) at once,
    // so B's pending work must be done first.
    void* p = r.allocate(bytes, a.get());
    gate held;
    held.hold(b.get());
    background freeing{[&] { r.deallocate(p, bytes, b.get()); }};
    std::this_thread::sleep_for(held_for);
    EXPECT_FALSE(freeing.done()) << bytes << " bytes: deallocate returned while the work on B was pending";
    held.release();
    freeing.join();
  }
  expect_all_memory_back(r);
}

}  // namespace
}  // namespace gpumem::test
