// replay(): exact counts on synthetic logs (ops, unknown and double frees, failures of the resource and of
// the log, lost frees, streams, progress) against a pool over a simulated upstream; the registry of
// replayable resources; and the shared ResNet-50 trace replayed on pool, arena and binning over a simulated
// upstream (skipped where the trace is absent).
#include "replay/log_files.hpp"

#include <gpumem/error.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>
#include <gpumem/replay/allocation_log.hpp>
#include <gpumem/replay/log_reader.hpp>
#include <gpumem/replay/replay.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace gpumem::test {
namespace {

constexpr std::size_t KiB = std::size_t{1} << 10;

allocation_log log_of(std::string_view rows)
{
  return parse_allocation_log("Thread,Time,Action,Pointer,Size,Stream\n" + std::string{rows}, "synthetic");
}

TEST(replay, counts_every_kind_of_row_exactly)
{
  allocation_log const log = log_of(
    "1,10:00:00.000001,allocate,0xa00,1000,0x0\n"
    "1,10:00:00.000002,allocate,0xb00,2000,0x0\n"
    "1,10:00:00.000003,free,0xa00,1000,0x0\n"
    "1,10:00:00.000004,free,0xdead00,64,0x0\n"            // never allocated
    "1,10:00:00.000005,free,0xa00,1000,0x0\n"             // freed twice
    "1,10:00:00.000006,allocate,0xc00,3000,0x0\n"
    "1,10:00:00.000007,allocate failure,0x0,500,0x0\n"    // the program's allocator failed; ours need not
    "1,10:00:00.000008,free,0xb00,2000,0x0\n"
    "1,10:00:00.000009,free,0xc00,3000,0x0\n"
    "1,10:00:00.000010,allocate,0xd00,100,0x0\n");        // never freed by the log
  mr::simulated_memory_resource upstream;
  {
    mr::pool_memory_resource pool{&upstream, 0};
    replay_result const r = replay(log, pool, {.peak_upstream_bytes = [&] { return upstream.peak_bytes_in_use(); }});
    EXPECT_EQ(r.events, 10U);
    EXPECT_EQ(r.allocations, 5U) << "4 allocate rows + 1 allocate failure row";
    EXPECT_EQ(r.deallocations, 4U) << "3 frees + the failure row's request given back";
    EXPECT_EQ(r.ops, 9U);
    EXPECT_EQ(r.unknown_frees, 2U);
    EXPECT_EQ(r.failures, 0U);
    EXPECT_EQ(r.log_failures, 1U);
    EXPECT_EQ(r.log_failures_reproduced, 0U);
    EXPECT_EQ(r.skipped_frees, 0U);
    EXPECT_EQ(r.missing_frees, 0U);
    EXPECT_EQ(r.live_at_end, 1U);
    EXPECT_EQ(r.streams, 1U);
    EXPECT_EQ(r.peak_live_bytes, 5000U);
    ASSERT_TRUE(r.peak_upstream_bytes.has_value());
    EXPECT_GE(*r.peak_upstream_bytes, 5000U);
    ASSERT_TRUE(r.fragmentation.has_value());
    EXPECT_GE(*r.fragmentation, 1.0);
    EXPECT_GT(r.ns_per_op, 0.0);
    EXPECT_EQ(pool.used_bytes(), 0U) << "everything live at the end was freed";
  }
  EXPECT_EQ(upstream.allocation_count(), 0U);
  EXPECT_EQ(upstream.invalid_deallocations(), 0U);
  upstream.check_invariants();
}

TEST(replay, failures_of_the_resource_are_counted_and_their_frees_skipped)
{
  allocation_log const log = log_of(
    "1,10:00:00.000001,allocate,0xa00,614400,0x0\n"          // 600 KiB: fits in 1 MiB
    "1,10:00:00.000002,allocate,0xb00,614400,0x0\n"          // does not fit beside the first
    "1,10:00:00.000003,allocate failure,0x0,2097152,0x0\n"   // 2 MiB: fails here too
    "1,10:00:00.000004,allocate failure,0x0,1024,0x0\n"      // small: succeeds here
    "1,10:00:00.000005,free,0xb00,614400,0x0\n"              // its allocation failed: skipped
    "1,10:00:00.000006,free,0xa00,614400,0x0\n"
    "1,10:00:00.000007,allocate,0xb00,614400,0x0\n");        // fits again
  mr::simulated_memory_resource upstream{1024 * KiB};
  {
    mr::pool_memory_resource pool{&upstream, 0};
    replay_result const r = replay(log, pool);
    EXPECT_EQ(r.failures, 2U);
    EXPECT_EQ(r.log_failures, 2U);
    EXPECT_EQ(r.log_failures_reproduced, 1U);
    EXPECT_EQ(r.skipped_frees, 1U);
    EXPECT_EQ(r.unknown_frees, 0U);
    EXPECT_EQ(r.allocations, 5U);
    EXPECT_EQ(r.deallocations, 2U) << "the small failure row's block and 0xa00";
    EXPECT_EQ(r.live_at_end, 1U);
    EXPECT_EQ(r.peak_live_bytes, 2 * 614400U) << "as the log says, whatever this resource managed";
    EXPECT_FALSE(r.peak_upstream_bytes.has_value()) << "no probe given";
    EXPECT_FALSE(r.fragmentation.has_value());
  }
  EXPECT_EQ(upstream.allocation_count(), 0U);
  EXPECT_EQ(upstream.invalid_deallocations(), 0U);
}

TEST(replay, an_allocation_at_a_live_address_frees_the_older_block_first)
{
  allocation_log const log = log_of(
    "1,10:00:00.000001,allocate,0xa00,100,0x0\n"
    "1,10:00:00.000002,allocate,0xa00,200,0x0\n"
    "1,10:00:00.000003,free,0xa00,200,0x0\n");
  mr::simulated_memory_resource upstream;
  replay_result const r = replay(log, upstream);
  EXPECT_EQ(r.missing_frees, 1U);
  EXPECT_EQ(r.ops, 4U);
  EXPECT_EQ(r.peak_live_bytes, 200U);
  EXPECT_EQ(upstream.allocation_count(), 0U);
  EXPECT_EQ(upstream.invalid_deallocations(), 0U) << "each block freed with the size it was allocated with";
}

TEST(replay, each_stream_id_gets_a_stream)
{
  allocation_log const log = log_of(
    "1,10:00:00.000001,allocate,0xa00,100,0x0\n"
    "1,10:00:00.000002,allocate,0xb00,100,0x1\n"
    "1,10:00:00.000003,allocate,0xc00,100,0x2\n"
    "1,10:00:00.000004,allocate,0xd00,100,0x7f0000001000\n"
    "1,10:00:00.000005,free,0xd00,100,0x7f0000001000\n"
    "1,10:00:00.000006,allocate,0xe00,100,0x7f0000002000\n"
    "1,10:00:00.000007,free,0xa00,100,0x7f0000002000\n");  // freed on another stream than it was allocated on
  mr::simulated_memory_resource upstream;
  {
    mr::pool_memory_resource pool{&upstream, 0};
    replay_result const r = replay(log, pool);
    EXPECT_EQ(r.streams, 5U);
    EXPECT_EQ(r.failures, 0U);
    EXPECT_EQ(r.ops, 7U);
    EXPECT_EQ(r.live_at_end, 3U);
    EXPECT_EQ(pool.used_bytes(), 0U);
  }
  EXPECT_EQ(upstream.allocation_count(), 0U);
}

TEST(replay, progress_rises_to_one_and_an_empty_log_replays)
{
  std::string rows;
  for (int i = 0; i < 1000; ++i) {
    rows += "1,10:00:00.000001,allocate,0x" + std::to_string(1000 + i) + "00,256,0x0\n";
    rows += "1,10:00:00.000002,free,0x" + std::to_string(1000 + i) + "00,256,0x0\n";
  }
  allocation_log const log = log_of(rows);
  mr::simulated_memory_resource upstream;
  std::vector<double> seen;
  replay_result const r = replay(log, upstream, {.progress = [&](double f) { seen.push_back(f); }, .progress_steps = 10});
  EXPECT_EQ(r.ops, 2000U);
  ASSERT_FALSE(seen.empty());
  EXPECT_LE(seen.size(), 11U);
  EXPECT_DOUBLE_EQ(seen.back(), 1.0);
  for (std::size_t i = 1; i < seen.size(); ++i) { EXPECT_GT(seen[i], seen[i - 1]); }

  seen.clear();
  replay_result const empty = replay(log_of(""), upstream, {.progress = [&](double f) { seen.push_back(f); }});
  EXPECT_EQ(empty.ops, 0U);
  EXPECT_EQ(empty.ns_per_op, 0.0);
  EXPECT_FALSE(empty.fragmentation.has_value());
  EXPECT_EQ(seen, std::vector<double>{1.0});
}

TEST(replay, timeline_samples_live_and_upstream_bytes_and_times_every_operation)
{
  // 500 blocks of growing size, each freed 3 rows later: the live bytes after every operation are known.
  std::string rows;
  std::vector<std::size_t> live_after_op;  // the model: live bytes after op k (1-based: index k - 1)
  std::size_t live = 0;
  std::vector<std::size_t> sizes;
  for (std::size_t i = 0; i < 500; ++i) {
    std::size_t const size = 256 * (1 + i % 40);
    sizes.push_back(size);
    char time[32];
    std::snprintf(time, sizeof time, "10:00:%02zu.%06zu", i / 100, (i % 100) * 1000);
    rows += std::string{"1,"} + time + ",allocate,0x" + std::to_string(100000 + i) + "00," + std::to_string(size) + ",0x0\n";
    live += size;
    live_after_op.push_back(live);
    if (i >= 3) {
      rows += std::string{"1,"} + time + ",free,0x" + std::to_string(100000 + i - 3) + "00," + std::to_string(sizes[i - 3]) + ",0x0\n";
      live -= sizes[i - 3];
      live_after_op.push_back(live);
    }
  }
  allocation_log const log = log_of(rows);
  registry::resource_handle r = registry::make_resource("pool", {.simulate = true});
  replay_timeline timeline;
  timeline.samples.push_back({});  // replaced, not appended to
  replay_result const result = replay(log, r, {.timeline = &timeline, .timeline_samples = 100});
  ASSERT_EQ(result.ops, live_after_op.size());

  std::size_t timed = 0;
  for (std::size_t const n : timeline.latency_histogram) { timed += n; }
  EXPECT_EQ(timed, result.ops) << "every operation lands in one latency bucket";

  ASSERT_GE(timeline.samples.size(), 50U) << "at least half of timeline_samples";
  EXPECT_LE(timeline.samples.size(), 101U) << "at most timeline_samples, plus the last operation";
  EXPECT_EQ(timeline.samples.front().op, 1U);
  EXPECT_EQ(timeline.samples.back().op, result.ops);
  for (std::size_t k = 0; k < timeline.samples.size(); ++k) {
    replay_timeline::sample const& s = timeline.samples[k];
    ASSERT_GE(s.op, 1U);
    ASSERT_LE(s.op, result.ops);
    if (k > 0) { EXPECT_GT(s.op, timeline.samples[k - 1].op); }
    if (k > 0) { EXPECT_GE(s.log_time_ns, timeline.samples[k - 1].log_time_ns); }
    EXPECT_EQ(s.live_bytes, live_after_op[s.op - 1]) << "after op " << s.op;
    EXPECT_GE(s.upstream_bytes, s.live_bytes) << "after op " << s.op << ": the pool holds at least what is live";
  }
  EXPECT_EQ(timeline.samples.front().log_time_ns, 0);
  EXPECT_EQ(timeline.samples.back().log_time_ns, 4'099'000'000) << "the last row is at 10:00:04.099000";
  EXPECT_EQ(timeline.samples.back().upstream_bytes, r.upstream_bytes());

  // A resource that refuses everything: failed allocations hold no bytes.
  mr::simulated_memory_resource tiny{256};
  replay_timeline refused;
  replay_result const failed = replay(log, tiny, {.timeline = &refused, .timeline_samples = 10});
  EXPECT_EQ(failed.failures, 500U - 13U) << "only the 13 blocks of 256 bytes (i % 40 == 0) fit";
  for (replay_timeline::sample const& s : refused.samples) {
    EXPECT_LE(s.live_bytes, 256U);
    EXPECT_EQ(s.upstream_bytes, 0U) << "no upstream probe was given";
  }

  replay_timeline empty;
  (void)replay(log_of(""), tiny, {.timeline = &empty});
  EXPECT_TRUE(empty.samples.empty());
}

TEST(replay, timeline_samples_stay_evenly_spaced_over_a_log_of_unknown_length)
{
  std::string rows;
  for (int i = 0; i < 50'000; ++i) {  // 100 000 operations, several batches
    rows += "1,10:00:00.000001,allocate,0x" + std::to_string(100000 + i) + "00,256,0x0\n";
    rows += "1,10:00:00.000002,free,0x" + std::to_string(100000 + i) + "00,256,0x0\n";
  }
  allocation_log const log = log_of(rows);
  mr::simulated_memory_resource upstream;
  replay_timeline timeline;
  replay_result const r = replay(log, upstream, {.timeline = &timeline, .timeline_samples = 1000});
  ASSERT_EQ(r.ops, 100'000U);
  ASSERT_GE(timeline.samples.size(), 500U);
  ASSERT_LE(timeline.samples.size(), 1001U);
  EXPECT_EQ(timeline.samples.front().op, 1U);
  EXPECT_EQ(timeline.samples.back().op, r.ops);
  std::size_t const stride = timeline.samples[2].op - timeline.samples[1].op;
  for (std::size_t k = 2; k + 1 < timeline.samples.size(); ++k) {
    EXPECT_EQ(timeline.samples[k].op - timeline.samples[k - 1].op, stride) << "sample " << k;
  }
}

TEST(replay, streams_a_reader_in_batches_with_the_counts_of_the_whole_log)
{
  // Over 60 000 rows (several batches); blocks live across batch boundaries, freed 30 000 rows later.
  std::string text{"Thread,Time,Action,Pointer,Size,Stream\n"};
  constexpr int blocks = 30'000;
  for (int i = 0; i < blocks; ++i) {
    text += "1,10:00:00.000001,allocate,0x" + std::to_string(100000 + i) + "00," + std::to_string(256 * (1 + i % 7)) +
            ",0x" + std::to_string(1 + i % 5) + "000\n";
  }
  for (int i = 0; i < blocks; ++i) {
    text += "1,10:00:00.000002,free,0x" + std::to_string(100000 + i) + "00,1,0x0\n";
  }
  text += "1,10:00:00.000003,free,0xdead00,1,0x0\n";
  mr::simulated_memory_resource upstream;
  replay_result const whole = replay(parse_allocation_log(text, "whole"), upstream);
  allocation_log_reader reader = allocation_log_reader::from_text(text, "streamed");
  replay_result const streamed = replay(reader, upstream);
  EXPECT_EQ(streamed.events, 2U * blocks + 1);
  EXPECT_EQ(streamed.ops, 2U * blocks);
  EXPECT_EQ(streamed.unknown_frees, 1U);
  EXPECT_EQ(streamed.streams, 6U) << "0x0 and 0x1000 .. 0x5000";
  EXPECT_EQ(streamed.peak_live_bytes, whole.peak_live_bytes);
  EXPECT_EQ(streamed.ops, whole.ops);
  EXPECT_EQ(upstream.allocation_count(), 0U);
  EXPECT_EQ(upstream.invalid_deallocations(), 0U) << "each block freed with the size it was allocated with";
}

TEST(replay, a_row_found_malformed_part_way_ends_the_replay_with_every_block_freed)
{
  std::string text{"Thread,Time,Action,Pointer,Size,Stream\n"};
  for (int i = 0; i < 40'000; ++i) {
    text += "1,10:00:00.000001,allocate,0x" + std::to_string(100000 + i) + "00,256,0x0\n";
  }
  text += "1,10:00:00.000002,allocate,0x100,twelve,0x0\n";
  mr::simulated_memory_resource upstream;
  allocation_log_reader reader = allocation_log_reader::from_text(text, "late.csv");
  try {
    (void)replay(reader, upstream);
    FAIL() << "no error for a malformed row";
  } catch (log_format_error const& e) {
    EXPECT_EQ(e.line(), 40'002U) << e.what();
  }
  EXPECT_EQ(upstream.allocation_count(), 0U) << "the blocks of the rows before were freed";
}

/// Threads of this process now (each stream of the host backend has one).
std::size_t thread_count()
{
  std::size_t n = 0;
  for ([[maybe_unused]] auto const& entry : std::filesystem::directory_iterator{"/proc/self/task"}) { ++n; }
  return n;
}

TEST(replay, thousands_of_stream_ids_share_a_bounded_pool_of_streams)
{
  std::string rows;
  constexpr int ids = 3000;
  for (int i = 0; i < ids; ++i) {
    std::string const stream = "0x" + std::to_string(7000000 + i) + "0";
    rows += "1,10:00:00.000001,allocate,0x" + std::to_string(100000 + i) + "00,256," + stream + "\n";
  }
  for (int i = 0; i < ids; ++i) {
    std::string const stream = "0x" + std::to_string(7000000 + i) + "0";
    rows += "1,10:00:00.000002,free,0x" + std::to_string(100000 + i) + "00,256," + stream + "\n";
  }
  // More rows, so that a second batch is read (and its rows seen by on_rows) while the streams the first
  // batch needed exist.
  for (int i = 0; i < 20'000; ++i) { rows += "1,10:00:00.000003,allocate failure,0x0,256,0x0\n"; }
  allocation_log const log = log_of(rows);
  mr::simulated_memory_resource upstream;
  mr::pool_memory_resource pool{&upstream, 0};
  std::size_t const before = thread_count();
  std::size_t most = before;
  replay_result const r = replay(log, pool, {.max_streams = 8, .on_rows = [&](std::span<log_event const>) {
                                               most = std::max(most, thread_count());
                                             }});
  most = std::max(most, thread_count());
  EXPECT_EQ(r.streams, std::size_t{ids} + 1) << "and 0x0";
  EXPECT_EQ(r.ops, 2U * ids + 2 * 20'000U);
  EXPECT_EQ(r.failures, 0U);
  EXPECT_LE(most, before + 8) << "one thread per stream on the host backend, 8 streams at most";
}

TEST(replay, stream_ids_beyond_the_counted_ones_still_replay_in_order)
{
  std::string text{"Thread,Time,Action,Pointer,Size,Stream\n"};
  constexpr int ids = 70'000;  // more than replay_result::streams counts
  for (int i = 0; i < ids; ++i) {
    std::string const pointer = "0x" + std::to_string(100000 + i) + "00";
    std::string const stream = "0x" + std::to_string(1000000 + i) + "0";
    text += "1,10:00:00.000001,allocate," + pointer + ",256," + stream + "\n";
    text += "1,10:00:00.000002,free," + pointer + ",256," + stream + "\n";
  }
  mr::simulated_memory_resource upstream;
  allocation_log_reader reader = allocation_log_reader::from_text(text, "ids");
  replay_result const r = replay(reader, upstream, {.max_streams = 4});
  EXPECT_EQ(r.streams, 65'536U) << "counted up to 65 536";
  EXPECT_EQ(r.ops, 2U * ids);
  EXPECT_EQ(upstream.allocation_count(), 0U);
}

TEST(replay, peak_live_bytes_past_2_to_the_64_saturates)
{
  allocation_log const log = log_of(
    "1,10:00:00.000001,allocate,0xa00,9223372036854775808,0x0\n"
    "1,10:00:00.000002,allocate,0xb00,9223372036854775808,0x0\n");
  mr::simulated_memory_resource upstream;
  replay_result const r = replay(log, upstream);
  EXPECT_EQ(r.peak_live_bytes, std::numeric_limits<std::size_t>::max());
  EXPECT_EQ(r.failures, 2U);
}

// ---- replaying a registered resource ----------------------------------------------------------------------

TEST(replay_registered_resource, every_default_resource_replays_a_small_log)
{
  allocation_log const log = log_of(
    "1,10:00:00.000001,allocate,0xa00,1000,0x0\n"
    "1,10:00:00.000002,allocate,0xb00,3000000,0x0\n"  // binning: the 4 MiB bin
    "1,10:00:00.000003,allocate,0xc00,9000000,0x0\n"  // binning: above the largest bin, from the pool
    "1,10:00:00.000004,free,0xa00,1000,0x0\n"
    "1,10:00:00.000005,free,0xb00,3000000,0x0\n"
    "1,10:00:00.000006,free,0xc00,9000000,0x0\n");
  std::size_t replayed = 0;
  for (auto const& info : registry::resources()) {
    if (!info.replays_by_default()) { continue; }
    for (bool const simulate : {false, true}) {
      if (simulate && !info.simulatable) { continue; }
      SCOPED_TRACE(std::string{info.name} + (simulate ? " simulated" : ""));
      registry::resource_handle r = registry::make_resource(info.name, {.simulate = simulate});
      EXPECT_EQ(r.name(), info.name);
      replay_result const result = replay(log, r);
      EXPECT_EQ(result.failures, 0U);
      EXPECT_EQ(result.ops, 6U);
      EXPECT_EQ(result.peak_live_bytes, 12'001'000U);
      ASSERT_TRUE(result.peak_upstream_bytes.has_value());
      EXPECT_GE(*result.peak_upstream_bytes, result.peak_live_bytes);
      ASSERT_TRUE(result.fragmentation.has_value());
      EXPECT_GE(*result.fragmentation, 1.0);
      ++replayed;
    }
  }
  EXPECT_EQ(replayed, 10U) << "pool, vmm, arena, binning (each twice), cuda_async, cuda";
}

// ---- the shared ResNet-50 trace ----------------------------------------------------------------------------

TEST(replay, resnet50_trace_on_simulated_sub_allocators)
{
  auto const trace = resnet50_trace();
  if (trace.empty()) {
    GTEST_SKIP() << "shared trace pytorch_resnet50_train.csv.gz not found under '" << traces_dir().string()
                 << "' (set GPUMEM_TRACES_DIR); the synthetic logs above still test replay";
  }
  allocation_log const log = read_allocation_log(trace);
  for (char const* name : {"pool", "arena", "binning"}) {
    SCOPED_TRACE(name);
    registry::resource_handle r = registry::make_resource(name, {.simulate = true});
    replay_result const result = replay(log, r);
    EXPECT_EQ(result.ops, 41'696U);
    EXPECT_EQ(result.failures, 0U);
    EXPECT_EQ(result.unknown_frees, 0U);
    EXPECT_EQ(result.live_at_end, 0U);
    EXPECT_EQ(result.peak_live_bytes, 9'386'021'008U);
    ASSERT_TRUE(result.fragmentation.has_value());
    if (!r.reserves_upfront()) {
      // RMM's pool reaches 1.555 and binning 1.773 on this trace (traces/README.md); a doubling pool over a
      // simulated upstream should land in the same range, and never below 1.
      EXPECT_GE(*result.fragmentation, 1.0);
      EXPECT_LE(*result.fragmentation, 2.5);
    }
    std::printf("[ replay   ] %-8s %8.1f ns/op (host, Debug)  peak upstream %zu  peak live %zu  ratio %.3f%s\n",
                name, result.ns_per_op, *result.peak_upstream_bytes, result.peak_live_bytes, *result.fragmentation,
                r.reserves_upfront() ? " (fixed arena: not a fragmentation figure)" : "");
  }
}

}  // namespace
}  // namespace gpumem::test
