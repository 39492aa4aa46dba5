// Exception types, messages, expects(), GPUMEM_CUDA_TRY.
#include <gpumem/error.hpp>

#include <gtest/gtest.h>

#include <string>
#include <type_traits>

namespace gpumem {
namespace {

static_assert(std::is_base_of_v<std::logic_error, logic_error>);
static_assert(std::is_base_of_v<std::runtime_error, cuda_error>);
static_assert(std::is_base_of_v<std::bad_alloc, bad_alloc>);
static_assert(std::is_base_of_v<bad_alloc, out_of_memory>);

bool contains(std::string const& text, std::string const& part) { return text.find(part) != std::string::npos; }

TEST(Error, FormatBytes)
{
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB (1024 bytes)");
  EXPECT_EQ(format_bytes(std::size_t{3} << 29), "1.50 GiB (1610612736 bytes)");
}

TEST(Error, FormatPointer)
{
  EXPECT_EQ(format_pointer(reinterpret_cast<void const*>(std::uintptr_t{0x7f12a0000000})), "0x7f12a0000000");
  EXPECT_EQ(format_pointer(nullptr), "0x0");
}

TEST(Error, ExpectsNamesTheFunction)
{
  try {
    expects(false, "the widget count must be positive");
    FAIL();
  } catch (logic_error const& e) {
    EXPECT_TRUE(contains(e.what(), "the widget count must be positive")) << e.what();
    EXPECT_TRUE(contains(e.what(), "TestBody")) << e.what();
  }
  EXPECT_NO_THROW(expects(true, "never thrown"));
  EXPECT_THROW(expects<bad_alloc>(false, "custom type"), bad_alloc);
}

TEST(Error, OutOfMemoryMessageNamesEverything)
{
  try {
    throw_out_of_memory("pool_memory_resource", std::size_t{3} << 30, 0, "largest free block 1.00 MiB");
    FAIL();
  } catch (out_of_memory const& e) {
    std::string const what = e.what();
    EXPECT_TRUE(contains(what, "pool_memory_resource")) << what;
    EXPECT_TRUE(contains(what, "3.00 GiB (3221225472 bytes)")) << what;
    EXPECT_TRUE(contains(what, "device 0")) << what;
    EXPECT_TRUE(contains(what, "free of")) << what;
    EXPECT_TRUE(contains(what, "total")) << what;
    EXPECT_TRUE(contains(what, "largest free block 1.00 MiB")) << what;
  }
}

TEST(Error, CudaTryNamesCallCodeAndText)
{
  try {
    GPUMEM_CUDA_TRY(cudaErrorInvalidValue);
    FAIL();
  } catch (cuda_error const& e) {
    EXPECT_EQ(e.code(), cudaErrorInvalidValue);
    std::string const what = e.what();
    EXPECT_TRUE(contains(what, "cudaErrorInvalidValue")) << what;
    EXPECT_TRUE(contains(what, "error_test.cpp")) << what;
  }
  EXPECT_NO_THROW(GPUMEM_CUDA_TRY(cudaSuccess));
}

TEST(Error, BadAllocCarriesItsMessage)
{
  bad_alloc const e{"size 18446744073709551615 overflows"};
  EXPECT_STREQ(e.what(), "size 18446744073709551615 overflows");
}

}  // namespace
}  // namespace gpumem
