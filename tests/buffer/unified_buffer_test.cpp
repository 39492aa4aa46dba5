// unified_buffer: every transition of the state machine in unified_buffer.hpp, for every accessor and every
// starting state, checked with state() and with the data of both copies; misuse (impossible dirty marks,
// wrong sizes, use after move); zero elements; fills with values that are not byte-uniform; the options;
// streams (a copy on one stream sees the work of another); and the asynchronous syncs of pinned buffers
// (they return at once, and the next host access waits for them). Every fixture runs with a pinned and a
// pageable host copy. Device memory is only written and read through the backend's copies
// (support/device_bytes.hpp), so the tests hold on a real GPU as well as on the host backend.
#include <gpumem/backend/backend.hpp>
#include <gpumem/buffer/buffer_state.hpp>
#include <gpumem/buffer/unified_buffer.hpp>
#include <gpumem/buffer/unified_options.hpp>
#include <gpumem/cuda_stream.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/pinned_memory_pool.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>

#include "support/buffer_state_printer.hpp"
#include "support/counting_resource.hpp"
#include "support/device_bytes.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <future>
#include <limits>
#include <memory>
#include <memory_resource>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace gpumem {
namespace {

using namespace std::chrono_literals;
using test::counting_resource;

template <class T>
concept unified_buffer_of = requires { typename unified_buffer<T>; };
struct alignas(256) aligned_256 {
  std::byte bytes[256];
};
struct alignas(512) aligned_512 {
  std::byte bytes[512];
};
static_assert(unified_buffer_of<int> && unified_buffer_of<aligned_256>);
static_assert(!unified_buffer_of<std::string>, "copies are bytewise");
static_assert(!unified_buffer_of<aligned_512>, "both copies are 256-byte aligned: every other element would be misaligned");
using test::device_read;
using test::device_write;
using test::pattern;
using test::stream_hold;
using u32 = std::uint32_t;

static_assert(!std::is_copy_constructible_v<unified_buffer<int>>);
static_assert(!std::is_copy_assignable_v<unified_buffer<int>>);
static_assert(std::is_nothrow_move_constructible_v<unified_buffer<int>>);
static_assert(std::is_nothrow_move_assignable_v<unified_buffer<int>>);
// Only trivially copyable element types: copies are bytewise.
template <class T>
concept unified_element = requires { typename unified_buffer<T>; };
static_assert(unified_element<int>);
static_assert(!unified_element<std::string>);

constexpr std::size_t elements = 1001;  // 4004 bytes: not a power of two, not a multiple of 256

/// Compares two sequences and names the first difference (vectors of thousands of elements print badly).
template <class A, class B>
::testing::AssertionResult same(A const& actual, B const& expected)
{
  if (std::size(actual) != std::size(expected)) {
    return ::testing::AssertionFailure() << "sizes differ: " << std::size(actual) << " vs " << std::size(expected);
  }
  auto a = std::begin(actual);
  auto b = std::begin(expected);
  for (std::size_t i = 0; a != std::end(actual); ++a, ++b, ++i) {
    if (!(*a == *b)) { return ::testing::AssertionFailure() << "first difference at element " << i; }
  }
  return ::testing::AssertionSuccess();
}

template <class T>
std::vector<T> to_vector(std::span<T const> s)
{
  return {s.begin(), s.end()};
}

/// Starts `fn` on another thread.
template <class Fn>
std::future<void> start(Fn fn)
{
  return std::async(std::launch::async, std::move(fn));
}

[[nodiscard]] bool finishes_within(std::future<void> const& f, std::chrono::milliseconds wait)
{
  return f.wait_for(wait) == std::future_status::ready;
}

/**
 * @brief Calls `call()` while `hold` keeps a stream back, and opens the gate when the call returns or after
 * `patience`, whichever comes first. @return whether the call returned while the gate was still closed.
 */
template <class Fn>
bool returns_while_held(stream_hold& hold, Fn&& call, std::chrono::milliseconds patience)
{
  std::mutex m;
  std::condition_variable cv;
  bool returned = false;
  bool released = false;
  std::thread releaser{[&] {
    std::unique_lock lock{m};
    cv.wait_for(lock, patience, [&] { return returned; });
    released = true;
    hold.release();
  }};
  bool early = false;
  try {
    call();
  } catch (...) {
    {
      std::lock_guard lock{m};
      returned = true;
    }
    cv.notify_all();
    releaser.join();
    throw;
  }
  {
    std::lock_guard lock{m};
    early = !released;
    returned = true;
  }
  cv.notify_all();
  releaser.join();
  return early;
}

/// Reads every copy that holds the current data (without changing the state) and compares it.
template <class T>
void expect_contents(unified_buffer<T>& b, std::vector<T> const& expected, cuda_stream_view stream)
{
  buffer_state const s = b.state();
  std::vector<T> out(b.size());
  b.copy_to(out, stream);
  EXPECT_TRUE(same(out, expected)) << "copy_to in state " << to_string(s);
  EXPECT_EQ(b.state(), s) << "copy_to changed the state";
  if (host_is_current(s)) {
    EXPECT_TRUE(same(b.host_view(), expected)) << "host copy in state " << to_string(s);
    EXPECT_EQ(b.state(), s) << "host_view changed the state";
  }
  if (device_is_current(s)) {
    EXPECT_TRUE(same(device_read(b.device_view(stream), b.size(), stream), expected))
      << "device copy in state " << to_string(s);
    EXPECT_EQ(b.state(), s) << "device_view changed the state";
  }
}

class UnifiedBufferTest : public ::testing::TestWithParam<bool> {
 protected:
  void TearDown() override { device_.expect_everything_returned(); }

  [[nodiscard]] bool pinned() const { return GetParam(); }
  [[nodiscard]] unified_options options() { return {.pinned = pinned(), .device_resource = &device_}; }

