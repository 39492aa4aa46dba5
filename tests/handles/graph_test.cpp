// graph: capture defers the work, launch replays it (with the data current at launch), misuse is reported.
#include "support/gate.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/cuda_stream.hpp>
#include <gpumem/error.hpp>
#include <gpumem/graph.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace gpumem {
namespace {

class Graph : public ::testing::Test {
 protected:
  void SetUp() override
  {
    source_ = backend().malloc_device(bytes);
    target_ = backend().malloc_device(bytes);
    ASSERT_NE(source_, nullptr);
    ASSERT_NE(target_, nullptr);
  }
  void TearDown() override
  {
    backend().free_device(source_);
    backend().free_device(target_);
  }
  static detail::backend& backend() { return detail::get_backend(); }

  std::vector<std::uint8_t> read(void* device)
  {
    std::vector<std::uint8_t> out(bytes);
    backend().memcpy_async(out.data(), device, bytes, stream_.value());
    stream_.synchronize();
    return out;
  }

  static constexpr std::size_t bytes = 4096;
  cuda_stream stream_;
  void* source_{};
  void* target_{};
};

void count_launch(void* counter) { ++*static_cast<int*>(counter); }

TEST_F(Graph, CaptureDefersAndLaunchReplays)
{
  backend().memset_async(source_, 0x11, bytes, stream_.value());
  backend().memset_async(target_, 0x00, bytes, stream_.value());
  stream_.synchronize();

  int launches = 0;
  graph g;
  g.capture_begin(stream_);
  EXPECT_TRUE(g.is_capturing());
  EXPECT_TRUE(backend().stream_is_capturing(stream_.value()));
  backend().memcpy_async(target_, source_, bytes, stream_.value());
  backend().launch_host_func(stream_.value(), &count_launch, &launches);
  g.capture_end();
  EXPECT_FALSE(g.is_capturing());
  EXPECT_TRUE(g.is_instantiated());
  EXPECT_EQ(read(target_), std::vector<std::uint8_t>(bytes, 0x00)) << "captured work ran during capture";
  EXPECT_EQ(launches, 0);

  g.launch(stream_);
  stream_.synchronize();
  EXPECT_EQ(read(target_), std::vector<std::uint8_t>(bytes, 0x11));
  EXPECT_EQ(launches, 1);

  backend().memset_async(source_, 0x22, bytes, stream_.value());
  g.launch(stream_);
  g.launch(stream_);
  stream_.synchronize();
  EXPECT_EQ(read(target_), std::vector<std::uint8_t>(bytes, 0x22)) << "a launch must read the data of its time";
  EXPECT_EQ(launches, 3);
}

TEST_F(Graph, CapturedMemsetAndCopyChain)
{
  graph g;
  g.capture_begin(stream_, capture_mode::thread_local_);
  backend().memset_async(source_, 0x5A, bytes, stream_.value());
  backend().memcpy_async(target_, source_, bytes, stream_.value());
  g.capture_end();
  g.launch(stream_);
  stream_.synchronize();
  EXPECT_EQ(read(target_), std::vector<std::uint8_t>(bytes, 0x5A));
}

TEST_F(Graph, MoveKeepsTheInstantiatedGraph)
{
  graph g;
  g.capture_begin(stream_);
  backend().memset_async(target_, 0x7E, bytes, stream_.value());
  g.capture_end();
  graph moved{std::move(g)};
  EXPECT_FALSE(g.is_instantiated());  // NOLINT(bugprone-use-after-move)
  moved.launch(stream_);
  stream_.synchronize();
  EXPECT_EQ(read(target_), std::vector<std::uint8_t>(bytes, 0x7E));
}

TEST_F(Graph, Misuse)
{
  graph g;
  EXPECT_THROW(g.launch(stream_), logic_error);
  EXPECT_THROW(g.capture_end(), logic_error);
  EXPECT_THROW(g.capture_begin(cuda_stream_default), cuda_error) << "the legacy default stream cannot be captured";
  EXPECT_FALSE(g.is_capturing());
  g.capture_begin(stream_);
  EXPECT_THROW(g.capture_begin(stream_), logic_error);
  g.capture_end();
}

TEST_F(Graph, DestroyingACapturingGraphEndsTheCapture)
{
  {
    graph g;
    g.capture_begin(stream_);
    backend().memset_async(target_, 0x01, bytes, stream_.value());
  }
  EXPECT_FALSE(backend().stream_is_capturing(stream_.value()));
  stream_.synchronize();
}

}  // namespace
}  // namespace gpumem
