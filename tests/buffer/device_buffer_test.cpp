// device_buffer: construction of each kind, copies, moves, resize/reserve/shrink_to_fit, streams, the
// resource and device it frees to, and out-of-memory. Contents are only touched through the backend's
// memcpy, so these tests hold on a real GPU as well as on the host backend.
#include <gpumem/backend/backend.hpp>
#include <gpumem/buffer/device_buffer.hpp>
#include <gpumem/cuda_device_id.hpp>
#include <gpumem/cuda_stream.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/per_device_resource.hpp>

#include "support/counting_resource.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace gpumem {
namespace {

using test::counting_resource;

static_assert(!std::is_copy_constructible_v<device_buffer>);
static_assert(!std::is_copy_assignable_v<device_buffer>);
static_assert(std::is_nothrow_move_constructible_v<device_buffer>);
static_assert(std::is_nothrow_move_assignable_v<device_buffer>);
static_assert(std::is_nothrow_destructible_v<device_buffer>);

/// Bytes that differ between seeds and do not repeat with a short period (catches copies from a wrong offset).
std::vector<std::uint8_t> make_pattern(std::size_t bytes, std::uint32_t seed)
{
  std::vector<std::uint8_t> out(bytes);
  for (std::size_t i = 0; i < bytes; ++i) {
    std::uint64_t const h = (i + 1) * 0x9E3779B97F4A7C15ULL + seed * 0xBF58476D1CE4E5B9ULL;
    out[i] = static_cast<std::uint8_t>(h >> 56);
  }
  return out;
}

void upload(void* dst, std::vector<std::uint8_t> const& src, cuda_stream_view stream)
{
  detail::get_backend().memcpy_async(dst, src.data(), src.size(), stream.value());
  detail::get_backend().stream_synchronize(stream.value());
}

std::vector<std::uint8_t> download(void const* src, std::size_t bytes, cuda_stream_view stream)
{
  std::vector<std::uint8_t> out(bytes);
  if (bytes != 0) { detail::get_backend().memcpy_async(out.data(), src, bytes, stream.value()); }
  detail::get_backend().stream_synchronize(stream.value());
  return out;
}

std::vector<std::uint8_t> prefix(std::vector<std::uint8_t> const& v, std::size_t n)
{
  return {v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n)};
}

class DeviceBufferTest : public ::testing::Test {
 protected:
  void TearDown() override { resource_.expect_everything_returned(); }

  cuda_stream stream_{cuda_stream::flags::non_blocking};
  counting_resource resource_;
};

TEST_F(DeviceBufferTest, DefaultConstructedIsEmpty)
{
  device_buffer const buffer;
  EXPECT_EQ(buffer.data(), nullptr);
  EXPECT_EQ(buffer.size(), 0U);
  EXPECT_EQ(buffer.ssize(), 0);
  EXPECT_EQ(buffer.capacity(), 0U);
  EXPECT_TRUE(buffer.is_empty());
  EXPECT_EQ(buffer.stream(), cuda_stream_default);
  EXPECT_EQ(buffer.memory_resource(), mr::get_current_device_resource());
  EXPECT_EQ(buffer.device(), get_current_cuda_device());
}

TEST_F(DeviceBufferTest, SizeConstructorAllocatesFromTheResourceOnTheStream)
{
  std::size_t const bytes = 1000;
  {
    device_buffer buffer{bytes, stream_, &resource_};
    ASSERT_NE(buffer.data(), nullptr);
    EXPECT_TRUE(detail::is_aligned(buffer.data(), detail::allocation_alignment));
    EXPECT_EQ(buffer.size(), bytes);
    EXPECT_EQ(buffer.ssize(), 1000);
    EXPECT_EQ(buffer.capacity(), bytes);
    EXPECT_FALSE(buffer.is_empty());
    EXPECT_EQ(buffer.stream(), stream_.view());
    EXPECT_EQ(buffer.memory_resource(), &resource_);
    EXPECT_EQ(buffer.device(), get_current_cuda_device());
    EXPECT_EQ(resource_.allocations(), 1U);
    EXPECT_EQ(resource_.bytes_allocated(), bytes);

    auto const pattern = make_pattern(bytes, 1);
    upload(buffer.data(), pattern, stream_);
    EXPECT_EQ(download(buffer.data(), bytes, stream_), pattern);
    EXPECT_EQ(resource_.deallocations(), 0U);
  }
  ASSERT_EQ(resource_.deallocations(), 1U);
  auto const freed = resource_.deallocation_log().front();
  EXPECT_EQ(freed.bytes, bytes);
  EXPECT_EQ(freed.stream, stream_.view());
}

