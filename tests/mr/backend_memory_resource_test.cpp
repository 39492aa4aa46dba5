// The upstream resources, backend_memory_resource for each memory kind (cuda_memory_resource,
// managed_memory_resource, pinned_host_memory_resource): the conformance battery for each (managed
// memory's out-of-memory case on the host backend only, see oversubscription_safe); then what every kind
// shares (equality by kind, waiting for the stream's work before the free); then each kind's own behaviour
// (host access, the out-of-memory messages, the current device).
#include "conformance/resource_battery.hpp"
#include "support/gate.hpp"
#include "support/memory_checks.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/cuda_device_id.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/backend_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/managed_memory_resource.hpp>
#include <gpumem/mr/pinned_host_memory_resource.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>

namespace gpumem::test {
namespace {

/// Pinned memory is bounded by the host's physical memory, not the device's, so twice the device total
/// could succeed (and pin a large part of the host). One PiB cannot.
constexpr std::size_t impossible_pinned_request = std::size_t{1} << 50;

struct cuda_resource_factory {
  static std::unique_ptr<mr::device_memory_resource> make() { return std::make_unique<mr::cuda_memory_resource>(); }
  static constexpr char const* name = "cuda_memory_resource";
  static constexpr bool oversubscription_safe = true;
};

struct managed_resource_factory {
  static std::unique_ptr<mr::device_memory_resource> make()
  {
    return std::make_unique<mr::managed_memory_resource>();
  }
  static constexpr char const* name = "managed_memory_resource";
  // cudaMallocManaged beyond the free device memory can page until the GPU stalls: never on a real GPU.
  static constexpr bool oversubscription_safe = false;
};

struct pinned_resource_factory {
  static std::unique_ptr<mr::device_memory_resource> make()
  {
    return std::make_unique<mr::pinned_host_memory_resource>();
  }
  static constexpr char const* name = "pinned_host_memory_resource";
  static constexpr bool oversubscription_safe = true;
  static std::size_t oom_request_bytes() { return impossible_pinned_request; }
};

#ifdef GPUMEM_HAS_CUDA_MR
static_assert(cuda::mr::async_resource_with<mr::cuda_memory_resource, cuda::mr::device_accessible>);
static_assert(!cuda::mr::async_resource_with<mr::cuda_memory_resource, cuda::mr::host_accessible>,
              "device memory must not claim to be host-accessible");
static_assert(cuda::mr::async_resource_with<mr::managed_memory_resource, cuda::mr::device_accessible,
                                            cuda::mr::host_accessible>);
static_assert(cuda::mr::resource_with<mr::managed_memory_resource, cuda::mr::host_accessible>);
static_assert(cuda::mr::async_resource_with<mr::pinned_host_memory_resource, cuda::mr::device_accessible,
                                            cuda::mr::host_accessible>);
#endif

static_assert(!std::is_constructible_v<mr::backend_memory_resource, mr::memory_kind>,
              "made only as one of the resources that name a kind");
static_assert(!std::is_copy_constructible_v<mr::backend_memory_resource>, "never sliced off a named kind");
static_assert(std::is_copy_constructible_v<mr::cuda_memory_resource>, "stateless: copies are equal resources");

}  // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(cuda_memory_resource, resource_battery, cuda_resource_factory);
INSTANTIATE_TYPED_TEST_SUITE_P(managed_memory_resource, resource_battery, managed_resource_factory);
INSTANTIATE_TYPED_TEST_SUITE_P(pinned_host_memory_resource, resource_battery, pinned_resource_factory);

namespace {

template <class Resource, mr::memory_kind Kind>
struct kind_case {
  using resource = Resource;
  static constexpr mr::memory_kind kind = Kind;
};

template <class Case>
class backend_memory_resource_kinds : public ::testing::Test {};

using kinds =
  ::testing::Types<kind_case<mr::cuda_memory_resource, mr::memory_kind::device>,
                   kind_case<mr::managed_memory_resource, mr::memory_kind::managed>,
                   kind_case<mr::pinned_host_memory_resource, mr::memory_kind::pinned_host>>;
TYPED_TEST_SUITE(backend_memory_resource_kinds, kinds);

TYPED_TEST(backend_memory_resource_kinds, instances_of_a_kind_are_equal_to_each_other_only)
{
  typename TypeParam::resource a;
  typename TypeParam::resource b;
  EXPECT_EQ(a.kind(), TypeParam::kind);
  EXPECT_TRUE(a.is_equal(b));
  EXPECT_TRUE(a == b);
  void* p = a.allocate(1000);
  b.deallocate(p, 1000);  // equal resources may free each other's memory

  mr::cuda_memory_resource device;
  mr::managed_memory_resource managed;
  mr::pinned_host_memory_resource pinned;
  mr::simulated_memory_resource simulated;
  for (mr::backend_memory_resource const* other : {static_cast<mr::backend_memory_resource const*>(&device),
                                                   static_cast<mr::backend_memory_resource const*>(&managed),
                                                   static_cast<mr::backend_memory_resource const*>(&pinned)}) {
    EXPECT_EQ(a.is_equal(*other), other->kind() == TypeParam::kind);
    EXPECT_EQ(other->is_equal(a), other->kind() == TypeParam::kind);
  }
  EXPECT_FALSE(a.is_equal(simulated));
}

/// deallocate(p, bytes, stream) must not return (and free) while work submitted to `stream` is pending.
/// The stream is held back by a gate and deallocate runs on another thread: it must still be blocked 100 ms
/// later, and return once the gate opens. (The pending work does not touch p, so a failing resource makes
/// this test fail cleanly instead of corrupting the heap.)
TYPED_TEST(backend_memory_resource_kinds, deallocate_waits_for_the_work_on_its_stream)
{
  typename TypeParam::resource resource;
  constexpr std::size_t bytes = 1U << 16;
  backend_stream stream;
  cuda_stream_view const s{stream.get()};
  void* p = resource.allocate(bytes, s);
  gate held;
  held.hold(stream.get());
  std::atomic<bool> returned{false};
  std::thread deallocating{[&] {
    resource.deallocate(p, bytes, s);
    returned.store(true);
  }};
  std::this_thread::sleep_for(std::chrono::milliseconds{100});
  EXPECT_FALSE(returned.load()) << "deallocate returned while work on its stream was still pending";
  held.release();
  deallocating.join();
  EXPECT_TRUE(returned.load());
}

TEST(backend_memory_resource, managed_and_pinned_memory_is_shared_by_the_host_and_the_stream)
{
  mr::managed_memory_resource managed;
  mr::pinned_host_memory_resource pinned;
  for (mr::device_memory_resource* r : {static_cast<mr::device_memory_resource*>(&managed),
                                        static_cast<mr::device_memory_resource*>(&pinned)}) {
    backend_stream stream;
    constexpr std::size_t bytes = 3 * 4096 + 5;
    auto* p = static_cast<unsigned char*>(r->allocate(bytes, stream.get()));
    ASSERT_NE(p, nullptr);
    // Host writes, stream reads.
    std::memset(p, 0x5A, bytes);
    EXPECT_TRUE(is_filled_with(p, bytes, 0x5A, stream.get()));
    // Stream writes, host reads (after synchronising the stream).
    write_pattern(p, bytes, 9, stream.get());
    for (std::size_t i = 0; i < bytes; ++i) {
      ASSERT_EQ(p[i], pattern_byte(9, i)) << "byte " << i;
    }
    r->deallocate(p, bytes, stream.get());
  }
}

/// The message of the gpumem::out_of_memory that allocate(request) throws; a failure if it throws none.
std::string out_of_memory_message(mr::device_memory_resource& r, std::size_t request)
{
  try {
    void* const p = r.allocate(request);
    r.deallocate(p, request);
    ADD_FAILURE() << "a request of " << request << " bytes, more than the memory there is, was served";
  } catch (out_of_memory const& e) {
    return e.what();
  }
  return {};
}

TEST(cuda_memory_resource, out_of_memory_message_names_resource_size_device_free_and_total)
{
  mr::cuda_memory_resource r;
  detail::backend& backend = detail::get_backend();
  int const device = backend.current_device();
  memory_info const before = backend.mem_info(device);
  std::size_t const request = before.total + 256;
  std::string const what = out_of_memory_message(r, request);
  EXPECT_NE(what.find("cuda_memory_resource"), std::string::npos) << what;
  EXPECT_NE(what.find(std::to_string(request)), std::string::npos) << what;
  EXPECT_NE(what.find("device " + std::to_string(device)), std::string::npos) << what;
  EXPECT_NE(what.find(format_bytes(before.total)), std::string::npos) << what;
  EXPECT_NE(what.find("free"), std::string::npos) << what;
  EXPECT_EQ(what.find("physical memory"), std::string::npos) << "the pinned kind's note only: " << what;
}

TEST(pinned_host_memory_resource, out_of_memory_says_pinned_memory_is_host_memory)
{
  mr::pinned_host_memory_resource r;
  std::string const what = out_of_memory_message(r, impossible_pinned_request);
  EXPECT_NE(what.find("pinned_host_memory_resource"), std::string::npos) << what;
  EXPECT_NE(what.find(std::to_string(impossible_pinned_request)), std::string::npos) << what;
  EXPECT_NE(what.find("physical memory"), std::string::npos) << what;
}

TEST(cuda_memory_resource, allocation_takes_memory_from_the_current_device_and_returns_it)
{
  mr::cuda_memory_resource r;
  detail::backend& backend = detail::get_backend();
  int const device = backend.current_device();
  constexpr std::size_t bytes = std::size_t{64} << 20;
  std::size_t const free_before = backend.mem_info(device).free;
  void* p = r.allocate(bytes);
  std::size_t const free_during = backend.mem_info(device).free;
  EXPECT_GE(free_before - std::min(free_before, free_during), bytes) << "the device's free memory did not drop";
  r.deallocate(p, bytes);
  if (backend.kind() == backend_kind::host) {  // exact accounting; a real GPU has other tenants
    EXPECT_EQ(backend.mem_info(device).free, free_before);
  }
}

TEST(cuda_memory_resource, allocates_on_whichever_device_is_current)
{
  detail::backend& backend = detail::get_backend();
  if (backend.device_count() < 2) { GTEST_SKIP() << "needs two devices (host backend: GPUMEM_HOST_DEVICES=2)"; }
  mr::cuda_memory_resource r;
  constexpr std::size_t bytes = std::size_t{32} << 20;
  std::size_t const free0 = backend.mem_info(0).free;
  std::size_t const free1 = backend.mem_info(1).free;
  cuda_set_device_raii const on_one{cuda_device_id{1}};
  void* p = r.allocate(bytes);
  EXPECT_GE(free1 - std::min(free1, backend.mem_info(1).free), bytes) << "device 1's free memory did not drop";
  if (backend.kind() == backend_kind::host) { EXPECT_EQ(backend.mem_info(0).free, free0); }
  r.deallocate(p, bytes);
}

}  // namespace
}  // namespace gpumem::test
