// spill_manager: a device budget for unified buffers. Construction errors; nothing spills within the budget;
// one buffer too many spills the least recently used (which one, and how: DEVICE_ONLY/DEVICE_DIRTY copies are
// copied back first, SYNCHRONIZED/HOST_DIRTY ones dropped); the next device access brings the data back;
// residency guards; explicit spill(); other users of resource(); destruction of the manager with live buffers.
// Then the point of it all, "never lose data": thousands of random operations on buffers three times larger
// than the budget, every read checked against a host model, on one thread and on four.
#include <gpumem/backend/backend.hpp>
#include <gpumem/buffer/buffer_state.hpp>
#include <gpumem/buffer/spill_manager.hpp>
#include <gpumem/buffer/unified_buffer.hpp>
#include <gpumem/buffer/unified_buffer_pool.hpp>
#include <gpumem/cuda_stream.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/per_device_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>

#include "support/buffer_state_printer.hpp"
#include "support/device_bytes.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace gpumem {
namespace {

using namespace std::chrono_literals;
using test::device_read;
using test::device_write;
using test::pattern;
using test::stream_hold;
using u32 = std::uint32_t;
using buffer_ptr = std::unique_ptr<unified_buffer<u32>>;

constexpr std::size_t KiB = std::size_t{1} << 10U;
constexpr std::size_t slot_bytes = 256 * KiB;  // the budget holds four of these
constexpr std::size_t slot = slot_bytes / sizeof(u32);
constexpr std::size_t budget = 4 * slot_bytes;

class SpillManagerTest : public ::testing::Test {
 protected:
  [[nodiscard]] buffer_ptr make(std::size_t count = slot, bool pinned = false)
  {
    return std::make_unique<unified_buffer<u32>>(count, unified_options{.pinned = pinned, .spill = &manager_});
  }

  /// A buffer of one slot, SYNCHRONIZED, holding pattern(seed); it becomes the most recently used.
  [[nodiscard]] buffer_ptr make_synchronized(std::uint64_t seed, bool pinned = false)
  {
    auto b = make(slot, pinned);
    std::ranges::copy(pattern<u32>(slot, seed), b->host().begin());
    b->sync_to_device(stream_);
    return b;
  }

  void expect_holds(unified_buffer<u32>& b, std::vector<u32> const& expected)
  {
    std::vector<u32> out(b.size());
    b.copy_to(out, stream_);
    EXPECT_TRUE(out == expected) << "the buffer lost its data (state " << to_string(b.state()) << ")";
  }

  void expect_within_budget() { EXPECT_LE(manager_.used_bytes(), manager_.budget()); }