TEST_F(DeviceBufferTest, ZeroSizeAllocatesNothing)
{
  {
    device_buffer buffer{0, stream_, &resource_};
    EXPECT_EQ(buffer.data(), nullptr);
    EXPECT_EQ(buffer.size(), 0U);
    EXPECT_EQ(buffer.capacity(), 0U);
    EXPECT_TRUE(buffer.is_empty());
    device_buffer const copy{buffer, stream_, &resource_};
    EXPECT_EQ(copy.data(), nullptr);
    EXPECT_EQ(copy.size(), 0U);
  }
  EXPECT_EQ(resource_.allocations(), 0U);
  EXPECT_EQ(resource_.deallocations(), 0U);
}

TEST_F(DeviceBufferTest, ConstructorCopiesFromHostMemory)
{
  auto const pattern = make_pattern(4097, 2);
  device_buffer const buffer{pattern.data(), pattern.size(), stream_, &resource_};
  EXPECT_EQ(buffer.size(), pattern.size());
  EXPECT_EQ(buffer.capacity(), pattern.size());
  EXPECT_EQ(download(buffer.data(), buffer.size(), stream_), pattern);
}

TEST_F(DeviceBufferTest, ConstructorCopiesFromDeviceMemory)
{
  auto const pattern = make_pattern(3000, 3);
  device_buffer const source{pattern.data(), pattern.size(), stream_, &resource_};
  device_buffer const buffer{source.data(), 1500, stream_, &resource_};
  EXPECT_EQ(buffer.size(), 1500U);
  EXPECT_EQ(download(buffer.data(), 1500, stream_), prefix(pattern, 1500));
}

TEST_F(DeviceBufferTest, NullSourceWithNonZeroSizeIsALogicError)
{
  EXPECT_THROW((device_buffer{nullptr, 16, stream_, &resource_}), logic_error);
  EXPECT_EQ(resource_.allocations(), 0U);  // checked before allocating
  device_buffer const empty{nullptr, 0, stream_, &resource_};
  EXPECT_EQ(empty.data(), nullptr);
}

TEST_F(DeviceBufferTest, NullResourceIsALogicError)
{
  EXPECT_THROW((device_buffer{16, stream_, nullptr}), logic_error);
}

TEST_F(DeviceBufferTest, DeepCopyOnAnotherStreamWithAnotherResource)
{
  cuda_stream other{cuda_stream::flags::non_blocking};  // declared first: buffers on it must be destroyed before it
  auto const pattern = make_pattern(5000, 4);
  device_buffer original{pattern.data(), pattern.size(), stream_, &resource_};
  stream_.synchronize();  // order the write on stream_ before the copy on `other`

  counting_resource other_resource;
  {
    device_buffer copy{original, other, &other_resource};
    EXPECT_NE(copy.data(), original.data());
    EXPECT_EQ(copy.size(), original.size());
    EXPECT_EQ(copy.capacity(), original.size());
    EXPECT_EQ(copy.stream(), other.view());
    EXPECT_EQ(copy.memory_resource(), &other_resource);
    EXPECT_EQ(other_resource.allocations(), 1U);
    EXPECT_EQ(resource_.allocations(), 1U);  // only the original
    EXPECT_EQ(download(copy.data(), copy.size(), other), pattern);

    // A deep copy: overwriting the original leaves the copy as it was.
    detail::get_backend().memset_async(original.data(), 0, original.size(), stream_.value());
    EXPECT_EQ(download(original.data(), original.size(), stream_), std::vector<std::uint8_t>(pattern.size(), 0));
    EXPECT_EQ(download(copy.data(), copy.size(), other), pattern);
  }
  ASSERT_EQ(other_resource.deallocations(), 1U);
  EXPECT_EQ(other_resource.deallocation_log().front().stream, other.view());
  EXPECT_EQ(other_resource.outstanding(), 0U);
}

TEST_F(DeviceBufferTest, DeepCopyCopiesSizeNotCapacity)
{
  auto const pattern = make_pattern(512, 5);
  device_buffer original{pattern.data(), pattern.size(), stream_, &resource_};
  original.reserve(4096, stream_);
  device_buffer const copy{original, stream_, &resource_};
  EXPECT_EQ(copy.size(), 512U);
  EXPECT_EQ(copy.capacity(), 512U);
  EXPECT_EQ(download(copy.data(), copy.size(), stream_), pattern);
}

