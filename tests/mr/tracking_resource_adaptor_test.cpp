// tracking_resource_adaptor: the conformance battery, then the outstanding map and byte count, the report
// (pointers, sizes, streams, captured stacks), deallocations it cannot match (forwarded as RMM does, refused by
// checked_deallocate), the leak report at destruction, and 8 threads at once.
#include "conformance/resource_battery.hpp"
#include "support/memory_checks.hpp"
#include "support/sub_allocator_checks.hpp"

#include <gpumem/error.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>
#include <gpumem/mr/tracking_resource_adaptor.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace gpumem::test {
namespace {

struct tracking_factory {
  static std::unique_ptr<mr::device_memory_resource> make()
  {
    return std::make_unique<mr::tracking_resource_adaptor>(&cuda_upstream());
  }
  static constexpr char const* name = "cuda_memory_resource";
  static constexpr bool oversubscription_safe = true;
};

struct tracking_with_stacks_factory {
  static std::unique_ptr<mr::device_memory_resource> make()
  {
    return std::make_unique<mr::tracking_resource_adaptor>(&cuda_upstream(), true);
  }
  static constexpr char const* name = "cuda_memory_resource";
  static constexpr bool oversubscription_safe = true;
};

}  // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(tracking_resource_adaptor, resource_battery, tracking_factory);
INSTANTIATE_TYPED_TEST_SUITE_P(tracking_resource_adaptor_with_stacks, resource_battery, tracking_with_stacks_factory);

namespace {

bool contains(std::string const& text, std::string const& part) { return text.find(part) != std::string::npos; }

TEST(tracking_resource_adaptor, tracks_every_outstanding_allocation)
{
  mr::simulated_memory_resource upstream;
  mr::tracking_resource_adaptor tracking{&upstream};
  EXPECT_EQ(tracking.upstream_resource(), &upstream);
  EXPECT_FALSE(tracking.captures_stacks());
  backend_stream stream;
  void* a = tracking.allocate(1000);
  void* b = tracking.allocate(5000, cuda_stream_view{stream.get()});
  EXPECT_EQ(tracking.allocated_bytes(), 6000U);
  EXPECT_EQ(tracking.outstanding_count(), 2U);
  auto const outstanding = tracking.outstanding_allocations();
  ASSERT_EQ(outstanding.size(), 2U);
  EXPECT_EQ(outstanding.at(a).bytes, 1000U);
  EXPECT_EQ(outstanding.at(a).stream, cuda_stream_default);
  EXPECT_TRUE(outstanding.at(a).stack.empty());
  EXPECT_EQ(outstanding.at(b).bytes, 5000U);
  EXPECT_EQ(outstanding.at(b).stream.value(), stream.get());

  std::string const report = tracking.report();
  EXPECT_TRUE(contains(report, "2 outstanding allocations")) << report;
  EXPECT_TRUE(contains(report, format_pointer(a) + ": 1000 bytes on stream 0x0")) << report;
  EXPECT_TRUE(contains(report, format_pointer(b) + ": 5000 bytes on stream " + format_pointer(stream.get())))
    << report;

  tracking.deallocate(a, 1000);
  EXPECT_EQ(tracking.allocated_bytes(), 5000U);
  EXPECT_FALSE(contains(tracking.report(), format_pointer(a)));
  tracking.deallocate(b, 5000, cuda_stream_view{stream.get()});
  EXPECT_EQ(tracking.allocated_bytes(), 0U);
  EXPECT_EQ(tracking.outstanding_count(), 0U);
  EXPECT_EQ(tracking.report(), "no outstanding allocations\n");
  EXPECT_EQ(tracking.invalid_deallocations(), 0U);
  EXPECT_EQ(upstream.allocation_count(), 0U);
}

TEST(tracking_resource_adaptor, captured_stacks_are_in_the_report)
{
  mr::simulated_memory_resource upstream;
  mr::tracking_resource_adaptor tracking{&upstream, true};
  EXPECT_TRUE(tracking.captures_stacks());
  void* p = tracking.allocate(4096);
  auto const outstanding = tracking.outstanding_allocations();
  std::string const& stack = outstanding.at(p).stack;
  EXPECT_TRUE(contains(stack, "#0 ")) << stack;
  EXPECT_TRUE(contains(stack, "#1 ")) << stack;
  EXPECT_TRUE(contains(tracking.report(), stack));
  tracking.deallocate(p, 4096);
}

TEST(tracking_resource_adaptor, unknown_pointers_are_forwarded_as_rmm_does_and_counted)
{
  mr::simulated_memory_resource upstream;
  mr::tracking_resource_adaptor tracking{&upstream};
  void* foreign = upstream.allocate(512);  // allocated before tracking began: not handed out by the adaptor
  void* other = upstream.allocate(256);

  ::testing::internal::CaptureStderr();
  tracking.deallocate(foreign, 512);
  std::string const first = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(upstream.owns(foreign)) << "memory freed through the adaptor must reach the upstream (no leak)";
  EXPECT_EQ(tracking.untracked_deallocations(), 1U);
  EXPECT_EQ(tracking.invalid_deallocations(), 0U);
  EXPECT_TRUE(contains(first, "did not hand out")) << first;
  EXPECT_TRUE(contains(first, format_pointer(foreign))) << first;

  ::testing::internal::CaptureStderr();
  tracking.deallocate(other, 256);  // counted, silent now
  std::string const second = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(second.empty()) << second;
  EXPECT_EQ(tracking.untracked_deallocations(), 2U);
  EXPECT_EQ(upstream.allocation_count(), 0U);
  EXPECT_EQ(upstream.invalid_deallocations(), 0U);
  EXPECT_EQ(tracking.allocated_bytes(), 0U);
}

TEST(tracking_resource_adaptor, memory_freed_through_a_wrapping_adaptor_is_not_leaked)
{
  // A tracking adaptor put on top of a resource that already has allocations out: they are freed through it.
  mr::simulated_memory_resource upstream;
  mr::tracking_resource_adaptor inner{&upstream};
  void* early = inner.allocate(4096);
  mr::tracking_resource_adaptor outer{&inner};
  void* late = outer.allocate(1024);
  outer.deallocate(early, 4096);
  outer.deallocate(late, 1024);
  EXPECT_EQ(outer.untracked_deallocations(), 1U);
  EXPECT_EQ(inner.outstanding_count(), 0U) << "the inner adaptor took back what it handed out";
  EXPECT_EQ(upstream.allocation_count(), 0U);
}

TEST(tracking_resource_adaptor, a_wrong_size_is_corrected_and_forwarded_as_rmm_does)
{
  mr::simulated_memory_resource upstream;
  mr::tracking_resource_adaptor tracking{&upstream};
  void* p = tracking.allocate(1024);
  ::testing::internal::CaptureStderr();
  tracking.deallocate(p, 2048);
  std::string const text = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(text, "wrong size")) << text;
  EXPECT_EQ(tracking.invalid_deallocations(), 1U);
  EXPECT_EQ(tracking.outstanding_count(), 0U);
  EXPECT_EQ(tracking.allocated_bytes(), 0U);
  EXPECT_FALSE(upstream.owns(p)) << "forwarded with the size it was allocated with";
  EXPECT_EQ(upstream.invalid_deallocations(), 0U) << "the upstream saw the right size";
}