  counting_resource device_;  // declared first: the buffers of a test free into it
  cuda_stream stream_{cuda_stream::flags::non_blocking};
  cuda_stream other_{cuda_stream::flags::non_blocking};
};

std::string pinned_name(::testing::TestParamInfo<bool> const& info) { return info.param ? "pinned" : "pageable"; }

INSTANTIATE_TEST_SUITE_P(HostCopy, UnifiedBufferTest, ::testing::Bool(), pinned_name);

// ---- the transition table ---------------------------------------------------------------------------------

enum class op {
  host,
  host_view,
  device,
  device_view,
  sync_to_device,
  sync_to_host,
  mark_host_dirty,
  mark_device_dirty,
  copy_from,
  copy_to,
  fill,
  zeros,
  synchronize,
  allocate,
  free
};

constexpr std::array all_ops{op::host,           op::host_view,       op::device,           op::device_view,
                             op::sync_to_device, op::sync_to_host,    op::mark_host_dirty,  op::mark_device_dirty,
                             op::copy_from,      op::copy_to,         op::fill,             op::zeros,
                             op::synchronize,    op::allocate,        op::free};
constexpr std::array all_states{buffer_state::UNINITIALIZED, buffer_state::HOST_ONLY,  buffer_state::DEVICE_ONLY,
                                buffer_state::SYNCHRONIZED,  buffer_state::HOST_DIRTY, buffer_state::DEVICE_DIRTY};

char const* name(op o)
{
  switch (o) {
    case op::host: return "host";
    case op::host_view: return "host_view";
    case op::device: return "device";
    case op::device_view: return "device_view";
    case op::sync_to_device: return "sync_to_device";
    case op::sync_to_host: return "sync_to_host";
    case op::mark_host_dirty: return "mark_host_dirty";
    case op::mark_device_dirty: return "mark_device_dirty";
    case op::copy_from: return "copy_from";
    case op::copy_to: return "copy_to";
    case op::fill: return "fill";
    case op::zeros: return "zeros";
    case op::synchronize: return "synchronize";
    case op::allocate: return "allocate";
    case op::free: return "free";
  }
  return "?";
}

/// The state after `o` from `s`, as unified_buffer.hpp lists the transitions; nullopt: a logic_error.
std::optional<buffer_state> expected_after(buffer_state s, op o)
{
  using enum buffer_state;
  switch (o) {
    case op::host:  // a host write access: "host access" then "host modified", from every state
      return HOST_DIRTY;  // DEVICE_ONLY, DEVICE_DIRTY: copied to SYNCHRONIZED first
    // The syncs follow their own documentation ("no-op otherwise"): on UNINITIALIZED there is nothing to make
    // current. (The file comment counts them as host/device accesses, which would make it HOST_ONLY/DEVICE_ONLY.)
    case op::sync_to_host:
      if (s == DEVICE_ONLY || s == DEVICE_DIRTY) { return SYNCHRONIZED; }
      return s;
    case op::host_view:  // a host read access
      if (s == UNINITIALIZED) { return HOST_ONLY; }
      if (s == DEVICE_ONLY || s == DEVICE_DIRTY) { return SYNCHRONIZED; }
      return s;
    case op::sync_to_device:
      if (s == HOST_ONLY || s == HOST_DIRTY) { return SYNCHRONIZED; }
      return s;
    case op::device:
    case op::device_view:  // device accesses
      if (s == UNINITIALIZED) { return DEVICE_ONLY; }
      if (s == HOST_ONLY || s == HOST_DIRTY) { return SYNCHRONIZED; }
      return s;
    case op::mark_host_dirty:
      if (s == HOST_ONLY || s == SYNCHRONIZED || s == HOST_DIRTY) { return HOST_DIRTY; }
      return std::nullopt;  // no host copy, or a stale one
    case op::mark_device_dirty:
      if (s == DEVICE_ONLY || s == SYNCHRONIZED || s == DEVICE_DIRTY) { return DEVICE_DIRTY; }
      return std::nullopt;  // no device copy, or a stale one
    case op::copy_from:
    case op::fill:
    case op::zeros:  // device writes: DEVICE_ONLY where there is no host copy
      if (s == UNINITIALIZED || s == DEVICE_ONLY) { return DEVICE_ONLY; }
      return DEVICE_DIRTY;
    case op::copy_to:
      if (s == UNINITIALIZED) { return std::nullopt; }
      return s;
    case op::synchronize:
      if (s == HOST_DIRTY || s == DEVICE_DIRTY) { return SYNCHRONIZED; }
      return s;
    case op::allocate:  // both copies: SYNCHRONIZED from UNINITIALIZED; a buffer with data keeps its state
      return s == UNINITIALIZED ? SYNCHRONIZED : s;
    case op::free: return UNINITIALIZED;
  }
  return std::nullopt;
}

class UnifiedBufferTransitionTest : public ::testing::TestWithParam<std::tuple<bool, buffer_state, op>> {
 protected:
  void TearDown() override { device_.expect_everything_returned(); }

