// limiting_resource_adaptor: the conformance battery (its own out-of-memory message), then the cap at its
// exact boundary with requests rounded up to the alignment, the message, an upstream failure giving its
// reservation back, construction errors, and 8 threads never exceeding the cap together.
#include "conformance/resource_battery.hpp"
#include "support/sub_allocator_checks.hpp"

#include <gpumem/error.hpp>
#include <gpumem/mr/limiting_resource_adaptor.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace gpumem::test {
namespace {

struct limiting_factory {
  static std::unique_ptr<mr::device_memory_resource> make()
  {
    return std::make_unique<mr::limiting_resource_adaptor>(&cuda_upstream(), 1 * GiB);
  }
  static constexpr char const* name = "limiting_resource_adaptor";
  static constexpr bool oversubscription_safe = true;
  static std::size_t oom_request_bytes() { return 1 * GiB + 1; }
};

}  // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(limiting_resource_adaptor, resource_battery, limiting_factory);

namespace {

TEST(limiting_resource_adaptor, the_limit_holds_at_its_exact_boundary)
{
  mr::simulated_memory_resource upstream;
  mr::limiting_resource_adaptor limited{&upstream, 4096};
  EXPECT_EQ(limited.get_allocation_limit(), 4096U);
  EXPECT_EQ(limited.upstream_resource(), &upstream);
  void* all = limited.allocate(4096);
  EXPECT_EQ(limited.get_allocated_bytes(), 4096U);
  EXPECT_THROW((void)limited.allocate(1), out_of_memory);
  limited.deallocate(all, 4096);
  EXPECT_EQ(limited.get_allocated_bytes(), 0U);

  // Requests count rounded up to 256: 8 requests of 257 bytes count 512 each.
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) { blocks.push_back(limited.allocate(257)); }
  EXPECT_EQ(limited.get_allocated_bytes(), 4096U);
  EXPECT_THROW((void)limited.allocate(1), out_of_memory);
  limited.deallocate(blocks.back(), 257);
  blocks.pop_back();
  EXPECT_EQ(limited.get_allocated_bytes(), 3584U);
  blocks.push_back(limited.allocate(512));  // exactly fills the limit again
  EXPECT_EQ(limited.get_allocated_bytes(), 4096U);
  limited.deallocate(blocks.back(), 512);
  blocks.pop_back();
  for (void* p : blocks) { limited.deallocate(p, 257); }
  EXPECT_EQ(limited.get_allocated_bytes(), 0U);
  EXPECT_EQ(upstream.allocation_count(), 0U);
  EXPECT_EQ(upstream.invalid_deallocations(), 0U);
}

TEST(limiting_resource_adaptor, has_room_for_says_whether_a_request_fits_now)
{
  mr::simulated_memory_resource upstream;
  mr::limiting_resource_adaptor limited{&upstream, 4096};
  EXPECT_TRUE(limited.has_room_for(4096));
  EXPECT_FALSE(limited.has_room_for(4097));
  EXPECT_FALSE(limited.has_room_for(SIZE_MAX)) << "a size that overflows when rounded up";
  void* p = limited.allocate(3840);
  EXPECT_TRUE(limited.has_room_for(256));
  EXPECT_FALSE(limited.has_room_for(257)) << "counts rounded up to 256";
  limited.deallocate(p, 3840);
  EXPECT_TRUE(limited.has_room_for(4096));
}

TEST(limiting_resource_adaptor, a_request_that_rounds_past_the_limit_fails)
{
  mr::simulated_memory_resource upstream;
  mr::limiting_resource_adaptor limited{&upstream, 1000};
  EXPECT_THROW((void)limited.allocate(1000), out_of_memory);  // counts 1024
  void* p = limited.allocate(768);
  EXPECT_EQ(limited.get_allocated_bytes(), 768U);
  limited.deallocate(p, 768);

  mr::limiting_resource_adaptor exact{&upstream, 1000, 1};
  void* q = exact.allocate(1000);
  EXPECT_EQ(exact.get_allocated_bytes(), 1000U);
  EXPECT_THROW((void)exact.allocate(1), out_of_memory);
  exact.deallocate(q, 1000);
  EXPECT_EQ(exact.get_allocated_bytes(), 0U);
}

