// The host backend's own contract: capacity-limited device memory, configuration parsing (which emulated
// devices a process sees included), invalid handles, what it does not emulate in a capture, the order a graph
// replays in. (Streams, events, graphs and CUDA's capture rules are covered on both backends by tests/handles.)
#include "backend/host/host_config.hpp"
#include "backend/host/host_graph.hpp"
#include "support/gate.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/align.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <gtest/gtest.h>

#include <optional>
#include <string>
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

TEST_F(HostBackend, PoolAllocationsOnACapturingStreamAreNotEmulated)
{
  // CUDA captures them as graph memory nodes; the host backend refuses them, loudly, and the capture with them.
  cudaStream_t s = host().stream_create(0, 0);
  cudaMemPool_t const pool = host().mempool_default(0);
  host().stream_begin_capture(s, capture_mode::relaxed);
  try {
    (void)host().mempool_malloc_async(pool, 1024, s);
    ADD_FAILURE() << "accepted";
  } catch (cuda_error const& e) {
    EXPECT_EQ(e.code(), cudaErrorNotSupported);
    EXPECT_NE(std::string{e.what()}.find("graph memory nodes"), std::string::npos) << e.what();
  }
  EXPECT_THROW(host().graph_destroy(host().stream_end_capture(s)), cuda_error);

  void* p = host().mempool_malloc_async(pool, 1024, s);
  ASSERT_NE(p, nullptr);
  std::size_t const used = host().mempool_get_usage(pool).used_current;
  host().stream_begin_capture(s, capture_mode::relaxed);
  ::testing::internal::CaptureStderr();
  host().mempool_free_async(p, s);
  std::string const printed = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(printed.find("mempool_free_async"), std::string::npos) << printed;
  EXPECT_EQ(host().mempool_get_usage(pool).used_current, used) << "the refused free freed nothing";
  EXPECT_THROW(host().graph_destroy(host().stream_end_capture(s)), cuda_error);
  host().mempool_free_async(p, s);
  host().stream_synchronize(s);
  host().stream_destroy(s);
}

TEST(HostGraph, ReplayRunsTheReadyNodeCapturedLastFirst)
{
  // 0 <- 1 <- 3, 0 <- 2, {2, 3} <- 4: two branches after node 0, joined by node 4.
  using detail::host::capture_sequence;
  std::vector<capture_sequence::node> nodes(5);
  nodes[1].dependencies = {0};
  nodes[2].dependencies = {0};
  nodes[3].dependencies = {1};
  nodes[4].dependencies = {2, 3};
  EXPECT_EQ(detail::host::replay_order(nodes), (std::vector<std::size_t>{0, 2, 1, 3, 4}));
  nodes[4].dependencies = {};  // a sink with no dependencies may run first
  EXPECT_EQ(detail::host::replay_order(nodes), (std::vector<std::size_t>{4, 0, 2, 1, 3}));
}