  counting_resource device_;
  cuda_stream stream_{cuda_stream::flags::non_blocking};
};

/**
 * Brings a fresh buffer to `s` with known data: host copy and device copy hold different patterns where the
 * state says one of them is stale, so a copy in the wrong direction shows. @return the current data (empty
 * for UNINITIALIZED).
 */
std::vector<u32> bring_to(unified_buffer<u32>& b, buffer_state s, cuda_stream_view stream)
{
  using enum buffer_state;
  auto const first = pattern<u32>(b.size(), 1);
  auto const second = pattern<u32>(b.size(), 2);
  switch (s) {
    case UNINITIALIZED: return {};
    case DEVICE_ONLY: b.copy_from(first, stream); return first;
    case HOST_ONLY:
    case SYNCHRONIZED:
    case HOST_DIRTY:
    case DEVICE_DIRTY: break;
  }
  // A read access makes it HOST_ONLY; the data go into the only copy through its pointer.
  std::ranges::copy(first, const_cast<u32*>(b.host_view().data()));  // NOLINT(cppcoreguidelines-pro-type-const-cast)
  if (s == HOST_ONLY) { return first; }
  b.sync_to_device(stream);  // SYNCHRONIZED
  if (s == SYNCHRONIZED) { return first; }
  if (s == HOST_DIRTY) {
    std::ranges::copy(second, b.host().begin());
    return second;
  }
  device_write(b.device(stream), second, stream);  // a kernel writes the device copy
  b.mark_device_dirty();
  return second;
}

TEST_P(UnifiedBufferTransitionTest, StateAndDataFollowTheTable)
{
  auto const [is_pinned, from, operation] = GetParam();
  unified_buffer<u32> b{elements, {.pinned = is_pinned, .device_resource = &device_}};
  auto current = bring_to(b, from, stream_);
  ASSERT_EQ(b.state(), from) << "cannot bring the buffer to the starting state";
  bool const known = from != buffer_state::UNINITIALIZED;
  auto const expected = expected_after(from, operation);
  auto const written = pattern<u32>(elements, 3);
  SCOPED_TRACE(std::string{"from "} + std::string{to_string(from)} + " by " + name(operation));

  switch (operation) {
    case op::host: {
      auto const h = b.host();
      ASSERT_EQ(h.size(), elements);
      EXPECT_EQ(detail::get_backend().is_pinned_host(h.data()), is_pinned);
      if (known) { EXPECT_TRUE(same(h, current)) << "host() does not show the current data"; }
      std::ranges::copy(written, h.begin());
      current = written;
      break;
    }
    case op::host_view: {
      auto const h = b.host_view();
      ASSERT_EQ(h.size(), elements);
      if (known) { EXPECT_TRUE(same(h, current)) << "host_view() does not show the current data"; }
      break;
    }
    case op::device:
    case op::device_view: {
      u32 const* p = operation == op::device ? b.device(stream_) : b.device_view(stream_);
      ASSERT_NE(p, nullptr);
      if (known) { EXPECT_TRUE(same(device_read(p, elements, stream_), current)) << "the device copy is not current"; }
      break;
    }
    case op::sync_to_device: b.sync_to_device(stream_); break;
    case op::sync_to_host: b.sync_to_host(stream_); break;
    case op::mark_host_dirty:
      if (expected) {
        // The host copy written through a pointer obtained earlier (host_view leaves these states alone).
        auto* p = const_cast<u32*>(b.host_view().data());  // NOLINT(cppcoreguidelines-pro-type-const-cast)
        std::ranges::copy(written, p);
        b.mark_host_dirty();
        current = written;
      } else {
        EXPECT_THROW(b.mark_host_dirty(), logic_error);
      }
      break;
    case op::mark_device_dirty:
      if (expected) {
        device_write(b.device(stream_), written, stream_);  // device() leaves these states alone
        b.mark_device_dirty();
        current = written;
      } else {
        EXPECT_THROW(b.mark_device_dirty(), logic_error);
      }
      break;
    case op::copy_from:
      b.copy_from(written, stream_);
      current = written;
      break;
    case op::copy_to: {
      std::vector<u32> out(elements);
      if (expected) {
        b.copy_to(out, stream_);
        EXPECT_TRUE(same(out, current));
      } else {
        EXPECT_THROW(b.copy_to(out, stream_), logic_error);
      }
      break;
    }
    case op::fill:
      b.fill(0x01020304U, stream_);
      current.assign(elements, 0x01020304U);
      break;
    case op::zeros:
      b.zeros(stream_);
      current.assign(elements, 0U);
      break;
    case op::synchronize: b.synchronize(stream_); break;
    case op::allocate: b.allocate(true, true, stream_); break;
    case op::free:
      b.free();
      EXPECT_FALSE(b.is_allocated());
      current.clear();
      break;
  }

  EXPECT_EQ(b.state(), expected.value_or(from)) << (expected ? "wrong state" : "a failed call changed the state");
  if (!current.empty()) { expect_contents(b, current, stream_); }
}

std::string transition_name(::testing::TestParamInfo<std::tuple<bool, buffer_state, op>> const& info)
{
  auto const [is_pinned, from, operation] = info.param;
  return std::string{is_pinned ? "pinned_" : "pageable_"} + std::string{to_string(from)} + "_" + name(operation);
}

INSTANTIATE_TEST_SUITE_P(AllStatesAllAccessors, UnifiedBufferTransitionTest,
                         ::testing::Combine(::testing::Bool(), ::testing::ValuesIn(all_states),
                                            ::testing::ValuesIn(all_ops)),
                         transition_name);

// ---- the fixture's tests (pinned and pageable) ---------------------------------------------------------

TEST_P(UnifiedBufferTest, ConstructionAllocatesNothing)
{
  {
    unified_buffer<u32> const b{elements, options()};
    EXPECT_TRUE(b.valid());
    EXPECT_EQ(b.size(), elements);
    EXPECT_EQ(b.size_bytes(), elements * sizeof(u32));
    EXPECT_EQ(b.storage().capacity(), elements * sizeof(u32));
    EXPECT_EQ(b.state(), buffer_state::UNINITIALIZED);
    EXPECT_EQ(b.is_pinned(), pinned());
    EXPECT_EQ(device_.allocations(), 0U);
  }
  EXPECT_EQ(device_.allocations(), 0U);
}

TEST_P(UnifiedBufferTest, HostCopyIsPinnedExactlyWhenAskedFor)
{
  unified_buffer<u32> b{elements, options()};
  EXPECT_EQ(detail::get_backend().is_pinned_host(b.host().data()), pinned());
  unified_buffer<u32> c{elements, options()};
  c.zeros(stream_);
  EXPECT_EQ(detail::get_backend().is_pinned_host(c.host_view().data()), pinned());
}

TEST_P(UnifiedBufferTest, DeviceCopyComesFromTheDeviceResourceAndGoesBack)
{
  {
    unified_buffer<u32> b{elements, options()};
    b.zeros(stream_);
    EXPECT_EQ(device_.allocations(), 1U);
    EXPECT_EQ(device_.bytes_allocated(), elements * sizeof(u32));
    (void)b.host_view();
    (void)b.device(stream_);
    b.fill(7U, stream_);
    EXPECT_EQ(device_.allocations(), 1U) << "the device copy is allocated once";
  }
  EXPECT_EQ(device_.deallocations(), 1U);  // TearDown checks the sizes
}

TEST_P(UnifiedBufferTest, ReadOnlyAccessorsNeverDirty)
{
  auto const data = pattern<u32>(elements, 11);
  for (auto const start : {buffer_state::HOST_ONLY, buffer_state::DEVICE_ONLY, buffer_state::SYNCHRONIZED}) {
    unified_buffer<u32> b{elements, options()};
    if (start == buffer_state::DEVICE_ONLY) {
      b.copy_from(data, stream_);
    } else {  // a read access: HOST_ONLY, written through its pointer (the only copy)
      std::ranges::copy(data, const_cast<u32*>(b.host_view().data()));  // NOLINT(cppcoreguidelines-pro-type-const-cast)
    }
    if (start == buffer_state::SYNCHRONIZED) { b.sync_to_device(stream_); }
    ASSERT_EQ(b.state(), start);
    for (int round = 0; round < 3; ++round) {
      (void)b.host_view();
      (void)b.device_view(stream_);
      b.sync_to_host(other_);
      b.sync_to_device(other_);
      std::vector<u32> out(elements);
      b.copy_to(out, stream_);
      EXPECT_TRUE(same(out, data));
      EXPECT_EQ(b.state(), buffer_state::SYNCHRONIZED) << "from " << to_string(start) << ", round " << round;
    }
  }
}

TEST_P(UnifiedBufferTest, ImpossibleDirtyMarksThrowAndChangeNothing)
{
  unified_buffer<u32> b{elements, options()};
  EXPECT_THROW(b.mark_host_dirty(), logic_error);
  EXPECT_THROW(b.mark_device_dirty(), logic_error);
  EXPECT_EQ(b.state(), buffer_state::UNINITIALIZED);

  auto const host_data = pattern<u32>(elements, 12);
  std::ranges::copy(host_data, b.host().begin());  // HOST_DIRTY: written, no device copy
  EXPECT_THROW(b.mark_device_dirty(), logic_error);  // there is no device copy
  EXPECT_EQ(b.state(), buffer_state::HOST_DIRTY);

  b.sync_to_device(stream_);
  std::ranges::copy(pattern<u32>(elements, 13), b.host().begin());  // HOST_DIRTY
  EXPECT_THROW(b.mark_device_dirty(), logic_error);  // the device copy is stale: the host write would be lost
  EXPECT_EQ(b.state(), buffer_state::HOST_DIRTY);
  expect_contents(b, pattern<u32>(elements, 13), stream_);

  unified_buffer<u32> d{elements, options()};
  d.copy_from(host_data, stream_);  // DEVICE_ONLY
  EXPECT_THROW(d.mark_host_dirty(), logic_error);
  EXPECT_EQ(d.state(), buffer_state::DEVICE_ONLY);
  d.sync_to_host(stream_);
  d.fill(5U, stream_);  // DEVICE_DIRTY
  EXPECT_THROW(d.mark_host_dirty(), logic_error);  // the host copy is stale
  EXPECT_EQ(d.state(), buffer_state::DEVICE_DIRTY);
  expect_contents(d, std::vector<u32>(elements, 5U), stream_);
}

TEST_P(UnifiedBufferTest, ThePublishedExamplesHold)
{
  // A host write of a new buffer leaves it HOST_DIRTY; the device access syncs it.
  unified_buffer<u32> b{elements, options()};
  std::ranges::fill(b.host(), 1U);
  EXPECT_EQ(b.state(), buffer_state::HOST_DIRTY);
  b.sync_to_device(stream_);
  EXPECT_EQ(b.state(), buffer_state::SYNCHRONIZED);
  expect_contents(b, std::vector<u32>(elements, 1U), stream_);

  // The table: a host access of a new buffer gives HOST_ONLY, a device access then SYNCHRONIZED, and
  // mark_host_dirty() on HOST_ONLY gives HOST_DIRTY.
  unified_buffer<u32> c{elements, options()};
  (void)c.host_view();
  EXPECT_EQ(c.state(), buffer_state::HOST_ONLY);
  c.mark_host_dirty();
  EXPECT_EQ(c.state(), buffer_state::HOST_DIRTY);
  (void)c.device_view(stream_);
  EXPECT_EQ(c.state(), buffer_state::SYNCHRONIZED);
}

TEST_P(UnifiedBufferTest, AllocateMakesTheCopiesAskedForAndFreeReturnsThem)
{
  unified_buffer<u32> b{elements, options()};
  EXPECT_FALSE(b.is_allocated());
  EXPECT_THROW(b.allocate(false, false, stream_), logic_error);
  EXPECT_EQ(b.state(), buffer_state::UNINITIALIZED);
  b.allocate(true, false, stream_);
  EXPECT_EQ(b.state(), buffer_state::HOST_ONLY);
  EXPECT_TRUE(b.is_allocated());
  EXPECT_EQ(device_.allocations(), 0U);
  b.free();
  EXPECT_EQ(b.state(), buffer_state::UNINITIALIZED);
  b.allocate(false, true, stream_);
  EXPECT_EQ(b.state(), buffer_state::DEVICE_ONLY);
  EXPECT_EQ(device_.allocations(), 1U);
  b.free();
  EXPECT_EQ(device_.deallocations(), 1U);
  b.allocate(true, true, stream_);
  EXPECT_EQ(b.state(), buffer_state::SYNCHRONIZED);
  EXPECT_EQ(device_.allocations(), 2U);

  // A buffer holding data keeps them and its state; the copy allocated meanwhile is not used until needed.
  auto const data = pattern<u32>(elements, 31);
  unified_buffer<u32> d{elements, options()};
  d.copy_from(data, stream_);
  d.allocate(true, true, stream_);
  EXPECT_EQ(d.state(), buffer_state::DEVICE_ONLY) << "the host copy now exists, and holds no data";
  expect_contents(d, data, stream_);
  d.free();
  EXPECT_FALSE(d.is_allocated());
  std::vector<u32> out(elements);
  EXPECT_THROW(d.copy_to(out, stream_), logic_error) << "a freed buffer holds no data";
  std::ranges::fill(d.host(), 4U);  // the next access allocates again
  expect_contents(d, std::vector<u32>(elements, 4U), stream_);
}

TEST_P(UnifiedBufferTest, FreeRefusesWhileAGuardHoldsTheDeviceCopy)
{
  unified_buffer<u32> b{elements, options()};
  b.fill(6U, stream_);
  {
    auto guard = b.keep_resident();
    EXPECT_THROW(b.free(), logic_error);
    EXPECT_EQ(b.state(), buffer_state::DEVICE_ONLY);
  }
  b.free();
  EXPECT_EQ(b.state(), buffer_state::UNINITIALIZED);
}

TEST_P(UnifiedBufferTest, SynchronizeMakesBothCopiesCurrent)
{
  auto const data = pattern<u32>(elements, 32);
  unified_buffer<u32> b{elements, options()};
  b.synchronize(stream_);
  EXPECT_EQ(b.state(), buffer_state::UNINITIALIZED);
  std::ranges::copy(data, b.host().begin());
  b.synchronize(stream_);  // HOST_DIRTY: host -> device
  EXPECT_EQ(b.state(), buffer_state::SYNCHRONIZED);
  EXPECT_TRUE(same(device_read(b.device_view(stream_), elements, stream_), data));
  b.fill(8U, stream_);  // DEVICE_DIRTY
  b.synchronize(stream_);
  EXPECT_EQ(b.state(), buffer_state::SYNCHRONIZED);
  EXPECT_TRUE(same(b.host_view(), std::vector<u32>(elements, 8U)));
}

TEST_P(UnifiedBufferTest, WrongSizesThrowNamingBothSizes)
{
  unified_buffer<u32> b{elements, options()};
  std::vector<u32> shorter(elements - 1);
  std::vector<u32> longer(elements + 17);
  auto expect_sizes_named = [](auto&& call, std::size_t given) {
    try {
      call();
      ADD_FAILURE() << "no logic_error for a span of " << given << " elements";
    } catch (logic_error const& e) {
      std::string const what = e.what();
      EXPECT_NE(what.find(std::to_string(given)), std::string::npos) << what;
      EXPECT_NE(what.find(std::to_string(elements)), std::string::npos) << what;
    }
  };
  expect_sizes_named([&] { b.copy_from(shorter, stream_); }, shorter.size());
  expect_sizes_named([&] { b.copy_from(longer, stream_); }, longer.size());
  EXPECT_EQ(b.state(), buffer_state::UNINITIALIZED);
  b.copy_from(pattern<u32>(elements, 14), stream_);
  expect_sizes_named([&] { b.copy_to(shorter, stream_); }, shorter.size());
  expect_sizes_named([&] { b.copy_to(longer, stream_); }, longer.size());
  EXPECT_EQ(b.state(), buffer_state::DEVICE_ONLY);
  expect_contents(b, pattern<u32>(elements, 14), stream_);
}

TEST_P(UnifiedBufferTest, CopyToAnUninitializedBufferThrows)
{
  unified_buffer<u32> b{elements, options()};
  std::vector<u32> out(elements, 9U);
  EXPECT_THROW(b.copy_to(out, stream_), logic_error);
  EXPECT_EQ(b.state(), buffer_state::UNINITIALIZED);
  EXPECT_EQ(out, std::vector<u32>(elements, 9U));
  EXPECT_EQ(device_.allocations(), 0U);
}

TEST_P(UnifiedBufferTest, UseAfterMoveThrowsNamingMoved)
{
  auto const data = pattern<u32>(elements, 15);
  unified_buffer<u32> a{elements, options()};
  a.copy_from(data, stream_);
  unified_buffer<u32> b{std::move(a)};
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): the point of the test
  EXPECT_EQ(a.size(), 0U);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(a.size_bytes(), 0U);
  std::vector<std::pair<char const*, std::function<void()>>> const calls{
    {"state", [&] { (void)a.state(); }},
    {"is_pinned", [&] { (void)a.is_pinned(); }},
    {"stream", [&] { (void)a.stream(); }},
    {"host", [&] { (void)a.host(); }},
    {"host_view", [&] { (void)a.host_view(); }},
    {"device", [&] { (void)a.device(stream_); }},
    {"device_view", [&] { (void)a.device_view(stream_); }},
    {"sync_to_device", [&] { a.sync_to_device(stream_); }},
    {"sync_to_host", [&] { a.sync_to_host(stream_); }},
    {"mark_host_dirty", [&] { a.mark_host_dirty(); }},
    {"mark_device_dirty", [&] { a.mark_device_dirty(); }},
    {"copy_from", [&] { a.copy_from(std::span<u32 const>{}, stream_); }},  // the size matches: 0
    {"copy_to", [&] { a.copy_to(std::span<u32>{}, stream_); }},
    {"fill", [&] { a.fill(1U, stream_); }},
    {"zeros", [&] { a.zeros(stream_); }},
    {"keep_resident", [&] { (void)a.keep_resident(); }},
    {"storage", [&] { (void)a.storage(); }},
  };
  for (auto const& [what, call] : calls) {
    try {
      call();
      ADD_FAILURE() << what << " on a moved-from buffer did not throw";
    } catch (logic_error const& e) {
      EXPECT_NE(std::string{e.what()}.find("moved"), std::string::npos) << what << ": " << e.what();
    }
  }
  EXPECT_THROW(a.copy_from(data, stream_), logic_error);  // the sizes differ, whatever the message

