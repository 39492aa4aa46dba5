// device_uvector<T>: typed construction (size, deep copy, host span), host round trips, element access and
// its ordering on a stream, resize/reserve/shrink_to_fit/release, moves, the resource and stream it frees
// to, out-of-memory and size overflow, and the compile-time rejection of unsuitable element types.
#include <gpumem/backend/backend.hpp>
#include <gpumem/buffer/device_uvector.hpp>
#include <gpumem/cuda_stream.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/align.hpp>

#include "support/counting_resource.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace gpumem {
namespace {

using test::counting_resource;
using ::testing::HasSubstr;

// ---- compile-time contract ----------------------------------------------------------------------

struct pod {
  std::int32_t a;
  double b;
  friend bool operator==(pod const&, pod const&) = default;
};

/// Trivially copyable but not default-constructible: element() must still work.
struct no_default {
  explicit no_default(int v) : value{v} {}
  int value;
  friend bool operator==(no_default const&, no_default const&) = default;
};

template <class T>
concept uvector_of = requires { typename device_uvector<T>; };

static_assert(uvector_of<int> && uvector_of<pod> && uvector_of<no_default> && uvector_of<bool>);
static_assert(!uvector_of<std::string>, "non-trivially-copyable elements are rejected");
static_assert(!uvector_of<std::vector<int>>);
static_assert(!uvector_of<int const>, "cv-qualified elements are rejected");

struct alignas(256) aligned_256 {
  std::byte bytes[256];
};
struct alignas(512) aligned_512 {
  std::byte bytes[512];
};
static_assert(uvector_of<aligned_256>, "256 bytes is the alignment every device resource guarantees");
static_assert(!uvector_of<aligned_512>, "on 256-byte-aligned storage every other element would be misaligned");

template <class V>
concept set_async_from_rvalue = requires(V v, cuda_stream_view s) { v.set_element_async(0, typename V::value_type{}, s); };
template <class V>
concept set_async_from_lvalue =
  requires(V v, typename V::value_type const& x, cuda_stream_view s) { v.set_element_async(0, x, s); };
template <class V>
concept set_sync_from_rvalue = requires(V v, cuda_stream_view s) { v.set_element(0, typename V::value_type{}, s); };

static_assert(set_async_from_lvalue<device_uvector<int>>);
static_assert(!set_async_from_rvalue<device_uvector<int>>, "an rvalue would die before the async copy reads it");
static_assert(set_sync_from_rvalue<device_uvector<int>>, "the synchronous setter accepts temporaries");

static_assert(!std::is_copy_constructible_v<device_uvector<int>>);
static_assert(std::is_nothrow_move_constructible_v<device_uvector<int>>);
static_assert(std::is_nothrow_move_assignable_v<device_uvector<int>>);
static_assert(std::is_same_v<device_uvector<int>::iterator, int*>);
static_assert(std::is_same_v<device_uvector<int>::const_iterator, int const*>);

// ---- helpers ------------------------------------------------------------------------------------

std::vector<std::int32_t> make_ints(std::size_t n, std::int32_t seed)
{
  std::vector<std::int32_t> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = static_cast<std::int32_t>((static_cast<std::int64_t>(i) * 2654435761LL + seed) % 1000003);
  }
  return out;
}

template <class T>
std::vector<T> head(std::vector<T> const& v, std::size_t n)
{
  return {v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n)};
}

class DeviceUvectorTest : public ::testing::Test {
 protected:
  void TearDown() override { resource_.expect_everything_returned(); }

  cuda_stream stream_{cuda_stream::flags::non_blocking};
  counting_resource resource_;
};

// ---- construction -------------------------------------------------------------------------------

