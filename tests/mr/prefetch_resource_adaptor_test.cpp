// prefetch_resource_adaptor: the conformance battery over managed memory, then: the memory is usable, the
// prefetch is ordered on the allocation's stream (held back by a gate, host backend), the backend call checks
// its arguments, and memory that cannot migrate (a pool over cudaMalloc) is served unprefetched, as in RMM.
#include "conformance/resource_battery.hpp"
#include "support/gate.hpp"
#include "support/memory_checks.hpp"
#include "support/sub_allocator_checks.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/managed_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/prefetch_resource_adaptor.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <memory>

namespace gpumem::test {
namespace {

mr::managed_memory_resource& managed_upstream()
{
  static mr::managed_memory_resource upstream;
  return upstream;
}

struct prefetch_factory {
  static std::unique_ptr<mr::device_memory_resource> make()
  {
    return std::make_unique<mr::prefetch_resource_adaptor>(&managed_upstream());
  }
  static constexpr char const* name = "managed_memory_resource";
  static constexpr bool oversubscription_safe = false;  // as managed memory's
};

}  // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(prefetch_resource_adaptor, resource_battery, prefetch_factory);

namespace {

bool on_host_backend() { return detail::get_backend().kind() == backend_kind::host; }

TEST(prefetch_resource_adaptor, memory_is_usable_on_the_allocating_stream)
{
  mr::prefetch_resource_adaptor prefetch{&managed_upstream()};
  EXPECT_EQ(prefetch.upstream_resource(), &managed_upstream());
  backend_stream stream;
  void* p = prefetch.allocate(1 * MiB, cuda_stream_view{stream.get()});
  write_pattern(p, 1 * MiB, 11, stream.get());
  EXPECT_TRUE(has_pattern(p, 1 * MiB, 11, stream.get()));
  prefetch.deallocate(p, 1 * MiB, cuda_stream_view{stream.get()});
}

TEST(prefetch_resource_adaptor, the_prefetch_is_ordered_on_the_allocating_stream)
{
  if (!on_host_backend()) { GTEST_SKIP() << "a gate on a GPU stream would also hold the prefetch; host only"; }
  detail::backend& backend = detail::get_backend();
  mr::prefetch_resource_adaptor prefetch{&managed_upstream()};
  backend_stream stream;
  gate held;
  held.hold(stream.get());
  void* p = prefetch.allocate(4096, cuda_stream_view{stream.get()});  // returns at once: the prefetch is queued
  EXPECT_FALSE(backend.stream_query(stream.get())) << "the stream's work (gate, prefetch) is still pending";
  held.release();
  backend.stream_synchronize(stream.get());
  EXPECT_TRUE(backend.stream_query(stream.get()));
  prefetch.deallocate(p, 4096, cuda_stream_view{stream.get()});
}

TEST(prefetch_resource_adaptor, the_backend_call_checks_its_arguments)
{
  if (!on_host_backend()) { GTEST_SKIP() << "checks the host backend's emulation"; }
  detail::backend& backend = detail::get_backend();
  void* p = managed_upstream().allocate(256);
  backend_stream stream;
  EXPECT_NO_THROW(backend.mem_prefetch_async(p, 256, backend.current_device(), stream.get()));
  EXPECT_NO_THROW(backend.mem_prefetch_async(nullptr, 0, backend.current_device(), stream.get()));
  EXPECT_THROW(backend.mem_prefetch_async(nullptr, 256, backend.current_device(), stream.get()), cuda_error);
  EXPECT_THROW(backend.mem_prefetch_async(p, 256, backend.device_count(), stream.get()), cuda_error);
  backend.stream_synchronize(stream.get());
  managed_upstream().deallocate(p, 256);
}

TEST(prefetch_resource_adaptor, construction_and_equality)
{
  EXPECT_THROW(mr::prefetch_resource_adaptor{nullptr}, logic_error);
  mr::simulated_memory_resource other;
  mr::prefetch_resource_adaptor a{&managed_upstream()};
  mr::prefetch_resource_adaptor b{&managed_upstream()};
  mr::prefetch_resource_adaptor c{&other};
  EXPECT_TRUE(a.is_equal(b));
  EXPECT_FALSE(a.is_equal(c));
}


TEST(prefetch_resource_adaptor, memory_that_cannot_migrate_is_served_unprefetched_as_in_rmm)
{
  // A pool over cudaMalloc memory: cudaMemPrefetchAsync would refuse it; the adaptor serves it as it is.
  mr::pool_memory_resource pool{&cuda_upstream(), 4 * MiB};
  mr::prefetch_resource_adaptor prefetch{&pool};
  backend_stream stream;
  void* p = nullptr;
  ASSERT_NO_THROW(p = prefetch.allocate(1 * MiB, cuda_stream_view{stream.get()}));
  write_pattern(p, 1 * MiB, 21, stream.get());
  EXPECT_TRUE(has_pattern(p, 1 * MiB, 21, stream.get()));
  prefetch.deallocate(p, 1 * MiB, cuda_stream_view{stream.get()});
  detail::get_backend().stream_synchronize(stream.get());
}

}  // namespace
}  // namespace gpumem::test
