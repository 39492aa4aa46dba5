// cuda_stream, cuda_stream_view and cuda_stream_pool: ordering, asynchrony, flags, priorities, moves,
// comparisons and conversions (as RMM's), synchronize_no_throw, and CUDA's implicit synchronisation between the legacy default stream and blocking streams.
#include "support/gate.hpp"

#include <gpumem/cuda_stream.hpp>
#include <gpumem/cuda_stream_pool.hpp>
#include <gpumem/error.hpp>
#include <gpumem/graph.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <type_traits>
#include <set>
#include <thread>
#include <vector>

namespace gpumem {
namespace {

TEST(CudaStream, RunsWorkInSubmissionOrder)
{
  cuda_stream stream;
  std::vector<int> seen;
  std::vector<std::function<void()>> steps;
  for (int i = 0; i < 50; ++i) { steps.emplace_back([&seen, i] { seen.push_back(i); }); }
  for (auto& step : steps) { test::on_stream(stream.value(), step); }
  stream.synchronize();
  ASSERT_EQ(seen.size(), 50U);
  for (int i = 0; i < 50; ++i) { EXPECT_EQ(seen[static_cast<std::size_t>(i)], i); }
}

TEST(CudaStream, SubmissionDoesNotWaitAndQueryReportsPendingWork)
{
  cuda_stream stream;
  test::gate gate;
  gate.hold(stream.value());
  std::atomic<bool> ran{false};
  auto after = [&ran] { ran = true; };
  test::on_stream(stream.value(), after);
  EXPECT_FALSE(stream.is_idle());
  EXPECT_FALSE(ran.load());
  gate.release();
  stream.synchronize();
  EXPECT_TRUE(ran.load());
  EXPECT_TRUE(stream.is_idle());
  EXPECT_TRUE(stream.view().is_idle());
}

TEST(CudaStream, CopyIsOrderedAfterEarlierWork)
{
  // Pinned host memory: CUDA makes a copy from pageable memory wait for the stream's earlier work on the
  // calling thread, which here would wait for the gate forever.
  cuda_stream stream;
  auto& backend = detail::get_backend();
  void* device = backend.malloc_device(sizeof(int));
  auto* host = static_cast<int*>(backend.malloc_pinned(2 * sizeof(int)));
  ASSERT_NE(device, nullptr);
  ASSERT_NE(host, nullptr);
  host[0] = 0;
  host[1] = -1;
  test::gate gate;
  gate.hold(stream.value());
  auto set_source = [host] { host[0] = 42; };
  test::on_stream(stream.value(), set_source);  // runs after the gate, before the copies
  backend.memcpy_async(device, host, sizeof(int), stream.value());
  backend.memcpy_async(host + 1, device, sizeof(int), stream.value());
  gate.release();
  stream.synchronize();
  EXPECT_EQ(host[1], 42);
  backend.free_device(device);
  backend.free_pinned(host);
}

TEST(CudaStream, FlagsPriorityAndDevice)
{
  cuda_stream blocking;
  cuda_stream non_blocking{cuda_stream::flags::non_blocking};
  EXPECT_EQ(blocking.get_flags(), cuda_stream::flags::sync_default);
  EXPECT_EQ(non_blocking.get_flags(), cuda_stream::flags::non_blocking);
  EXPECT_EQ(blocking.device(), get_current_cuda_device());
  auto const [least, greatest] = cuda_stream::priority_range();
  EXPECT_LE(greatest, least);
  cuda_stream high{cuda_stream::flags::sync_default, greatest};
  EXPECT_EQ(high.priority(), greatest);
  cuda_stream beyond{cuda_stream::flags::sync_default, greatest - 100};
  EXPECT_EQ(beyond.priority(), greatest) << "priorities outside the range are clamped, as CUDA does";
}

TEST(CudaStreamView, PriorityAndCaptureStateOfAnyHandle)
{
  auto const [least, greatest] = cuda_stream::priority_range();
  cuda_stream high{cuda_stream::flags::sync_default, greatest};
  cuda_stream low{cuda_stream::flags::sync_default, least};
  cuda_stream_view const high_view{high.value()};  // a bare handle, as a foreign stream arrives
  EXPECT_EQ(high_view.priority(), greatest);
  EXPECT_EQ(cuda_stream_view{low.value()}.priority(), least);
  EXPECT_FALSE(high_view.is_capturing());
  graph g;
  g.capture_begin(high_view);
  EXPECT_TRUE(high_view.is_capturing());
  EXPECT_FALSE(cuda_stream_view{low.value()}.is_capturing());
  g.capture_end();
  EXPECT_FALSE(high_view.is_capturing());
}

TEST(CudaStreamView, HostFunctionRunsAfterEarlierWorkAndBeforeLaterWork)
{
  cuda_stream stream;
  cuda_stream_view const view{stream.value()};
  std::vector<int> seen;
  test::gate gate;
  gate.hold(stream.value());
  auto first = [&seen] { seen.push_back(1); };
  test::on_stream(stream.value(), first);
  view.launch_host_func([](void* data) { static_cast<std::vector<int>*>(data)->push_back(2); }, &seen);
  auto last = [&seen] { seen.push_back(3); };
  test::on_stream(stream.value(), last);
  EXPECT_TRUE(seen.empty()) << "launch_host_func does not wait for the stream";
  gate.release();
  view.synchronize();
  EXPECT_EQ(seen, (std::vector<int>{1, 2, 3}));
  EXPECT_THROW(view.launch_host_func(nullptr, nullptr), logic_error);
}

TEST(CudaStreamView, HostFunctionLaunchedDuringCaptureRunsAtEveryLaunch)
{
  cuda_stream stream;
  cuda_stream_view const view{stream.value()};
  int runs = 0;
  graph g;
  g.capture_begin(view);
  view.launch_host_func([](void* data) { ++*static_cast<int*>(data); }, &runs);
  g.capture_end();
  view.synchronize();
  EXPECT_EQ(runs, 0) << "captured, not run";
  g.launch(view);
  g.launch(view);
  view.synchronize();
  EXPECT_EQ(runs, 2);
}

TEST(CudaStream, MoveTransfersOwnership)
{
  cuda_stream a;
  cudaStream_t const handle = a.value();
  cuda_stream b{std::move(a)};
  EXPECT_FALSE(a.is_valid());  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  EXPECT_EQ(b.value(), handle);
  EXPECT_THROW(a.synchronize(), logic_error);
  cuda_stream c;
  c = std::move(b);
  EXPECT_EQ(c.value(), handle);
  c.synchronize();
}

TEST(CudaStreamView, DefaultValues)
{
  EXPECT_TRUE(cuda_stream_default.is_default());
  EXPECT_TRUE(cuda_stream_legacy.is_default());
  EXPECT_FALSE(cuda_stream_per_thread.is_default());
  EXPECT_TRUE(cuda_stream_per_thread.is_per_thread_default());
  cuda_stream_default.synchronize();
  cuda_stream_per_thread.synchronize();
  EXPECT_TRUE(cuda_stream_default.synchronize_no_throw());
}

TEST(CudaStreamView, PerThreadDefaultStreamIsOrdered)
{
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&failures] {
      auto& backend = detail::get_backend();
      std::vector<int> source(1000);
      for (int i = 0; i < 1000; ++i) { source[static_cast<std::size_t>(i)] = i; }
      std::vector<int> back(1000, -1);
      void* device = backend.malloc_device(sizeof(int) * 1000);
      backend.memcpy_async(device, source.data(), sizeof(int) * 1000, cudaStreamPerThread);
      backend.memcpy_async(back.data(), device, sizeof(int) * 1000, cudaStreamPerThread);
      backend.stream_synchronize(cudaStreamPerThread);
      if (back != source) { ++failures; }
      backend.free_device(device);
    });
  }
  for (auto& t : threads) { t.join(); }
  EXPECT_EQ(failures.load(), 0);
}