  EXPECT_EQ(b.size(), elements);
  EXPECT_EQ(b.state(), buffer_state::DEVICE_ONLY);
  expect_contents(b, data, stream_);

  unified_buffer<u32> c{3, options()};
  c = std::move(b);
  EXPECT_FALSE(b.valid());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.size(), 0U);
  EXPECT_THROW((void)b.host_view(), logic_error);
  EXPECT_EQ(c.size(), elements);
  expect_contents(c, data, stream_);
}

TEST_P(UnifiedBufferTest, ReleasedStorageLeavesAnInvalidBuffer)
{
  unified_buffer<u32> a{elements, options()};
  a.fill(3U, stream_);
  auto storage = a.release_storage();
  EXPECT_FALSE(a.valid());
  EXPECT_EQ(a.size(), 0U);
  EXPECT_THROW((void)a.state(), logic_error);
  unified_buffer<u32> b{std::move(storage)};
  EXPECT_EQ(b.size(), elements);
  expect_contents(b, std::vector<u32>(elements, 3U), stream_);
}

TEST_P(UnifiedBufferTest, ZeroElements)
{
  using enum buffer_state;
  unified_buffer<u32> b{0, options()};
  EXPECT_EQ(b.size(), 0U);
  EXPECT_EQ(b.size_bytes(), 0U);
  EXPECT_EQ(b.state(), UNINITIALIZED);
  EXPECT_THROW(b.copy_to(std::span<u32>{}, stream_), logic_error);
  EXPECT_EQ(b.device(stream_), nullptr);
  EXPECT_EQ(b.state(), DEVICE_ONLY);
  EXPECT_EQ(b.host().size(), 0U);
  EXPECT_EQ(b.state(), HOST_DIRTY);
  EXPECT_EQ(b.device_view(stream_), nullptr);
  EXPECT_EQ(b.state(), SYNCHRONIZED);
  b.mark_device_dirty();
  EXPECT_EQ(b.state(), DEVICE_DIRTY);
  b.sync_to_host(other_);
  EXPECT_EQ(b.state(), SYNCHRONIZED);
  b.copy_to(std::span<u32>{}, stream_);
  b.copy_from(std::span<u32 const>{}, stream_);
  EXPECT_EQ(b.state(), DEVICE_DIRTY);
  b.fill(0x01020304U, stream_);
  b.zeros(stream_);
  b.sync_to_device(stream_);
  EXPECT_EQ(b.host_view().size(), 0U);
  EXPECT_EQ(b.state(), SYNCHRONIZED);
  EXPECT_THROW(b.copy_from(std::vector<u32>(1), stream_), logic_error);

  unified_buffer<u32> c{0, options()};
  c.zeros(stream_);
  EXPECT_EQ(c.state(), DEVICE_ONLY);
  std::vector<u32> none;
  c.copy_to(none, stream_);
}