TEST(limiting_resource_adaptor, the_message_names_the_request_the_limit_and_the_bytes_in_use)
{
  mr::simulated_memory_resource upstream;
  mr::limiting_resource_adaptor limited{&upstream, 1 * MiB};
  void* p = limited.allocate(300 * KiB);
  try {
    (void)limited.allocate(800 * KiB);
    FAIL() << "the limit was not enforced";
  } catch (out_of_memory const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find("limiting_resource_adaptor"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(800 * KiB)), std::string::npos) << what;    // the request
    EXPECT_NE(what.find(format_bytes(1 * MiB)), std::string::npos) << what;       // the limit
    EXPECT_NE(what.find(format_bytes(300 * KiB)), std::string::npos) << what;     // in use
    EXPECT_NE(what.find("limit"), std::string::npos) << what;
  }
  EXPECT_EQ(limited.get_allocated_bytes(), 300 * KiB);
  EXPECT_EQ(upstream.total_allocations(), 1U) << "a refused request must not reach the upstream";
  limited.deallocate(p, 300 * KiB);
}

TEST(limiting_resource_adaptor, an_upstream_failure_gives_the_reservation_back)
{
  mr::simulated_memory_resource upstream{1 * MiB};
  mr::limiting_resource_adaptor limited{&upstream, 4 * MiB};
  EXPECT_THROW((void)limited.allocate(2 * MiB), out_of_memory);
  EXPECT_EQ(limited.get_allocated_bytes(), 0U);
  upstream.fail_after(0);
  EXPECT_THROW((void)limited.allocate(256), out_of_memory);
  EXPECT_EQ(limited.get_allocated_bytes(), 0U);
  upstream.clear_failures();
  void* p = limited.allocate(1 * MiB);
  limited.deallocate(p, 1 * MiB);
}

TEST(limiting_resource_adaptor, construction_errors_are_logic_errors)
{
  mr::simulated_memory_resource upstream;
  EXPECT_THROW(mr::limiting_resource_adaptor(nullptr, 1024), logic_error);
  EXPECT_THROW(mr::limiting_resource_adaptor(&upstream, 1024, 3), logic_error);
  EXPECT_THROW(mr::limiting_resource_adaptor(&upstream, 1024, 0), logic_error);
  mr::limiting_resource_adaptor a{&upstream, 1024};
  mr::limiting_resource_adaptor b{&upstream, 2048};
  EXPECT_TRUE(a.is_equal(b));
}

TEST(limiting_resource_adaptor, eight_threads_never_exceed_the_limit_together)
{
  constexpr int threads = 8;
  constexpr int rounds = 2000;
  constexpr std::size_t limit = 16 * KiB;
  mr::simulated_memory_resource upstream;
  mr::limiting_resource_adaptor limited{&upstream, limit};
  std::atomic<std::size_t> refused{0};
  std::atomic<std::size_t> served{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < rounds; ++i) {
        std::size_t const bytes = 256 * static_cast<std::size_t>(1 + (t + i) % 8);
        try {
          void* p = limited.allocate(bytes);
          served.fetch_add(1);
          EXPECT_LE(limited.get_allocated_bytes(), limit);
          limited.deallocate(p, bytes);
        } catch (out_of_memory const&) {
          refused.fetch_add(1);
        }
      }
    });
  }
  for (auto& worker : workers) { worker.join(); }
  EXPECT_EQ(served.load() + refused.load(), static_cast<std::size_t>(threads * rounds));
  EXPECT_GT(served.load(), 0U);
  EXPECT_LE(upstream.peak_bytes_in_use(), limit);
  EXPECT_EQ(limited.get_allocated_bytes(), 0U);
  EXPECT_EQ(upstream.allocation_count(), 0U);
}

}  // namespace
}  // namespace gpumem::test
