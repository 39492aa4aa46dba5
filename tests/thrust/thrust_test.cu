// thrust_allocator and exec_policy, compiled by nvcc: a thrust::device_vector whose storage comes from a
// gpumem resource, and thrust::sort whose temporary storage comes from one, on a gpumem stream. The
// allocation accounting runs on either backend; the kernels (fill, sort) need a CUDA device and are
// skipped on the host backend.
#include "support/counting_resource.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/cuda_stream.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/exec_policy.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/thrust_allocator.hpp>

#include <gtest/gtest.h>

#include <thrust/device_vector.h>
#include <thrust/host_vector.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace gpumem::test {
namespace {

bool on_gpu() { return detail::get_backend().kind() == backend_kind::cuda; }

struct alignas(512) aligned_512 {
  char bytes[512];
};
template <class T>
concept thrust_allocatable = requires(mr::thrust_allocator<T> a) { a.allocate(1); };
static_assert(thrust_allocatable<std::int64_t>);
static_assert(!thrust_allocatable<aligned_512>, "256-byte-aligned memory cannot hold a 512-byte-aligned T");

mr::cuda_memory_resource& cuda_upstream_for_thrust()
{
  static mr::cuda_memory_resource upstream;
  return upstream;
}

TEST(thrust_allocator, allocates_and_frees_through_the_resource_on_its_stream)
{
  counting_resource counting;
  cuda_stream s;
  mr::thrust_allocator<std::uint32_t> allocator{s, &counting};
  auto p = allocator.allocate(1000);
  EXPECT_EQ(counting.bytes_allocated(), 4000U);
  allocator.deallocate(p, 1000);
  ASSERT_EQ(counting.deallocations(), 1U);
  EXPECT_EQ(counting.deallocation_log().front().stream.value(), s.value());
  mr::thrust_allocator<double> const rebound{allocator};
  EXPECT_TRUE(rebound == allocator);
  counting.expect_everything_returned();
}

TEST(thrust_allocator, a_device_vector_sorted_with_exec_policy_takes_all_its_memory_from_gpumem)
{
  if (!on_gpu()) { GTEST_SKIP() << "thrust kernels need a CUDA device (host backend)"; }
  mr::pool_memory_resource pool{&cuda_upstream_for_thrust()};
  counting_resource temporaries{&pool};  // sees only the sort's temporary storage
  cuda_stream s;
  std::size_t const n = std::size_t{1} << 22;
  std::vector<std::uint32_t> host(n);
  std::mt19937 rng{42};
  for (auto& v : host) { v = static_cast<std::uint32_t>(rng()); }
  {
    thrust::device_vector<std::uint32_t, mr::thrust_allocator<std::uint32_t>> keys(
      host.begin(), host.end(), mr::thrust_allocator<std::uint32_t>{s, &pool});
    EXPECT_GE(pool.bytes_in_use(), n * sizeof(std::uint32_t)) << "the vector's storage must come from the pool";
    thrust::sort(mr::exec_policy(s, &temporaries), keys.begin(), keys.end());
    s.synchronize();
    EXPECT_GE(temporaries.allocations(), 1U) << "thrust::sort took no temporary storage from gpumem";
    thrust::host_vector<std::uint32_t> sorted = keys;
    std::sort(host.begin(), host.end());
    EXPECT_TRUE(std::equal(host.begin(), host.end(), sorted.begin())) << "thrust::sort gave a wrong order";
  }
  s.synchronize();
  temporaries.expect_everything_returned();
  EXPECT_EQ(pool.bytes_in_use(), 0U);
}

}  // namespace
}  // namespace gpumem::test
