// The test binary's main: picks the backend (GPUMEM_BACKEND), and when the cuda backend is asked for on a
// machine with no usable device, exits with 77 so that ctest reports the run as skipped, not failed.
#include <gpumem/backend/backend.hpp>
#include <gpumem/error.hpp>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>

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
  return RUN_ALL_TESTS();
}
