// RMM C++ conformance: code written as an RMM user writes it against RMM's documented C++ API, compiled against
// gpumem through rmm_names.hpp alone (the only change an RMM program needs). Each test checks the behaviour
// RMM documents for the names it uses; where gpumem deliberately differs, the test checks gpumem's documented
// behaviour and says so (docs/python.md, "RMM in C++", lists every difference). Runs on the host backend in CI
// and on the GPU; what only a GPU shows (managed pools where the driver has them) skips elsewhere with the reason.
#include "conformance/rmm/rmm_names.hpp"

#include "support/memory_checks.hpp"  // reads and writes device memory on either backend

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

using gpumem::test::has_pattern;
using gpumem::test::write_pattern;

/// What a device buffer holds, read back on `stream`.
std::vector<std::int32_t> to_host(rmm::device_uvector<std::int32_t> const& v, rmm::cuda_stream_view stream)
{
  return v.to_host(stream);
}

// ---- streams ----------------------------------------------------------------------------------------

TEST(RmmCudaStream, OwnsAValidStreamAndConvertsAsRmmDocuments)
{
  rmm::cuda_stream stream{};
  EXPECT_TRUE(stream.is_valid());
  rmm::cuda_stream_view const view = stream.view();
  EXPECT_EQ(view.value(), stream.value());
  rmm::cuda_stream_view const implicit = stream;  // implicit conversion to a view
  EXPECT_EQ(implicit, view);
  EXPECT_EQ(static_cast<cudaStream_t>(stream), stream.value());  // explicit conversion to cudaStream_t
  static_assert(!std::is_convertible_v<rmm::cuda_stream, cudaStream_t>);
#ifdef GPUMEM_HAS_CUDA_STREAM_REF
  cuda::stream_ref const ref = stream;  // implicit conversion to cuda::stream_ref
  EXPECT_EQ(ref.get(), stream.value());
#endif
  EXPECT_TRUE(stream == view);
  EXPECT_FALSE(stream != view);
  EXPECT_TRUE(stream != rmm::cuda_stream_default);
  stream.synchronize();
  stream.synchronize_no_throw();
  rmm::cuda_stream moved = std::move(stream);
  EXPECT_TRUE(moved.is_valid());
  EXPECT_FALSE(stream.is_valid());  // NOLINT(bugprone-use-after-move): RMM documents a moved-from stream invalid
}

TEST(RmmCudaStreamView, DefaultsAndComparisons)
{
  rmm::cuda_stream_view const default_view{};
  EXPECT_TRUE(default_view.is_default());
  EXPECT_EQ(default_view, rmm::cuda_stream_default);
  EXPECT_TRUE(rmm::cuda_stream_legacy.is_default());
  EXPECT_TRUE(rmm::cuda_stream_per_thread.is_per_thread_default());
  EXPECT_NE(rmm::cuda_stream_per_thread, rmm::cuda_stream_default);
  rmm::cuda_stream owner;
  rmm::cuda_stream_view const from_handle{owner.value()};
  EXPECT_EQ(from_handle, owner.view());
  from_handle.synchronize();
  from_handle.synchronize_no_throw();
}

TEST(RmmCudaStreamPool, HandsOutStreamsRoundRobin)
{
  rmm::cuda_stream_pool pool{4};
  EXPECT_EQ(pool.get_pool_size(), 4U);
  EXPECT_EQ(pool.get_stream(0), pool.get_stream(4));
  EXPECT_NE(pool.get_stream(0), pool.get_stream(1));
}

// ---- containers ---------------------------------------------------------------------------------------

class RmmContainers : public ::testing::Test {
 protected:
  rmm::cuda_stream stream_;
  rmm::mr::cuda_memory_resource cuda_mr_;
};