TEST_F(DeviceBufferTest, MoveConstructionLeavesTheSourceEmptyAndUsable)
{
  auto const pattern = make_pattern(777, 6);
  device_buffer source{pattern.data(), pattern.size(), stream_, &resource_};
  void* const memory = source.data();

  device_buffer target{std::move(source)};
  EXPECT_EQ(target.data(), memory);
  EXPECT_EQ(target.size(), 777U);
  EXPECT_EQ(target.capacity(), 777U);
  EXPECT_EQ(target.stream(), stream_.view());
  EXPECT_EQ(target.memory_resource(), &resource_);
  EXPECT_EQ(download(target.data(), target.size(), stream_), pattern);

  // NOLINTBEGIN(bugprone-use-after-move): the moved-from state is specified
  EXPECT_EQ(source.data(), nullptr);
  EXPECT_EQ(source.size(), 0U);
  EXPECT_EQ(source.capacity(), 0U);
  EXPECT_TRUE(source.is_empty());
  EXPECT_EQ(source.stream(), cuda_stream_default);
  EXPECT_EQ(source.memory_resource(), &resource_);

  // Still usable: growing allocates from the same resource.
  source.resize(64, stream_);
  EXPECT_EQ(source.size(), 64U);
  EXPECT_NE(source.data(), nullptr);
  EXPECT_EQ(resource_.allocations(), 2U);
  // NOLINTEND(bugprone-use-after-move)
}

TEST_F(DeviceBufferTest, MoveAssignmentFreesTheTargetsMemoryOnItsStream)
{
  cuda_stream other{cuda_stream::flags::non_blocking};
  auto const pattern = make_pattern(300, 7);
  device_buffer target{100, other, &resource_};
  void* const target_memory = target.data();
  device_buffer source{pattern.data(), pattern.size(), stream_, &resource_};

  target = std::move(source);
  ASSERT_EQ(resource_.deallocations(), 1U);
  auto const freed = resource_.deallocation_log().front();
  EXPECT_EQ(freed.ptr, target_memory);
  EXPECT_EQ(freed.bytes, 100U);
  EXPECT_EQ(freed.stream, other.view());

  EXPECT_EQ(target.size(), 300U);
  EXPECT_EQ(target.stream(), stream_.view());
  EXPECT_EQ(download(target.data(), target.size(), stream_), pattern);
  EXPECT_EQ(source.data(), nullptr);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(source.size(), 0U);       // NOLINT(bugprone-use-after-move)
}

TEST_F(DeviceBufferTest, SelfMoveAssignmentKeepsTheContents)
{
  auto const pattern = make_pattern(128, 8);
  device_buffer buffer{pattern.data(), pattern.size(), stream_, &resource_};
  device_buffer& alias = buffer;
  buffer = std::move(alias);
  EXPECT_EQ(buffer.size(), 128U);
  EXPECT_EQ(download(buffer.data(), buffer.size(), stream_), pattern);
  EXPECT_EQ(resource_.deallocations(), 0U);
}

TEST_F(DeviceBufferTest, ResizeDownKeepsCapacityMemoryAndContents)
{
  auto const pattern = make_pattern(1000, 9);
  device_buffer buffer{pattern.data(), pattern.size(), stream_, &resource_};
  void* const memory = buffer.data();

  buffer.resize(400, stream_);
  EXPECT_EQ(buffer.size(), 400U);
  EXPECT_EQ(buffer.capacity(), 1000U);
  EXPECT_EQ(buffer.data(), memory);
  EXPECT_EQ(resource_.allocations(), 1U);
  EXPECT_EQ(download(buffer.data(), 400, stream_), prefix(pattern, 400));

  // Growing back within the capacity does not reallocate either.
  buffer.resize(900, stream_);
  EXPECT_EQ(buffer.data(), memory);
  EXPECT_EQ(buffer.capacity(), 1000U);
  EXPECT_EQ(resource_.allocations(), 1U);
  EXPECT_EQ(download(buffer.data(), 400, stream_), prefix(pattern, 400));
}