/// A 12-byte element whose bytes all differ, so a fill that repeats a byte, a word or a misaligned pattern shows.
struct rgb32 {
  u32 r;
  u32 g;
  u32 b;
  friend bool operator==(rgb32 const&, rgb32 const&) = default;
};
static_assert(sizeof(rgb32) == 12);

/// A 3-byte element: the pattern is not a power of two long.
struct rgb8 {
  std::uint8_t r;
  std::uint8_t g;
  std::uint8_t b;
  friend bool operator==(rgb8 const&, rgb8 const&) = default;
};
static_assert(sizeof(rgb8) == 3);

constexpr std::array fill_sizes{std::size_t{1}, std::size_t{3}, std::size_t{7}, std::size_t{13}, std::size_t{1000},
                                std::size_t{4097}, std::size_t{65537}};

template <class T>
void check_fill(unified_options const& options, T const& value, cuda_stream_view stream)
{
  for (std::size_t const n : fill_sizes) {
    SCOPED_TRACE("elements: " + std::to_string(n) + " of " + std::to_string(sizeof(T)) + " bytes");
    unified_buffer<T> fresh{n, options};
    fresh.fill(value, stream);
    EXPECT_EQ(fresh.state(), buffer_state::DEVICE_ONLY);
    expect_contents(fresh, std::vector<T>(n, value), stream);

    unified_buffer<T> written{n, options};  // a fill over data: the host copy must not keep them
    std::ranges::fill(written.host(), T{});
    written.fill(value, stream);
    EXPECT_EQ(written.state(), buffer_state::DEVICE_DIRTY);
    EXPECT_TRUE(same(written.host_view(), std::vector<T>(n, value)));
    EXPECT_EQ(written.state(), buffer_state::SYNCHRONIZED);
  }
}