TEST_F(DeviceUvectorTest, SizeConstructor)
{
  {
    device_uvector<double> const v{100, stream_, &resource_};
    EXPECT_EQ(v.size(), 100U);
    EXPECT_EQ(v.ssize(), 100);
    EXPECT_EQ(v.capacity(), 100U);
    EXPECT_FALSE(v.is_empty());
    ASSERT_NE(v.data(), nullptr);
    EXPECT_TRUE(detail::is_aligned(v.data(), detail::allocation_alignment));
    EXPECT_EQ(v.begin(), v.data());
    EXPECT_EQ(v.end() - v.begin(), 100);
    EXPECT_EQ(v.cend() - v.cbegin(), 100);
    EXPECT_EQ(v.stream(), stream_.view());
    EXPECT_EQ(v.memory_resource(), &resource_);
    EXPECT_EQ(resource_.bytes_allocated(), 100 * sizeof(double));
  }
  ASSERT_EQ(resource_.deallocations(), 1U);
  EXPECT_EQ(resource_.deallocation_log().front().stream, stream_.view());
}

TEST_F(DeviceUvectorTest, ZeroSize)
{
  device_uvector<int> v{0, stream_, &resource_};
  EXPECT_TRUE(v.is_empty());
  EXPECT_EQ(v.size(), 0U);
  EXPECT_EQ(v.capacity(), 0U);
  EXPECT_EQ(v.data(), nullptr);
  EXPECT_EQ(v.begin(), v.end());
  EXPECT_TRUE(v.to_host(stream_).empty());
  std::vector<int> none;
  v.copy_to_host(none, stream_);
  EXPECT_THROW((void)v.front_element(stream_), out_of_range);
  EXPECT_THROW((void)v.back_element(stream_), out_of_range);
  device_uvector<int> const from_empty_span{std::span<int const>{}, stream_, &resource_};
  EXPECT_TRUE(from_empty_span.is_empty());
  EXPECT_EQ(resource_.allocations(), 0U);
}

TEST_F(DeviceUvectorTest, HostSpanRoundTripOfAMillionInts)
{
  auto const host = make_ints(1'000'000, 1);
  device_uvector<std::int32_t> const v{host, stream_, &resource_};
  EXPECT_EQ(v.size(), host.size());
  EXPECT_EQ(v.to_host(stream_), host);

  std::vector<std::int32_t> back(host.size(), -1);
  v.copy_to_host(back, stream_);
  EXPECT_EQ(back, host);
  EXPECT_EQ(v.element(0, stream_), host[0]);
  EXPECT_EQ(v.element(123'456, stream_), host[123'456]);
  EXPECT_EQ(v.back_element(stream_), host.back());
}

TEST_F(DeviceUvectorTest, StructElements)
{
  std::vector<pod> const host{{1, 1.5}, {-2, 2.25}, {3, -3.125}};
  device_uvector<pod> const v{host, stream_, &resource_};
  EXPECT_EQ(v.to_host(stream_), host);
  EXPECT_EQ(v.element(1, stream_), (pod{-2, 2.25}));
}

TEST_F(DeviceUvectorTest, ElementTypeWithoutDefaultConstructor)
{
  std::vector<no_default> const host{no_default{7}, no_default{8}, no_default{9}};
  device_uvector<no_default> v{host, stream_, &resource_};
  EXPECT_EQ(v.element(2, stream_), no_default{9});
  v.set_element(0, no_default{70}, stream_);
  EXPECT_EQ(v.front_element(stream_), no_default{70});
  std::vector<no_default> back(3, no_default{0});
  v.copy_to_host(back, stream_);
  EXPECT_EQ(back, (std::vector<no_default>{no_default{70}, no_default{8}, no_default{9}}));
}

