// vmm_pool_memory_resource: each thread's small blocks come from pages of its own (page shards), taken and
// freed without the pool's mutex. Frees from other threads, threads that exit with blocks in use, empty pages
// of idle threads before a growth, stream order through a shard, streams that come and go, and many threads
// passing blocks to each other.
#include "support/borrowed_vmm_provider.hpp"
#include "support/gate.hpp"
#include "support/memory_checks.hpp"
#include "support/sub_allocator_checks.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/cuda_stream.hpp>
#include <gpumem/error.hpp>
#include <gpumem/backend/virtual_memory_provider.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace gpumem::test {
namespace {

using mr::simulated_vmm_provider;
using mr::vmm_pool_memory_resource;
using mr::vmm_pool_options;

constexpr std::size_t granule = 2 * MiB;  // the simulated provider's granularity, and the host backend's

vmm_pool_options slabs_of(std::size_t slab_size)
{
  vmm_pool_options options;
  options.slab_size = slab_size;
  options.reservation_size = 1 * GiB;
  options.mapping_divisor = 0;
  return options;
}

std::uintptr_t address_of(void const* p) { return reinterpret_cast<std::uintptr_t>(p); }

TEST(vmm_pool_page_shards, each_threads_small_blocks_come_from_pages_of_its_own)
{
  simulated_vmm_provider provider;
  vmm_pool_memory_resource pool{borrow(provider), slabs_of(granule)};
  cuda_stream stream;
  void* mine = pool.allocate(4096, stream.view());
  void* theirs = nullptr;
  std::thread{[&] { theirs = pool.allocate(4096, stream.view()); }}.join();
  EXPECT_EQ(pool.small_page_count(), 2U) << "one page per thread, though one page holds both blocks";
  std::uintptr_t const distance = address_of(mine) > address_of(theirs) ? address_of(mine) - address_of(theirs)
                                                                         : address_of(theirs) - address_of(mine);
  EXPECT_GE(distance, 64U * KiB) << "the other thread's block lies in another page";
  void* next = pool.allocate(4096, stream.view());
  EXPECT_EQ(address_of(next), address_of(mine) + 4096) << "this thread's page, carved in order";
  pool.deallocate(theirs, 4096, stream.view());  // a block of the exited thread's shard, freed here
  pool.deallocate(next, 4096, stream.view());
  pool.deallocate(mine, 4096, stream.view());
  pool.check_invariants();
  EXPECT_EQ(pool.bytes_in_use(), 0U);
  (void)stream.synchronize();
}

TEST(vmm_pool_page_shards, a_block_freed_by_another_thread_goes_back_to_its_owners_page)
{
  simulated_vmm_provider provider;
  vmm_pool_memory_resource pool{borrow(provider), slabs_of(granule)};
  cuda_stream stream;
  std::promise<std::vector<void*>> handed;
  std::promise<void> freed;
  std::promise<void*> again;
  std::thread owner{[&] {
    std::vector<void*> blocks;
    for (int i = 0; i < 8; ++i) { blocks.push_back(pool.allocate(8192, stream.view())); }
    handed.set_value(blocks);
    freed.get_future().wait();
    again.set_value(pool.allocate(8192, stream.view()));
  }};
  std::vector<void*> const blocks = handed.get_future().get();
  for (void* b : blocks) { pool.deallocate(b, 8192, stream.view()); }  // not this thread's: under the mutex
  EXPECT_EQ(pool.bytes_in_use(), 0U);
  pool.check_invariants();
  freed.set_value();
  void* const reused = again.get_future().get();
  owner.join();
  EXPECT_EQ(reused, blocks.back()) << "the owner's page got the blocks back: the one freed last serves first";
  EXPECT_THROW(pool.checked_deallocate(blocks.front(), 8192, stream.view()), logic_error)
    << "a block of another thread's page freed twice is refused";
  pool.deallocate(reused, 8192, stream.view());
  pool.check_invariants();
  EXPECT_EQ(pool.bytes_in_use(), 0U);
  (void)stream.synchronize();
}

TEST(vmm_pool_page_shards, an_exiting_threads_pages_with_blocks_in_use_stay_and_the_next_thread_claims_them)
{
  simulated_vmm_provider provider;
  vmm_pool_memory_resource pool{borrow(provider), slabs_of(granule)};
  cuda_stream stream;
  std::vector<void*> blocks(4);
  std::thread{[&] {
    for (auto& b : blocks) { b = pool.allocate(4096, stream.view()); }
  }}.join();
  EXPECT_EQ(pool.bytes_in_use(), 4U * 4096) << "the exited thread's blocks are still in use";
  EXPECT_EQ(pool.small_page_count(), 1U);
  for (std::size_t i = 1; i < blocks.size(); ++i) { pool.deallocate(blocks[i], 4096, stream.view()); }
  pool.check_invariants();
  void* adopted = nullptr;
  std::thread{[&] { adopted = pool.allocate(4096, stream.view()); }}.join();
  EXPECT_EQ(pool.small_page_count(), 1U) << "the new thread took the page its shard came with";
  EXPECT_GE(address_of(adopted), address_of(blocks[0]));
  EXPECT_LT(address_of(adopted), address_of(blocks[0]) + 64 * KiB);
  pool.deallocate(adopted, 4096, stream.view());
  pool.deallocate(blocks[0], 4096, stream.view());
  pool.check_invariants();
  EXPECT_EQ(pool.bytes_in_use(), 0U);
  (void)pool.release_unused();
  EXPECT_EQ(pool.physical_bytes(), 0U) << "the empty page went back and its slab with it";
  (void)stream.synchronize();
}

// A thread frees without the mutex, so its empty pages stay in its shard until its next heap operation; another
// thread's growth must not be refused or made larger because of them.
TEST(vmm_pool_page_shards, an_idle_threads_empty_pages_go_back_before_the_pool_grows)
{
  simulated_vmm_provider provider;
  vmm_pool_options options = slabs_of(granule);
  options.maximum_physical_size = granule;
  vmm_pool_memory_resource pool{borrow(provider), options};
  cuda_stream stream;
  std::promise<void> emptied;
  std::promise<void> done;
  std::thread idle{[&] {
    std::vector<void*> blocks;
    for (int i = 0; i < 24; ++i) { blocks.push_back(pool.allocate(64 * KiB, stream.view())); }  // 6 pages
    for (void* b : blocks) { pool.deallocate(b, 64 * KiB, stream.view()); }
    emptied.set_value();
    done.get_future().wait();  // alive, in no call of the pool
  }};
  emptied.get_future().wait();
  EXPECT_EQ(pool.bytes_in_use(), 0U);
  EXPECT_GE(pool.small_page_count(), 6U) << "the idle thread's empty pages are kept in its shard";
  void* large = nullptr;
  EXPECT_NO_THROW(large = pool.allocate(granule, stream.view())) << "the empty pages were not given back first";
  EXPECT_EQ(pool.physical_bytes(), granule);
  EXPECT_EQ(pool.small_page_count(), 0U);
  pool.deallocate(large, granule, stream.view());
  done.set_value();
  idle.join();
  pool.check_invariants();
  (void)stream.synchronize();
}

// The free on a busy stream goes into the thread's shard without the mutex (its stream's slot is remembered
// from an earlier free); the same thread takes the block on another stream, which must wait for that work.
TEST(vmm_pool_page_shards, a_block_freed_into_a_shard_on_a_busy_stream_reaches_another_stream_only_after_that_work)
{
  vmm_pool_memory_resource pool{slabs_of(granule)};
  detail::backend& backend = detail::get_backend();
  cuda_stream a{cuda_stream::flags::non_blocking};
  cuda_stream b{cuda_stream::flags::non_blocking};
  constexpr std::size_t bytes = 4096;
  pool.deallocate(pool.allocate(bytes, a.view()), bytes, a.view());  // the shard now knows a's slot
  std::size_t const takes = pool.cross_stream_takes();
  void* p = pool.allocate(bytes, a.view());
  EXPECT_EQ(pool.cross_stream_takes(), takes) << "a's own free needs no wait";
  gate held;
  held.hold(a.value());
  backend.memset_async(p, 0xAA, bytes, a.value());
  pool.deallocate(p, bytes, a.view());
  void* q = pool.allocate(bytes, b.view());
  if (q != p) { held.release(); }
  ASSERT_EQ(q, p) << "the test needs b to receive a's block";
  EXPECT_EQ(pool.cross_stream_takes(), takes + 1);
  backend.memset_async(q, 0xBB, bytes, b.value());
  std::atomic<bool> b_ran{false};
  auto mark = [&b_ran] { b_ran.store(true); };
  on_stream(b.value(), mark);
  std::this_thread::sleep_for(std::chrono::milliseconds{50});
  EXPECT_FALSE(b_ran.load()) << "b's work ran while a's work on the same memory was still held back";
  held.release();
  b.synchronize();
  a.synchronize();
  EXPECT_TRUE(is_filled_with(q, bytes, 0xBB, b.value())) << "a's pending memset ran after b's";
  pool.deallocate(q, bytes, b.view());
  pool.check_invariants();
}

// A shard remembers streams' slots; a destroyed stream's slot is retired and later reused for other streams.
// Frees must then neither count on the old slot nor mark blocks with it.
TEST(vmm_pool_page_shards, slots_remembered_by_a_shard_are_forgotten_when_their_streams_go)
{
  simulated_vmm_provider provider;
  vmm_pool_memory_resource pool{borrow(provider), slabs_of(granule)};
  constexpr std::size_t bytes = 4096;
  for (int i = 0; i < 150; ++i) {  // more streams than slots: retired slots are reused
    cuda_stream s{cuda_stream::flags::non_blocking};
    void* p = pool.allocate(bytes, s.view());
    pool.deallocate(p, bytes, s.view());  // the slot is made here, under the mutex, and remembered
    p = pool.allocate(bytes, s.view());
    pool.deallocate(p, bytes, s.view());  // into the shard
    ASSERT_NO_THROW(pool.check_invariants()) << "stream " << i;
  }
  cuda_stream last{cuda_stream::flags::non_blocking};
  std::size_t const takes = pool.cross_stream_takes();
  void* p = pool.allocate(bytes, last.view());
  EXPECT_EQ(pool.cross_stream_takes(), takes + 1) << "the block was freed on a destroyed stream: it waits on its event";
  pool.deallocate(p, bytes, last.view());
  pool.deallocate(pool.allocate(bytes, last.view()), bytes, last.view());
  EXPECT_EQ(pool.cross_stream_takes(), takes + 1) << "the new stream's own frees need no wait";
  pool.check_invariants();
  EXPECT_EQ(pool.bytes_in_use(), 0U);
}

// Threads allocate small and large blocks on streams of their own, free most of their blocks themselves and
// hand the others to the next thread, which frees them on its stream; threads exit and new ones claim their
// shards. Patterns in some blocks catch a block handed out twice.
TEST(vmm_pool_page_shards, threads_passing_blocks_to_each_other_keep_contents_and_invariants)
{
  constexpr int thread_count = 8;
  constexpr int generations = 3;
  vmm_pool_memory_resource pool{slabs_of(granule)};
  struct passed_block {
    void* ptr;
    std::size_t bytes;
    std::uint32_t seed;  // 0: no pattern; else written and synchronised before the block is passed on
  };
  std::vector<std::mutex> inbox_locks(thread_count);
  std::vector<std::deque<passed_block>> inboxes(thread_count);
  std::atomic<int> failures{0};
  for (int generation = 0; generation < generations; ++generation) {
    std::vector<std::thread> threads;
    for (int t = 0; t < thread_count; ++t) {
      threads.emplace_back([&, t, generation] {
        cuda_stream stream{cuda_stream::flags::non_blocking};
        std::mt19937_64 rng{static_cast<std::uint64_t>(generation * 100 + t + 1)};
        std::vector<passed_block> live;
        auto const free_block = [&](passed_block const& b) {
          if (b.seed != 0 && !has_pattern(b.ptr, b.bytes, b.seed, stream.value())) { failures.fetch_add(1); }
          pool.deallocate(b.ptr, b.bytes, stream.view());
        };
        for (int i = 0; i < 2000; ++i) {
          if (live.empty() || (live.size() < 48 && rng() % 2 == 0)) {
            std::size_t const bytes = rng() % 8 == 0 ? 256 * KiB + rng() % (512 * KiB) : 256 + rng() % (64 * KiB);
            void* p = pool.allocate(bytes, stream.view());
            std::uint32_t seed = 0;
            if (rng() % 8 == 0) {
              seed = static_cast<std::uint32_t>((generation * thread_count + t) * 100'000 + i + 1);
              write_pattern(p, bytes, seed, stream.value());
            }
            live.push_back({p, bytes, seed});
          } else {
            std::size_t const index = static_cast<std::size_t>(rng() % live.size());
            passed_block const b = live[index];
            live[index] = live.back();
            live.pop_back();
            if (rng() % 4 == 0) {  // to the next thread, whose stream will free it
              (void)stream.synchronize();
              std::lock_guard lock{inbox_locks[(t + 1) % thread_count]};
              inboxes[(t + 1) % thread_count].push_back(b);
            } else {
              free_block(b);
            }
          }
          if (i % 64 == 0) {
            std::deque<passed_block> mine;
            {
              std::lock_guard lock{inbox_locks[t]};
              mine.swap(inboxes[t]);
            }
            for (auto const& b : mine) { free_block(b); }
          }
        }
        for (auto const& b : live) { free_block(b); }
        (void)stream.synchronize();
      });
    }
    for (auto& thread : threads) { thread.join(); }
    ASSERT_NO_THROW(pool.check_invariants()) << "generation " << generation;
  }
  for (int t = 0; t < thread_count; ++t) {  // what the last threads were handed and did not free
    for (auto const& b : inboxes[t]) {
      if (b.seed != 0 && !has_pattern(b.ptr, b.bytes, b.seed, cudaStream_t{})) { failures.fetch_add(1); }
      pool.deallocate(b.ptr, b.bytes, cuda_stream_default);
    }
  }
  EXPECT_EQ(failures.load(), 0) << "a block's contents changed while it was live: handed out twice?";
  pool.check_invariants();
  EXPECT_EQ(pool.bytes_in_use(), 0U);
  (void)pool.release_unused();
  EXPECT_EQ(pool.physical_bytes(), 0U) << "every page went back";
}

}  // namespace
}  // namespace gpumem::test
