// event: record/query/synchronize, cross-stream waits, elapsed time, flags and their misuse.
#include "support/gate.hpp"

#include <gpumem/cuda_stream.hpp>
#include <gpumem/error.hpp>
#include <gpumem/event.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace gpumem {
namespace {

void sleep_ms(void* ms) { std::this_thread::sleep_for(std::chrono::milliseconds{*static_cast<int*>(ms)}); }

TEST(Event, NeverRecordedIsComplete)
{
  event e;
  EXPECT_TRUE(e.query());
  e.synchronize();
}

TEST(Event, QueryFollowsTheRecordedPoint)
{
  cuda_stream stream;
  test::gate gate;
  gate.hold(stream.value());
  event e;
  e.record(stream);
  EXPECT_FALSE(e.query());
  gate.release();
  e.synchronize();
  EXPECT_TRUE(e.query());
}

TEST(Event, WaitOrdersAnotherStreamAfterTheRecord)
{
  cuda_stream producer;
  cuda_stream consumer{cuda_stream::flags::non_blocking};
  test::gate gate;
  gate.hold(producer.value());
  std::atomic<int> step{0};
  int order_seen = -1;
  auto produce = [&step] { step = 1; };
  auto consume = [&step, &order_seen] { order_seen = step.load(); };
  test::on_stream(producer.value(), produce);
  event ready;
  ready.record(producer);
  ready.wait(consumer);
  test::on_stream(consumer.value(), consume);
  EXPECT_FALSE(consumer.is_idle());
  gate.release();
  consumer.synchronize();
  EXPECT_EQ(order_seen, 1) << "the consumer ran before the producer's recorded work";
}

TEST(Event, WaitOnNeverRecordedEventDoesNothing)
{
  cuda_stream stream;
  event e;
  e.wait(stream);
  stream.synchronize();
}

TEST(Event, ElapsedTimeMeasuresWorkBetweenRecords)
{
  cuda_stream stream;
  event start;
  event stop;
  start.record(stream);
  int ms = 30;
  detail::get_backend().launch_host_func(stream.value(), &sleep_ms, &ms);
  stop.record(stream);
  stop.synchronize();
  float const elapsed = event::elapsed_time(start, stop);
  EXPECT_GE(elapsed, 25.0F);
  EXPECT_LT(elapsed, 5000.0F);
  EXPECT_FLOAT_EQ(get_elapsed_time(start, stop), elapsed);
}

TEST(Event, ElapsedTimeErrors)
{
  cuda_stream stream;
  event a;
  event b;
  EXPECT_THROW((void)event::elapsed_time(a, b), cuda_error) << "never recorded";
  event untimed{event_flags::disable_timing};
  untimed.record(stream);
  a.record(stream);
  stream.synchronize();
  try {
    (void)event::elapsed_time(a, untimed);
    FAIL() << "elapsed_time accepted an event without timing";
  } catch (logic_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("disable_timing"), std::string::npos) << e.what();
  }
}

TEST(Event, ElapsedTimeOfPendingRecordIsNotReady)
{
  cuda_stream stream;
  test::gate gate;
  event a;
  event b;
  a.record(stream);
  gate.hold(stream.value());
  b.record(stream);
  try {
    (void)event::elapsed_time(a, b);
    ADD_FAILURE() << "elapsed_time of an incomplete event succeeded";
  } catch (cuda_error const& e) {
    EXPECT_EQ(e.code(), cudaErrorNotReady);
  }
  gate.release();
  stream.synchronize();
}

TEST(Event, FlagsAndTheirRules)
{
  event blocking{event_flags::blocking_sync};
  EXPECT_TRUE(has_flag(blocking.flags(), event_flags::blocking_sync));
  event ipc{event_flags::interprocess | event_flags::disable_timing};
  EXPECT_TRUE(has_flag(ipc.flags(), event_flags::interprocess));
  try {
    event bad{event_flags::interprocess};
    FAIL() << "an interprocess event with timing was accepted";
  } catch (logic_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("interprocess"), std::string::npos);
  }
}

TEST(Event, RerecordReplacesTheEarlierRecord)
{
  cuda_stream stream;
  event e;
  e.record(stream);
  stream.synchronize();
  EXPECT_TRUE(e.query());
  test::gate gate;
  gate.hold(stream.value());
  e.record(stream);
  EXPECT_FALSE(e.query());
  gate.release();
  e.synchronize();
}

TEST(Event, MoveTransfersOwnership)
{
  event a;
  cudaEvent_t const handle = a.value();
  event b{std::move(a)};
  EXPECT_FALSE(a.is_valid());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.value(), handle);
  EXPECT_THROW(a.record(), logic_error);
  event c;
  c = std::move(b);
  c.record();
  c.synchronize();
}

}  // namespace
}  // namespace gpumem
