// The battery's own instruments must be able to fail: a check that cannot see overlap or a wrong pattern
// would let every resource pass. Runs them on deliberately bad inputs.
#include "support/memory_checks.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gpumem::test {
namespace {

TEST(memory_checks, do_not_overlap_sees_overlap_duplicates_and_null)
{
  alignas(256) static char arena[4096];
  EXPECT_TRUE(do_not_overlap({{arena, 256}, {arena + 256, 256}, {arena + 1024, 1}}));
  auto const overlapping = do_not_overlap({{arena + 1024, 100}, {arena, 257}, {arena + 256, 256}});
  EXPECT_FALSE(overlapping);
  EXPECT_NE(std::string{overlapping.message()}.find("overlaps"), std::string::npos) << overlapping.message();
  EXPECT_FALSE(do_not_overlap({{arena, 16}, {arena, 16}})) << "the same pointer twice";
  EXPECT_FALSE(do_not_overlap({{arena, 16}, {nullptr, 16}}));
}

TEST(memory_checks, pattern_checks_see_a_single_wrong_byte_and_a_swapped_seed)
{
  mr::cuda_memory_resource resource;
  backend_stream stream;
  constexpr std::size_t bytes = 70'000;
  void* p = resource.allocate(bytes, stream.get());
  write_pattern(p, bytes, 3, stream.get());
  EXPECT_TRUE(has_pattern(p, bytes, 3, stream.get()));
  EXPECT_FALSE(has_pattern(p, bytes, 4, stream.get())) << "another seed must not match";

  // One byte changed, deep inside.
  unsigned char const wrong = static_cast<unsigned char>(pattern_byte(3, 65'537) ^ 0x01U);
  detail::get_backend().memcpy_async(static_cast<char*>(p) + 65'537, &wrong, 1, stream.get());
  detail::get_backend().stream_synchronize(stream.get());
  auto const result = has_pattern(p, bytes, 3, stream.get());
  EXPECT_FALSE(result);
  EXPECT_NE(std::string{result.message()}.find("byte 65537"), std::string::npos) << result.message();

  detail::get_backend().memset_async(p, 0, bytes, stream.get());
  EXPECT_TRUE(is_filled_with(p, bytes, 0, stream.get()));
  detail::get_backend().memset_async(static_cast<char*>(p) + bytes - 1, 1, 1, stream.get());
  EXPECT_FALSE(is_filled_with(p, bytes, 0, stream.get())) << "the last byte is not zero";
  resource.deallocate(p, bytes, stream.get());
}

TEST(memory_checks, the_pattern_is_not_periodic_in_256_bytes)
{
  // A buffer shifted by a multiple of 256 (a classic off-by-a-block bug) must not still match.
  for (std::size_t shift = 256; shift <= 65536; shift *= 2) {
    int differences = 0;
    for (std::size_t i = 0; i < 4096; ++i) {
      differences += pattern_byte(1, i) != pattern_byte(1, i + shift) ? 1 : 0;
    }
    EXPECT_GT(differences, 1000) << "shift " << shift;
  }
}

}  // namespace
}  // namespace gpumem::test
