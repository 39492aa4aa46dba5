// latency_percentile (latency_percentile.hpp) on hand-made histograms: the bucket that holds the rank,
// the estimate inside it, the open last bucket, an empty histogram and q out of range.
#include <gpumem/error.hpp>
#include <gpumem/replay/latency_percentile.hpp>

#include <gtest/gtest.h>

#include <cmath>

namespace gpumem::test {
namespace {

TEST(replay_latency_percentile, an_empty_histogram_has_none)
{
  replay_timeline const empty;
  EXPECT_FALSE(latency_percentile(empty, 0.5));
}

TEST(replay_latency_percentile, every_operation_in_one_bucket_gives_a_time_inside_it)
{
  replay_timeline t;
  t.latency_histogram[9] = 1000;  // [512, 1024) ns
  for (double const q : {0.01, 0.5, 0.99, 1.0}) {
    auto const p = latency_percentile(t, q);
    ASSERT_TRUE(p);
    EXPECT_GE(*p, 512.0) << q;
    EXPECT_LT(*p, 1024.0) << q;
  }
  // Spread evenly over the bucket on a log scale: the median is at its geometric middle.
  EXPECT_NEAR(*latency_percentile(t, 0.5), std::exp2(9.0 + 499.5 / 1000.0), 1e-6);
  EXPECT_LT(*latency_percentile(t, 0.5), *latency_percentile(t, 0.99));
}

TEST(replay_latency_percentile, the_tail_moves_p99_but_not_p50)
{
  replay_timeline t;
  t.latency_histogram[6] = 98;   // [64, 128) ns
  t.latency_histogram[20] = 2;   // [1 Mi, 2 Mi) ns: 2 slow calls in 100
  EXPECT_LT(*latency_percentile(t, 0.50), 128.0);
  EXPECT_LT(*latency_percentile(t, 0.98), 128.0);  // rank 98: the last fast one
  EXPECT_GE(*latency_percentile(t, 0.99), std::exp2(20.0));  // rank 99: a slow one
  EXPECT_LT(*latency_percentile(t, 0.99), std::exp2(21.0));

  t.latency_histogram[20] = 1;  // 1 in 99: p99 (rank 99 of 99) is the slow one still
  EXPECT_GE(*latency_percentile(t, 0.99), std::exp2(20.0));
}

TEST(replay_latency_percentile, the_first_and_last_buckets_read_as_their_bounds)
{
  replay_timeline t;
  t.latency_histogram[0] = 10;
  EXPECT_EQ(*latency_percentile(t, 0.5), 1.0);
  t.latency_histogram[0] = 0;
  t.latency_histogram[replay_timeline::latency_buckets - 1] = 10;
  EXPECT_EQ(*latency_percentile(t, 0.5), std::exp2(static_cast<double>(replay_timeline::latency_buckets - 1)));
}

TEST(replay_latency_percentile, q_outside_0_to_1_is_refused)
{
  replay_timeline t;
  t.latency_histogram[3] = 1;
  EXPECT_THROW((void)latency_percentile(t, 0.0), logic_error);
  EXPECT_THROW((void)latency_percentile(t, 1.5), logic_error);
  EXPECT_THROW((void)latency_percentile(t, std::nan("")), logic_error);
  EXPECT_EQ(*latency_percentile(t, 1.0), *latency_percentile(t, 0.01));  // one operation: every rank is it
}

}  // namespace
}  // namespace gpumem::test