TEST(CudaStreamView, LegacyDefaultStreamWaitsForBlockingStreams)
{
  cuda_stream blocking;
  test::gate gate;
  gate.hold(blocking.value());
  std::atomic<bool> default_ran{false};
  auto mark = [&default_ran] { default_ran = true; };
  test::on_stream(cuda_stream_default.value(), mark);
  std::this_thread::sleep_for(std::chrono::milliseconds{50});
  EXPECT_FALSE(default_ran.load()) << "work on the legacy default stream ran before earlier work of a blocking stream";
  gate.release();
  cuda_stream_default.synchronize();
  EXPECT_TRUE(default_ran.load());
}

TEST(CudaStreamView, NonBlockingStreamDoesNotHoldBackTheLegacyDefaultStream)
{
  if (!test::on_host_backend()) {
    GTEST_SKIP() << "CUDA may run all host functions on one driver thread, so a held host function would "
                    "hold back the other stream's too";
  }
  cuda_stream non_blocking{cuda_stream::flags::non_blocking};
  test::gate gate;
  gate.hold(non_blocking.value());
  std::atomic<bool> default_ran{false};
  auto mark = [&default_ran] { default_ran = true; };
  test::on_stream(cuda_stream_default.value(), mark);
  EXPECT_TRUE(test::eventually([&] { return default_ran.load(); }));
  gate.release();
  non_blocking.synchronize();
}