TEST_F(DeviceBufferTest, ResizeUpReallocatesOnTheGivenStreamAndKeepsContents)
{
  cuda_stream other{cuda_stream::flags::non_blocking};  // declared first: buffers on it must be destroyed before it
  auto const pattern = make_pattern(500, 10);
  device_buffer buffer{pattern.data(), pattern.size(), stream_, &resource_};
  void* const old_memory = buffer.data();
  stream_.synchronize();  // the contents are complete before another stream reads them

  buffer.resize(3000, other);
  EXPECT_EQ(buffer.size(), 3000U);
  EXPECT_EQ(buffer.capacity(), 3000U);
  EXPECT_EQ(buffer.stream(), other.view());
  EXPECT_EQ(resource_.allocations(), 2U);
  ASSERT_EQ(resource_.deallocations(), 1U);
  auto const freed = resource_.deallocation_log().front();
  EXPECT_EQ(freed.ptr, old_memory);
  EXPECT_EQ(freed.bytes, 500U);
  EXPECT_EQ(freed.stream, other.view());  // freed where the copy that read it ran
  EXPECT_EQ(prefix(download(buffer.data(), 3000, other), 500), pattern);

  // The new bytes are writable.
  auto const tail = make_pattern(2500, 11);
  upload(static_cast<std::uint8_t*>(buffer.data()) + 500, tail, other);
  auto const all = download(buffer.data(), 3000, other);
  EXPECT_EQ(prefix(all, 500), pattern);
  EXPECT_EQ(std::vector<std::uint8_t>(all.begin() + 500, all.end()), tail);
}

TEST_F(DeviceBufferTest, ResizeToZeroKeepsTheMemory)
{
  device_buffer buffer{256, stream_, &resource_};
  buffer.resize(0, stream_);
  EXPECT_TRUE(buffer.is_empty());
  EXPECT_EQ(buffer.capacity(), 256U);
  EXPECT_NE(buffer.data(), nullptr);
  EXPECT_EQ(resource_.deallocations(), 0U);
}

TEST_F(DeviceBufferTest, ReserveGrowsCapacityOnlyAndKeepsContents)
{
  auto const pattern = make_pattern(600, 12);
  device_buffer buffer{pattern.data(), pattern.size(), stream_, &resource_};
  void* const memory = buffer.data();

  buffer.reserve(100, stream_);  // below the capacity: nothing happens
  EXPECT_EQ(buffer.data(), memory);
  EXPECT_EQ(buffer.capacity(), 600U);
  EXPECT_EQ(resource_.allocations(), 1U);

  buffer.reserve(10000, stream_);
  EXPECT_EQ(buffer.size(), 600U);
  EXPECT_EQ(buffer.capacity(), 10000U);
  EXPECT_EQ(resource_.allocations(), 2U);
  EXPECT_EQ(resource_.deallocations(), 1U);
  EXPECT_EQ(download(buffer.data(), buffer.size(), stream_), pattern);

  // Growing within the reserved capacity does not reallocate.
  void* const reserved = buffer.data();
  buffer.resize(9000, stream_);
  EXPECT_EQ(buffer.data(), reserved);
  EXPECT_EQ(resource_.allocations(), 2U);
  EXPECT_EQ(prefix(download(buffer.data(), 9000, stream_), 600), pattern);
}

TEST_F(DeviceBufferTest, ReserveOnAnEmptyBuffer)
{
  device_buffer buffer{0, stream_, &resource_};
  buffer.reserve(512, stream_);
  EXPECT_EQ(buffer.size(), 0U);
  EXPECT_EQ(buffer.capacity(), 512U);
  EXPECT_NE(buffer.data(), nullptr);
}

TEST_F(DeviceBufferTest, ShrinkToFitReallocatesToTheSizeAndKeepsContents)
{
  auto const pattern = make_pattern(2000, 13);
  device_buffer buffer{pattern.data(), pattern.size(), stream_, &resource_};
  buffer.resize(700, stream_);
  ASSERT_EQ(buffer.capacity(), 2000U);

  buffer.shrink_to_fit(stream_);
  EXPECT_EQ(buffer.size(), 700U);
  EXPECT_EQ(buffer.capacity(), 700U);
  EXPECT_EQ(resource_.allocations(), 2U);
  ASSERT_EQ(resource_.deallocations(), 1U);
  EXPECT_EQ(resource_.deallocation_log().front().bytes, 2000U);
  EXPECT_EQ(download(buffer.data(), buffer.size(), stream_), prefix(pattern, 700));

  buffer.shrink_to_fit(stream_);  // already fits: nothing happens
  EXPECT_EQ(resource_.allocations(), 2U);
}

