// replay() with replay_options::threads != 1: the counts and the peak live bytes of a log with several
// threads and cross-thread frees are those of the single-threaded replay for any number of workers; frees
// that cross threads wait for their allocation; failures and their frees on other threads; the refusals
// (too many threads, a timeline, a resource declared not thread-safe); an error of the resource on a worker;
// the planner's lanes and its slots, bounded when one thread frees what another allocates; the bytes the
// workers held at once, which the ratio is taken over; and a real two-thread log
// (data/logs/pytorch_unet_train.csv.gz) on a pool over a simulated upstream.
#include "replay/log_files.hpp"
#include "replay/replay_plan.hpp"

#include <gpumem/error.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>
#include <gpumem/registry/resource_registry.hpp>
#include <gpumem/replay/allocation_log.hpp>
#include <gpumem/replay/replay.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace gpumem::test {
namespace {

allocation_log log_of(std::string_view rows)
{
  return parse_allocation_log("Thread,Time,Action,Pointer,Size,Stream\n" + std::string{rows}, "synthetic");
}

std::string hex(std::uint64_t v)
{
  char text[32];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(v));
  return text;
}

std::string row(std::uint64_t thread, char const* action, std::uint64_t pointer, std::size_t size,
                std::uint64_t stream = 0)
{
  return std::to_string(thread) + ",10:00:00.000001," + action + "," + hex(pointer) + "," + std::to_string(size) +
         "," + hex(stream) + "\n";
}

/// 60 000 rows over 4 threads (ids 11, 22, 33, 44) and 3 streams, several batches: blocks live across
/// batches and about half of the frees are on another thread than the allocation; with unknown and double
/// frees, lost frees (an allocation at a live address, by another thread), `allocate failure` rows, and
/// blocks left live at the end.
allocation_log four_thread_log()
{
  std::mt19937_64 random{20261125};
  std::vector<std::uint64_t> const threads{11, 22, 33, 44};
  std::vector<std::uint64_t> live;
  std::string rows;
  std::uint64_t next_pointer = 0x100000;
  for (int i = 0; i < 60'000; ++i) {
    std::uint64_t const thread = threads[random() % threads.size()];
    std::uint64_t const stream = 0x1000 * (random() % 3);
    auto const roll = random() % 100;
    if (roll < 50 || live.empty()) {
      std::uint64_t const pointer = (next_pointer += 0x100);
      live.push_back(pointer);
      rows += row(thread, "allocate", pointer, 256 * (1 + random() % 64), stream);
    } else if (roll < 95) {
      std::size_t const k = random() % live.size();
      rows += row(thread, "free", live[k], 1, stream);  // any thread: often not the allocating one
      live[k] = live.back();
      live.pop_back();
    } else if (roll < 97) {
      rows += row(thread, "free", 0xdead00 + 0x100 * (random() % 8), 1, stream);  // never allocated
    } else if (roll < 99) {
      rows += row(thread, "allocate", live[random() % live.size()], 512, stream);  // the log lost a free
    } else {
      rows += row(thread, "allocate failure", 0, 4096, stream);
    }
  }
  return log_of(rows);
}

/// Every count replay() gives that does not depend on timing.
void expect_same_counts(replay_result const& r, replay_result const& single)
{
  EXPECT_EQ(r.events, single.events);
  EXPECT_EQ(r.allocations, single.allocations);
  EXPECT_EQ(r.deallocations, single.deallocations);
  EXPECT_EQ(r.ops, single.ops);
  EXPECT_EQ(r.failures, single.failures);
  EXPECT_EQ(r.unknown_frees, single.unknown_frees);
  EXPECT_EQ(r.skipped_frees, single.skipped_frees);
  EXPECT_EQ(r.missing_frees, single.missing_frees);
  EXPECT_EQ(r.log_failures, single.log_failures);
  EXPECT_EQ(r.log_failures_reproduced, single.log_failures_reproduced);
  EXPECT_EQ(r.live_at_end, single.live_at_end);
  EXPECT_EQ(r.streams, single.streams);
  EXPECT_EQ(r.peak_live_bytes, single.peak_live_bytes);
}

