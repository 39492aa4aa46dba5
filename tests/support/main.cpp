// The test binary's main: picks the backend (GPUMEM_BACKEND), and when the cuda backend is asked for on a
// machine with no usable device, exits with 77 so that ctest reports the run as skipped, not failed.
// After the last test it checks that no test left a block of the default pinned pool in use (a leak), and
// returns the pool's chunks to the system, so that compute-sanitizer's leak check sees nothing left.
#include <gpumem/backend/backend.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/pinned_memory_pool.hpp>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace {

class default_pinned_pool_check final : public ::testing::Environment {
 public:
  void TearDown() override
  {
    auto& pool = gpumem::mr::get_default_pinned_pool();
    pool.wait_pending();
    auto const usage = pool.usage();
    EXPECT_EQ(usage.in_use, 0U) << "the tests left " << usage.in_use
                                << " bytes of the default pinned pool in use: a pinned block leaked";
    pool.release_free_chunks();
    EXPECT_EQ(pool.usage().reserved, usage.in_use) << "free chunks of the default pinned pool were not released";
  }
};

}  // namespace

int main(int argc, char** argv)
{
  ::testing::InitGoogleTest(&argc, argv);
  bool const listing = ::testing::GTEST_FLAG(list_tests);
  char const* requested = std::getenv("GPUMEM_BACKEND");
  if (!listing && requested != nullptr && std::string_view{requested} == "cuda") {
    try {
      (void)gpumem::detail::get_backend();
    } catch (gpumem::cuda_error const& e) {
      std::printf("SKIPPED: GPUMEM_BACKEND=cuda but no CUDA device is usable here (%s)\n", e.what());
      return 77;
    }
  }
  if (!listing) {
    std::printf("gpumem tests on the %s backend\n",
                std::string(gpumem::to_string(gpumem::detail::get_backend().kind())).c_str());
  }
  if (!listing) { ::testing::AddGlobalTestEnvironment(new default_pinned_pool_check); }  // gtest owns it
  return RUN_ALL_TESTS();
}