TEST_F(DeviceBufferTest, ShrinkToFitOfAnEmptyBufferFreesItsMemory)
{
  device_buffer buffer{1024, stream_, &resource_};
  buffer.resize(0, stream_);
  buffer.shrink_to_fit(stream_);
  EXPECT_EQ(buffer.data(), nullptr);
  EXPECT_EQ(buffer.capacity(), 0U);
  EXPECT_EQ(resource_.deallocations(), 1U);
  EXPECT_EQ(resource_.allocations(), 1U);  // an empty allocation is no allocation
}

TEST_F(DeviceBufferTest, SetStreamChangesWhereTheMemoryIsFreed)
{
  cuda_stream other{cuda_stream::flags::non_blocking};
  {
    device_buffer buffer{4096, stream_, &resource_};
    stream_.synchronize();
    buffer.set_stream(other);
    EXPECT_EQ(buffer.stream(), other.view());
  }
  ASSERT_EQ(resource_.deallocations(), 1U);
  EXPECT_EQ(resource_.deallocation_log().front().stream, other.view());
}

TEST_F(DeviceBufferTest, OutOfMemoryAtConstructionPropagatesAndLeaksNothing)
{
  resource_.set_limit(1 << 20);
  EXPECT_THROW((device_buffer{2 << 20, stream_, &resource_}), out_of_memory);
  auto const pattern = make_pattern(1 << 20, 14);
  EXPECT_NO_THROW((device_buffer{pattern.data(), pattern.size(), stream_, &resource_}));
}

TEST_F(DeviceBufferTest, OutOfMemoryWhileGrowingLeavesTheBufferUnchanged)
{
  cuda_stream other{cuda_stream::flags::non_blocking};  // declared first: buffers on it must be destroyed before it
  auto const pattern = make_pattern(1000, 15);
  device_buffer buffer{pattern.data(), pattern.size(), stream_, &resource_};
  void* const memory = buffer.data();
  resource_.set_limit(4096);

  EXPECT_THROW(buffer.resize(8192, other), out_of_memory);
  EXPECT_THROW(buffer.reserve(8192, other), out_of_memory);
  EXPECT_EQ(buffer.data(), memory);
  EXPECT_EQ(buffer.size(), 1000U);
  EXPECT_EQ(buffer.capacity(), 1000U);
  EXPECT_EQ(buffer.stream(), stream_.view());  // strong guarantee: not even the stream changed
  EXPECT_EQ(resource_.outstanding(), 1U);
  EXPECT_EQ(download(buffer.data(), buffer.size(), stream_), pattern);
}

TEST_F(DeviceBufferTest, OutOfMemoryFromTheRealResourcePropagates)
{
  // 16 TiB: more than any device has, and more than the host backend's capacity.
  std::size_t const huge = std::size_t{1} << 44;
  EXPECT_THROW((device_buffer{huge, stream_, &resource_}), out_of_memory);
  EXPECT_THROW((device_buffer{huge, stream_}), out_of_memory);
  device_buffer buffer{64, stream_, &resource_};
  EXPECT_THROW(buffer.resize(huge, stream_), out_of_memory);
  EXPECT_EQ(buffer.size(), 64U);
  EXPECT_EQ(resource_.outstanding(), 1U);
}

TEST_F(DeviceBufferTest, WorksOnTheLegacyDefaultStream)
{
  auto const pattern = make_pattern(333, 16);
  {
    device_buffer buffer{pattern.data(), pattern.size(), cuda_stream_default, &resource_};
    device_buffer const copy{buffer, cuda_stream_default, &resource_};
    EXPECT_EQ(download(copy.data(), copy.size(), cuda_stream_default), pattern);
  }
  auto const log = resource_.deallocation_log();
  ASSERT_EQ(log.size(), 2U);
  EXPECT_EQ(log[0].stream, cuda_stream_default);
  EXPECT_EQ(log[1].stream, cuda_stream_default);
}

TEST_F(DeviceBufferTest, ReallocatesAndIsFreedWithItsOwnDeviceCurrent)
{
  if (get_num_cuda_devices() < 2) {
    GTEST_SKIP() << "needs two devices (on the host backend: GPUMEM_HOST_DEVICES=2)";
  }
  cuda_device_id const home{1};
  std::optional<counting_resource> home_resource;
  std::optional<device_buffer> buffer;
  {
    cuda_set_device_raii const guard{home};
    home_resource.emplace(mr::get_current_device_resource());
    buffer.emplace(std::size_t{4096}, cuda_stream_default, &*home_resource);
    EXPECT_EQ(buffer->device(), home);
  }
  ASSERT_NE(get_current_cuda_device(), home);
  auto const current = get_current_cuda_device();
  buffer->resize(8192, cuda_stream_default);  // reallocates on the buffer's device, not the current one
  buffer.reset();
  EXPECT_EQ(get_current_cuda_device(), current);  // and puts the current device back

  EXPECT_EQ(home_resource->allocation_devices(), (std::vector<int>{home.value(), home.value()}));
  auto const log = home_resource->deallocation_log();
  ASSERT_EQ(log.size(), 2U);
  EXPECT_EQ(log[0].device, home.value());
  EXPECT_EQ(log[1].device, home.value());
  EXPECT_EQ(home_resource->outstanding(), 0U);
  EXPECT_TRUE(home_resource->errors().empty());
}