TEST(replay_threads, any_number_of_workers_gives_the_counts_of_the_single_threaded_replay)
{
  allocation_log const log = four_thread_log();
  mr::simulated_memory_resource upstream;
  replay_result single;
  {
    mr::pool_memory_resource pool{&upstream, 0};
    single = replay(log, pool);
  }
  EXPECT_EQ(single.threads, 1U);
  EXPECT_EQ(single.cross_thread_waits, 0U);
  EXPECT_EQ(single.held_peak_bytes, single.peak_live_bytes) << "in log order the replay holds what the log had live";
  ASSERT_GT(single.unknown_frees, 0U);
  ASSERT_GT(single.missing_frees, 0U);
  ASSERT_GT(single.log_failures, 0U);
  ASSERT_GT(single.live_at_end, 0U);
  EXPECT_EQ(single.failures, 0U);

  struct expected {
    std::size_t threads, workers;
  };
  for (expected const e : {expected{2, 2}, expected{4, 4}, expected{0, 4}, expected{3, 3}, expected{16, 4}}) {
    SCOPED_TRACE("threads = " + std::to_string(e.threads));
    {
      mr::pool_memory_resource pool{&upstream, 0};
      replay_result const r = replay(log, pool, {.peak_upstream_bytes = [&] { return upstream.peak_bytes_in_use(); },
                                                 .threads = e.threads});
      expect_same_counts(r, single);
      EXPECT_EQ(r.threads, e.workers) << "one worker per log thread, up to the number asked for";
      EXPECT_GT(r.ns_per_op, 0.0);
      ASSERT_TRUE(r.fragmentation.has_value());
      EXPECT_GE(*r.fragmentation, 1.0);
      EXPECT_GT(r.held_peak_bytes, 0U);
      EXPECT_DOUBLE_EQ(*r.fragmentation,
                       static_cast<double>(*r.peak_upstream_bytes) / static_cast<double>(r.held_peak_bytes))
        << "the ratio is over what the workers held at once";
      EXPECT_EQ(pool.used_bytes(), 0U) << "every block freed";
    }
    EXPECT_EQ(upstream.allocation_count(), 0U);
    EXPECT_EQ(upstream.invalid_deallocations(), 0U) << "each block freed once, with its allocated size";
  }
}

TEST(replay_threads, a_free_on_another_thread_waits_for_its_allocation)
{
  // Each block is allocated by one thread and freed by the other, which then allocates the next: every
  // operation depends on the one before it on the other worker, so the workers must take turns.
  std::string rows;
  for (std::uint64_t i = 0; i < 2000; ++i) {
    std::uint64_t const by = 1 + i % 2;
    std::uint64_t const other = 3 - by;
    rows += row(by, "allocate", 0x100000 + 0x100 * i, 256 * (1 + i % 5));
    rows += row(other, "free", 0x100000 + 0x100 * i, 1);
  }
  allocation_log const log = log_of(rows);
  mr::simulated_memory_resource upstream;
  replay_result const single = replay(log, upstream);
  replay_result const r = replay(log, upstream, {.threads = 2});
  expect_same_counts(r, single);
  EXPECT_EQ(r.ops, 4000U);
  EXPECT_EQ(r.threads, 2U);
  EXPECT_GT(r.cross_thread_waits, 0U) << "the freeing worker found the allocation not yet done";
  EXPECT_LE(r.cross_thread_waits, r.ops);
  EXPECT_EQ(upstream.allocation_count(), 0U);
  EXPECT_EQ(upstream.invalid_deallocations(), 0U);
}

TEST(replay_threads, a_failed_allocation_is_counted_and_its_free_skipped_on_the_other_thread)
{
  allocation_log const log = log_of(row(1, "allocate", 0xa00, 4096) +      // fits
                                    row(1, "allocate", 0xb00, 1 << 20) +   // more than the upstream holds
                                    row(2, "free", 0xb00, 1 << 20) +       // its free, on another thread: skipped
                                    row(2, "free", 0xa00, 4096) +          // a cross-thread free that runs
                                    row(2, "allocate failure", 0, 1 << 20) +  // fails here too
                                    row(1, "allocate", 0xc00, 256));        // live at the end
  mr::simulated_memory_resource upstream{64 * 1024};
  for (std::size_t const threads : {std::size_t{1}, std::size_t{2}}) {
    SCOPED_TRACE("threads = " + std::to_string(threads));
    replay_result const r = replay(log, upstream, {.threads = threads});
    EXPECT_EQ(r.failures, 2U);
    EXPECT_EQ(r.skipped_frees, 1U);
    EXPECT_EQ(r.log_failures_reproduced, 1U);
    EXPECT_EQ(r.allocations, 4U);
    EXPECT_EQ(r.deallocations, 1U);
    EXPECT_EQ(r.live_at_end, 1U);
    EXPECT_EQ(upstream.allocation_count(), 0U);
    EXPECT_EQ(upstream.invalid_deallocations(), 0U);
  }
}