TEST_F(RmmContainers, DeviceBufferAllocatesCopiesAndResizes)
{
  rmm::device_buffer buffer(1000, stream_, &cuda_mr_);
  EXPECT_EQ(buffer.size(), 1000U);
  EXPECT_EQ(buffer.capacity(), 1000U);
  EXPECT_EQ(buffer.alignment(), rmm::CUDA_ALLOCATION_ALIGNMENT);
  EXPECT_TRUE(rmm::is_pointer_aligned(buffer.data()));
  EXPECT_EQ(buffer.stream(), stream_.view());
  EXPECT_EQ(buffer.memory_resource(), &cuda_mr_);
  write_pattern(buffer.data(), 1000, 1, stream_.value());
  buffer.resize(5000, stream_);
  EXPECT_TRUE(has_pattern(buffer.data(), 1000, 1, stream_.value())) << "resize keeps the contents";
  buffer.resize(10, stream_);
  EXPECT_EQ(buffer.capacity(), 5000U) << "shrinking the size keeps the capacity";
  buffer.shrink_to_fit(stream_);
  EXPECT_EQ(buffer.capacity(), 10U);
  rmm::device_buffer const copy(buffer, stream_);
  EXPECT_EQ(copy.size(), 10U);
  rmm::device_buffer moved(std::move(buffer));
  EXPECT_EQ(moved.size(), 10U);
  EXPECT_EQ(buffer.data(), nullptr);  // NOLINT(bugprone-use-after-move): RMM documents it empty
  std::vector<std::uint8_t> const host(300, 7);
  rmm::device_buffer const from_host(host.data(), host.size(), stream_);
  stream_.synchronize();
  EXPECT_EQ(from_host.size(), 300U);
}

