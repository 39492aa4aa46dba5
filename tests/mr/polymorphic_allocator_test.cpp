// polymorphic_allocator and stream_allocator_adaptor: typed sizes and the stream reach the resource, the
// default is the current device resource, overflow is bad_alloc, equality follows the resources, rebinding
// keeps resource and stream, and a standard container works over host-accessible (managed) memory.
#include "support/counting_resource.hpp"

#include <gpumem/cuda_stream.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/managed_memory_resource.hpp>
#include <gpumem/mr/new_delete_resource.hpp>
#include <gpumem/mr/per_device_resource.hpp>
#include <gpumem/mr/polymorphic_allocator.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <type_traits>
#include <vector>

namespace gpumem::test {
namespace {

static_assert(std::is_same_v<std::allocator_traits<mr::stream_allocator_adaptor<mr::polymorphic_allocator<int>>>::
                               rebind_alloc<double>,
                             mr::stream_allocator_adaptor<mr::polymorphic_allocator<double>>>);

struct alignas(512) aligned_512 {
  std::byte bytes[512];
};
template <class T>
concept allocatable_on_a_stream = requires(mr::polymorphic_allocator<T> a, cuda_stream_view s) { a.allocate(1, s); };
template <class T>
concept allocatable_through_the_adaptor =
  requires(mr::stream_allocator_adaptor<mr::polymorphic_allocator<T>> a) { a.allocate(1); };
static_assert(allocatable_on_a_stream<std::uint64_t> && allocatable_through_the_adaptor<std::uint64_t>);
static_assert(!allocatable_on_a_stream<aligned_512>, "256-byte-aligned memory cannot hold a 512-byte-aligned T");
static_assert(!allocatable_through_the_adaptor<aligned_512>);

TEST(polymorphic_allocator, allocates_n_objects_on_the_given_stream_from_its_resource)
{
  counting_resource counting;
  mr::polymorphic_allocator<std::uint64_t> allocator{&counting};
  cuda_stream s;
  std::uint64_t* p = allocator.allocate(100, s);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 256, 0U);
  EXPECT_EQ(counting.bytes_allocated(), 800U);
  allocator.deallocate(p, 100, s);
  ASSERT_EQ(counting.deallocations(), 1U);
  auto const log = counting.deallocation_log();
  EXPECT_EQ(log.front().bytes, 800U);
  EXPECT_EQ(log.front().stream.value(), s.value());
  counting.expect_everything_returned();
}

TEST(polymorphic_allocator, defaults_to_the_current_device_resource_and_rejects_null)
{
  mr::polymorphic_allocator<int> allocator;
  EXPECT_EQ(allocator.resource(), mr::get_current_device_resource());
  EXPECT_THROW(mr::polymorphic_allocator<int>{nullptr}, logic_error);
}

TEST(polymorphic_allocator, an_overflowing_count_is_bad_alloc_naming_it)
{
  counting_resource counting;
  mr::polymorphic_allocator<std::uint64_t> allocator{&counting};
  std::size_t const n = std::numeric_limits<std::size_t>::max() / 4;
  try {
    (void)allocator.allocate(n, cuda_stream_view{});
    FAIL() << "an overflowing request was accepted";
  } catch (bad_alloc const& e) {
    EXPECT_NE(std::string{e.what()}.find(std::to_string(n)), std::string::npos) << e.what();
  }
  EXPECT_EQ(counting.allocations(), 0U);
}

TEST(polymorphic_allocator, equality_follows_the_resources_across_types)
{
  counting_resource a;
  counting_resource b;
  mr::polymorphic_allocator<int> on_a{&a};
  mr::polymorphic_allocator<double> also_on_a{&a};
  mr::polymorphic_allocator<int> on_b{&b};
  EXPECT_TRUE(on_a == also_on_a);
  EXPECT_FALSE(on_a == on_b);
  mr::polymorphic_allocator<double> const converted{on_a};
  EXPECT_EQ(converted.resource(), &a);
}

TEST(stream_allocator_adaptor, binds_the_stream_and_rebinds_with_it)
{
  counting_resource counting;
  cuda_stream s;
  auto adaptor = mr::make_stream_allocator_adaptor(mr::polymorphic_allocator<int>{&counting}, s);
  EXPECT_EQ(adaptor.stream().value(), s.value());
  int* p = std::allocator_traits<decltype(adaptor)>::allocate(adaptor, 10);
  EXPECT_EQ(counting.bytes_allocated(), 40U);
  std::allocator_traits<decltype(adaptor)>::deallocate(adaptor, p, 10);
  EXPECT_EQ(counting.deallocation_log().front().stream.value(), s.value());

  using double_adaptor = std::allocator_traits<decltype(adaptor)>::rebind_alloc<double>;
  double_adaptor rebound{adaptor};
  EXPECT_EQ(rebound.stream().value(), s.value());
  EXPECT_EQ(rebound.underlying_allocator().resource(), &counting);
  EXPECT_TRUE(rebound == adaptor);
  cuda_stream other;
  EXPECT_FALSE(mr::make_stream_allocator_adaptor(mr::polymorphic_allocator<int>{&counting}, other) == adaptor);
  counting.expect_everything_returned();
}

// Managed memory is host-accessible on both backends, so a standard container may construct in it.
TEST(stream_allocator_adaptor, serves_a_standard_container_over_managed_memory)
{
  mr::managed_memory_resource managed;
  counting_resource counting{&managed};
  cuda_stream s;
  {
    auto adaptor = mr::make_stream_allocator_adaptor(mr::polymorphic_allocator<int>{&counting}, s);
    s.synchronize();
    std::vector<int, decltype(adaptor)> v(1000, 0, adaptor);
    std::iota(v.begin(), v.end(), 0);
    v.resize(5000);
    EXPECT_EQ(v[999], 999);
    EXPECT_EQ(std::accumulate(v.begin(), v.begin() + 1000, 0), 999 * 1000 / 2);
  }
  s.synchronize();
  EXPECT_GE(counting.allocations(), 2U) << "resize must have reallocated through the adaptor";
  counting.expect_everything_returned();
}


int allocate_one_through(mr::polymorphic_allocator<int> allocator, cuda_stream_view stream)
{
  int* p = allocator.allocate(1, stream);
  int const nonnull = p != nullptr ? 1 : 0;
  allocator.deallocate(p, 1, stream);
  return nonnull;
}

TEST(polymorphic_allocator, a_resource_converts_implicitly_as_rmms_does)
{
  mr::simulated_memory_resource resource;
  static_assert(std::is_convertible_v<mr::device_memory_resource*, mr::polymorphic_allocator<int>>);
  static_assert(std::is_convertible_v<mr::device_memory_resource&, mr::polymorphic_allocator<int>>);
  EXPECT_EQ(allocate_one_through(&resource, cuda_stream_default), 1);
  EXPECT_EQ(allocate_one_through(resource, cuda_stream_default), 1);
  mr::polymorphic_allocator<double> const from_reference = resource;
  EXPECT_EQ(from_reference.resource(), &resource);
  EXPECT_EQ(resource.allocation_count(), 0U);
}

}  // namespace
}  // namespace gpumem::test
