// callback_memory_resource: the conformance battery over callbacks that forward to cudaMalloc, then what the
// callbacks receive (sizes, streams, their arguments), the checks on what they return (null, misaligned),
// an exception passing through, and the construction errors.
#include "conformance/resource_battery.hpp"
#include "support/memory_checks.hpp"
#include "support/sub_allocator_checks.hpp"

#include <gpumem/error.hpp>
#include <gpumem/mr/callback_memory_resource.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpumem::test {
namespace {

/// Callbacks that forward to the process's cuda_memory_resource (the `arg` is that resource).
std::unique_ptr<mr::callback_memory_resource> forwarding_resource()
{
  auto allocate = [](std::size_t bytes, cuda_stream_view stream, void* arg) {
    return static_cast<mr::device_memory_resource*>(arg)->allocate(bytes, stream);
  };
  auto deallocate = [](void* ptr, std::size_t bytes, cuda_stream_view stream, void* arg) {
    static_cast<mr::device_memory_resource*>(arg)->deallocate(ptr, bytes, stream);
  };
  return std::make_unique<mr::callback_memory_resource>(allocate, deallocate, &cuda_upstream(), &cuda_upstream());
}

struct callback_factory {
  static std::unique_ptr<mr::device_memory_resource> make() { return forwarding_resource(); }
  static constexpr char const* name = "cuda_memory_resource";  // its out_of_memory passes through
  static constexpr bool oversubscription_safe = true;
};

}  // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(callback_memory_resource, resource_battery, callback_factory);

namespace {

struct call {
  void* ptr;
  std::size_t bytes;
  cudaStream_t stream;
  void* arg;
};

TEST(callback_memory_resource, callbacks_receive_the_size_the_stream_and_their_own_argument)
{
  std::vector<call> allocations;
  std::vector<call> deallocations;
  int allocate_tag = 0;
  int deallocate_tag = 0;
  mr::callback_memory_resource r{
    [&](std::size_t bytes, cuda_stream_view stream, void* arg) {
      void* const p = cuda_upstream().allocate(bytes, stream);
      allocations.push_back({p, bytes, stream.value(), arg});
      return p;
    },
    [&](void* ptr, std::size_t bytes, cuda_stream_view stream, void* arg) {
      deallocations.push_back({ptr, bytes, stream.value(), arg});
      cuda_upstream().deallocate(ptr, bytes, stream);
    },
    &allocate_tag, &deallocate_tag};
  backend_stream stream;
  cuda_stream_view const s{stream.get()};
  EXPECT_EQ(r.allocate(0, s), nullptr) << "0 bytes never reach the callback";
  r.deallocate(nullptr, 0, s);
  void* const p = r.allocate(1000, s);
  r.deallocate(p, 1000, s);
  ASSERT_EQ(allocations.size(), 1U);
  ASSERT_EQ(deallocations.size(), 1U);
  EXPECT_EQ(allocations[0].bytes, 1000U);
  EXPECT_EQ(allocations[0].stream, stream.get());
  EXPECT_EQ(allocations[0].arg, &allocate_tag);
  EXPECT_EQ(deallocations[0].ptr, p);
  EXPECT_EQ(deallocations[0].bytes, 1000U);
  EXPECT_EQ(deallocations[0].stream, stream.get());
  EXPECT_EQ(deallocations[0].arg, &deallocate_tag);
}

TEST(callback_memory_resource, a_null_result_is_bad_alloc_naming_the_size)
{
  mr::callback_memory_resource r{[](std::size_t, cuda_stream_view, void*) -> void* { return nullptr; },
                                 [](void*, std::size_t, cuda_stream_view, void*) {}};
  try {
    (void)r.allocate(12345);
    FAIL() << "a null result was handed out";
  } catch (out_of_memory const&) {
    FAIL() << "a null result is not known to be exhaustion";
  } catch (bad_alloc const& e) {
    EXPECT_NE(std::string{e.what()}.find("12345"), std::string::npos) << e.what();
  }
}

TEST(callback_memory_resource, a_misaligned_result_is_given_back_and_refused)
{
  std::vector<void*> given_back;
  mr::callback_memory_resource r{
    [](std::size_t bytes, cuda_stream_view stream, void*) {
      return static_cast<char*>(cuda_upstream().allocate(bytes + 256, stream)) + 16;
    },
    [&](void* ptr, std::size_t bytes, cuda_stream_view stream, void*) {
      given_back.push_back(ptr);
      cuda_upstream().deallocate(static_cast<char*>(ptr) - 16, bytes + 256, stream);
    }};
  try {
    (void)r.allocate(100);
    FAIL() << "a misaligned pointer was handed out";
  } catch (logic_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("not aligned to 256"), std::string::npos) << e.what();
  }
  EXPECT_EQ(given_back.size(), 1U) << "the misaligned memory must go back through the deallocate callback";
}

TEST(callback_memory_resource, an_exception_from_the_allocate_callback_passes_through)
{
  mr::callback_memory_resource r{
    [](std::size_t, cuda_stream_view, void*) -> void* { throw std::runtime_error("the callback's own error"); },
    [](void*, std::size_t, cuda_stream_view, void*) {}};
  EXPECT_THROW((void)r.allocate(256), std::runtime_error);
}

TEST(callback_memory_resource, empty_callbacks_are_refused_and_equality_is_identity)
{
  auto const allocate = [](std::size_t, cuda_stream_view, void*) -> void* { return nullptr; };
  auto const deallocate = [](void*, std::size_t, cuda_stream_view, void*) {};
  EXPECT_THROW(mr::callback_memory_resource(nullptr, deallocate), logic_error);
  EXPECT_THROW(mr::callback_memory_resource(allocate, nullptr), logic_error);
  mr::callback_memory_resource a{allocate, deallocate};
  mr::callback_memory_resource b{allocate, deallocate};
  EXPECT_TRUE(a.is_equal(a));
  EXPECT_FALSE(a.is_equal(b));
}

}  // namespace
}  // namespace gpumem::test