  cuda_stream stream_{cuda_stream::flags::non_blocking};
  cuda_stream other_{cuda_stream::flags::non_blocking};
  mr::pool_memory_resource upstream_{mr::get_current_device_resource()};  // frees without a device sync
  spill_manager manager_{&upstream_, budget};
};

TEST_F(SpillManagerTest, ConstructionErrors)
{
  EXPECT_THROW((spill_manager{nullptr, budget}), logic_error);
  EXPECT_THROW((spill_manager{&upstream_, 0}), logic_error);
  mr::pool_memory_resource other{mr::get_current_device_resource()};
  EXPECT_THROW((unified_buffer<u32>{10, {.device_resource = &other, .spill = &manager_}}), logic_error)
    << "device_resource and spill are exclusive";
  EXPECT_EQ(manager_.budget(), budget);
  EXPECT_EQ(manager_.used_bytes(), 0U);
  EXPECT_EQ(manager_.resident_buffers(), 0U);
  auto const s = manager_.statistics();
  EXPECT_EQ(s.spills, 0U);
  EXPECT_EQ(s.bytes_spilled, 0U);
  EXPECT_EQ(s.copies_back, 0U);
  EXPECT_EQ(s.failed_allocations, 0U);
}

TEST_F(SpillManagerTest, WithinTheBudgetNothingSpills)
{
  std::vector<buffer_ptr> buffers;
  for (std::uint64_t i = 0; i < 4; ++i) {
    buffers.push_back(make());
    buffers.back()->copy_from(pattern<u32>(slot, i), stream_);
  }
  EXPECT_EQ(manager_.used_bytes(), budget);
  EXPECT_EQ(manager_.resident_buffers(), 4U);
  for (std::uint64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(buffers[i]->state(), buffer_state::DEVICE_ONLY);
    expect_holds(*buffers[i], pattern<u32>(slot, i));
  }
  EXPECT_EQ(manager_.statistics().spills, 0U);
  buffers.clear();
  EXPECT_EQ(manager_.used_bytes(), 0U) << "destroyed buffers give their device copies back";
  EXPECT_EQ(manager_.resident_buffers(), 0U);
}

TEST_F(SpillManagerTest, OneBufferTooManySpillsTheLeastRecentlyUsed)
{
  std::vector<buffer_ptr> buffers;
  for (std::uint64_t i = 0; i < 4; ++i) { buffers.push_back(make_synchronized(i)); }
  (void)buffers[0]->device_view(stream_);  // used again: buffers[1] is now the least recently used
  buffers.push_back(make_synchronized(4));
  EXPECT_EQ(buffers[1]->state(), buffer_state::HOST_ONLY);
  for (std::size_t i : {0U, 2U, 3U, 4U}) { EXPECT_EQ(buffers[i]->state(), buffer_state::SYNCHRONIZED) << i; }
  auto const s = manager_.statistics();
  EXPECT_EQ(s.spills, 1U);
  EXPECT_EQ(s.bytes_spilled, slot_bytes);
  EXPECT_EQ(s.copies_back, 0U) << "a SYNCHRONIZED device copy needs no copy back";
  EXPECT_EQ(manager_.used_bytes(), budget);
  EXPECT_EQ(manager_.resident_buffers(), 4U);
  for (std::uint64_t i = 0; i < 5; ++i) { expect_holds(*buffers[i], pattern<u32>(slot, i)); }

  // Each kind of use counts: copy_from, fill and zeros too.
  buffers[2]->fill(7U, stream_);
  buffers[3]->zeros(stream_);
  buffers[0]->copy_from(pattern<u32>(slot, 10), stream_);
  buffers[1]->sync_to_device(stream_);  // back, spilling the least recently used: buffers[4]
  EXPECT_EQ(buffers[4]->state(), buffer_state::HOST_ONLY);
  EXPECT_EQ(buffers[1]->state(), buffer_state::SYNCHRONIZED);
  expect_within_budget();
}

TEST_F(SpillManagerTest, DeviceDataAreCopiedBackBeforeTheCopyIsDropped)
{
  auto dirty = make_synchronized(1);
  auto const kernel = pattern<u32>(slot, 2);
  device_write(dirty->device(stream_), kernel, stream_);
  dirty->mark_device_dirty();
  ASSERT_EQ(dirty->state(), buffer_state::DEVICE_DIRTY);
  auto device_only = make();
  device_only->copy_from(pattern<u32>(slot, 3), stream_);
  auto third = make_synchronized(4);
  auto fourth = make_synchronized(5);

  auto fifth = make_synchronized(6);  // spills `dirty`
  EXPECT_EQ(dirty->state(), buffer_state::HOST_ONLY);
  auto s = manager_.statistics();
  EXPECT_EQ(s.spills, 1U);
  EXPECT_EQ(s.copies_back, 1U);
  EXPECT_EQ(s.bytes_copied_back, slot_bytes);
  EXPECT_TRUE(std::ranges::equal(dirty->host_view(), kernel)) << "the kernel's writes were lost";

  auto sixth = make_synchronized(7);  // spills `device_only`
  EXPECT_EQ(device_only->state(), buffer_state::HOST_ONLY);
  s = manager_.statistics();
  EXPECT_EQ(s.spills, 2U);
  EXPECT_EQ(s.copies_back, 2U);
  expect_holds(*device_only, pattern<u32>(slot, 3));
  expect_holds(*dirty, kernel);
  expect_within_budget();
}

TEST_F(SpillManagerTest, AKernelInFlightIsSafe)
{
  // The copy back runs on the buffer's stream after the work submitted to it: a "kernel" held back by a gate
  // must land before the data are saved.
  auto dirty = make_synchronized(1, /*pinned=*/true);
  std::vector<buffer_ptr> others;
  for (std::uint64_t i = 0; i < 3; ++i) { others.push_back(make_synchronized(10 + i)); }
  auto const kernel = pattern<u32>(slot, 2);
  buffer_ptr newcomer;
  {
    stream_hold hold{stream_};
    device_write(dirty->device(stream_), kernel, stream_);
    dirty->mark_device_dirty();
    for (auto& o : others) { (void)o->device_view(other_); }  // `dirty` is the least recently used again
    std::thread opener{[&hold] {
      std::this_thread::sleep_for(50ms);
      hold.release();
    }};
    newcomer = make();
    newcomer->copy_from(pattern<u32>(slot, 3), other_);  // spills `dirty` while its kernel waits
    opener.join();
  }
  EXPECT_EQ(dirty->state(), buffer_state::HOST_ONLY);
  expect_holds(*dirty, kernel);
  expect_holds(*newcomer, pattern<u32>(slot, 3));
}

TEST_F(SpillManagerTest, SynchronizedAndHostDirtyCopiesAreDroppedWithoutACopy)
{
  auto synchronized = make_synchronized(1);
  auto host_dirty = make_synchronized(2);
  auto const host_data = pattern<u32>(slot, 3);
  std::ranges::copy(host_data, host_dirty->host().begin());
  ASSERT_EQ(host_dirty->state(), buffer_state::HOST_DIRTY);
  EXPECT_EQ(manager_.spill(2 * slot_bytes), 2 * slot_bytes);
  EXPECT_EQ(synchronized->state(), buffer_state::HOST_ONLY);
  EXPECT_EQ(host_dirty->state(), buffer_state::HOST_ONLY);
  auto const s = manager_.statistics();
  EXPECT_EQ(s.spills, 2U);
  EXPECT_EQ(s.bytes_spilled, 2 * slot_bytes);
  EXPECT_EQ(s.copies_back, 0U);
  EXPECT_EQ(manager_.used_bytes(), 0U);
  expect_holds(*synchronized, pattern<u32>(slot, 1));
  expect_holds(*host_dirty, host_data);
}

TEST_F(SpillManagerTest, TheNextDeviceAccessBringsTheDataBack)
{
  auto b = make();
  b->copy_from(pattern<u32>(slot, 1), stream_);
  auto const kernel = pattern<u32>(slot, 2);
  device_write(b->device(stream_), kernel, stream_);
  b->mark_device_dirty();
  EXPECT_EQ(manager_.spill(1), slot_bytes);
  ASSERT_EQ(b->state(), buffer_state::HOST_ONLY);
  EXPECT_EQ(manager_.used_bytes(), 0U);
  auto const* p = b->device_view(other_);
  EXPECT_EQ(b->state(), buffer_state::SYNCHRONIZED);
  EXPECT_EQ(manager_.used_bytes(), slot_bytes);
  EXPECT_EQ(manager_.resident_buffers(), 1U);
  EXPECT_TRUE(device_read(p, slot, other_) == kernel);
  // And a spilled buffer that a host write made newer brings the new data.
  EXPECT_EQ(manager_.spill(1), slot_bytes);
  b->host()[5] = 12345U;
  auto expected = kernel;
  expected[5] = 12345U;
  EXPECT_TRUE(device_read(b->device_view(stream_), slot, stream_) == expected);
}

TEST_F(SpillManagerTest, ResidencyGuardsPreventSpilling)
{
  std::vector<buffer_ptr> buffers;
  std::vector<residency_guard> guards;
  for (std::uint64_t i = 0; i < 4; ++i) {
    buffers.push_back(make());
    buffers.back()->copy_from(pattern<u32>(slot, i), stream_);
    guards.push_back(buffers.back()->keep_resident());
  }
  auto extra = make();
  std::ranges::copy(pattern<u32>(slot, 9), extra->host().begin());
  EXPECT_THROW(extra->sync_to_device(stream_), out_of_memory);
  EXPECT_THROW((void)manager_.resource()->allocate(slot_bytes, stream_), out_of_memory);
  EXPECT_EQ(extra->state(), buffer_state::HOST_DIRTY);  // written on the host, never copied
  EXPECT_EQ(manager_.statistics().spills, 0U);
  EXPECT_GE(manager_.statistics().failed_allocations, 1U);
  EXPECT_EQ(manager_.spill(budget), 0U) << "explicit spills respect the guards too";
  for (std::uint64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(buffers[i]->state(), buffer_state::DEVICE_ONLY) << i;
    expect_holds(*buffers[i], pattern<u32>(slot, i));
  }

  residency_guard moved{std::move(guards[2])};  // a moved guard still holds
  guards[2].release();                           // a moved-from guard releases nothing
  EXPECT_THROW(extra->sync_to_device(stream_), out_of_memory);
  moved.release();
  extra->sync_to_device(stream_);  // spills buffers[2], the only one without a guard
  EXPECT_EQ(buffers[2]->state(), buffer_state::HOST_ONLY);
  EXPECT_EQ(extra->state(), buffer_state::SYNCHRONIZED);
  expect_holds(*buffers[2], pattern<u32>(slot, 2));
  expect_holds(*extra, pattern<u32>(slot, 9));
  for (std::size_t i : {0U, 1U, 3U}) { EXPECT_EQ(buffers[i]->state(), buffer_state::DEVICE_ONLY) << i; }
  guards.clear();
}

// A buffer inside a member call on another thread cannot be spilled at that moment. An allocation that finds
// nothing else to spill waits for it instead of failing: without the wait, the four-thread stress test below
// failed now and then with an out-of-memory while every resident buffer was busy.
TEST_F(SpillManagerTest, AnAllocationWaitsForABufferBusyOnAnotherThread)
{
  std::vector<buffer_ptr> buffers;
  std::vector<residency_guard> guards;
  for (std::uint64_t i = 0; i < 4; ++i) {  // the budget is full, DEVICE_ONLY
    buffers.push_back(make());
    buffers.back()->copy_from(pattern<u32>(slot, i), stream_);
    if (i > 0) { guards.push_back(buffers.back()->keep_resident()); }  // only buffers[0] may be spilled
  }
  std::vector<u32> read(slot);
  auto extra = make();
  {
    stream_hold hold{other_};
    std::atomic<bool> reading{false};
    std::thread reader{[&] {
      reading = true;
      buffers[0]->copy_to(read, other_);  // inside buffers[0] until the held stream runs
    }};
    while (!reading) { std::this_thread::yield(); }
    std::this_thread::sleep_for(50ms);
    std::thread opener{[&hold] {
      std::this_thread::sleep_for(150ms);
      hold.release();
    }};
    EXPECT_NO_THROW(extra->copy_from(pattern<u32>(slot, 9), stream_)) << "failed instead of waiting";
    opener.join();
    reader.join();
  }
  EXPECT_TRUE(read == pattern<u32>(slot, 0));
  EXPECT_EQ(buffers[0]->state(), buffer_state::HOST_ONLY);
  EXPECT_EQ(manager_.statistics().failed_allocations, 0U);
  expect_holds(*buffers[0], pattern<u32>(slot, 0));
  guards.clear();
  expect_holds(*extra, pattern<u32>(slot, 9));
  expect_within_budget();
}

TEST_F(SpillManagerTest, OtherUsersOfTheResourceSpillBuffersToo)
{
  std::vector<buffer_ptr> buffers;
  for (std::uint64_t i = 0; i < 4; ++i) { buffers.push_back(make_synchronized(i)); }
  void* p = manager_.resource()->allocate(slot_bytes, stream_);
  EXPECT_EQ(buffers[0]->state(), buffer_state::HOST_ONLY);
  EXPECT_EQ(manager_.used_bytes(), budget);
  EXPECT_EQ(manager_.resident_buffers(), 3U);
  manager_.resource()->deallocate(p, slot_bytes, stream_);
  EXPECT_EQ(manager_.used_bytes(), 3 * slot_bytes);
  expect_holds(*buffers[0], pattern<u32>(slot, 0));
}

TEST_F(SpillManagerTest, ExplicitSpillFreesLeastRecentlyUsedFirst)
{
  std::vector<buffer_ptr> buffers;
  for (std::uint64_t i = 0; i < 4; ++i) { buffers.push_back(make_synchronized(i)); }
  (void)buffers[0]->device(stream_);
  EXPECT_EQ(manager_.spill(1), slot_bytes) << "at least one byte: one whole buffer";
  EXPECT_EQ(buffers[1]->state(), buffer_state::HOST_ONLY);
  EXPECT_EQ(buffers[0]->state(), buffer_state::SYNCHRONIZED);
  EXPECT_EQ(manager_.spill(slot_bytes + 1), 2 * slot_bytes);
  EXPECT_EQ(buffers[2]->state(), buffer_state::HOST_ONLY);
  EXPECT_EQ(buffers[3]->state(), buffer_state::HOST_ONLY);
  EXPECT_EQ(buffers[0]->state(), buffer_state::SYNCHRONIZED);
  EXPECT_EQ(manager_.spill(100 * budget), slot_bytes) << "only what is there";
  EXPECT_EQ(manager_.spill(1), 0U);
  EXPECT_EQ(manager_.used_bytes(), 0U);
  EXPECT_EQ(manager_.resident_buffers(), 0U);
  EXPECT_EQ(manager_.statistics().spills, 4U);
  for (std::uint64_t i = 0; i < 4; ++i) { expect_holds(*buffers[i], pattern<u32>(slot, i)); }
}

TEST_F(SpillManagerTest, ARequestLargerThanTheBudgetFails)
{
  auto small = make_synchronized(1);
  auto huge = make(budget / sizeof(u32) + 64);
  std::ranges::copy(pattern<u32>(huge->size(), 2), huge->host().begin());
  EXPECT_THROW((void)huge->device(stream_), out_of_memory);
  EXPECT_EQ(huge->state(), buffer_state::HOST_DIRTY);  // unchanged: written on the host, never copied
  EXPECT_GE(manager_.statistics().failed_allocations, 1U);
  expect_holds(*huge, pattern<u32>(huge->size(), 2));
  expect_holds(*small, pattern<u32>(slot, 1));
  expect_within_budget();
}

TEST_F(SpillManagerTest, ReleasedPoolBuffersAreSpilledFirst)
{
  unified_buffer_pool<u32> pool{{.spill = &manager_}};
  std::vector<buffer_ptr> buffers;
  for (std::uint64_t i = 0; i < 3; ++i) { buffers.push_back(make_synchronized(i)); }
  auto pooled = pool.acquire(slot);
  pooled->copy_from(pattern<u32>(slot, 8), stream_);  // the most recently used
  pool.release(std::move(pooled));                     // its data are garbage now: spilled first
  auto extra = make_synchronized(9);
  auto const s = manager_.statistics();
  EXPECT_EQ(s.spills, 1U);
  EXPECT_EQ(s.copies_back, 0U) << "a released buffer's data were copied back";
  for (std::size_t i = 0; i < 3; ++i) { EXPECT_EQ(buffers[i]->state(), buffer_state::SYNCHRONIZED) << i; }
  expect_holds(*extra, pattern<u32>(slot, 9));
  pool.clear();
}

TEST_F(SpillManagerTest, DestroyingTheManagerDetachesItsBuffers)
{
  auto manager = std::make_unique<spill_manager>(&upstream_, budget);
  unified_options const options{.spill = manager.get()};
  unified_options const pinned_options{.pinned = true, .spill = manager.get()};
  unified_buffer<u32> dirty{slot, pinned_options};
  unified_buffer<u32> device_only{slot, options};
  unified_buffer<u32> synchronized{slot, options};
  unified_buffer<u32> host_only{slot, options};
  auto const kernel = pattern<u32>(slot, 1);
  std::ranges::fill(dirty.host(), 0U);
  device_write(dirty.device(stream_), kernel, stream_);
  dirty.mark_device_dirty();
  device_only.copy_from(pattern<u32>(slot, 2), stream_);
  std::ranges::copy(pattern<u32>(slot, 3), synchronized.host().begin());
  synchronized.sync_to_device(stream_);
  std::ranges::copy(pattern<u32>(slot, 4), host_only.host().begin());
  auto const upstream_before = upstream_.used_bytes();

  manager.reset();
  EXPECT_LE(upstream_.used_bytes(), upstream_before - 3 * slot_bytes) << "device copies were not freed";
  for (auto* b : {&dirty, &device_only, &synchronized, &host_only}) {
    EXPECT_TRUE(host_is_current(b->state())) << to_string(b->state());
  }
  expect_holds(dirty, kernel);
  expect_holds(device_only, pattern<u32>(slot, 2));
  expect_holds(synchronized, pattern<u32>(slot, 3));
  expect_holds(host_only, pattern<u32>(slot, 4));

  // They go on without a budget, on the upstream.
  for (auto* b : {&dirty, &device_only, &synchronized, &host_only}) { (void)b->device_view(stream_); }
  EXPECT_GE(upstream_.used_bytes(), 4 * slot_bytes);
  EXPECT_TRUE(device_read(dirty.device_view(stream_), slot, stream_) == kernel);
  device_write(device_only.device(other_), pattern<u32>(slot, 5), other_);
  device_only.mark_device_dirty();
  expect_holds(device_only, pattern<u32>(slot, 5));
  EXPECT_TRUE(std::ranges::equal(device_only.host_view(), pattern<u32>(slot, 5)));
}

// ---- never lose data ----------------------------------------------------------------------------------------

/// A unified buffer and what it must hold.
struct modelled {
  buffer_ptr buffer;
  std::vector<u32> model;
};

enum class action {
  host_write,      // host() and a partial write
  kernel_write,    // a partial write of the device copy on a stream, then mark_device_dirty()
  host_mark,       // a partial write through host_view()'s pointer, then mark_host_dirty()
  copy_from,
  fill,
  zeros,
  sync_to_host,
  sync_to_device,
  check_host_view,
  check_copy_to,
  check_device,
  spill,
  count
};

char const* name(action a)
{
  constexpr std::array<char const*, static_cast<std::size_t>(action::count)> names{
    "host_write", "kernel_write",   "host_mark",       "copy_from",     "fill",         "zeros",
    "sync_to_host", "sync_to_device", "check_host_view", "check_copy_to", "check_device", "spill"};
  return names[static_cast<std::size_t>(a)];
}

/**
 * @brief Drives random operations on `buffers` (which only this caller touches) and checks every read against
 * the model. `guard` holds a residency guard around the use of a device pointer (needed when other threads
 * allocate through the same manager). @return a description of the first problem, or nothing.
 */
std::optional<std::string> random_operations(std::vector<modelled>& buffers, spill_manager& manager,
                                             std::vector<cuda_stream_view> const& streams, int operations,
                                             std::uint64_t seed, bool guard)
{
  std::mt19937_64 rng{seed};
  auto uniform = [&rng](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  std::uint64_t data_seed = seed * 1000003ULL;
  for (int i = 0; i < operations; ++i) {
    auto& [buffer, model] = buffers[uniform(buffers.size())];
    auto const stream = streams[uniform(streams.size())];
    auto const what = static_cast<action>(uniform(static_cast<std::size_t>(action::count)));
    std::size_t const n = model.size();
    std::size_t const offset = uniform(n);
    std::size_t const length = 1 + uniform(n - offset);
    auto problem = [&](std::string const& text) {
      std::ostringstream out;
      out << "operation " << i << " (" << name(what) << ", buffer of " << n << " elements, state "
          << to_string(buffer->state()) << "): " << text;
      return out.str();
    };
    switch (what) {
      case action::host_write: {
        auto const data = pattern<u32>(length, ++data_seed);
        auto const host = buffer->host();
        std::ranges::copy(data, host.begin() + static_cast<std::ptrdiff_t>(offset));
        std::ranges::copy(data, model.begin() + static_cast<std::ptrdiff_t>(offset));
        break;
      }
      case action::kernel_write: {
        auto const data = pattern<u32>(length, ++data_seed);
        std::optional<residency_guard> held;
        if (guard) { held.emplace(buffer->keep_resident()); }
        device_write(buffer->device(stream) + offset, data, stream);
        buffer->mark_device_dirty();
        std::ranges::copy(data, model.begin() + static_cast<std::ptrdiff_t>(offset));
        break;
      }
      case action::host_mark: {
        auto const data = pattern<u32>(length, ++data_seed);
        auto* p = const_cast<u32*>(buffer->host_view().data());  // NOLINT(cppcoreguidelines-pro-type-const-cast)
        std::ranges::copy(data, p + offset);
        buffer->mark_host_dirty();
        std::ranges::copy(data, model.begin() + static_cast<std::ptrdiff_t>(offset));
        break;
      }
      case action::copy_from: {
        model = pattern<u32>(n, ++data_seed);
        buffer->copy_from(model, stream);
        break;
      }
      case action::fill: {
        auto const value = static_cast<u32>(rng());
        buffer->fill(value, stream);
        std::ranges::fill(model, value);
        break;
      }
      case action::zeros:
        buffer->zeros(stream);
        std::ranges::fill(model, 0U);
        break;
      case action::sync_to_host: buffer->sync_to_host(stream); break;
      case action::sync_to_device: buffer->sync_to_device(stream); break;
      case action::check_host_view:
        if (!std::ranges::equal(buffer->host_view(), model)) { return problem("host_view differs from the model"); }
        break;
      case action::check_copy_to: {
        std::vector<u32> out(n);
        buffer->copy_to(out, stream);
        if (out != model) { return problem("copy_to differs from the model"); }
        break;
      }
      case action::check_device: {
        std::optional<residency_guard> held;
        if (guard) { held.emplace(buffer->keep_resident()); }
        if (device_read(buffer->device_view(stream), n, stream) != model) {
          return problem("the device copy differs from the model");
        }
        break;
      }
      case action::spill: (void)manager.spill(1 + uniform(256 * KiB)); break;
      case action::count: break;
    }
    if (manager.used_bytes() > manager.budget()) {
      return problem("used_bytes " + std::to_string(manager.used_bytes()) + " exceeds the budget");
    }
  }
  for (std::size_t b = 0; b < buffers.size(); ++b) {
    std::vector<u32> out(buffers[b].model.size());
    buffers[b].buffer->copy_to(out, streams.front());
    if (out != buffers[b].model) { return "at the end, buffer " + std::to_string(b) + " differs from the model"; }
  }
  return std::nullopt;
}

/// `count` buffers of `min_bytes` to `max_bytes` (multiples of 256), alternately pinned and pageable, with
/// initial data so that every one has a model.
std::vector<modelled> make_buffers(spill_manager& manager, std::size_t count, std::size_t min_bytes,
                                   std::size_t max_bytes, std::uint64_t seed, cuda_stream_view stream)
{
  std::mt19937_64 rng{seed};
  std::vector<modelled> out;
  for (std::size_t i = 0; i < count; ++i) {
    std::size_t const bytes = (min_bytes + rng() % (max_bytes - min_bytes + 1)) / 256 * 256;
    std::size_t const n = bytes / sizeof(u32);
    modelled m{std::make_unique<unified_buffer<u32>>(n, unified_options{.pinned = i % 2 == 0, .spill = &manager}),
               pattern<u32>(n, seed + i)};
    if (i % 3 == 0) {
      m.buffer->copy_from(m.model, stream);
    } else {
      std::ranges::copy(m.model, m.buffer->host().begin());
    }
    out.push_back(std::move(m));
  }
  return out;
}

[[nodiscard]] std::size_t total_bytes(std::vector<modelled> const& buffers)
{
  std::size_t total = 0;
  for (auto const& b : buffers) { total += b.model.size() * sizeof(u32); }
  return total;
}

TEST(SpillManagerStress, NeverLosesData)
{
  cuda_stream first{cuda_stream::flags::non_blocking};
  cuda_stream second{cuda_stream::flags::non_blocking};
  mr::pool_memory_resource upstream{mr::get_current_device_resource()};
  // The budget is a third of the buffers: 24 buffers of 64 to 256 KiB (about 3.8 MiB), 1.25 MiB of device.
  spill_manager manager{&upstream, 1280 * KiB};
  auto buffers = make_buffers(manager, 24, 64 * KiB, 256 * KiB, 42, first);
  ASSERT_GT(total_bytes(buffers), 2 * manager.budget());
  auto const problem = random_operations(buffers, manager, {first.view(), second.view()}, 2000, 7, false);
  EXPECT_FALSE(problem.has_value()) << *problem;
  auto const s = manager.statistics();
  RecordProperty("spills", std::to_string(s.spills));
  RecordProperty("copies_back", std::to_string(s.copies_back));
  EXPECT_GT(s.spills, 50U) << "too few spills to test anything";
  EXPECT_GT(s.copies_back, 10U);
  EXPECT_GT(s.spills, s.copies_back) << "no spill dropped a copy without copying";
  EXPECT_EQ(s.failed_allocations, 0U);
  EXPECT_LE(manager.used_bytes(), manager.budget());
  buffers.clear();
  EXPECT_EQ(manager.used_bytes(), 0U);
}

TEST(SpillManagerStress, NeverLosesDataWithFourThreads)
{
  constexpr int threads = 4;
  std::vector<cuda_stream> streams(threads);
  mr::pool_memory_resource upstream{mr::get_current_device_resource()};
  // 24 buffers of 64 to 128 KiB (about 2.3 MiB) over 1.25 MiB: enough that the guards and the buffers other
  // threads are using (never spilled) always leave something to spill.
  spill_manager manager{&upstream, 1280 * KiB};
  std::vector<std::vector<modelled>> sets;
  std::size_t total = 0;
  for (int t = 0; t < threads; ++t) {
    sets.push_back(make_buffers(manager, 6, 64 * KiB, 128 * KiB, 100 + static_cast<std::uint64_t>(t),
                                streams[static_cast<std::size_t>(t)]));
    total += total_bytes(sets.back());
  }
  ASSERT_GT(total, manager.budget() + manager.budget() / 2);
  std::vector<std::optional<std::string>> problems(threads);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      auto const i = static_cast<std::size_t>(t);
      try {
        problems[i] = random_operations(sets[i], manager, {streams[i].view()}, 500, 1000 + i, true);
      } catch (std::exception const& e) {
        problems[i] = std::string{"exception: "} + e.what();
      }
    });
  }
  for (auto& w : workers) { w.join(); }
  for (int t = 0; t < threads; ++t) {
    auto const& problem = problems[static_cast<std::size_t>(t)];
    EXPECT_FALSE(problem.has_value()) << "thread " << t << ": " << *problem;
  }
  auto const s = manager.statistics();
  RecordProperty("spills", std::to_string(s.spills));
  RecordProperty("copies_back", std::to_string(s.copies_back));
  EXPECT_GT(s.spills, 50U);
  EXPECT_LE(manager.used_bytes(), manager.budget());
  sets.clear();
  EXPECT_EQ(manager.used_bytes(), 0U);
}

}  // namespace
}  // namespace gpumem
