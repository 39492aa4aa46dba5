// bench/workload.hpp and bench/measure.hpp: the `random` sequences are deterministic and consistent (every
// free matches a live block of the same size, the live limit holds, the recorded peak is the real one), the
// split over threads divides the work exactly, the block checker catches null, misaligned and overlapping
// blocks, and the measurements verify before they time (a resource that hands out overlapping blocks fails).
#include <gpumem/bench/measure.hpp>
#include <gpumem/bench/workload.hpp>
#include <gpumem/cuda_stream.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <span>
#include <cstdint>
#include <vector>

namespace gpumem::test {
namespace {

using bench::random_shape;
using bench::sequence;

/// Replays `seq` on paper: checks every step against the live slots and returns the peak live bytes.
std::size_t check_sequence(sequence const& seq, random_shape const& shape)
{
  std::vector<std::uint32_t> live(seq.slots, 0);
  std::size_t live_count = 0;
  std::size_t live_bytes = 0;
  std::size_t peak = 0;
  std::size_t allocations = 0;
  for (bench::step const& s : seq.steps) {
    EXPECT_LT(s.slot, seq.slots);
    if (s.allocate) {
      EXPECT_EQ(live[s.slot], 0U) << "allocating into a slot that holds a block";
      EXPECT_GE(s.size, shape.min_size);
      EXPECT_LE(s.size, shape.max_size);
      live[s.slot] = s.size;
      ++live_count;
      ++allocations;
      live_bytes += s.size;
      peak = std::max(peak, live_bytes);
      EXPECT_LE(live_count, seq.slots) << "the live limit";
    } else {
      EXPECT_EQ(live[s.slot], s.size) << "a free must name a live block with its size";
      live[s.slot] = 0;
      --live_count;
      live_bytes -= s.size;
    }
  }
  EXPECT_EQ(live_count, 0U) << "everything is freed at the end";
  EXPECT_EQ(allocations, seq.allocations);
  return peak;
}

TEST(bench_workload, random_sequence_is_deterministic_and_consistent)
{
  random_shape const shape = bench::random_smoke;
  sequence const a = bench::make_sequence(shape.steps, shape.max_live, shape, 42);
  sequence const b = bench::make_sequence(shape.steps, shape.max_live, shape, 42);
  sequence const c = bench::make_sequence(shape.steps, shape.max_live, shape, 43);
  ASSERT_EQ(a.steps.size(), b.steps.size());
  EXPECT_TRUE(std::equal(a.steps.begin(), a.steps.end(), b.steps.begin(), [](auto const& x, auto const& y) {
    return x.size == y.size && x.slot == y.slot && x.allocate == y.allocate;
  }));
  EXPECT_NE(a.bytes_allocated, c.bytes_allocated) << "another seed, another sequence";
  EXPECT_EQ(check_sequence(a, shape), a.peak_live_bytes);
  EXPECT_GE(a.steps.size(), shape.steps);
  EXPECT_GT(a.allocations, shape.steps / 4);
}

TEST(bench_workload, split_random_divides_the_work_exactly)
{
  random_shape const shape{1003, 70, 256, 1 << 20, 7};
  std::vector<sequence> const parts = bench::split_random(shape, 4);
  ASSERT_EQ(parts.size(), 4U);
  // 1003 steps = 251 + 251 + 251 + 250; 70 live blocks = 18 + 18 + 17 + 17; thread t seeded 7 + t.
  std::size_t const steps[] = {251, 251, 251, 250};
  std::size_t const slots[] = {18, 18, 17, 17};
  for (std::size_t t = 0; t < 4; ++t) {
    sequence const expected = bench::make_sequence(steps[t], slots[t], shape, 7 + t);
    EXPECT_EQ(parts[t].slots, slots[t]);
    ASSERT_EQ(parts[t].steps.size(), expected.steps.size()) << "thread " << t;
    EXPECT_TRUE(std::equal(parts[t].steps.begin(), parts[t].steps.end(), expected.steps.begin(),
                           [](auto const& x, auto const& y) {
                             return x.size == y.size && x.slot == y.slot && x.allocate == y.allocate;
                           }))
      << "thread " << t;
    (void)check_sequence(parts[t], shape);
  }
}

TEST(bench_workload, bad_shapes_are_refused)
{
  random_shape const shape = bench::random_smoke;
  EXPECT_THROW((void)bench::make_sequence(10, 0, shape, 1), logic_error);
  EXPECT_THROW((void)bench::make_sequence(10, 70000, shape, 1), logic_error);
  EXPECT_THROW((void)bench::make_sequence(10, 8, random_shape{10, 8, 512, 256, 1}, 1), logic_error);
  EXPECT_THROW((void)bench::split_random(shape, 0), logic_error);
  EXPECT_THROW((void)bench::split_random(random_shape{10, 4, 256, 512, 1}, 5), logic_error);
}

TEST(bench_workload, block_checker_reports_null_misaligned_and_overlapping_blocks)
{
  bench::block_checker checker;
  alignas(256) static char arena[4096];
  EXPECT_THAT(checker.add(nullptr, 256), testing::HasSubstr("returned nullptr"));
  EXPECT_THAT(checker.add(arena + 16, 256), testing::HasSubstr("not 256-byte aligned"));
  EXPECT_EQ(checker.add(arena, 512), "");
  EXPECT_THAT(checker.add(arena + 256, 256), testing::HasSubstr("overlaps the live block"));
  EXPECT_EQ(checker.add(arena + 512, 256), "") << "adjacent is not overlapping";
  checker.remove(arena);
  EXPECT_EQ(checker.add(arena + 256, 256), "") << "a freed range can be handed out again";
}

/// Hands out the same address for every allocation: overlapping blocks.
class overlapping_resource final : public mr::device_memory_resource {
  void* do_allocate(std::size_t, cuda_stream_view) override { return block_; }
  void do_deallocate(void*, std::size_t, cuda_stream_view) noexcept override {}
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override { return this == &other; }
  alignas(256) static inline char storage_[1 << 12];
  void* block_{storage_};
};

TEST(bench_measure, measures_after_verifying_and_fails_on_overlapping_blocks)
{
  mr::simulated_memory_resource upstream;
  mr::pool_memory_resource pool{&upstream, 0};
  cuda_stream stream;
  std::vector<cuda_stream_view> const streams{stream.view(), stream.view(), stream.view(), stream.view()};

  bench::measurement const fixed = bench::measure_fixed(pool, stream.view(), bench::fixed_sizes[1], 3, 0.0);
  EXPECT_EQ(fixed.workload, "fixed/4KiB");
  ASSERT_EQ(fixed.ns_per_op.size(), 3U);
  for (double const ns : fixed.ns_per_op) { EXPECT_GT(ns, 0.0); }
  EXPECT_GE(fixed.ops_per_pass, 32U);

  std::vector<sequence> const one = bench::split_random(bench::random_smoke, 1);
  bench::measurement const random = bench::measure_random(pool, streams, one, 2, "random");
  EXPECT_EQ(random.ns_per_op.size(), 2U);
  EXPECT_EQ(random.peak_live_bytes, one[0].peak_live_bytes) << "one thread: the sequence's own peak";
  EXPECT_EQ(random.ops_per_pass, one[0].steps.size());

  std::vector<sequence> const four = bench::split_random(bench::random_smoke, 4);
  bench::measurement const mt = bench::measure_random(pool, streams, four, 2, "random_mt/4");
  EXPECT_EQ(mt.ns_per_op.size(), 2U);
  EXPECT_GT(mt.peak_live_bytes, 0U);
  EXPECT_DOUBLE_EQ(mt.median_ns_per_op(), (mt.ns_per_op[0] + mt.ns_per_op[1]) / 2);

  overlapping_resource broken;
  EXPECT_THAT([&] { (void)bench::measure_fixed(broken, stream.view(), bench::fixed_sizes[0], 1, 0.0); },
              testing::ThrowsMessage<logic_error>(testing::HasSubstr("overlaps")));
  EXPECT_THAT([&] { (void)bench::measure_random(broken, streams, one, 1, "random"); },
              testing::ThrowsMessage<logic_error>(testing::HasSubstr("overlaps")));
  EXPECT_THROW((void)bench::measure_random(pool, std::span{streams}.first(2), four, 1, "random_mt/4"), logic_error)
    << "one stream per sequence";
  stream.synchronize();
}

/// Allocates from `upstream`, recording the stream of every allocation; a free on another stream than its
/// allocation's, or of an unknown block, is counted as a mismatch.
class stream_recording_resource final : public mr::device_memory_resource {
 public:
  explicit stream_recording_resource(mr::device_memory_resource& upstream) : upstream_{upstream} {}
  std::map<cudaStream_t, std::size_t> allocations_per_stream;
  std::size_t mismatches{};

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    void* const p = upstream_.allocate(bytes, stream);
    std::lock_guard const lock{mutex_};
    live_[p] = stream.value();
    ++allocations_per_stream[stream.value()];
    return p;
  }
  void do_deallocate(void* p, std::size_t bytes, cuda_stream_view stream) noexcept override
  {
    {
      std::lock_guard const lock{mutex_};
      auto const it = live_.find(p);
      if (it == live_.end() || it->second != stream.value()) { ++mismatches; }
      if (it != live_.end()) { live_.erase(it); }
    }
    upstream_.deallocate(p, bytes, stream);
  }
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override { return this == &other; }
  mr::device_memory_resource& upstream_;
  std::mutex mutex_;
  std::map<void*, cudaStream_t> live_;
};

/// How many allocations of `seq` fall on each of `streams` streams when slot k lives on stream k % streams.
std::vector<std::size_t> allocations_per_stream(sequence const& seq, std::size_t streams)
{
  std::vector<std::size_t> counts(streams, 0);
  for (bench::step const& s : seq.steps) {
    if (s.allocate) { ++counts[s.slot % streams]; }
  }
  return counts;
}

TEST(bench_workload, several_streams_per_sequence_place_each_block_on_its_slots_stream)
{
  mr::simulated_memory_resource upstream;
  stream_recording_resource recording{upstream};
  cuda_stream a;
  cuda_stream b;
  cuda_stream c;
  std::vector<cuda_stream_view> const streams{a.view(), b.view(), c.view()};
  sequence const seq = bench::split_random(bench::random_smoke, 1).front();
  std::vector<void*> slots(seq.slots, nullptr);

  bench::run_sequence(recording, streams, seq, slots);
  std::vector<std::size_t> const expected = allocations_per_stream(seq, 3);
  EXPECT_EQ(recording.mismatches, 0U) << "every block is freed on the stream it was allocated on";
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(recording.allocations_per_stream[streams[i].value()], expected[i]) << "stream " << i;
    EXPECT_GT(expected[i], 0U);
  }