TEST(CudaStreamView, BlockingStreamWaitsForTheLegacyDefaultStream)
{
  cuda_stream blocking;
  test::gate gate;
  gate.hold(cuda_stream_default.value());
  std::atomic<bool> stream_ran{false};
  auto mark = [&stream_ran] { stream_ran = true; };
  test::on_stream(blocking.value(), mark);
  std::this_thread::sleep_for(std::chrono::milliseconds{50});
  EXPECT_FALSE(stream_ran.load());
  gate.release();
  blocking.synchronize();
  EXPECT_TRUE(stream_ran.load());
}

TEST(CudaStreamPool, RoundRobinOverDistinctStreams)
{
  cuda_stream_pool pool{4};
  EXPECT_EQ(pool.get_pool_size(), 4U);
  std::set<cudaStream_t> seen;
  std::vector<cudaStream_t> order;
  for (int i = 0; i < 8; ++i) {
    cuda_stream_view const s = pool.get_stream();
    seen.insert(s.value());
    order.push_back(s.value());
  }
  EXPECT_EQ(seen.size(), 4U);
  for (std::size_t i = 0; i < 4; ++i) { EXPECT_EQ(order[i], order[i + 4]); }
  EXPECT_EQ(pool.get_stream(1).value(), pool.get_stream(5).value());
  for (std::size_t i = 0; i < 4; ++i) { pool.get_stream(i).synchronize(); }
}

TEST(CudaStreamPool, RejectsZeroStreams)
{
  try {
    cuda_stream_pool pool{0};
    FAIL() << "a pool of zero streams was accepted";
  } catch (logic_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("size was 0"), std::string::npos) << e.what();
  }
}

TEST(CudaStreamPool, ConcurrentGetStream)
{
  cuda_stream_pool pool{3};
  std::vector<std::thread> threads;
  std::atomic<int> invalid{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        if (pool.get_stream().value() == nullptr) { ++invalid; }
      }
    });
  }
  for (auto& t : threads) { t.join(); }
  EXPECT_EQ(invalid.load(), 0);
}


TEST(CudaStream, ComparesAndConvertsAsRmmsDoes)
{
  cuda_stream a;
  cuda_stream b{cuda_stream::flags::non_blocking};
  cuda_stream_view const view_of_a = a;
  EXPECT_TRUE(a == view_of_a);
  EXPECT_TRUE(view_of_a == a);
  EXPECT_TRUE(a == a.value());
  EXPECT_FALSE(a == b);
  EXPECT_TRUE(a != b);
  EXPECT_TRUE(a != cuda_stream_default);
  EXPECT_EQ(static_cast<cudaStream_t>(a), a.value());
  static_assert(!std::is_convertible_v<cuda_stream const&, cudaStream_t>, "explicit, as RMM's");
  static_assert(std::is_convertible_v<cuda_stream const&, cuda_stream_view>);
#ifdef GPUMEM_HAS_CUDA_STREAM_REF
  cuda::stream_ref const ref = a;
  EXPECT_EQ(ref.get(), a.value());
#endif
  cuda_stream moved{std::move(a)};
  EXPECT_TRUE(moved == view_of_a);
  EXPECT_TRUE(a == cuda_stream_default) << "a moved-from stream holds no handle";  // NOLINT(bugprone-use-after-move)
}

TEST(CudaStream, SynchronizeNoThrowWaitsAndReports)
{
  cuda_stream stream;
  std::atomic<bool> ran{false};
  test::gate held;
  held.hold(stream.value());
  auto mark = [&ran] { ran = true; };
  test::on_stream(stream.value(), mark);
  std::thread opener{[&held] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    held.release();
  }};
  EXPECT_TRUE(stream.synchronize_no_throw());
  EXPECT_TRUE(ran.load());
  opener.join();
  stream.synchronize_no_throw();  // the result may be ignored, as RMM's returns nothing
  cuda_stream moved{std::move(stream)};
  EXPECT_FALSE(stream.synchronize_no_throw()) << "a moved-from stream: reported, not thrown";  // NOLINT
  EXPECT_TRUE(moved.synchronize_no_throw());
}

}  // namespace
}  // namespace gpumem