TEST(replay_threads, refuses_too_many_threads_a_timeline_and_a_resource_declared_not_thread_safe)
{
  allocation_log const log = log_of(row(1, "allocate", 0xa00, 256) + row(2, "free", 0xa00, 256));
  mr::simulated_memory_resource upstream;
  auto const message = [&](replay_options const& options) -> std::string {
    try {
      (void)replay(log, upstream, options);
    } catch (logic_error const& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(message({.threads = max_replay_threads + 1}).find("threads = 65 is more than 64"), std::string::npos)
    << message({.threads = max_replay_threads + 1});
  replay_timeline timeline;
  EXPECT_NE(message({.timeline = &timeline, .threads = 2}).find("timeline"), std::string::npos);
  std::string const unsafe = message({.threads = 2, .resource_thread_safe = false});
  EXPECT_NE(unsafe.find("'gpumem::mr::simulated_memory_resource' is not thread-safe"), std::string::npos) << unsafe;
  EXPECT_NE(unsafe.find("thread_safe_resource_adaptor"), std::string::npos) << unsafe;
  EXPECT_EQ(upstream.allocation_count(), 0U);

  // One thread needs no thread-safety; the largest number of threads is accepted.
  EXPECT_EQ(replay(log, upstream, {.threads = 1, .resource_thread_safe = false}).ops, 2U);
  EXPECT_EQ(replay(log, upstream, {.threads = max_replay_threads}).ops, 2U);

  // A registered resource is named by its registered name.
  registry::resource_handle pool = registry::make_resource("pool", {.simulate = true});
  try {
    (void)replay(log, pool, {.threads = 2, .resource_thread_safe = false});
    FAIL() << "no refusal";
  } catch (logic_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("the resource 'pool' is not thread-safe"), std::string::npos) << e.what();
  }
  EXPECT_EQ(replay(log, pool, {.threads = 0}).threads, 2U);
}

TEST(replay_threads, a_thread_that_frees_what_another_allocates_keeps_the_slot_table_bounded)
{
  // A producer (thread 1) and a consumer (thread 2): the consumer's lane gets every freed slot back, the
  // producer's none; beyond lane_free_slots they are shared, so the table does not grow with the log.
  constexpr std::size_t blocks = 100'000;
  std::vector<log_event> events;
  for (std::size_t i = 0; i < blocks; ++i) {
    std::uintptr_t const pointer = 0x100000 + 0x100 * i;
    events.push_back({.thread = 1, .action = log_action::allocate, .pointer = pointer, .size = 256});
    events.push_back({.thread = 2, .action = log_action::free, .pointer = pointer, .size = 256});
  }
  detail::replay_planner planner{1, 4};
  detail::replay_batch batch;
  planner.plan(events, batch);
  EXPECT_EQ(planner.lanes_used(), 2U) << "two log threads on two of the four lanes";
  EXPECT_LE(planner.slot_count(), detail::replay_planner::lane_free_slots + 2);
  ASSERT_EQ(batch.ops.size(), 2 * blocks);
  ASSERT_EQ(batch.lanes.size(), batch.ops.size());
  for (std::size_t i = 0; i < batch.ops.size(); ++i) {
    ASSERT_EQ(batch.lanes[i], i % 2) << "operation " << i << ": on the lane of its row's thread";
  }

  detail::replay_planner one_lane{1};
  one_lane.plan(events, batch);
  EXPECT_TRUE(batch.lanes.empty()) << "a single-threaded plan records no lanes";
  EXPECT_EQ(one_lane.slot_count(), 1U) << "one lane reuses its one slot";
}

/// Over a simulated upstream; its `fail_at`-th allocate call throws a cuda_error (a backend failure).
class failing_resource final : public mr::device_memory_resource {
 public:
  failing_resource(mr::simulated_memory_resource& upstream, std::size_t fail_at)
    : upstream_{upstream}, fail_at_{fail_at}
  {
  }

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    if (++calls_ == fail_at_) { throw cuda_error(cudaErrorUnknown, "injected backend failure"); }
    return upstream_.allocate(bytes, stream);
  }
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override
  {
    upstream_.deallocate(ptr, bytes, stream);
  }

  mr::simulated_memory_resource& upstream_;
  std::size_t fail_at_;
  std::atomic<std::size_t> calls_{0};
};