TEST_F(DeviceUvectorTest, DeepCopyOnAnotherStreamWithAnotherResource)
{
  cuda_stream other{cuda_stream::flags::non_blocking};  // declared first: buffers on it must be destroyed before it
  auto const host = make_ints(10'000, 2);
  device_uvector<std::int32_t> original{host, stream_, &resource_};
  stream_.synchronize();  // order the upload before the copy on `other`

  counting_resource other_resource;
  {
    device_uvector<std::int32_t> const copy{original, other, &other_resource};
    EXPECT_NE(copy.data(), original.data());
    EXPECT_EQ(copy.size(), host.size());
    EXPECT_EQ(copy.stream(), other.view());
    EXPECT_EQ(copy.memory_resource(), &other_resource);
    EXPECT_EQ(copy.to_host(other), host);

    original.set_element(5, -1, stream_);
    EXPECT_EQ(original.element(5, stream_), -1);
    EXPECT_EQ(copy.element(5, other), host[5]);
  }
  auto const log = other_resource.deallocation_log();
  ASSERT_EQ(log.size(), 1U);
  EXPECT_EQ(log.front().stream, other.view());
  EXPECT_EQ(other_resource.outstanding(), 0U);
}

TEST_F(DeviceUvectorTest, MoveLeavesTheSourceEmpty)
{
  auto const host = make_ints(50, 3);
  device_uvector<std::int32_t> source{host, stream_, &resource_};
  auto const* const memory = source.data();

  device_uvector<std::int32_t> target{std::move(source)};
  EXPECT_EQ(target.data(), memory);
  EXPECT_EQ(target.to_host(stream_), host);
  // NOLINTBEGIN(bugprone-use-after-move): the moved-from state is specified
  EXPECT_TRUE(source.is_empty());
  EXPECT_EQ(source.data(), nullptr);
  EXPECT_EQ(source.capacity(), 0U);

  device_uvector<std::int32_t> assigned{7, stream_, &resource_};
  assigned = std::move(target);
  EXPECT_EQ(assigned.data(), memory);
  EXPECT_EQ(assigned.to_host(stream_), host);
  EXPECT_TRUE(target.is_empty());
  EXPECT_EQ(resource_.deallocations(), 1U);  // the 7 elements `assigned` had
  EXPECT_EQ(resource_.deallocation_log().front().bytes, 7 * sizeof(std::int32_t));

  source.resize(3, stream_);  // a moved-from vector is usable
  source.set_element(2, 42, stream_);
  EXPECT_EQ(source.element(2, stream_), 42);
  // NOLINTEND(bugprone-use-after-move)
}

// ---- size and capacity --------------------------------------------------------------------------

TEST_F(DeviceUvectorTest, ResizeDownThenUpKeepsContents)
{
  auto const host = make_ints(1000, 4);
  device_uvector<std::int32_t> v{host, stream_, &resource_};
  auto* const memory = v.data();

  v.resize(300, stream_);
  EXPECT_EQ(v.size(), 300U);
  EXPECT_EQ(v.capacity(), 1000U);
  EXPECT_EQ(v.data(), memory);
  EXPECT_EQ(v.to_host(stream_), head(host, 300));

  v.resize(5000, stream_);
  EXPECT_EQ(v.size(), 5000U);
  EXPECT_EQ(v.capacity(), 5000U);
  EXPECT_EQ(resource_.allocations(), 2U);
  EXPECT_EQ(head(v.to_host(stream_), 300), head(host, 300));
}

TEST_F(DeviceUvectorTest, ReserveAndShrinkToFit)
{
  auto const host = make_ints(64, 5);
  device_uvector<std::int32_t> v{host, stream_, &resource_};
  v.reserve(10, stream_);
  EXPECT_EQ(v.capacity(), 64U);
  EXPECT_EQ(resource_.allocations(), 1U);

  v.reserve(1024, stream_);
  EXPECT_EQ(v.size(), 64U);
  EXPECT_EQ(v.capacity(), 1024U);
  auto* const reserved = v.data();
  v.resize(1000, stream_);
  EXPECT_EQ(v.data(), reserved);
  EXPECT_EQ(resource_.allocations(), 2U);
  EXPECT_EQ(head(v.to_host(stream_), 64), host);

  v.resize(64, stream_);
  v.shrink_to_fit(stream_);
  EXPECT_EQ(v.capacity(), 64U);
  EXPECT_EQ(resource_.allocations(), 3U);
  EXPECT_EQ(v.to_host(stream_), host);
}

TEST_F(DeviceUvectorTest, ReleaseHandsOverTheMemoryAsABuffer)
{
  auto const host = make_ints(100, 6);
  device_uvector<std::int32_t> v{host, stream_, &resource_};
  auto const* const memory = v.data();
  {
    device_buffer const buffer = v.release();
    EXPECT_TRUE(v.is_empty());  // NOLINT(bugprone-use-after-move)
    EXPECT_EQ(v.data(), nullptr);
    EXPECT_EQ(buffer.data(), memory);
    EXPECT_EQ(buffer.size(), 100 * sizeof(std::int32_t));
    EXPECT_EQ(buffer.memory_resource(), &resource_);
    std::vector<std::int32_t> back(100);
    detail::get_backend().memcpy_async(back.data(), buffer.data(), buffer.size(), stream_.value());
    stream_.synchronize();
    EXPECT_EQ(back, host);
    EXPECT_EQ(resource_.deallocations(), 0U);
  }
  EXPECT_EQ(resource_.deallocations(), 1U);  // the buffer freed it, once
}

// ---- element access -----------------------------------------------------------------------------

TEST_F(DeviceUvectorTest, ElementAccessors)
{
  device_uvector<std::int64_t> v{4, stream_, &resource_};
  v.set_element(0, 10, stream_);
  v.set_element(1, 11, stream_);
  v.set_element(2, -12, stream_);
  v.set_element(3, std::numeric_limits<std::int64_t>::max(), stream_);
  EXPECT_EQ(v.front_element(stream_), 10);
  EXPECT_EQ(v.element(1, stream_), 11);
  EXPECT_EQ(v.element(2, stream_), -12);
  EXPECT_EQ(v.back_element(stream_), std::numeric_limits<std::int64_t>::max());

  v.set_element_to_zero_async(3, stream_);
  EXPECT_EQ(v.back_element(stream_), 0);
  EXPECT_EQ(v.to_host(stream_), (std::vector<std::int64_t>{10, 11, -12, 0}));
}

TEST_F(DeviceUvectorTest, SetElementAsyncIsOrderedOnTheStream)
{
  // The upload from the constructor, the element writes and the memsets are all enqueued on one stream
  // without waiting in between; in-order execution means each later write wins.
  auto const host = make_ints(200'000, 7);
  device_uvector<std::int32_t> v{host, stream_, &resource_};
  std::int32_t const first = -1;
  std::int32_t const second = -2;
  std::int32_t const third = -3;
  v.set_element_async(199'999, first, stream_);   // after the bulk upload of element 199'999
  v.set_element_async(0, first, stream_);
  v.set_element_async(0, second, stream_);        // overwrites `first`
  v.set_element_to_zero_async(1, stream_);
  v.set_element_async(1, third, stream_);         // after the memset
  v.set_element_async(2, third, stream_);
  v.set_element_to_zero_async(2, stream_);        // after the copy

  EXPECT_EQ(v.element(0, stream_), second);
  EXPECT_EQ(v.element(1, stream_), third);
  EXPECT_EQ(v.element(2, stream_), 0);
  EXPECT_EQ(v.back_element(stream_), first);

  auto expected = host;
  expected[0] = second;
  expected[1] = third;
  expected[2] = 0;
  expected[199'999] = first;
  EXPECT_EQ(v.to_host(stream_), expected);
}

TEST_F(DeviceUvectorTest, OutOfRangeAccessNamesTheIndexAndTheSize)
{
  device_uvector<std::int32_t> v{5, stream_, &resource_};
  std::int32_t const value = 1;
  auto expect_out_of_range = [](auto&& access, std::string const& index) {
    try {
      access();
      ADD_FAILURE() << "no exception for index " << index;
    } catch (std::out_of_range const& e) {  // gpumem::out_of_range, RMM's type (a std::out_of_range)
      EXPECT_THAT(e.what(), HasSubstr("index " + index));
      EXPECT_THAT(e.what(), HasSubstr("size 5"));
    }
  };
  expect_out_of_range([&] { (void)v.element(5, stream_); }, "5");
  expect_out_of_range([&] { (void)v.element(1000, stream_); }, "1000");
  expect_out_of_range([&] { v.set_element_async(5, value, stream_); }, "5");
  expect_out_of_range([&] { v.set_element(7, value, stream_); }, "7");
  expect_out_of_range([&] { v.set_element_to_zero_async(6, stream_); }, "6");
  expect_out_of_range([&] { (void)v.element_ptr(5); }, "5");
  expect_out_of_range([&] { (void)std::as_const(v).element_ptr(9); }, "9");
  EXPECT_NO_THROW((void)v.element(4, stream_));
}

TEST_F(DeviceUvectorTest, CopyToHostSizeMismatchNamesBothSizes)
{
  device_uvector<std::int32_t> const v{7, stream_, &resource_};
  std::vector<std::int32_t> wrong(11);
  try {
    v.copy_to_host(wrong, stream_);
    ADD_FAILURE() << "no exception";
  } catch (logic_error const& e) {
    EXPECT_THAT(e.what(), HasSubstr("11"));
    EXPECT_THAT(e.what(), HasSubstr("7"));
  }
}

// ---- streams, resources, failures ---------------------------------------------------------------

TEST_F(DeviceUvectorTest, SetStreamChangesWhereTheMemoryIsFreed)
{
  cuda_stream other{cuda_stream::flags::non_blocking};
  {
    device_uvector<float> v{256, stream_, &resource_};
    stream_.synchronize();
    v.set_stream(other);
    EXPECT_EQ(v.stream(), other.view());
  }
  ASSERT_EQ(resource_.deallocations(), 1U);
  EXPECT_EQ(resource_.deallocation_log().front().stream, other.view());
}

TEST_F(DeviceUvectorTest, OutOfMemoryPropagatesAndLeaksNothing)
{
  resource_.set_limit(4096);
  EXPECT_THROW((device_uvector<std::int32_t>{2048, stream_, &resource_}), out_of_memory);
  auto const host = make_ints(2048, 8);
  EXPECT_THROW((device_uvector<std::int32_t>{host, stream_, &resource_}), out_of_memory);

  auto const small = make_ints(1000, 9);
  device_uvector<std::int32_t> v{small, stream_, &resource_};
  EXPECT_THROW(v.resize(2000, stream_), out_of_memory);
  EXPECT_THROW((device_uvector<std::int32_t>{v, stream_, &resource_}.resize(1025, stream_)), out_of_memory);
  EXPECT_EQ(v.size(), 1000U);
  EXPECT_EQ(v.to_host(stream_), small);
  EXPECT_EQ(resource_.outstanding(), 1U);

  // The real resource runs out too: 4 Ti elements of 4 bytes.
  EXPECT_THROW((device_uvector<std::int32_t>{std::size_t{1} << 42, stream_}), out_of_memory);
}

TEST_F(DeviceUvectorTest, ElementCountOverflowIsBadAllocNotOutOfMemory)
{
  std::size_t const too_many = std::numeric_limits<std::size_t>::max() / sizeof(std::int64_t) + 1;
  try {
    device_uvector<std::int64_t> const v{too_many, stream_, &resource_};
    ADD_FAILURE() << "no exception";
  } catch (out_of_memory const&) {
    ADD_FAILURE() << "overflow is not exhausted memory";
  } catch (bad_alloc const& e) {
    EXPECT_THAT(e.what(), HasSubstr(std::to_string(too_many)));
  }
  device_uvector<std::int64_t> v{1, stream_, &resource_};
  EXPECT_THROW(v.reserve(too_many, stream_), bad_alloc);
  EXPECT_EQ(resource_.allocations(), 1U);
}

}  // namespace
}  // namespace gpumem