TEST_P(UnifiedBufferTest, FillRepeatsValuesThatAreNotByteUniform)
{
  check_fill<u32>(options(), 0x01020304U, stream_);
  check_fill<std::uint8_t>(options(), 0xA5, stream_);
  check_fill<std::uint16_t>(options(), 0x0102, stream_);
  check_fill<std::uint64_t>(options(), 0x0102030405060708ULL, stream_);
  check_fill<rgb32>(options(), rgb32{0x01020304U, 0xA0B0C0D0U, 0xDEADBEEFU}, stream_);
  check_fill<rgb8>(options(), rgb8{1, 2, 3}, stream_);
  check_fill<double>(options(), -1.25, stream_);
}

TEST_P(UnifiedBufferTest, ZerosClearsEveryByte)
{
  for (std::size_t const n : fill_sizes) {
    SCOPED_TRACE("elements: " + std::to_string(n));
    unified_buffer<rgb32> b{n, options()};
    std::ranges::fill(b.host(), rgb32{1, 2, 3});
    b.zeros(stream_);
    EXPECT_EQ(b.state(), buffer_state::DEVICE_DIRTY);
    expect_contents(b, std::vector<rgb32>(n, rgb32{0, 0, 0}), stream_);

    unified_buffer<rgb8> c{n, options()};
    c.copy_from(std::vector<rgb8>(n, rgb8{9, 9, 9}), stream_);
    c.zeros(stream_);
    EXPECT_EQ(c.state(), buffer_state::DEVICE_ONLY);
    expect_contents(c, std::vector<rgb8>(n, rgb8{0, 0, 0}), stream_);
  }
}

TEST_P(UnifiedBufferTest, TheBufferStreamIsTheLatestDeviceAccessSyncOrWrite)
{
  unified_buffer<u32> b{elements, options()};
  b.copy_from(pattern<u32>(elements, 16), stream_);
  EXPECT_EQ(b.stream(), stream_.view());
  (void)b.device_view(other_);
  EXPECT_EQ(b.stream(), other_.view());
  b.sync_to_host(stream_);
  EXPECT_EQ(b.stream(), stream_.view());
  (void)b.host_view();
  (void)b.host();
  EXPECT_EQ(b.stream(), stream_.view()) << "a host access is not a device access";
  b.sync_to_device(other_);
  EXPECT_EQ(b.stream(), other_.view());
  b.zeros(stream_);
  EXPECT_EQ(b.stream(), stream_.view());
  expect_contents(b, std::vector<u32>(elements, 0U), stream_);
}

TEST_P(UnifiedBufferTest, SyncToHostOnAnotherStreamSeesTheWritesOfTheFirst)
{
  auto const before = pattern<u32>(elements, 17);
  auto const kernel = pattern<u32>(elements, 18);
  unified_buffer<u32> b{elements, options()};
  b.copy_from(before, stream_);
  stream_.synchronize();
  {
    stream_hold hold{stream_};
    device_write(b.device(stream_), kernel, stream_);  // the "kernel", held back by the gate
    b.mark_device_dirty();
    bool const early = returns_while_held(hold, [&] { b.sync_to_host(other_); }, pinned() ? 2000ms : 50ms);
    if (pinned()) {
      EXPECT_TRUE(early) << "a pinned sync_to_host waited for the stream";
    } else {
      EXPECT_FALSE(early) << "a pageable sync_to_host returned before the data were in the host copy";
    }
  }
  EXPECT_EQ(b.state(), buffer_state::SYNCHRONIZED);
  EXPECT_EQ(b.stream(), other_.view());
  EXPECT_TRUE(same(b.host_view(), kernel)) << "the copy on the second stream did not wait for the first";
  expect_contents(b, kernel, other_);
}

TEST_P(UnifiedBufferTest, DeviceAccessOnAnotherStreamWaitsForTheFirst)
{
  auto const kernel = pattern<u32>(elements, 19);
  unified_buffer<u32> b{elements, options()};
  b.zeros(stream_);
  std::vector<u32> seen;
  std::future<void> reader;
  {
    stream_hold hold{stream_};
    device_write(b.device(stream_), kernel, stream_);
    b.mark_device_dirty();  // DEVICE_ONLY -> DEVICE_DIRTY
    u32 const* p = b.device_view(other_);
    reader = start([&seen, p, this] { seen = device_read(p, elements, other_); });
    EXPECT_FALSE(finishes_within(reader, 50ms)) << "the second stream did not wait for the first";
  }
  reader.get();
  EXPECT_TRUE(same(seen, kernel));
}

/// Calls copy_from(source) on `stream` while the stream is held for 50 ms, then overwrites the source at
/// once: a copy that returned before it had read the source shows (deterministically) as zeros.
void copy_from_then_overwrite(unified_buffer<u32>& b, std::span<u32> source, cuda_stream_view stream)
{
  stream_hold hold{stream};
  std::thread opener{[&hold] {
    std::this_thread::sleep_for(50ms);
    hold.release();
  }};
  b.copy_from(source, stream);
  std::ranges::fill(source, 0U);  // allowed as soon as copy_from has returned
  opener.join();
}