TEST_F(HostBackend, AMissingJoinShowsOnTheCpu)
{
  // The side stream writes what the origin stream then reads, with no event between the two: on a GPU a race.
  // The host backend runs the origin's read first, so the graph gives the stale value every time.
  cudaStream_t origin = host().stream_create(0, 0);
  cudaStream_t side = host().stream_create(0, 0);
  cudaEvent_t fork = host().event_create(0);
  cudaEvent_t join = host().event_create(0);
  int value = 1;
  int seen = 0;
  host().stream_begin_capture(origin, capture_mode::global);
  host().event_record(fork, origin);
  host().stream_wait_event(side, fork);
  host().launch_host_func(side, [](void* v) { *static_cast<int*>(v) = 2; }, &value);
  host().memcpy_async(&seen, &value, sizeof(int), origin);  // should have waited for `join` first
  host().event_record(join, side);
  host().stream_wait_event(origin, join);
  cudaGraph_t graph = host().stream_end_capture(origin);
  cudaGraphExec_t exec = host().graph_instantiate(graph);
  host().graph_launch(exec, origin);
  host().stream_synchronize(origin);
  EXPECT_EQ(seen, 1);
  EXPECT_EQ(value, 2);
  host().graph_exec_destroy(exec);
  host().graph_destroy(graph);
  host().event_destroy(fork);
  host().event_destroy(join);
  host().stream_destroy(origin);
  host().stream_destroy(side);
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

// Threads that record events on streams and make other streams wait on them, all at once: as in CUDA, a
// wait follows a record that is already in its stream, so no two streams ever wait on each other and every
// stream finishes. (When the emulation published a record before enqueueing it, a wait could enter a stream
// ahead of the record it waited for, and streams deadlocked under such load.)
TEST_F(HostBackend, StreamsWaitingOnEachOthersEventsFromManyThreadsAllFinish)
{
  constexpr int streams = 6;
  constexpr int threads = 8;
  std::vector<cudaStream_t> stream(streams);
  std::vector<cudaEvent_t> event(streams);
  for (int i = 0; i < streams; ++i) {
    stream[static_cast<std::size_t>(i)] = host().stream_create(cudaStreamNonBlocking, 0);
    event[static_cast<std::size_t>(i)] = host().event_create(cudaEventDisableTiming);
  }
  std::vector<std::thread> team;
  for (int t = 0; t < threads; ++t) {
    team.emplace_back([&, t] {
      std::uint64_t x = 0x9E3779B97F4A7C15ULL * static_cast<std::uint64_t>(t + 1);
      for (int step = 0; step < 20'000; ++step) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        auto const from = static_cast<std::size_t>(x % streams);
        auto const to = static_cast<std::size_t>((x >> 8) % streams);
        host().event_record(event[from], stream[from]);
        host().stream_wait_event(stream[to], event[from]);
      }
    });
  }
  for (auto& member : team) { member.join(); }
  std::atomic<bool> finished{false};
  std::thread watchdog{[&finished] {
    for (int i = 0; i < 600 && !finished.load(); ++i) { std::this_thread::sleep_for(std::chrono::milliseconds{100}); }
    if (!finished.load()) {
      std::fprintf(stderr, "streams waiting on each other's events did not finish within 60 s: deadlock\n");
      std::abort();
    }
  }};
  host().device_synchronize();
  finished = true;
  watchdog.join();
  for (int i = 0; i < streams; ++i) {
    host().event_destroy(event[static_cast<std::size_t>(i)]);
    host().stream_destroy(stream[static_cast<std::size_t>(i)]);
  }
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

TEST(HostConfig, ParsesVisibleDevices)
{
  using detail::host::parse_visible_devices;
  EXPECT_EQ(parse_visible_devices("0", 1), std::vector<int>{0});
  EXPECT_EQ(parse_visible_devices("2,0", 4), (std::vector<int>{2, 0}));
  EXPECT_EQ(parse_visible_devices("3,1,0,2", 4), (std::vector<int>{3, 1, 0, 2}));
  struct bad_value {
    char const* text;
    char const* says;
  };
  for (auto const [text, says] : {bad_value{"", "empty entry"}, bad_value{"1,", "empty entry"},
                                  bad_value{",1", "empty entry"}, bad_value{"1,,0", "empty entry"},
                                  bad_value{"a", "\"a\""}, bad_value{"0x1", "\"0x1\""},
                                  bad_value{"-1", "\"-1\""}, bad_value{"+1", "\"+1\""},
                                  bad_value{"1 ,0", "\"1 \""}, bad_value{"4", "from 0 to 3"},
                                  bad_value{"99999999999", "not a device ordinal"},
                                  bad_value{"2,1,2", "device 2 twice"}}) {
    try {
      (void)parse_visible_devices(text, 4);
      ADD_FAILURE() << "accepted \"" << text << "\"";
    } catch (logic_error const& e) {
      std::string const what = e.what();
      EXPECT_NE(what.find("GPUMEM_HOST_VISIBLE_DEVICES=\"" + std::string{text} + "\""), std::string::npos) << what;
      EXPECT_NE(what.find(says), std::string::npos) << what;
    }
  }
}

/// Sets (or, with nullptr, unsets) an environment variable for a scope, and restores it after.
class scoped_environment_variable {
 public:
  scoped_environment_variable(char const* name, char const* value) : name_{name}
  {
    if (char const* previous = std::getenv(name)) { previous_ = previous; }
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  scoped_environment_variable(scoped_environment_variable const&) = delete;
  scoped_environment_variable& operator=(scoped_environment_variable const&) = delete;
  ~scoped_environment_variable()
  {
    if (previous_) {
      ::setenv(name_, previous_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  char const* name_;
  std::optional<std::string> previous_;
};

TEST(HostConfig, VisibleDevicesAreEveryDeviceInOrderUnlessTheVariableSaysWhich)
{
  using detail::host::read_host_config;
  scoped_environment_variable const devices{"GPUMEM_HOST_DEVICES", "4"};
  {
    scoped_environment_variable const visible{"GPUMEM_HOST_VISIBLE_DEVICES", nullptr};
    EXPECT_EQ(read_host_config().visible_devices, (std::vector<int>{0, 1, 2, 3}));
  }
  {
    scoped_environment_variable const visible{"GPUMEM_HOST_VISIBLE_DEVICES", "3,1"};
    EXPECT_EQ(read_host_config().visible_devices, (std::vector<int>{3, 1}));
    EXPECT_EQ(read_host_config().device_count(), 2);
  }
  {
    scoped_environment_variable const visible{"GPUMEM_HOST_VISIBLE_DEVICES", ""};
    EXPECT_THROW((void)read_host_config(), logic_error) << "set but empty: a process without devices";
  }
  {
    scoped_environment_variable const fewer{"GPUMEM_HOST_DEVICES", nullptr};
    scoped_environment_variable const visible{"GPUMEM_HOST_VISIBLE_DEVICES", "1"};
    EXPECT_THROW((void)read_host_config(), logic_error) << "one emulated device by default: device 1 is not there";
  }
}

// ctest runs this binary once more with GPUMEM_HOST_DEVICES=4 and GPUMEM_HOST_VISIBLE_DEVICES=2,0
// (host.visible_devices), where device 0 must be named after emulated device 2.
TEST_F(HostBackend, EachDeviceIsNamedAfterTheEmulatedDeviceItIs)
{
  std::vector<int> const visible = detail::host::read_host_config().visible_devices;
  ASSERT_EQ(host().device_count(), static_cast<int>(visible.size()));
  for (int device = 0; device < host().device_count(); ++device) {
    EXPECT_EQ(host().properties(device).name,
              "gpumem host device " + std::to_string(visible[static_cast<std::size_t>(device)]));
  }
}

}  // namespace
}  // namespace gpumem