TEST(replay_threads, an_error_of_the_resource_on_a_worker_ends_the_replay_with_every_block_freed)
{
  allocation_log const log = four_thread_log();
  mr::simulated_memory_resource upstream;
  failing_resource failing{upstream, 20'000};
  EXPECT_THROW((void)replay(log, failing, {.threads = 4}), cuda_error);
  EXPECT_EQ(upstream.allocation_count(), 0U) << "the blocks the workers held were freed";
  EXPECT_EQ(upstream.invalid_deallocations(), 0U);
}

/// Over a simulated upstream, a resource that makes two workers hold blocks at once that the log never had
/// live together (sizes pick the calls): the allocation of `first` waits for the allocation of `signal`, which
/// comes after the other worker's allocation of its own block, and that allocation waits for the free of
/// `first`. Each wait gives up after ten seconds, so that a replay that runs otherwise fails instead of hanging.
class interleaving_resource final : public mr::device_memory_resource {
 public:
  interleaving_resource(mr::simulated_memory_resource& upstream, std::size_t first, std::size_t signal)
    : upstream_{upstream}, first_{first}, signal_{signal}
  {
  }
  [[nodiscard]] bool timed_out() const noexcept { return timed_out_.load(); }

 private:
  void wait_for(std::atomic<bool> const& flag)
  {
    auto const until = std::chrono::steady_clock::now() + std::chrono::seconds{10};
    while (!flag.load()) {
      if (std::chrono::steady_clock::now() > until) {
        timed_out_.store(true);
        return;
      }
      std::this_thread::yield();
    }
  }
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    if (bytes == first_) { wait_for(signal_allocated_); }
    if (bytes == signal_) {
      signal_allocated_.store(true);
      wait_for(first_freed_);
    }
    return upstream_.allocate(bytes, stream);
  }
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override
  {
    upstream_.deallocate(ptr, bytes, stream);
    if (bytes == first_) { first_freed_.store(true); }
  }

  mr::simulated_memory_resource& upstream_;
  std::size_t first_;
  std::size_t signal_;
  std::atomic<bool> signal_allocated_{false};
  std::atomic<bool> first_freed_{false};
  std::atomic<bool> timed_out_{false};
};

TEST(replay_threads, the_ratio_is_over_the_bytes_the_workers_held_at_once_which_can_exceed_the_logs_peak)
{
  // In log order thread 1's 3 MiB block is freed before thread 2 allocates: the log's peak is 3 MiB. The
  // workers keep only each thread's order, and here thread 2's 1 MiB block is held while thread 1 allocates.
  std::size_t const first = std::size_t{3} << 20;
  std::size_t const second = std::size_t{1} << 20;
  std::size_t const signal = 4096;
  allocation_log const log = log_of(row(1, "allocate", 0xa00000, first) + row(1, "free", 0xa00000, 1) +
                                    row(2, "allocate", 0xb00000, second) + row(2, "allocate", 0xc00000, signal) +
                                    row(2, "free", 0xb00000, 1) + row(2, "free", 0xc00000, 1));
  mr::simulated_memory_resource upstream;
  interleaving_resource interleaving{upstream, first, signal};
  replay_result const r =
    replay(log, interleaving, {.peak_upstream_bytes = [&] { return upstream.peak_bytes_in_use(); }, .threads = 2});
  ASSERT_FALSE(interleaving.timed_out()) << "the workers did not interleave as planned";
  EXPECT_EQ(r.threads, 2U);
  EXPECT_EQ(r.peak_live_bytes, first) << "as the log says";
  EXPECT_EQ(r.held_peak_bytes, first + second);
  ASSERT_TRUE(r.peak_upstream_bytes.has_value());
  EXPECT_EQ(*r.peak_upstream_bytes, first + second);
  ASSERT_TRUE(r.fragmentation.has_value());
  EXPECT_DOUBLE_EQ(*r.fragmentation, 1.0) << "the upstream held no more than the workers did: no fragmentation";
  EXPECT_EQ(upstream.allocation_count(), 0U);

  // In log order, on one thread: the log's peak, held and taken.
  mr::simulated_memory_resource in_order;
  replay_result const single = replay(log, in_order, {.peak_upstream_bytes = [&] { return in_order.peak_bytes_in_use(); }});
  EXPECT_EQ(single.held_peak_bytes, first);
  ASSERT_TRUE(single.fragmentation.has_value());
  EXPECT_DOUBLE_EQ(*single.fragmentation, 1.0);
}

TEST(replay_threads, a_real_two_thread_log_replays_with_the_single_threaded_counts)
{
  std::filesystem::path const file = traces_dir() / "pytorch_unet_train.csv.gz";
  if (traces_dir().empty() || !std::filesystem::exists(file)) {
    GTEST_SKIP() << "pytorch_unet_train.csv.gz not found under '" << traces_dir().string() << "'";
  }
  allocation_log const log = read_allocation_log(file);
  registry::resource_handle first = registry::make_resource("pool", {.simulate = true});
  replay_result const single = replay(log, first);
  for (std::size_t const threads : {std::size_t{2}, std::size_t{0}}) {
    SCOPED_TRACE("threads = " + std::to_string(threads));
    registry::resource_handle pool = registry::make_resource("pool", {.simulate = true});
    replay_result const r = replay(log, pool, {.threads = threads});
    expect_same_counts(r, single);
    EXPECT_EQ(r.threads, 2U) << "the log has two threads";
    EXPECT_EQ(r.failures, 0U);
    ASSERT_TRUE(r.peak_upstream_bytes.has_value());
    EXPECT_GE(*r.peak_upstream_bytes, r.held_peak_bytes) << "a pool holds at least what its callers hold";
  }
}

}  // namespace
}  // namespace gpumem::test