TEST_F(RmmContainers, DeviceBufferWithAnAlignment)
{
  for (std::size_t const alignment : {std::size_t{64}, std::size_t{256}, std::size_t{4096}}) {
    rmm::device_buffer buffer(1234, alignment, stream_, &cuda_mr_);
    EXPECT_EQ(buffer.alignment(), alignment);
    EXPECT_TRUE(rmm::is_pointer_aligned(buffer.data(), alignment)) << alignment;
    buffer.resize(100'000, stream_);
    EXPECT_TRUE(rmm::is_pointer_aligned(buffer.data(), alignment)) << "kept across reallocation";
    std::vector<std::uint8_t> const host(512, 3);
    rmm::device_buffer const copied(host.data(), host.size(), alignment, stream_, &cuda_mr_);
    EXPECT_TRUE(rmm::is_pointer_aligned(copied.data(), alignment));
    rmm::device_buffer const deep(copied, stream_);
    EXPECT_EQ(deep.alignment(), alignment) << "a copy has the source's alignment";
    stream_.synchronize();
  }
  EXPECT_THROW(rmm::device_buffer(10, 3, stream_), rmm::logic_error) << "not a power of two";
}

TEST_F(RmmContainers, DeviceUvectorElementsPointersAndIterators)
{
  rmm::device_uvector<std::int32_t> vec(100, stream_, &cuda_mr_);
  EXPECT_EQ(vec.size(), 100U);
  for (std::int32_t i = 0; i < 100; ++i) { vec.set_element(static_cast<std::size_t>(i), i * 3, stream_); }
  EXPECT_EQ(vec.element(42, stream_), 126);
  EXPECT_EQ(vec.front_element(stream_), 0);
  EXPECT_EQ(vec.back_element(stream_), 297);
  vec.set_element_to_zero_async(1, stream_);
  EXPECT_EQ(vec.element(1, stream_), 0);

  EXPECT_EQ(vec.element_ptr(0), vec.data());
  EXPECT_EQ(vec.element_ptr(99), vec.data() + 99);
  EXPECT_EQ(std::as_const(vec).element_ptr(7), vec.data() + 7);
  EXPECT_EQ(vec.end() - vec.begin(), 100);
  EXPECT_EQ(vec.rend() - vec.rbegin(), 100);
  EXPECT_EQ(vec.rbegin().base(), vec.end());
  EXPECT_EQ(vec.rend().base(), vec.begin());
  EXPECT_EQ(vec.crbegin().operator->(), vec.data() + 99) << "the last element, without touching it";
  static_assert(std::is_same_v<rmm::device_uvector<std::int32_t>::reverse_iterator, std::reverse_iterator<std::int32_t*>>);

  vec.resize(200, stream_);
  EXPECT_EQ(vec.element(42, stream_), 126);
  rmm::device_buffer released = vec.release();
  EXPECT_EQ(released.size(), 200 * sizeof(std::int32_t));
  EXPECT_EQ(vec.size(), 0U);
}

TEST_F(RmmContainers, OutOfRangeElementAccessThrowsRmmOutOfRange)
{
  rmm::device_uvector<std::int32_t> vec(5, stream_, &cuda_mr_);
  EXPECT_THROW((void)vec.element(5, stream_), rmm::out_of_range);
  EXPECT_THROW(vec.set_element(5, 1, stream_), std::out_of_range);  // rmm::out_of_range is a std::out_of_range
  EXPECT_THROW(vec.set_element_to_zero_async(6, stream_), rmm::out_of_range);
  EXPECT_THROW((void)vec.element_ptr(5), rmm::out_of_range) << "RMM leaves this undefined; gpumem checks";
  rmm::device_uvector<std::int32_t> empty(0, stream_, &cuda_mr_);
  EXPECT_THROW((void)empty.front_element(stream_), rmm::out_of_range);
  EXPECT_THROW((void)empty.back_element(stream_), rmm::out_of_range);
}

TEST_F(RmmContainers, DeviceUvectorFromAHostSpanAndACopy)
{
  std::vector<std::int32_t> const host{1, 2, 3, 4, 5};
  rmm::device_uvector<std::int32_t> const vec(std::span<std::int32_t const>{host}, stream_, &cuda_mr_);
  rmm::device_uvector<std::int32_t> const copy(vec, stream_);
  EXPECT_EQ(to_host(copy, stream_), host);
}

TEST_F(RmmContainers, DeviceScalarValue)
{
  rmm::device_scalar<std::int64_t> scalar{42, stream_, &cuda_mr_};
  EXPECT_EQ(scalar.value(stream_), 42);
  std::int64_t const next = 7;
  scalar.set_value_async(next, stream_);
  EXPECT_EQ(scalar.value(stream_), 7);
  scalar.set_value_to_zero_async(stream_);
  EXPECT_EQ(scalar.value(stream_), 0);
}

// ---- per-device resources ---------------------------------------------------------------------------

TEST(RmmPerDeviceResource, SetAndRestoreTheCurrentResource)
{
  rmm::mr::cuda_memory_resource cuda_mr;
  rmm::mr::pool_memory_resource<rmm::mr::cuda_memory_resource> pool{&cuda_mr, 1U << 20U};
  rmm::mr::device_memory_resource* const previous = rmm::mr::set_current_device_resource(&pool);
  EXPECT_EQ(rmm::mr::get_current_device_resource(), &pool);
  EXPECT_EQ(rmm::mr::get_per_device_resource(rmm::get_current_cuda_device()), &pool);
  {
    rmm::device_buffer const buffer(100, rmm::cuda_stream_default);  // from the current resource
    EXPECT_EQ(buffer.memory_resource(), &pool);
  }
  rmm::mr::set_per_device_resource(rmm::get_current_cuda_device(), previous);
  EXPECT_EQ(rmm::mr::get_current_device_resource(), previous);
}

// ---- resources ---------------------------------------------------------------------------------------

template <class Resource>
void allocate_write_read_free(Resource& mr, rmm::cuda_stream_view stream)
{
  void* const p = mr.allocate(10'000, stream);
  EXPECT_TRUE(rmm::is_pointer_aligned(p));
  write_pattern(p, 10'000, 5, stream.value());
  EXPECT_TRUE(has_pattern(p, 10'000, 5, stream.value()));
  mr.deallocate(p, 10'000, stream);
}

TEST(RmmResources, EveryUpstreamAndSubAllocatorServesMemory)
{
  rmm::cuda_stream stream;
  rmm::mr::cuda_memory_resource cuda_mr;
  rmm::mr::managed_memory_resource managed_mr;
  rmm::mr::pool_memory_resource<rmm::mr::cuda_memory_resource> pool{&cuda_mr, 1U << 22U, 1U << 24U};
  rmm::mr::arena_memory_resource<rmm::mr::cuda_memory_resource> arena{&cuda_mr, 1U << 22U};
  rmm::mr::fixed_size_memory_resource<rmm::mr::cuda_memory_resource> fixed{&cuda_mr, 1U << 14U};
  rmm::mr::binning_memory_resource<rmm::mr::cuda_memory_resource> binning{&cuda_mr, 10, 20};
  rmm::mr::cuda_async_memory_resource async_mr;
  rmm::mr::cuda_async_view_memory_resource async_view{async_mr.pool_handle()};
  allocate_write_read_free(cuda_mr, stream);
  allocate_write_read_free(managed_mr, stream);
  allocate_write_read_free(pool, stream);
  allocate_write_read_free(arena, stream);
  allocate_write_read_free(fixed, stream);
  allocate_write_read_free(binning, stream);
  allocate_write_read_free(async_mr, stream);
  allocate_write_read_free(async_view, stream);
  EXPECT_TRUE(async_view.is_equal(async_mr)) << "a view of a pool equals the pool's owner, as in RMM";
  stream.synchronize();
}

TEST(RmmResources, EqualityAsRmmDefinesIt)
{
  rmm::mr::cuda_memory_resource a;
  rmm::mr::cuda_memory_resource b;
  rmm::mr::managed_memory_resource managed;
  EXPECT_TRUE(a.is_equal(b)) << "memory from one cuda_memory_resource may be freed by another";
  EXPECT_TRUE(a == b);
  EXPECT_FALSE(a.is_equal(managed));
  rmm::mr::pool_memory_resource<rmm::mr::cuda_memory_resource> pool_a{&a, 1U << 20U};
  rmm::mr::pool_memory_resource<rmm::mr::cuda_memory_resource> pool_b{&a, 1U << 20U};
  EXPECT_TRUE(pool_a.is_equal(pool_a));
  EXPECT_FALSE(pool_a.is_equal(pool_b)) << "two pools do not share their blocks";
  rmm::mr::statistics_resource_adaptor<rmm::mr::cuda_memory_resource> stats_a{&a};
  rmm::mr::statistics_resource_adaptor<rmm::mr::cuda_memory_resource> stats_b{&b};
  rmm::mr::tracking_resource_adaptor<rmm::mr::cuda_memory_resource> tracking{&a};
  EXPECT_TRUE(stats_a.is_equal(stats_b)) << "adaptors of one type over equal upstreams";
  EXPECT_FALSE(stats_a.is_equal(tracking)) << "different adaptor types";
  EXPECT_FALSE(stats_a.is_equal(a)) << "an adaptor is not its upstream";
}

TEST(RmmResources, ExhaustionThrowsOutOfMemoryWhichIsABadAlloc)
{
  rmm::mr::cuda_memory_resource cuda_mr;
  rmm::mr::limiting_resource_adaptor<rmm::mr::cuda_memory_resource> limited{&cuda_mr, 1U << 20U};
  void* const p = limited.allocate(1U << 19U);
  EXPECT_EQ(limited.get_allocated_bytes(), std::size_t{1} << 19U);
  EXPECT_EQ(limited.get_allocation_limit(), std::size_t{1} << 20U);
  EXPECT_THROW((void)limited.allocate(1U << 20U), rmm::out_of_memory);
  EXPECT_THROW((void)limited.allocate(1U << 20U), rmm::bad_alloc);
  EXPECT_THROW((void)limited.allocate(1U << 20U), std::bad_alloc);
  limited.deallocate(p, 1U << 19U);
}

TEST(RmmResources, DeliberateDifferencesOfGpumem)
{
  rmm::mr::cuda_memory_resource cuda_mr;
  rmm::mr::statistics_resource_adaptor<rmm::mr::cuda_memory_resource> stats{&cuda_mr};
  // allocate(0) is nullptr before any resource or adaptor sees it: nothing is allocated, nothing counted.
  EXPECT_EQ(stats.allocate(0), nullptr);
  EXPECT_EQ(stats.get_allocations_counter().total, 0);
  // An alignment above the 256 bytes every resource guarantees is refused (RMM returns 256-aligned memory).
  EXPECT_THROW((void)stats.allocate(100, std::size_t{4096}), rmm::logic_error);
  // ... and served by the aligned adaptor, as in RMM.
  rmm::mr::aligned_resource_adaptor<rmm::mr::cuda_memory_resource> aligned{&cuda_mr, 4096};
  void* const p = aligned.allocate(100);
  EXPECT_TRUE(rmm::is_pointer_aligned(p, 4096));
  aligned.deallocate(p, 100);
}

// ---- adaptors ---------------------------------------------------------------------------------------

bool retry_once(std::size_t /*bytes*/, void* arg)
{
  bool& retried = *static_cast<bool*>(arg);
  if (!retried) {
    retried = true;
    return true;  // first time: retry the allocation
  }
  return false;  // second time: let the adaptor throw
}

TEST(RmmAdaptors, FailureCallbackAsRmmsExample)
{
  using failure_callback_adaptor = rmm::mr::failure_callback_resource_adaptor<rmm::mr::device_memory_resource>;
  static_assert(std::is_same_v<failure_callback_adaptor::exception_type, rmm::out_of_memory>);
  rmm::mr::cuda_memory_resource cuda_mr;
  rmm::mr::limiting_resource_adaptor<rmm::mr::cuda_memory_resource> limited{&cuda_mr, 1U << 20U};
  bool retried{false};
  failure_callback_adaptor mr{&limited, retry_once, &retried};
  EXPECT_THROW((void)mr.allocate(2U << 20U), rmm::out_of_memory);
  EXPECT_TRUE(retried);
}

TEST(RmmAdaptors, FailureCallbackOnAChosenExceptionType)
{
  rmm::mr::cuda_memory_resource cuda_mr;
  rmm::mr::limiting_resource_adaptor<rmm::mr::cuda_memory_resource> limited{&cuda_mr, 1U << 20U};
  int calls = 0;
  auto const count_and_give_up = [](std::size_t, void* arg) {
    ++*static_cast<int*>(arg);
    return false;
  };
  rmm::mr::failure_callback_resource_adaptor<rmm::mr::device_memory_resource, std::bad_alloc> on_bad_alloc{
    &limited, count_and_give_up, &calls};
  EXPECT_THROW((void)on_bad_alloc.allocate(2U << 20U), rmm::out_of_memory) << "the caught exception, rethrown";
  EXPECT_EQ(calls, 1) << "out_of_memory is a std::bad_alloc: the callback ran";
  rmm::mr::failure_callback_resource_adaptor<rmm::mr::device_memory_resource, rmm::cuda_error> on_cuda_error{
    &limited, count_and_give_up, &calls};
  EXPECT_THROW((void)on_cuda_error.allocate(2U << 20U), rmm::out_of_memory);
  EXPECT_EQ(calls, 1) << "not a cuda_error: passed through without the callback";
}

TEST(RmmAdaptors, StatisticsCountBytesAndAllocations)
{
  rmm::mr::cuda_memory_resource cuda_mr;
  rmm::mr::statistics_resource_adaptor<rmm::mr::cuda_memory_resource> stats{&cuda_mr};
  void* const a = stats.allocate(1000);
  void* const b = stats.allocate(3000);
  EXPECT_EQ(stats.get_bytes_counter().current, 4000);
  EXPECT_EQ(stats.get_allocations_counter().current, 2);
  stats.deallocate(a, 1000);
  EXPECT_EQ(stats.get_bytes_counter().current, 3000);
  EXPECT_EQ(stats.get_bytes_counter().peak, 4000);
  EXPECT_EQ(stats.get_bytes_counter().total, 4000);
  stats.deallocate(b, 3000);
}

TEST(RmmAdaptors, TrackingForwardsFreesItDoesNotKnow)
{
  rmm::mr::cuda_memory_resource cuda_mr;
  rmm::mr::statistics_resource_adaptor<rmm::mr::cuda_memory_resource> stats{&cuda_mr};
  void* const early = stats.allocate(2048);  // before tracking began
  rmm::mr::tracking_resource_adaptor<rmm::mr::device_memory_resource> tracking{&stats};
  void* const late = tracking.allocate(1024);
  EXPECT_EQ(tracking.get_allocated_bytes(), 1024U);
  EXPECT_NE(tracking.get_outstanding_allocations_str().find("1024"), std::string::npos);
  tracking.deallocate(early, 2048);  // freed through the wrapping adaptor: forwarded, not leaked
  tracking.deallocate(late, 1024);
  EXPECT_EQ(tracking.get_allocated_bytes(), 0U);
  EXPECT_EQ(stats.get_bytes_counter().current, 0) << "both frees reached the upstream";
}

TEST(RmmAdaptors, LoggingWritesACsvRowPerCall)
{
  rmm::mr::cuda_memory_resource cuda_mr;
  std::ostringstream out;
  {
    rmm::mr::logging_resource_adaptor<rmm::mr::cuda_memory_resource> logging{&cuda_mr, out, true};
    void* const p = logging.allocate(4096);
    logging.deallocate(p, 4096);
  }
  std::string const log = out.str();
  EXPECT_NE(log.find("allocate"), std::string::npos) << log;
  EXPECT_NE(log.find("free"), std::string::npos) << log;
  EXPECT_NE(log.find("4096"), std::string::npos) << log;
}

TEST(RmmAdaptors, ThreadSafeForwards)
{
  rmm::mr::cuda_memory_resource cuda_mr;
  rmm::mr::pool_memory_resource<rmm::mr::cuda_memory_resource> pool{&cuda_mr, 1U << 20U};
  rmm::mr::thread_safe_resource_adaptor<rmm::mr::pool_memory_resource<rmm::mr::cuda_memory_resource>> safe{&pool};
  rmm::cuda_stream stream;
  allocate_write_read_free(safe, stream);
}

TEST(RmmAdaptors, PrefetchAdaptorOverPoolMemoryIsANoOpAsInRmm)
{
  rmm::cuda_stream stream;
  rmm::mr::cuda_memory_resource cuda_mr;
  rmm::mr::pool_memory_resource<rmm::mr::cuda_memory_resource> pool{&cuda_mr, 1U << 22U};
  rmm::mr::prefetch_resource_adaptor<rmm::mr::device_memory_resource> over_pool{&pool};
  allocate_write_read_free(over_pool, stream);  // device memory: served unprefetched, no error
  rmm::mr::managed_memory_resource managed_mr;
  rmm::mr::prefetch_resource_adaptor<rmm::mr::managed_memory_resource> over_managed{&managed_mr};
  allocate_write_read_free(over_managed, stream);  // managed memory: prefetched
  stream.synchronize();
}

// ---- prefetch -----------------------------------------------------------------------------------------

TEST(RmmPrefetch, ManagedMemoryAndMemoryThatIsNot)
{
  rmm::cuda_stream stream;
  rmm::mr::managed_memory_resource managed_mr;
  rmm::mr::cuda_memory_resource cuda_mr;
  rmm::device_uvector<std::int32_t> managed_vec(1000, stream, &managed_mr);
  rmm::device_uvector<std::int32_t> device_vec(1000, stream, &cuda_mr);
  rmm::prefetch(managed_vec.data(), managed_vec.size() * sizeof(std::int32_t), rmm::get_current_cuda_device(), stream);
  rmm::prefetch<std::int32_t>(std::span<std::int32_t const>{managed_vec.data(), managed_vec.size()},
                              rmm::get_current_cuda_device(), stream);
  rmm::prefetch(managed_vec.data(), 4000, rmm::cuda_device_id{cudaCpuDeviceId}, stream);
  // Not managed: a no-op in RMM, not an error.
  EXPECT_NO_THROW(rmm::prefetch(device_vec.data(), 4000, rmm::get_current_cuda_device(), stream));
  stream.synchronize();
}

// ---- allocators ---------------------------------------------------------------------------------------

void takes_an_allocator(rmm::mr::polymorphic_allocator<int> allocator, rmm::cuda_stream_view stream)
{
  int* const p = allocator.allocate(10, stream);
  EXPECT_NE(p, nullptr);
  allocator.deallocate(p, 10, stream);
}

TEST(RmmPolymorphicAllocator, AsRmmsTestsUseIt)
{
  rmm::cuda_stream stream;
  rmm::mr::polymorphic_allocator<int> const default_allocator{};
  EXPECT_EQ(default_allocator.get_upstream_resource(), rmm::mr::get_current_device_resource());
  rmm::mr::cuda_memory_resource mr0;
  rmm::mr::cuda_memory_resource mr1;
  rmm::mr::managed_memory_resource managed;
  rmm::mr::polymorphic_allocator<int> const alloc0{&mr0};
  rmm::mr::polymorphic_allocator<int> const alloc1{&mr1};
  EXPECT_EQ(alloc0.get_upstream_resource(), &mr0);
  EXPECT_EQ(alloc0, alloc1) << "equal resources";
  EXPECT_NE(alloc0, rmm::mr::polymorphic_allocator<int>{&managed});
  rmm::mr::polymorphic_allocator<double> const rebound{alloc0};
  EXPECT_EQ(alloc0, rebound);
  using rebind = std::allocator_traits<rmm::mr::polymorphic_allocator<int>>::rebind_alloc<double>;
  static_assert(std::is_same_v<std::allocator_traits<rebind>::value_type, double>);
  takes_an_allocator(&mr0, stream);  // a resource converts implicitly
  takes_an_allocator(mr0, stream);
  auto bound = rmm::mr::make_stream_allocator_adaptor(alloc0, stream);
  int* const p = bound.allocate(5);
  bound.deallocate(p, 5);
  stream.synchronize();
}

// ---- stream-ordered managed memory --------------------------------------------------------------------

TEST(RmmCudaAsyncManaged, AllocatesManagedMemoryStreamOrdered)
{
  try {
    rmm::mr::cuda_async_managed_memory_resource mr;
    rmm::cuda_stream stream;
    allocate_write_read_free(mr, stream);
    rmm::mr::cuda_async_managed_memory_resource other;
    EXPECT_TRUE(mr.is_equal(other)) << "both use the device's default managed pool";
    EXPECT_EQ(mr.pool_handle(), other.pool_handle());
    rmm::device_uvector<std::int32_t> vec(256, stream, &mr);
    rmm::prefetch(vec.data(), vec.size() * sizeof(std::int32_t), rmm::get_current_cuda_device(), stream);
    vec.set_element(3, 9, stream);
    EXPECT_EQ(vec.element(3, stream), 9);
  } catch (rmm::cuda_error const& e) {
    if (e.code() != cudaErrorNotSupported) { throw; }
    GTEST_SKIP() << e.what();  // RMM throws too where CUDA 13 or concurrent managed access is missing
  }
}

}  // namespace

TEST(RmmResources, CallbackMemoryResourceCallsTheFunctionsWithTheirArguments)
{
  rmm::mr::cuda_memory_resource upstream;
  int allocations = 0;
  int deallocations = 0;
  rmm::mr::callback_memory_resource callbacks{
    [&](std::size_t bytes, rmm::cuda_stream_view stream, void* arg) {
      ++*static_cast<int*>(arg);
      return upstream.allocate(bytes, stream);
    },
    [&](void* ptr, std::size_t bytes, rmm::cuda_stream_view stream, void* arg) {
      ++*static_cast<int*>(arg);
      upstream.deallocate(ptr, bytes, stream);
    },
    &allocations, &deallocations};
  rmm::cuda_stream stream;
  allocate_write_read_free(callbacks, stream);
  EXPECT_EQ(allocations, deallocations);
  EXPECT_GE(allocations, 1);
  stream.synchronize();
}

TEST(RmmResources, SystemMemoryResourceWhereTheDeviceReadsPageableMemory)
{
  if (!rmm::mr::is_system_memory_supported(rmm::get_current_cuda_device())) {
    EXPECT_THROW(rmm::mr::system_memory_resource{}, rmm::cuda_error) << "RMM refuses it there too";
    return;
  }
  rmm::mr::system_memory_resource system;
  rmm::cuda_stream stream;
  allocate_write_read_free(system, stream);
  stream.synchronize();
}