TEST(tracking_resource_adaptor, checked_deallocate_refuses_what_it_cannot_match_and_changes_nothing)
{
  mr::simulated_memory_resource upstream;
  mr::tracking_resource_adaptor tracking{&upstream};
  void* p = tracking.allocate(1024);
  void* foreign = upstream.allocate(512);
  ::testing::internal::CaptureStderr();
  EXPECT_THROW(tracking.checked_deallocate(foreign, 512), logic_error);
  EXPECT_TRUE(upstream.owns(foreign)) << "a checked call changes nothing";
  EXPECT_THROW(tracking.checked_deallocate(p, 2048), logic_error);
  EXPECT_EQ(tracking.outstanding_count(), 1U);
  EXPECT_TRUE(upstream.owns(p));
  tracking.checked_deallocate(p, 1024);
  EXPECT_THROW(tracking.checked_deallocate(p, 1024), logic_error) << "a double free";
  (void)::testing::internal::GetCapturedStderr();
  EXPECT_EQ(tracking.invalid_deallocations(), 3U);
  EXPECT_EQ(tracking.untracked_deallocations(), 0U);
  EXPECT_EQ(upstream.invalid_deallocations(), 0U);
  upstream.deallocate(foreign, 512);
  EXPECT_EQ(upstream.allocation_count(), 0U);
}

TEST(tracking_resource_adaptor, destruction_with_outstanding_allocations_reports_leaks)
{
  mr::simulated_memory_resource upstream;
  void* leaked = nullptr;
  ::testing::internal::CaptureStderr();
  {
    mr::tracking_resource_adaptor tracking{&upstream};
    leaked = tracking.allocate(12345);
    void* returned = tracking.allocate(100);
    tracking.deallocate(returned, 100);
  }
  std::string const report = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(report, "leak")) << report;
  EXPECT_TRUE(contains(report, "1 outstanding allocation")) << report;
  EXPECT_TRUE(contains(report, format_pointer(leaked) + ": 12345 bytes")) << report;
  upstream.deallocate(leaked, 12345);

  ::testing::internal::CaptureStderr();
  {
    mr::tracking_resource_adaptor tracking{&upstream};
    void* p = tracking.allocate(100);
    tracking.deallocate(p, 100);
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "") << "no leak, no report";
}

TEST(tracking_resource_adaptor, construction_and_equality)
{
  mr::simulated_memory_resource upstream;
  mr::simulated_memory_resource other;
  EXPECT_THROW(mr::tracking_resource_adaptor{nullptr}, logic_error);
  mr::tracking_resource_adaptor a{&upstream};
  mr::tracking_resource_adaptor b{&upstream, true};
  mr::tracking_resource_adaptor c{&other};
  EXPECT_TRUE(a.is_equal(b));
  EXPECT_FALSE(a.is_equal(c));
}

TEST(tracking_resource_adaptor, eight_threads_leave_nothing_outstanding)
{
  constexpr int threads = 8;
  constexpr int rounds = 1000;
  mr::simulated_memory_resource upstream;
  mr::tracking_resource_adaptor tracking{&upstream};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&tracking, t] {
      std::vector<void*> mine;
      for (int i = 0; i < rounds; ++i) {
        std::size_t const bytes = static_cast<std::size_t>(256 * (t + 1));
        mine.push_back(tracking.allocate(bytes));
        if (i % 3 == 0) { (void)tracking.outstanding_allocations(); }
        if (mine.size() == 4) {
          for (void* p : mine) { tracking.deallocate(p, bytes); }
          mine.clear();
        }
      }
      for (void* p : mine) { tracking.deallocate(p, static_cast<std::size_t>(256 * (t + 1))); }
    });
  }
  for (auto& worker : workers) { worker.join(); }
  EXPECT_EQ(tracking.outstanding_count(), 0U);
  EXPECT_EQ(tracking.allocated_bytes(), 0U);
  EXPECT_EQ(tracking.invalid_deallocations(), 0U);
  EXPECT_EQ(upstream.allocation_count(), 0U);
}

}  // namespace
}  // namespace gpumem::test
