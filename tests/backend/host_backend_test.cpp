// The host backend's own contract: capacity-limited device memory, configuration parsing, invalid handles,
// capture rules. (Streams, events and graphs are covered on both backends by tests/handles.)
#include "backend/host/host_config.hpp"
#include "support/gate.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/align.hpp>

#include <algorithm>
#include <cstring>

#include <gtest/gtest.h>

#include <vector>

namespace gpumem {
namespace {

class HostBackend : public ::testing::Test {
 protected:
  void SetUp() override
  {
    if (!test::on_host_backend()) { GTEST_SKIP() << "host backend only"; }
  }
  static detail::backend& host() { return detail::host_backend_instance(); }
};

TEST_F(HostBackend, DeviceMemoryIsCappedAtCapacity)
{
  memory_info const info = host().mem_info(0);
  EXPECT_EQ(host().malloc_device(info.total + 1), nullptr) << "more than the capacity must fail";
  std::size_t const half = info.free / 2;
  void* a = host().malloc_device(half);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(host().mem_info(0).free, info.free - detail::align_up(half, 256));
  EXPECT_EQ(host().malloc_device(info.free - half + 4096), nullptr) << "the rest is not there";
  void* b = host().malloc_device(1024);
  ASSERT_NE(b, nullptr);
  host().free_device(a);
  host().free_device(b);
  EXPECT_EQ(host().mem_info(0).free, info.free);
}

TEST_F(HostBackend, AllocationsAre256ByteAlignedAndWritable)
{
  std::vector<void*> pointers;
  for (std::size_t bytes : {1UL, 255UL, 256UL, 257UL, 65537UL}) {
    void* p = host().malloc_device(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(detail::is_aligned(p, 256));
    std::memset(p, 0xAB, bytes);
    pointers.push_back(p);
  }
  for (void* p : pointers) { host().free_device(p); }
  EXPECT_EQ(host().malloc_device(0), nullptr);
}

TEST_F(HostBackend, PinnedAndManagedMemory)
{
  std::size_t const free_before = host().mem_info(0).free;
  void* pinned = host().malloc_pinned(1 << 20);
  ASSERT_NE(pinned, nullptr);
  EXPECT_EQ(host().mem_info(0).free, free_before) << "pinned memory is host memory";
  void* managed = host().malloc_managed(1 << 20);
  ASSERT_NE(managed, nullptr);
  EXPECT_EQ(host().mem_info(0).free, free_before - (1 << 20)) << "managed memory counts against the device";
  host().free_pinned(pinned);
  host().free_managed(managed);
  EXPECT_EQ(host().mem_info(0).free, free_before);
}

TEST_F(HostBackend, FreeOfUnknownPointerIsIgnoredNotACrash)
{
  int local = 0;
  std::size_t const free_before = host().mem_info(0).free;
  host().free_device(&local);
  void* p = host().malloc_device(512);
  host().free_pinned(p);  // wrong kind: ignored, p stays live
  EXPECT_EQ(host().mem_info(0).free, free_before - 512);
  host().free_device(p);
  EXPECT_EQ(host().mem_info(0).free, free_before);
}

TEST_F(HostBackend, InvalidHandlesAreCudaErrors)
{
  int not_a_stream = 0;
  try {
    host().stream_synchronize(reinterpret_cast<cudaStream_t>(&not_a_stream));
    FAIL();
  } catch (cuda_error const& e) {
    EXPECT_EQ(e.code(), cudaErrorInvalidResourceHandle);
  }
  EXPECT_THROW(host().event_record(reinterpret_cast<cudaEvent_t>(&not_a_stream), nullptr), cuda_error);
  EXPECT_THROW(host().set_current_device(host().device_count()), cuda_error);
  EXPECT_THROW((void)host().stream_create(0x80, 0), cuda_error) << "unknown flags";
}

// CUDA leaves a call on a destroyed stream or event undefined (on a GPU, typically a crash) and often
// hands the same handle to the next stream it creates, which hides such a bug until it crashes. The host
// backend never reuses a handle and stops the process on any call with a destroyed one.
TEST_F(HostBackend, HandlesAreNeverReused)
{
  std::vector<cudaStream_t> streams;
  std::vector<cudaEvent_t> events;
  for (int i = 0; i < 64; ++i) {
    streams.push_back(host().stream_create(0, 0));
    host().stream_destroy(streams.back());
    events.push_back(host().event_create(cudaEventDisableTiming));
    host().event_destroy(events.back());
  }
  std::sort(streams.begin(), streams.end());
  std::sort(events.begin(), events.end());
  EXPECT_EQ(std::adjacent_find(streams.begin(), streams.end()), streams.end());
  EXPECT_EQ(std::adjacent_find(events.begin(), events.end()), events.end());
}

TEST_F(HostBackend, ACallOnADestroyedStreamOrEventStopsTheProcess)
{
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  cudaStream_t const stream = host().stream_create(cudaStreamNonBlocking, 0);
  cudaEvent_t const event = host().event_create(cudaEventDisableTiming);
  host().stream_destroy(stream);
  EXPECT_DEATH(host().event_record(event, stream), "event_record.*on stream .* which was destroyed");
  EXPECT_DEATH(host().stream_synchronize(stream), "which was destroyed");
  EXPECT_DEATH(host().stream_destroy(stream), "stream_destroy on stream .* which was destroyed");
  cudaStream_t const live = host().stream_create(0, 0);
  host().event_destroy(event);
  EXPECT_DEATH(host().stream_wait_event(live, event), "on event .* which was destroyed");
  EXPECT_DEATH(host().event_destroy(event), "which was destroyed");
  host().stream_destroy(live);
}

TEST_F(HostBackend, SynchronizeDuringCaptureIsRejected)
{
  cudaStream_t s = host().stream_create(0, 0);
  host().stream_begin_capture(s, capture_mode::global);
  try {
    host().stream_synchronize(s);
    ADD_FAILURE();
  } catch (cuda_error const& e) {
    EXPECT_EQ(e.code(), cudaErrorStreamCaptureUnsupported);
  }
  EXPECT_THROW(host().stream_begin_capture(s, capture_mode::global), cuda_error);
  host().graph_destroy(host().stream_end_capture(s));
  EXPECT_THROW((void)host().stream_end_capture(s), cuda_error);
  host().stream_destroy(s);
}

TEST_F(HostBackend, DestroyingAStreamCompletesItsWork)
{
  cudaStream_t s = host().stream_create(0, 0);
  std::vector<int> source(100000, 7);
  std::vector<int> target(100000, 0);
  host().memcpy_async(target.data(), source.data(), source.size() * sizeof(int), s);
  host().stream_destroy(s);
  EXPECT_EQ(target, source);
}

TEST_F(HostBackend, DeviceSynchronizeWaitsForEveryStream)
{
  std::vector<cudaStream_t> streams;
  std::vector<int> marks(8, 0);
  for (int i = 0; i < 8; ++i) {
    streams.push_back(host().stream_create(cudaStreamNonBlocking, 0));
    host().launch_host_func(streams.back(), [](void* m) {
      std::this_thread::sleep_for(std::chrono::milliseconds{5});
      *static_cast<int*>(m) = 1;
    }, &marks[static_cast<std::size_t>(i)]);
  }
  host().device_synchronize();
  EXPECT_EQ(marks, std::vector<int>(8, 1));
  for (auto s : streams) { host().stream_destroy(s); }
}

TEST(HostConfig, ParsesByteSizes)
{
  using detail::host::parse_byte_size;
  EXPECT_EQ(parse_byte_size("4096", "X"), 4096U);
  EXPECT_EQ(parse_byte_size("64K", "X"), 65536U);
  EXPECT_EQ(parse_byte_size("512MiB", "X"), std::size_t{512} << 20);
  EXPECT_EQ(parse_byte_size("8G", "X"), std::size_t{8} << 30);
  EXPECT_EQ(parse_byte_size("1TiB", "X"), std::size_t{1} << 40);
  for (char const* bad : {"", "G", "12Q", "-5", "99999999999999999999T", "1 GiB"}) {
    try {
      (void)parse_byte_size(bad, "GPUMEM_HOST_MEMORY");
      ADD_FAILURE() << "accepted \"" << bad << "\"";
    } catch (logic_error const& e) {
      EXPECT_NE(std::string{e.what()}.find("GPUMEM_HOST_MEMORY"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace gpumem
