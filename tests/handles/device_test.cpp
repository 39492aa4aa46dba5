// Device queries and the current-device guard.
#include <gpumem/cuda_device_id.hpp>
#include <gpumem/device.hpp>
#include <gpumem/error.hpp>

#include <gtest/gtest.h>

#include <string>
#include <thread>

namespace gpumem {
namespace {

TEST(Device, CountAndCurrent)
{
  EXPECT_GE(get_num_cuda_devices(), 1);
  cuda_device_id const current = get_current_cuda_device();
  EXPECT_GE(current.value(), 0);
  EXPECT_LT(current.value(), get_num_cuda_devices());
}

TEST(Device, SetCurrentDeviceMakesAValidDeviceCurrentAndRefusesOthers)
{
  cuda_device_id const before = get_current_cuda_device();
  int const count = get_num_cuda_devices();
  set_current_cuda_device(before);
  EXPECT_EQ(get_current_cuda_device(), before);
  EXPECT_THROW(set_current_cuda_device(cuda_device_id{count}), logic_error);
  EXPECT_THROW(set_current_cuda_device(cuda_device_id{-1}), logic_error);
  EXPECT_EQ(get_current_cuda_device(), before) << "a refused device leaves the current one";
  if (count < 2) { GTEST_SKIP() << "switching devices needs two (GPUMEM_HOST_DEVICES=2 on the host backend)"; }
  cuda_device_id const other{before.value() == 0 ? 1 : 0};
  std::thread{[other] {
    set_current_cuda_device(other);
    EXPECT_EQ(get_current_cuda_device(), other);
  }}.join();
  EXPECT_EQ(get_current_cuda_device(), before) << "the current device is per thread";
  set_current_cuda_device(other);
  EXPECT_EQ(get_current_cuda_device(), other);
  set_current_cuda_device(before);
}

TEST(Device, Properties)
{
  device_properties const p = get_device_properties(cuda_device_id{0});
  EXPECT_FALSE(p.name.empty());
  EXPECT_GT(p.total_memory, 0U);
  EXPECT_GT(p.multiprocessor_count, 0);
  if (detail::get_backend().kind() == backend_kind::cuda) {
    EXPECT_GE(p.compute_capability_major, 5);
    EXPECT_FALSE(p.pci_bus_id.empty());
  }
}

TEST(Device, MemoryInfoIsConsistentAndTracksAllocations)
{
  memory_info const before = available_device_memory(cuda_device_id{0});
  EXPECT_GT(before.total, 0U);
  EXPECT_LE(before.free, before.total);
  EXPECT_EQ(available_device_memory().total, available_device_memory(get_current_cuda_device()).total);
  std::size_t const bytes = std::size_t{256} << 20;
  void* p = detail::get_backend().malloc_device(bytes);
  ASSERT_NE(p, nullptr);
  memory_info const during = available_device_memory(cuda_device_id{0});
  EXPECT_LE(during.free + bytes, before.free + (std::size_t{64} << 20))  // other processes may move it a little
    << "free memory did not drop by the allocation";
  detail::get_backend().free_device(p);
}

TEST(Device, Versions)
{
  EXPECT_GE(runtime_version(), 12000);
  if (detail::get_backend().kind() == backend_kind::cuda) {
    EXPECT_GE(driver_version(), runtime_version());
  } else {
    EXPECT_EQ(driver_version(), 0);
  }
}

TEST(Device, InvalidDeviceIsALogicErrorNamingIt)
{
  int const count = get_num_cuda_devices();
  for (int bad : {-1, count, count + 7}) {
    try {
      (void)get_device_properties(cuda_device_id{bad});
      FAIL() << "device " << bad << " was accepted";
    } catch (logic_error const& e) {
      std::string const what = e.what();
      EXPECT_NE(what.find("device " + std::to_string(bad) + " does not exist"), std::string::npos) << what;
      EXPECT_NE(what.find(std::to_string(count)), std::string::npos) << what;
    }
  }
  EXPECT_THROW((void)available_device_memory(cuda_device_id{count}), logic_error);
  EXPECT_THROW(cuda_set_device_raii{cuda_device_id{count}}, logic_error);
}

TEST(Device, SetDeviceGuardRestores)
{
  cuda_device_id const original = get_current_cuda_device();
  int const last = get_num_cuda_devices() - 1;
  {
    cuda_set_device_raii guard{cuda_device_id{last}};
    EXPECT_EQ(get_current_cuda_device().value(), last);
  }
  EXPECT_EQ(get_current_cuda_device(), original);
}

TEST(Device, Synchronize) { synchronize_device(); }

TEST(CudaDeviceId, ValueSemantics)
{
  constexpr cuda_device_id a{1};
  constexpr cuda_device_id b{2};
  static_assert(a < b && a != b && a.value() == 1);
  EXPECT_EQ(cuda_device_id{3}, cuda_device_id{3});
}

}  // namespace
}  // namespace gpumem
