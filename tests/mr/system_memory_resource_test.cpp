// system_memory_resource: the conformance battery where the device can access pageable memory (always on
// the host backend; on a GPU only with HMM or ATS), the host backend's support, the error naming the device
// where it cannot, equality, and memory the host can use directly.
#include "conformance/resource_battery.hpp"
#include "support/memory_checks.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/cuda_device_id.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/system_memory_resource.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gpumem::test {
namespace {

bool supported() { return mr::is_system_memory_supported(get_current_cuda_device()); }

struct system_factory {
  static std::optional<std::string> unsupported()
  {
    if (supported()) { return std::nullopt; }
    return "the device cannot access pageable host memory (no HMM or ATS)";
  }
  static std::unique_ptr<mr::device_memory_resource> make() { return std::make_unique<mr::system_memory_resource>(); }
  static constexpr char const* name = "system_memory_resource";
  static constexpr bool oversubscription_safe = true;
  static std::size_t oom_request_bytes() { return std::size_t{1} << 62; }  // no system has it
};

}  // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(system_memory_resource, resource_battery, system_factory);

namespace {

TEST(system_memory_resource, the_host_backend_supports_it_and_fabric_it_does_not)
{
  detail::backend& backend = detail::get_backend();
  if (backend.kind() != backend_kind::host) { GTEST_SKIP() << "checks the host backend's emulated devices"; }
  for (int device = 0; device < backend.device_count(); ++device) {
    EXPECT_TRUE(mr::is_system_memory_supported(cuda_device_id{device}));
    EXPECT_TRUE(backend.properties(device).pageable_memory_access);
    EXPECT_FALSE(backend.properties(device).fabric_handles_supported);
  }
}

TEST(system_memory_resource, construction_follows_the_device_attribute)
{
  if (supported()) {
    mr::system_memory_resource const r;
    EXPECT_EQ(r.device(), get_current_cuda_device());
    return;
  }
  try {
    mr::system_memory_resource const r;
    FAIL() << "made on a device that cannot access pageable memory";
  } catch (cuda_error const& e) {
    EXPECT_EQ(e.code(), cudaErrorNotSupported);
    std::string const what = e.what();
    EXPECT_NE(what.find("device " + std::to_string(get_current_cuda_device().value())), std::string::npos) << what;
    EXPECT_NE(what.find("cudaDevAttrPageableMemoryAccess"), std::string::npos) << what;
  }
}

TEST(system_memory_resource, its_memory_is_host_memory_the_program_reads_and_writes_directly)
{
  if (!supported()) { GTEST_SKIP() << "the device cannot access pageable host memory"; }
  mr::system_memory_resource r;
  backend_stream stream;
  cuda_stream_view const s{stream.get()};
  auto* const p = static_cast<unsigned char*>(r.allocate(4096, s));
  std::memset(p, 0x5a, 4096);  // the host writes it without a copy
  std::vector<unsigned char> back(4096);
  detail::get_backend().memcpy_async(back.data(), p, 4096, stream.get());
  detail::get_backend().stream_synchronize(stream.get());
  EXPECT_EQ(back[0], 0x5a);
  EXPECT_EQ(back[4095], 0x5a);
  r.deallocate(p, 4096, s);
}

TEST(system_memory_resource, every_instance_equals_every_other_and_no_other_resource)
{
  if (!supported()) { GTEST_SKIP() << "the device cannot access pageable host memory"; }
  mr::system_memory_resource a;
  mr::system_memory_resource b;
  mr::cuda_memory_resource cuda;
  EXPECT_TRUE(a.is_equal(b));
  EXPECT_TRUE(b.is_equal(a));
  EXPECT_FALSE(a.is_equal(cuda));
  void* const p = a.allocate(512);
  b.deallocate(p, 512);  // equal resources free each other's memory
}

}  // namespace
}  // namespace gpumem::test
