// The C API (gpumem.h): the C translation unit's checks (tests/support/c_api_check.c), plus what is easier
// to check from C++: status mapping of every error kind, per-thread last error, interop with the C++ API.
#include "support/counting_resource.hpp"
#include "support/memory_checks.hpp"

#include <gpumem.h>
#include <gpumem/backend/backend.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/per_device_resource.hpp>
#include <gpumem/plain.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <thread>

extern "C" int gpumem_c_api_check(void);

namespace gpumem::test {
namespace {

class c_api : public ::testing::Test {
 protected:
  void SetUp() override
  {
    mr::reset_all_device_resources();
    baseline_ = live_allocation_count();
  }
  void TearDown() override { EXPECT_EQ(live_allocation_count(), baseline_) << "the test leaked allocations"; }

 private:
  std::size_t baseline_{};
};

TEST_F(c_api, every_function_works_from_c)
{
  EXPECT_EQ(gpumem_c_api_check(), 0) << "see the failed checks printed above";
}

TEST_F(c_api, out_of_memory_maps_to_its_status_and_message)
{
  detail::backend& backend = detail::get_backend();
  std::size_t const request = backend.mem_info(backend.current_device()).total * 2;
  void* p = &p;
  EXPECT_EQ(gpumem_alloc(request, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(p, nullptr);
  std::string const what = gpumem_last_error();
  EXPECT_NE(what.find(std::to_string(request)), std::string::npos) << what;
  EXPECT_NE(what.find("out of memory"), std::string::npos) << what;
}

TEST_F(c_api, zeros_and_stream_ordered_pair)
{
  backend_stream stream;
  void* p = nullptr;
  ASSERT_EQ(gpumem_alloc_async(5000, stream.get(), &p), GPUMEM_SUCCESS);
  write_pattern(p, 5000, 12, stream.get());
  EXPECT_TRUE(has_pattern(p, 5000, 12, stream.get()));
  EXPECT_EQ(gpumem_free_async(p, stream.get()), GPUMEM_SUCCESS);

  void* z = nullptr;
  ASSERT_EQ(gpumem_zeros(70'000, &z), GPUMEM_SUCCESS);
  EXPECT_TRUE(is_filled_with(z, 70'000, 0, cuda_stream_default));
  EXPECT_EQ(gpumem_free(z), GPUMEM_SUCCESS);
}

TEST_F(c_api, memory_is_shared_with_the_cpp_plain_api)
{
  void* p = nullptr;
  ASSERT_EQ(gpumem_alloc(300, &p), GPUMEM_SUCCESS);
  EXPECT_EQ(allocation_size(p), 300U);
  gpumem::free(p);
  void* q = alloc(400);
  std::size_t size = 0;
  EXPECT_EQ(gpumem_allocation_size(q, &size), GPUMEM_SUCCESS);
  EXPECT_EQ(size, 400U);
  EXPECT_EQ(gpumem_free(q), GPUMEM_SUCCESS);
}

TEST_F(c_api, a_shared_resource_lives_until_its_memory_is_freed_even_when_replaced)
{
  bool destroyed = false;
  std::shared_ptr<mr::device_memory_resource> shared{new counting_resource{},  // NOLINT(cppcoreguidelines-owning-memory)
                                                     [&destroyed](mr::device_memory_resource* resource) {
                                                       destroyed = true;
                                                       delete resource;  // NOLINT(cppcoreguidelines-owning-memory)
                                                     }};
  (void)mr::set_current_device_resource(shared);
  void* p = nullptr;
  ASSERT_EQ(gpumem_alloc(1000, &p), GPUMEM_SUCCESS);
  (void)mr::set_current_device_resource(nullptr);
  shared.reset();
  EXPECT_FALSE(destroyed) << "the pointer holds its resource";
  EXPECT_EQ(gpumem_free(p), GPUMEM_SUCCESS) << gpumem_last_error();
  EXPECT_TRUE(destroyed);
}

TEST_F(c_api, freeing_into_a_replaced_raw_resource_is_an_invalid_value)
{
  counting_resource counting;
  (void)mr::set_current_device_resource(&counting);
  void* p = nullptr;
  ASSERT_EQ(gpumem_alloc(1000, &p), GPUMEM_SUCCESS);
  (void)mr::set_current_device_resource(nullptr);
  EXPECT_EQ(gpumem_free(p), GPUMEM_ERROR_INVALID_VALUE);
  std::string const what = gpumem_last_error();
  EXPECT_NE(what.find("replaced"), std::string::npos) << what;
  EXPECT_EQ(counting.deallocations(), 0U) << "the replaced resource must not be called";
  counting.deallocate(p, 1000);
}

TEST_F(c_api, last_error_is_per_thread_and_kept_until_the_next_failure)
{
  int unknown = 0;
  ASSERT_EQ(gpumem_free(&unknown), GPUMEM_ERROR_INVALID_VALUE);
  std::string const mine = gpumem_last_error();
  EXPECT_NE(mine.find(format_pointer(&unknown)), std::string::npos) << mine;

  void* p = nullptr;
  ASSERT_EQ(gpumem_alloc(64, &p), GPUMEM_SUCCESS);
  EXPECT_EQ(std::string{gpumem_last_error()}, mine) << "a success must not clear the last error";
  EXPECT_EQ(gpumem_free(p), GPUMEM_SUCCESS);

  std::string other_before;
  std::string other_after;
  std::thread other{[&] {
    other_before = gpumem_last_error();
    (void)gpumem_alloc(16, nullptr);
    other_after = gpumem_last_error();
  }};
  other.join();
  EXPECT_EQ(other_before, "") << "a thread with no failure has an empty last error";
  EXPECT_NE(other_after.find("NULL"), std::string::npos) << other_after;
  EXPECT_EQ(std::string{gpumem_last_error()}, mine) << "another thread's failure changed this thread's error";
}

TEST_F(c_api, status_strings_are_distinct)
{
  std::set<std::string> texts;
  for (gpumem_status const status : {GPUMEM_SUCCESS, GPUMEM_ERROR_OUT_OF_MEMORY, GPUMEM_ERROR_BAD_ALLOC,
                                     GPUMEM_ERROR_INVALID_VALUE, GPUMEM_ERROR_CUDA, GPUMEM_ERROR_UNKNOWN}) {
    char const* text = gpumem_status_string(status);
    ASSERT_NE(text, nullptr);
    EXPECT_NE(std::strlen(text), 0U);
    texts.insert(text);
  }
  EXPECT_EQ(texts.size(), 6U);
  EXPECT_EQ(std::string{gpumem_status_string(static_cast<gpumem_status>(7))}, "unrecognised gpumem_status value");
}

}  // namespace
}  // namespace gpumem::test