  bench::block_checker checker;
  bench::live_meter meter;
  EXPECT_EQ(bench::run_sequence_checked(recording, streams, seq, slots, checker, meter), "");
  EXPECT_EQ(meter.peak.load(), seq.peak_live_bytes);
  EXPECT_EQ(meter.live.load(), 0U);
  EXPECT_EQ(recording.mismatches, 0U);
  EXPECT_EQ(recording.allocations_per_stream[streams[0].value()], 2 * expected[0]);

  EXPECT_THAT([&] { bench::run_sequence(recording, std::span<cuda_stream_view const>{}, seq, slots); },
              testing::ThrowsMessage<logic_error>(testing::HasSubstr("empty")));
  EXPECT_EQ(upstream.bytes_in_use(), 0U) << "nothing is left allocated";
}

TEST(bench_workload, several_streams_per_thread_give_each_thread_its_own_streams)
{
  mr::simulated_memory_resource upstream;
  stream_recording_resource recording{upstream};
  std::vector<cuda_stream> owned(4);
  std::vector<cuda_stream_view> streams;
  for (auto const& s : owned) { streams.push_back(s.view()); }
  std::vector<sequence> const two = bench::split_random(bench::random_smoke, 2);
  std::vector<std::vector<void*>> slots{std::vector<void*>(two[0].slots), std::vector<void*>(two[1].slots)};
  bench::worker_team team{2};
  bench::first_error error;

  (void)bench::run_sequences(team, recording, streams, two, slots, error, 2);
  EXPECT_EQ(error.get(), "");
  EXPECT_EQ(recording.mismatches, 0U);
  for (std::size_t t = 0; t < 2; ++t) {
    std::vector<std::size_t> const expected = allocations_per_stream(two[t], 2);
    for (std::size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(recording.allocations_per_stream[streams[t * 2 + k].value()], expected[k]) << t << "/" << k;
    }
  }
  EXPECT_EQ(upstream.bytes_in_use(), 0U);
}

}  // namespace
}  // namespace gpumem::test