TEST_P(UnifiedBufferTest, CopyFromReturnsWhenTheSourceMayBeReused)
{
  unified_buffer<u32> b{elements, options()};
  auto pageable = pattern<u32>(elements, 20);
  copy_from_then_overwrite(b, pageable, stream_);
  {
    SCOPED_TRACE("from pageable memory");
    expect_contents(b, pattern<u32>(elements, 20), stream_);
  }

  auto& pool = mr::get_default_pinned_pool();
  auto* pinned_source = static_cast<u32*>(pool.allocate(elements * sizeof(u32)));
  std::ranges::copy(pattern<u32>(elements, 21), pinned_source);
  copy_from_then_overwrite(b, std::span<u32>{pinned_source, elements}, other_);
  pool.deallocate(pinned_source, elements * sizeof(u32));
  SCOPED_TRACE("from pinned memory");
  expect_contents(b, pattern<u32>(elements, 21), stream_);
}

TEST_P(UnifiedBufferTest, CopyToIntoPinnedAndPageableMemory)
{
  unified_buffer<u32> b{elements, options()};
  b.copy_from(pattern<u32>(elements, 22), stream_);
  auto& pool = mr::get_default_pinned_pool();
  auto* pinned_out = static_cast<u32*>(pool.allocate(elements * sizeof(u32)));
  b.copy_to(std::span<u32>{pinned_out, elements}, other_);
  EXPECT_TRUE(same(std::span<u32 const>{pinned_out, elements}, pattern<u32>(elements, 22)));
  pool.deallocate(pinned_out, elements * sizeof(u32));
  std::vector<u32> pageable(elements);
  b.copy_to(pageable, stream_);
  EXPECT_TRUE(same(pageable, pattern<u32>(elements, 22)));
}

TEST_P(UnifiedBufferTest, FailedDeviceAllocationLeavesTheStateUnchanged)
{
  device_.set_limit(elements * sizeof(u32) - 1);
  auto const data = pattern<u32>(elements, 23);
  unified_buffer<u32> b{elements, options()};
  std::ranges::copy(data, b.host().begin());
  EXPECT_THROW((void)b.device(stream_), out_of_memory);
  EXPECT_THROW(b.sync_to_device(stream_), out_of_memory);
  EXPECT_EQ(b.state(), buffer_state::HOST_DIRTY);
  EXPECT_TRUE(same(b.host_view(), data));

  unified_buffer<u32> c{elements, options()};
  EXPECT_THROW(c.copy_from(data, stream_), out_of_memory);
  EXPECT_THROW(c.fill(1U, stream_), out_of_memory);
  EXPECT_EQ(c.state(), buffer_state::UNINITIALIZED);
  device_.set_limit(std::numeric_limits<std::size_t>::max());
  c.copy_from(data, stream_);
  expect_contents(c, data, stream_);
}

TEST_P(UnifiedBufferTest, ConcurrentReadersSeeTheSameData)
{
  auto const kernel = pattern<u32>(elements, 24);
  std::vector<cuda_stream> streams(4);  // before the buffer: its last stream must outlive it
  unified_buffer<u32> b{elements, options()};
  b.zeros(stream_);
  (void)b.host_view();
  device_write(b.device(stream_), kernel, stream_);
  b.mark_device_dirty();
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (std::size_t t = 0; t < streams.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        std::vector<u32> out(elements);
        switch ((t + static_cast<std::size_t>(i)) % 3) {
          case 0: out = to_vector(b.host_view()); break;
          case 1: b.copy_to(out, streams[t]); break;
          default: out = device_read(b.device_view(streams[t]), elements, streams[t]); break;
        }
        if (out != kernel) { ++failures; }
      }
    });
  }
  for (auto& t : threads) { t.join(); }
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(b.state(), buffer_state::SYNCHRONIZED);
}

// ---- options ----------------------------------------------------------------------------------------------

/// A host resource that counts what it hands out (over the default resource).
class counting_host_resource final : public std::pmr::memory_resource {
 public:
  std::atomic<std::size_t> allocations{0};
  std::atomic<std::size_t> outstanding{0};

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override
  {
    void* p = std::pmr::new_delete_resource()->allocate(bytes, alignment);
    ++allocations;
    ++outstanding;
    return p;
  }
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override
  {
    --outstanding;
    std::pmr::new_delete_resource()->deallocate(p, bytes, alignment);
  }
  [[nodiscard]] bool do_is_equal(std::pmr::memory_resource const& other) const noexcept override
  {
    return this == &other;
  }
};

TEST(UnifiedBufferOptions, PageableHostCopyComesFromTheHostResource)
{
  counting_host_resource host;
  cuda_stream stream{cuda_stream::flags::non_blocking};
  {
    unified_buffer<u32> b{elements, {.host_resource = &host}};
    EXPECT_EQ(host.allocations.load(), 0U);
    b.copy_from(pattern<u32>(elements, 25), stream);
    (void)b.host_view();
    EXPECT_EQ(host.allocations.load(), 1U);
    EXPECT_FALSE(detail::get_backend().is_pinned_host(b.host_view().data()));
    expect_contents(b, pattern<u32>(elements, 25), stream);
  }
  EXPECT_EQ(host.outstanding.load(), 0U);
}

TEST(UnifiedBufferOptions, PinnedHostCopyComesFromThePinnedPool)
{
  mr::pinned_memory_pool pool{{.chunk_size = std::size_t{1} << 20U}};
  cuda_stream stream{cuda_stream::flags::non_blocking};
  {
    unified_buffer<u32> b{elements, {.pinned = true, .pinned_pool = &pool}};
    EXPECT_EQ(pool.usage().in_use, 0U);
    std::ranges::copy(pattern<u32>(elements, 26), b.host().begin());
    EXPECT_GE(pool.usage().in_use, elements * sizeof(u32));
    b.sync_to_device(stream);
    expect_contents(b, pattern<u32>(elements, 26), stream);
  }
  pool.wait_pending();
  EXPECT_EQ(pool.usage().in_use, 0U);
  EXPECT_EQ(pool.usage().pending, 0U);
}

TEST(UnifiedBufferOptions, DefaultsUseTheCurrentDeviceResourceAndTheDefaultStream)
{
  unified_buffer<double> b{777};
  EXPECT_FALSE(b.is_pinned());
  std::vector<double> data(777);
  for (std::size_t i = 0; i < data.size(); ++i) { data[i] = static_cast<double>(i) * 0.5; }
  b.copy_from(data);
  EXPECT_EQ(b.state(), buffer_state::DEVICE_ONLY);
  EXPECT_TRUE(same(b.host_view(), data));
  std::vector<double> out(777);
  b.copy_to(out);
  EXPECT_EQ(out, data);
  b.host()[5] = -1.0;
  b.sync_to_device();
  data[5] = -1.0;
  EXPECT_TRUE(same(device_read(b.device_view(), data.size(), cuda_stream_default), data));
}

