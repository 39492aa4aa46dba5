// prefetch (prefetch.hpp): managed memory stays usable after a prefetch to its device or to the host, the
// prefetch is ordered on its stream and does not wait for it (held back by a gate: host backend), memory that
// cannot migrate is a no-op (RMM's rule) while the backend call itself refuses it as CUDA does, the span
// overload, and bad arguments are logic errors naming what is wrong.
#include "support/gate.hpp"
#include "support/memory_checks.hpp"

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/cuda_stream.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/managed_memory_resource.hpp>
#include <gpumem/mr/pinned_host_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/prefetch.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace gpumem::test {
namespace {

constexpr std::size_t bytes = std::size_t{1} << 20;

TEST(prefetch, managed_memory_is_usable_after_a_prefetch_to_its_device)
{
  mr::managed_memory_resource managed;
  cuda_stream stream;
  void* const p = managed.allocate(bytes, stream);
  write_pattern(p, bytes, 5, stream.value());
  prefetch(p, bytes, get_current_cuda_device(), stream);
  EXPECT_TRUE(has_pattern(p, bytes, 5, stream.value()));
  prefetch(p, 0, get_current_cuda_device(), stream);  // nothing to move
  prefetch(nullptr, 0, get_current_cuda_device(), stream);
  stream.synchronize();
  managed.deallocate(p, bytes, stream);
}

TEST(prefetch, is_ordered_on_its_stream_and_does_not_wait_for_it)
{
  if (!on_host_backend()) { GTEST_SKIP() << "a gate on a GPU stream would also hold the prefetch; host only"; }
  mr::managed_memory_resource managed;
  cuda_stream stream;
  void* const p = managed.allocate(bytes, stream);
  gate held;
  held.hold(stream.value());
  prefetch(p, bytes, get_current_cuda_device(), stream);  // returns at once: the prefetch is queued
  EXPECT_FALSE(stream.is_idle()) << "the gate and the prefetch are still pending";
  held.release();
  stream.synchronize();
  EXPECT_TRUE(stream.is_idle());
  managed.deallocate(p, bytes, stream);
}

TEST(prefetch, bad_arguments_are_logic_errors)
{
  mr::managed_memory_resource managed;
  cuda_stream stream;
  void* const p = managed.allocate(256, stream);
  try {
    prefetch(p, 256, cuda_device_id{get_num_cuda_devices()}, stream);
    ADD_FAILURE() << "a device that does not exist was accepted";
  } catch (logic_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("does not exist"), std::string::npos) << e.what();
  }
  EXPECT_THROW(prefetch(nullptr, 256, get_current_cuda_device(), stream), logic_error);
  stream.synchronize();
  managed.deallocate(p, 256, stream);
}


TEST(prefetch, memory_that_cannot_migrate_is_a_no_op_as_in_rmm)
{
  mr::cuda_memory_resource device_memory;
  mr::pool_memory_resource pool{&device_memory, std::size_t{1} << 22};
  cuda_stream stream;
  void* const plain = device_memory.allocate(bytes, stream);
  void* const pooled = pool.allocate(4096, stream);
  write_pattern(pooled, 4096, 9, stream.value());
  EXPECT_NO_THROW(prefetch(plain, bytes, get_current_cuda_device(), stream));
  EXPECT_NO_THROW(prefetch(pooled, 4096, get_current_cuda_device(), stream));
  EXPECT_NO_THROW(prefetch(pooled, 4096, cuda_device_id{cudaCpuDeviceId}, stream));
  std::vector<std::uint8_t> host(4096);
  EXPECT_NO_THROW(prefetch(host.data(), host.size(), get_current_cuda_device(), stream)) << "pageable memory";
  EXPECT_TRUE(has_pattern(pooled, 4096, 9, stream.value()));
  stream.synchronize();
  pool.deallocate(pooled, 4096, stream);
  device_memory.deallocate(plain, bytes, stream);
}

TEST(prefetch, the_backend_says_what_can_migrate_and_refuses_the_rest_as_cuda_does)
{
  detail::backend& backend = detail::get_backend();
  int const device = backend.current_device();
  mr::cuda_memory_resource device_memory;
  mr::managed_memory_resource managed;
  mr::pinned_host_memory_resource pinned;
  cuda_stream stream;
  void* const d = device_memory.allocate(4096, stream);
  void* const m = managed.allocate(4096, stream);
  void* const h = pinned.allocate(4096);
  bool const concurrent = backend.properties(device).concurrent_managed_access;
  EXPECT_EQ(backend.is_migratable(m, device), concurrent);
  EXPECT_EQ(backend.is_migratable(static_cast<char*>(m) + 100, cudaCpuDeviceId), concurrent) << "inside it";
  EXPECT_FALSE(backend.is_migratable(d, device));
  EXPECT_FALSE(backend.is_migratable(h, device));
  EXPECT_FALSE(backend.is_migratable(nullptr, device));
  try {
    backend.mem_prefetch_async(d, 4096, device, stream.value());
    ADD_FAILURE() << "cudaMemPrefetchAsync of device memory was accepted";
  } catch (cuda_error const& e) {
    EXPECT_EQ(e.code(), cudaErrorInvalidValue) << e.what();
  }
  stream.synchronize();
  pinned.deallocate(h, 4096);
  managed.deallocate(m, 4096, stream);
  device_memory.deallocate(d, 4096, stream);
}

TEST(prefetch, host_backend_refuses_a_range_past_the_managed_allocation)
{
  if (!on_host_backend()) { GTEST_SKIP() << "checks the host backend's emulation"; }
  detail::backend& backend = detail::get_backend();
  mr::managed_memory_resource managed;
  cuda_stream stream;
  void* const m = managed.allocate(4096, stream);
  EXPECT_NO_THROW(backend.mem_prefetch_async(m, 4096, cudaCpuDeviceId, stream.value()));
  EXPECT_THROW(backend.mem_prefetch_async(m, 8192, backend.current_device(), stream.value()), cuda_error);
  stream.synchronize();
  managed.deallocate(m, 4096, stream);
}

TEST(prefetch, a_span_and_a_prefetch_to_the_host)
{
  mr::managed_memory_resource managed;
  cuda_stream stream;
  auto* const values = static_cast<std::int32_t*>(managed.allocate(1024 * sizeof(std::int32_t), stream));
  write_pattern(values, 1024 * sizeof(std::int32_t), 3, stream.value());
  prefetch(std::span<std::int32_t const>{values, 1024}, get_current_cuda_device(), stream);
  prefetch(std::span<std::int32_t const>{values, 1024}, cuda_device_id{cudaCpuDeviceId}, stream);
  stream.synchronize();
  EXPECT_TRUE(has_pattern(values, 1024 * sizeof(std::int32_t), 3, stream.value()));
  managed.deallocate(values, 1024 * sizeof(std::int32_t), stream);
}

}  // namespace
}  // namespace gpumem::test
