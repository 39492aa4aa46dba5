// device_scalar<T>: construction with and without an initial value, value round trips, asynchronous sets
// and their ordering on a stream, zeroing, deep copy on another stream, moves, the resource and stream it
// frees to, out-of-memory, and the compile-time contract (rvalue async set deleted, element types).
#include <gpumem/backend/backend.hpp>
#include <gpumem/buffer/device_scalar.hpp>
#include <gpumem/cuda_stream.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/align.hpp>

#include "support/counting_resource.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

namespace gpumem {
namespace {

using test::counting_resource;

struct pair_of {
  std::int32_t first;
  float second;
  friend bool operator==(pair_of const&, pair_of const&) = default;
};

template <class T>
concept scalar_of = requires { typename device_scalar<T>; };
static_assert(scalar_of<int> && scalar_of<pair_of>);
static_assert(!scalar_of<std::string>);

struct alignas(512) aligned_512 {
  std::byte bytes[512];
};
static_assert(!scalar_of<aligned_512>, "256-byte-aligned storage cannot hold a 512-byte-aligned value");

template <class S>
concept set_async_from_rvalue = requires(S s, cuda_stream_view v) { s.set_value_async(typename S::value_type{}, v); };
template <class S>
concept set_async_from_lvalue =
  requires(S s, typename S::value_type const& x, cuda_stream_view v) { s.set_value_async(x, v); };
static_assert(set_async_from_lvalue<device_scalar<int>>);
static_assert(!set_async_from_rvalue<device_scalar<int>>, "an rvalue would die before the async copy reads it");
static_assert(!std::is_copy_constructible_v<device_scalar<int>>);
static_assert(std::is_nothrow_move_constructible_v<device_scalar<int>>);
static_assert(device_scalar<int>::size() == 1);

class DeviceScalarTest : public ::testing::Test {
 protected:
  void TearDown() override { resource_.expect_everything_returned(); }

  cuda_stream stream_{cuda_stream::flags::non_blocking};
  counting_resource resource_;
};

TEST_F(DeviceScalarTest, ConstructWithoutValueThenSetAndRead)
{
  {
    device_scalar<std::int64_t> s{stream_, &resource_};
    ASSERT_NE(s.data(), nullptr);
    EXPECT_TRUE(detail::is_aligned(s.data(), detail::allocation_alignment));
    EXPECT_EQ(s.stream(), stream_.view());
    EXPECT_EQ(s.memory_resource(), &resource_);
    EXPECT_EQ(resource_.bytes_allocated(), sizeof(std::int64_t));

    std::int64_t const value = -1234567890123;
    s.set_value_async(value, stream_);
    EXPECT_EQ(s.value(stream_), value);
  }
  ASSERT_EQ(resource_.deallocations(), 1U);
  EXPECT_EQ(resource_.deallocation_log().front().stream, stream_.view());
}

TEST_F(DeviceScalarTest, InitialValueMayBeATemporary)
{
  device_scalar<pair_of> const s{pair_of{7, 2.5F}, stream_, &resource_};
  EXPECT_EQ(s.value(stream_), (pair_of{7, 2.5F}));
  device_scalar<int> const on_default{42, cuda_stream_default, &resource_};
  EXPECT_EQ(on_default.value(cuda_stream_default), 42);
}

TEST_F(DeviceScalarTest, ValueIsReadThroughTheDevicePointer)
{
  device_scalar<std::uint32_t> s{0xDEADBEEFU, stream_, &resource_};
  std::uint32_t host = 0;
  detail::get_backend().memcpy_async(&host, s.data(), sizeof(host), stream_.value());
  stream_.synchronize();
  EXPECT_EQ(host, 0xDEADBEEFU);

  std::uint32_t const written = 0x01234567U;
  detail::get_backend().memcpy_async(s.data(), &written, sizeof(written), stream_.value());
  EXPECT_EQ(s.value(stream_), written);
}

TEST_F(DeviceScalarTest, AsyncSetsAndZeroingAreOrderedOnTheStream)
{
  device_scalar<double> s{1.0, stream_, &resource_};
  double const a = 2.0;
  double const b = 3.0;
  s.set_value_async(a, stream_);
  s.set_value_to_zero_async(stream_);
  s.set_value_async(b, stream_);
  EXPECT_EQ(s.value(stream_), b);

  s.set_value_async(a, stream_);
  s.set_value_to_zero_async(stream_);
  EXPECT_EQ(s.value(stream_), 0.0);
}

TEST_F(DeviceScalarTest, DeepCopyOnAnotherStream)
{
  cuda_stream other{cuda_stream::flags::non_blocking};  // declared first: buffers on it must be destroyed before it
  device_scalar<int> original{5, stream_, &resource_};
  device_scalar<int> const copy{original, other, &resource_};
  EXPECT_NE(copy.data(), original.data());
  EXPECT_EQ(copy.stream(), other.view());
  EXPECT_EQ(copy.value(other), 5);
  original.set_value_to_zero_async(stream_);
  EXPECT_EQ(original.value(stream_), 0);
  EXPECT_EQ(copy.value(other), 5);
}

TEST_F(DeviceScalarTest, MoveTransfersTheMemory)
{
  device_scalar<int> source{9, stream_, &resource_};
  int const* const memory = source.data();
  device_scalar<int> target{std::move(source)};
  EXPECT_EQ(target.data(), memory);
  EXPECT_EQ(target.value(stream_), 9);
  EXPECT_EQ(source.data(), nullptr);  // NOLINT(bugprone-use-after-move)
  EXPECT_THROW((void)source.value(stream_), logic_error);  // NOLINT(bugprone-use-after-move)

  device_scalar<int> assigned{1, stream_, &resource_};
  assigned = std::move(target);
  EXPECT_EQ(assigned.value(stream_), 9);
  EXPECT_EQ(resource_.deallocations(), 1U);
}

TEST_F(DeviceScalarTest, SetStreamChangesWhereTheMemoryIsFreed)
{
  cuda_stream other{cuda_stream::flags::non_blocking};
  {
    device_scalar<int> s{3, stream_, &resource_};
    s.set_stream(other);
    EXPECT_EQ(s.stream(), other.view());
    EXPECT_EQ(s.value(other), 3);
  }
  ASSERT_EQ(resource_.deallocations(), 1U);
  EXPECT_EQ(resource_.deallocation_log().front().stream, other.view());
}

TEST_F(DeviceScalarTest, OutOfMemoryPropagatesAndLeaksNothing)
{
  resource_.set_limit(0);
  EXPECT_THROW((device_scalar<int>{stream_, &resource_}), out_of_memory);
  EXPECT_THROW((device_scalar<int>{1, stream_, &resource_}), out_of_memory);
  EXPECT_EQ(resource_.allocations(), 0U);
}

}  // namespace
}  // namespace gpumem
