// peak_above_device_note (device_fit.hpp): silent while the peak fits (equal included), one line naming
// both sizes, the failures and --simulate above it; current_device_memory_bytes is the backend's total.
#include <gpumem/device.hpp>
#include <gpumem/replay/device_fit.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <limits>
#include <string>

namespace gpumem::test {
namespace {

constexpr std::size_t GiB = std::size_t{1} << 30;

TEST(replay_device_fit, a_peak_that_fits_needs_no_note)
{
  EXPECT_FALSE(peak_above_device_note(0, 8 * GiB, 0));
  EXPECT_FALSE(peak_above_device_note(8 * GiB - 1, 8 * GiB, 0));
  EXPECT_FALSE(peak_above_device_note(8 * GiB, 8 * GiB, 0));
}

TEST(replay_device_fit, a_peak_above_the_device_names_both_sizes_and_the_remedy)
{
  auto const note = peak_above_device_note(8 * GiB + 3 * (GiB / 4), 8 * GiB, 497);
  ASSERT_TRUE(note);
  EXPECT_NE(note->find("peak live bytes (8.75 GiB)"), std::string::npos) << *note;
  EXPECT_NE(note->find("device's memory (8 GiB)"), std::string::npos) << *note;
  EXPECT_NE(note->find("497 allocations failed"), std::string::npos) << *note;
  EXPECT_NE(note->find("--simulate"), std::string::npos) << *note;
  EXPECT_NE(peak_above_device_note(9 * GiB, 8 * GiB, 1)->find(" 1 allocation failed"), std::string::npos);
  EXPECT_EQ(note->find('\n'), std::string::npos) << "one line";
}

TEST(replay_device_fit, a_saturated_peak_is_above_any_device)
{
  auto const note = peak_above_device_note(std::numeric_limits<std::size_t>::max(), 80 * GiB, 2);
  ASSERT_TRUE(note);
  EXPECT_NE(note->find("16 EiB"), std::string::npos) << *note;
}

TEST(replay_device_fit, device_memory_is_the_current_devices_total)
{
  EXPECT_EQ(current_device_memory_bytes(), available_device_memory().total);
  EXPECT_GT(current_device_memory_bytes(), 0U);
}

}  // namespace
}  // namespace gpumem::test
