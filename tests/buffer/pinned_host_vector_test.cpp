// pinned_host_vector / pinned_allocator: the elements are pinned, resize(n) leaves trivially copyable
// elements unwritten while resize(n, value) initialises them, copies between vectors, allocator equality and
// rebinding, and a round trip through device memory with asynchronous copies from and into the vector.
#include <gpumem/backend/backend.hpp>
#include <gpumem/buffer/pinned_host_vector.hpp>
#include <gpumem/cuda_stream.hpp>
#include <gpumem/mr/per_device_resource.hpp>
#include <gpumem/mr/pinned_memory_pool.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

namespace gpumem {
namespace {

constexpr std::size_t chunk = std::size_t{2} << 20U;

bool pinned(void const* p) { return detail::get_backend().is_pinned_host(p); }

TEST(PinnedHostVector, ElementsArePinned)
{
  pinned_host_vector<int> v;
  v.push_back(1);
  EXPECT_TRUE(pinned(v.data()));
  for (int i = 2; i <= 5000; ++i) { v.push_back(i); }  // reallocations stay pinned
  EXPECT_TRUE(pinned(v.data()));
  EXPECT_TRUE(pinned(&v.back()));
  EXPECT_EQ(v.front(), 1);
  EXPECT_EQ(v.back(), 5000);
  EXPECT_EQ(std::accumulate(v.begin(), v.end(), std::int64_t{0}), std::int64_t{5000} * 5001 / 2);
  v.resize(100000);
  EXPECT_TRUE(pinned(v.data()));
  EXPECT_EQ(v[4999], 5000) << "resize kept the elements";
  EXPECT_EQ(v.get_allocator().pool(), &mr::get_default_pinned_pool());
}

TEST(PinnedHostVector, MemoryComesFromTheGivenPoolAndGoesBack)
{
  mr::pinned_memory_pool pool{{.chunk_size = chunk}};
  {
    pinned_host_vector<double> v{pinned_allocator<double>{pool}};
    v.resize(1000, 2.5);
    EXPECT_GE(pool.usage().in_use, 1000 * sizeof(double));
    EXPECT_TRUE(pinned(v.data()));
  }
  EXPECT_EQ(pool.usage().in_use, 0U);
}

TEST(PinnedHostVector, ResizeWithAValueInitialises)
{
  mr::pinned_memory_pool pool{{.chunk_size = chunk}};
  pinned_host_vector<std::uint32_t> v{pinned_allocator<std::uint32_t>{pool}};
  v.resize(1001, 0xDEADBEEFU);
  for (auto const x : v) { ASSERT_EQ(x, 0xDEADBEEFU); }
  v.resize(2002, 7U);
  EXPECT_EQ(v[1000], 0xDEADBEEFU);
  EXPECT_EQ(v[1001], 7U);
  EXPECT_EQ(v[2001], 7U);
  pinned_host_vector<std::uint32_t> w(3000, 9U, pinned_allocator<std::uint32_t>{pool});
  EXPECT_EQ(w[0], 9U);
  EXPECT_EQ(w[2999], 9U);
}

TEST(PinnedHostVector, ResizeWithoutAValueDoesNotWriteTrivialElements)
{
  // A fresh pool hands the same block back for the same size: fill it, free it, then resize(n) into it.
  mr::pinned_memory_pool pool{{.chunk_size = chunk}};
  std::size_t const n = 4096;
  void* block = pool.allocate(n, alignof(unsigned char));
  std::memset(block, 0xAB, n);
  pool.deallocate(block, n, alignof(unsigned char));
  pinned_host_vector<unsigned char> v{pinned_allocator<unsigned char>{pool}};
  v.resize(n);
  ASSERT_EQ(static_cast<void*>(v.data()), block) << "the pool did not hand the same block back";
  std::size_t untouched = 0;
  for (auto const byte : v) { untouched += byte == 0xAB ? 1U : 0U; }
  EXPECT_EQ(untouched, n) << "resize(n) wrote the elements (value-initialisation)";
}

TEST(PinnedHostVector, NonTrivialElementsAreConstructed)
{
  pinned_host_vector<std::string> v;
  v.resize(3);
  EXPECT_TRUE(v[0].empty());
  EXPECT_TRUE(v[2].empty());
  v.emplace_back(100, 'x');
  EXPECT_EQ(v[3], std::string(100, 'x'));
  EXPECT_TRUE(pinned(v.data()));
}

TEST(PinnedHostVector, CopiesBetweenVectors)
{
  mr::pinned_memory_pool first_pool{{.chunk_size = chunk}};
  mr::pinned_memory_pool second_pool{{.chunk_size = chunk}};
  pinned_host_vector<int> a{pinned_allocator<int>{first_pool}};
  for (int i = 0; i < 3000; ++i) { a.push_back(i * 3); }

  pinned_host_vector<int> const copy{a};
  EXPECT_EQ(copy, a);
  EXPECT_NE(copy.data(), a.data());
  EXPECT_TRUE(pinned(copy.data()));
  EXPECT_EQ(copy.get_allocator().pool(), &first_pool);

  pinned_host_vector<int> b{pinned_allocator<int>{second_pool}};
  b = a;
  EXPECT_EQ(b, a);
  EXPECT_TRUE(pinned(b.data()));
  EXPECT_GE(second_pool.usage().in_use, 3000 * sizeof(int));

  std::vector<int> pageable(a.begin(), a.end());
  pinned_host_vector<int> from_pageable(pageable.begin(), pageable.end());
  EXPECT_TRUE(std::equal(from_pageable.begin(), from_pageable.end(), pageable.begin(), pageable.end()));
  a[0] = -1;
  EXPECT_EQ(b[0], 0) << "a copy shares storage";

  pinned_host_vector<int> moved{std::move(a)};
  EXPECT_EQ(moved[0], -1);
  EXPECT_EQ(moved.size(), 3000U);
}

TEST(PinnedHostVector, AllocatorsCompareEqualForTheSamePool)
{
  mr::pinned_memory_pool one{{.chunk_size = chunk}};
  mr::pinned_memory_pool two{{.chunk_size = chunk}};
  EXPECT_TRUE(pinned_allocator<int>{one} == pinned_allocator<int>{one});
  EXPECT_FALSE(pinned_allocator<int>{one} == pinned_allocator<int>{two});
  EXPECT_TRUE(pinned_allocator<int>{} == pinned_allocator<double>{});  // both the default pool
  EXPECT_FALSE(pinned_allocator<int>{} == pinned_allocator<int>{one});
  pinned_allocator<double> const rebound{pinned_allocator<int>{two}};
  EXPECT_EQ(rebound.pool(), &two);
  EXPECT_TRUE(rebound == pinned_allocator<char>{two});
}

TEST(PinnedHostVector, AllocateOverflowThrows)
{
  pinned_allocator<std::uint64_t> a;
  EXPECT_THROW((void)a.allocate(static_cast<std::size_t>(-1) / 4), std::bad_array_new_length);
}

TEST(PinnedHostVector, RoundTripThroughDeviceMemory)
{
  cuda_stream stream{cuda_stream::flags::non_blocking};
  std::size_t const n = 300001;
  pinned_host_vector<float> source(n);
  for (std::size_t i = 0; i < n; ++i) { source[i] = static_cast<float>(i) * 0.25F - 7.0F; }
  pinned_host_vector<float> back(n, 0.0F);
  auto* device = mr::get_current_device_resource();
  void* d = device->allocate(n * sizeof(float), stream);
  auto& backend = detail::get_backend();
  backend.memcpy_async(d, source.data(), n * sizeof(float), stream.value());
  backend.memcpy_async(back.data(), d, n * sizeof(float), stream.value());
  stream.synchronize();
  EXPECT_EQ(back, source);
  device->deallocate(d, n * sizeof(float), stream);
}

}  // namespace
}  // namespace gpumem