TEST(UnifiedBufferOptions, OverflowingSizeIsALogicError)
{
  EXPECT_THROW((unified_buffer<std::uint64_t>{std::numeric_limits<std::size_t>::max() / 4}), logic_error);
  EXPECT_THROW((unified_buffer<rgb32>{std::numeric_limits<std::size_t>::max() / 8}), logic_error);
}

// ---- asynchronous syncs of pinned buffers -----------------------------------------------------------------

class UnifiedBufferAsync : public ::testing::Test {
 protected:
  /// A device resource that does not wait for the device when it frees (cudaFree would wait for held streams).
  mr::pool_memory_resource device_pool_{mr::get_current_device_resource()};
  cuda_stream stream_{cuda_stream::flags::non_blocking};
};

TEST_F(UnifiedBufferAsync, PinnedSyncToHostReturnsAtOnceAndTheNextHostAccessWaits)
{
  auto const stale = pattern<u32>(elements, 30);
  auto const kernel = pattern<u32>(elements, 31);
  unified_buffer<u32> b{elements, {.pinned = true, .device_resource = &device_pool_}};
  std::ranges::copy(stale, b.host().begin());
  device_write(b.device(stream_), kernel, stream_);
  b.mark_device_dirty();
  ASSERT_EQ(b.state(), buffer_state::DEVICE_DIRTY);

  std::vector<u32> seen;
  std::atomic<bool> returned{false};
  std::future<void> sync;
  std::future<void> reader;
  stream_hold hold{stream_};  // destroyed first: opens the gate before the futures wait for their threads
  sync = start([&] { b.sync_to_host(stream_); });
  ASSERT_TRUE(finishes_within(sync, 2000ms)) << "a pinned sync_to_host waited for the stream";
  sync.get();
  EXPECT_EQ(b.state(), buffer_state::SYNCHRONIZED);
  reader = start([&] {
    seen = to_vector(b.host_view());
    returned = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(returned.load()) << "host_view() returned while the device->host copy was held back";
  hold.release();
  ASSERT_TRUE(finishes_within(reader, 5000ms));
  reader.get();
  EXPECT_TRUE(same(seen, kernel)) << "host_view() saw the host copy before the copy from the device";
}

TEST_F(UnifiedBufferAsync, PinnedSyncToDeviceReturnsAtOnceAndAHostWriteWaitsForTheCopy)
{
  auto const old_data = pattern<u32>(elements, 32);
  auto const new_data = pattern<u32>(elements, 33);
  unified_buffer<u32> b{elements, {.pinned = true, .device_resource = &device_pool_}};
  std::ranges::fill(b.host(), 0U);
  u32 const* device_copy = b.device_view(stream_);  // SYNCHRONIZED; the device copy stays where it is
  std::ranges::copy(old_data, b.host().begin());     // HOST_DIRTY
  stream_.synchronize();

  std::atomic<bool> written{false};
  std::future<void> sync;
  std::future<void> writer;
  stream_hold hold{stream_};
  sync = start([&] { b.sync_to_device(stream_); });  // one asynchronous copy that reads the host copy
  ASSERT_TRUE(finishes_within(sync, 2000ms)) << "a pinned sync_to_device waited for the stream";
  sync.get();
  EXPECT_EQ(b.state(), buffer_state::SYNCHRONIZED);
  writer = start([&] {
    std::ranges::copy(new_data, b.host().begin());
    written = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(written.load()) << "host() returned while a copy still read the host copy";
  hold.release();
  ASSERT_TRUE(finishes_within(writer, 5000ms));
  writer.get();
  EXPECT_EQ(b.state(), buffer_state::HOST_DIRTY);
  EXPECT_TRUE(same(device_read(device_copy, elements, stream_), old_data))
    << "the device did not get the data the host copy held at sync_to_device";
  EXPECT_TRUE(same(b.host_view(), new_data));
  expect_contents(b, new_data, stream_);
}

TEST_F(UnifiedBufferAsync, PageableSyncToHostReturnsWhenTheDataAreThere)
{
  auto const kernel = pattern<u32>(elements, 34);
  unified_buffer<u32> b{elements, {.device_resource = &device_pool_}};
  std::ranges::fill(b.host(), 0U);
  device_write(b.device(stream_), kernel, stream_);
  b.mark_device_dirty();
  std::future<void> sync;
  {
    stream_hold hold{stream_};
    sync = start([&] { b.sync_to_host(stream_); });
    EXPECT_FALSE(finishes_within(sync, 50ms)) << "a pageable sync_to_host returned before its copy";
  }
  sync.get();
  EXPECT_EQ(b.state(), buffer_state::SYNCHRONIZED);
  EXPECT_TRUE(same(b.host_view(), kernel));
}

TEST_F(UnifiedBufferAsync, DestructionNeverFreesAHostCopyThatACopyStillReads)
{
  // Destruction may wait for the copy or hand the block back in stream order; either way the pool must not
  // hand the block out again while the held copy may still read it.
  mr::pinned_memory_pool pool{{.chunk_size = std::size_t{2} << 20U}};
  std::size_t const bytes = elements * sizeof(u32);
  auto b = std::make_unique<unified_buffer<u32>>(
    elements, unified_options{.pinned = true, .device_resource = &device_pool_, .pinned_pool = &pool});
  std::ranges::copy(pattern<u32>(elements, 35), b->host().begin());
  void const* host = b->host_view().data();
  std::future<void> destroy;
  stream_hold hold{stream_};
  b->sync_to_device(stream_);
  destroy = start([&b] { b.reset(); });
  if (finishes_within(destroy, 50ms)) {  // did not wait: the block must be pending
    EXPECT_GE(pool.usage().pending, bytes);
    void* again = pool.allocate(bytes);
    EXPECT_NE(again, host) << "the host copy was reused while a copy still read it";
    pool.deallocate(again, bytes);
  }
  hold.release();
  ASSERT_TRUE(finishes_within(destroy, 5000ms));
  destroy.get();
  stream_.synchronize();
  pool.wait_pending();
  EXPECT_EQ(pool.usage().in_use, 0U);
  EXPECT_EQ(pool.usage().pending, 0U);
}

}  // namespace
}  // namespace gpumem