// ---- alignment (RMM's aligned constructors) ------------------------------------------------------

TEST_F(DeviceBufferTest, DefaultAlignmentIsTheResourcesOwn)
{
  device_buffer const buffer{1000, stream_, &resource_};
  EXPECT_EQ(buffer.alignment(), detail::allocation_alignment);
  EXPECT_EQ(resource_.bytes_allocated(), 1000U) << "no padding at the resources' alignment";
}

TEST_F(DeviceBufferTest, AnAlignmentAboveTheResourcesIsHonouredAndKept)
{
  for (std::size_t const alignment : {std::size_t{512}, std::size_t{4096}, std::size_t{1} << 16}) {
    auto const pattern = make_pattern(3000, 7);
    device_buffer buffer{3000, alignment, stream_, &resource_};
    EXPECT_EQ(buffer.alignment(), alignment);
    EXPECT_TRUE(detail::is_aligned(buffer.data(), alignment)) << alignment;
    EXPECT_EQ(buffer.size(), 3000U);
    EXPECT_EQ(buffer.capacity(), 3000U);
    upload(buffer.data(), pattern, stream_);
    buffer.resize(50'000, stream_);  // reallocates: the alignment and the contents stay
    EXPECT_TRUE(detail::is_aligned(buffer.data(), alignment)) << alignment;
    EXPECT_EQ(prefix(download(buffer.data(), 50'000, stream_), 3000), pattern);
    buffer.resize(100, stream_);
    buffer.shrink_to_fit(stream_);
    EXPECT_TRUE(detail::is_aligned(buffer.data(), alignment));
    device_buffer const copy{buffer, stream_, &resource_};
    EXPECT_EQ(copy.alignment(), alignment) << "a copy keeps the alignment";
    EXPECT_TRUE(detail::is_aligned(copy.data(), alignment));
    EXPECT_EQ(download(copy.data(), 100, stream_), prefix(pattern, 100));
    device_buffer moved{std::move(buffer)};
    EXPECT_EQ(moved.alignment(), alignment);
    EXPECT_TRUE(detail::is_aligned(moved.data(), alignment));
  }
  EXPECT_EQ(resource_.outstanding(), 0U) << "every padded allocation was returned whole";
}

TEST_F(DeviceBufferTest, AlignedCopyFromASourceAndSmallAlignments)
{
  auto const pattern = make_pattern(777, 3);
  device_buffer const aligned{pattern.data(), pattern.size(), 1024, stream_, &resource_};
  EXPECT_EQ(aligned.alignment(), 1024U);
  EXPECT_TRUE(detail::is_aligned(aligned.data(), 1024));
  EXPECT_EQ(download(aligned.data(), 777, stream_), pattern);
  device_buffer const small{64, 8, stream_, &resource_};
  EXPECT_EQ(small.alignment(), 8U);
  EXPECT_TRUE(detail::is_aligned(small.data(), detail::allocation_alignment)) << "at least the requested";
  device_buffer const empty{std::size_t{0}, 4096, stream_, &resource_};
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_EQ(empty.alignment(), 4096U);
}

TEST_F(DeviceBufferTest, BadAlignmentsAreRefused)
{
  EXPECT_THROW((device_buffer{100, 3, stream_, &resource_}), logic_error);
  EXPECT_THROW((device_buffer{100, 0, stream_, &resource_}), logic_error);
  int const value = 1;
  EXPECT_THROW((device_buffer{&value, sizeof value, 48, stream_, &resource_}), logic_error);
  std::size_t const huge = std::numeric_limits<std::size_t>::max() - 100;
  EXPECT_THROW((device_buffer{huge, 4096, stream_, &resource_}), bad_alloc) << "size plus padding overflows";
  EXPECT_EQ(resource_.allocations(), 0U);
}

}  // namespace
}  // namespace gpumem
