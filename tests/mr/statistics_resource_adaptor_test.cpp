// statistics_resource_adaptor: the conformance battery, then the counters (current, peak, total for bytes
// and allocations), nested scopes with RMM's folding rule, pop without push, and 8 threads at once.
#include "conformance/resource_battery.hpp"
#include "support/sub_allocator_checks.hpp"

#include <gpumem/error.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>
#include <gpumem/mr/statistics_resource_adaptor.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

namespace gpumem::test {
namespace {

struct statistics_factory {
  static std::unique_ptr<mr::device_memory_resource> make()
  {
    return std::make_unique<mr::statistics_resource_adaptor>(&cuda_upstream());
  }
  static constexpr char const* name = "cuda_memory_resource";
  static constexpr bool oversubscription_safe = true;
};

}  // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(statistics_resource_adaptor, resource_battery, statistics_factory);

namespace {

using counter = mr::statistics_resource_adaptor::counter;

counter make_counter(std::int64_t current, std::int64_t peak, std::int64_t total) { return {current, peak, total}; }

TEST(statistics_resource_adaptor, counts_current_peak_and_total)
{
  mr::simulated_memory_resource upstream;
  mr::statistics_resource_adaptor stats{&upstream};
  EXPECT_EQ(stats.upstream_resource(), &upstream);
  EXPECT_EQ(stats.get_bytes_counter(), make_counter(0, 0, 0));
  void* a = stats.allocate(100);
  void* b = stats.allocate(200);
  EXPECT_EQ(stats.get_bytes_counter(), make_counter(300, 300, 300));
  EXPECT_EQ(stats.get_allocations_counter(), make_counter(2, 2, 2));
  stats.deallocate(a, 100);
  EXPECT_EQ(stats.get_bytes_counter(), make_counter(200, 300, 300));
  EXPECT_EQ(stats.get_allocations_counter(), make_counter(1, 2, 2));
  void* c = stats.allocate(50);
  EXPECT_EQ(stats.get_bytes_counter(), make_counter(250, 300, 350));
  EXPECT_EQ(stats.get_allocations_counter(), make_counter(2, 2, 3));
  EXPECT_EQ(stats.allocate(0), nullptr);  // not counted
  stats.deallocate(b, 200);
  stats.deallocate(c, 50);
  auto const all = stats.get_counters();
  EXPECT_EQ(all.bytes, make_counter(0, 300, 350));
  EXPECT_EQ(all.allocations, make_counter(0, 2, 3));
  EXPECT_EQ(upstream.allocation_count(), 0U);
}

TEST(statistics_resource_adaptor, failed_allocations_are_not_counted)
{
  mr::simulated_memory_resource upstream{1 << 20};
  mr::statistics_resource_adaptor stats{&upstream};
  EXPECT_THROW((void)stats.allocate(2 << 20), out_of_memory);
  EXPECT_EQ(stats.get_bytes_counter(), make_counter(0, 0, 0));
  EXPECT_EQ(stats.get_allocations_counter(), make_counter(0, 0, 0));
}

TEST(statistics_resource_adaptor, a_popped_scope_folds_its_peak_into_the_parent)
{
  mr::simulated_memory_resource upstream;
  mr::statistics_resource_adaptor stats{&upstream};
  void* outer = stats.allocate(1000);
  auto const before = stats.push_counters();
  EXPECT_EQ(before.bytes, make_counter(1000, 1000, 1000));
  EXPECT_EQ(stats.scope_depth(), 1U);
  EXPECT_EQ(stats.get_bytes_counter(), make_counter(0, 0, 0));  // a new scope starts at zero

  void* x = stats.allocate(500);
  void* y = stats.allocate(700);
  stats.deallocate(y, 700);
  EXPECT_EQ(stats.get_bytes_counter(), make_counter(500, 1200, 1200));

  // A second level: its peak is counted from the first level's current value when it is popped.
  stats.push_counters();
  void* z = stats.allocate(300);
  stats.deallocate(z, 300);
  auto const inner = stats.pop_counters();
  EXPECT_EQ(inner.bytes, make_counter(0, 300, 300));
  EXPECT_EQ(inner.allocations, make_counter(0, 1, 1));
  EXPECT_EQ(stats.get_bytes_counter(), make_counter(500, 1200, 1500));  // max(1200, 500 + 300) = 1200

  auto const scope = stats.pop_counters();
  EXPECT_EQ(scope.bytes, make_counter(500, 1200, 1500));
  EXPECT_EQ(scope.allocations, make_counter(1, 2, 3));
  EXPECT_EQ(stats.scope_depth(), 0U);
  // parent.peak = max(1000, 1000 + 1200); current and total add up.
  EXPECT_EQ(stats.get_bytes_counter(), make_counter(1500, 2200, 2500));
  EXPECT_EQ(stats.get_allocations_counter(), make_counter(2, 3, 4));

  stats.deallocate(x, 500);
  stats.deallocate(outer, 1000);
  EXPECT_EQ(stats.get_bytes_counter(), make_counter(0, 2200, 2500));
}

TEST(statistics_resource_adaptor, a_scope_that_frees_older_memory_goes_negative)
{
  mr::simulated_memory_resource upstream;
  mr::statistics_resource_adaptor stats{&upstream};
  void* old = stats.allocate(4096);
  stats.push_counters();
  stats.deallocate(old, 4096);
  EXPECT_EQ(stats.get_bytes_counter(), make_counter(-4096, 0, 0));
  EXPECT_EQ(stats.get_allocations_counter(), make_counter(-1, 0, 0));
  stats.pop_counters();
  EXPECT_EQ(stats.get_bytes_counter(), make_counter(0, 4096, 4096));
}

TEST(statistics_resource_adaptor, pop_without_push_is_a_logic_error)
{
  mr::simulated_memory_resource upstream;
  mr::statistics_resource_adaptor stats{&upstream};
  EXPECT_THROW(stats.pop_counters(), logic_error);
  stats.push_counters();
  EXPECT_NO_THROW(stats.pop_counters());
  EXPECT_THROW(stats.pop_counters(), logic_error);
  EXPECT_THROW(mr::statistics_resource_adaptor{nullptr}, logic_error);
}

TEST(statistics_resource_adaptor, equal_over_equal_upstreams)
{
  mr::simulated_memory_resource upstream;
  mr::simulated_memory_resource other;
  mr::statistics_resource_adaptor a{&upstream};
  mr::statistics_resource_adaptor b{&upstream};
  mr::statistics_resource_adaptor c{&other};
  EXPECT_TRUE(a.is_equal(b));
  EXPECT_FALSE(a.is_equal(c));
}

TEST(statistics_resource_adaptor, eight_threads_balance)
{
  constexpr int threads = 8;
  constexpr int rounds = 2000;
  constexpr std::size_t bytes = 1024;
  mr::simulated_memory_resource upstream;
  mr::statistics_resource_adaptor stats{&upstream};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&stats] {
      for (int i = 0; i < rounds; ++i) {
        void* p = stats.allocate(bytes);
        void* q = stats.allocate(bytes);
        (void)stats.get_bytes_counter();
        stats.deallocate(p, bytes);
        stats.deallocate(q, bytes);
      }
    });
  }
  for (auto& worker : workers) { worker.join(); }
  auto const all = stats.get_counters();
  EXPECT_EQ(all.bytes.current, 0);
  EXPECT_EQ(all.bytes.total, static_cast<std::int64_t>(threads * rounds * 2 * bytes));
  EXPECT_GE(all.bytes.peak, static_cast<std::int64_t>(2 * bytes));
  EXPECT_LE(all.bytes.peak, static_cast<std::int64_t>(threads * 2 * bytes));
  EXPECT_EQ(all.allocations.current, 0);
  EXPECT_EQ(all.allocations.total, threads * rounds * 2);
  EXPECT_LE(all.allocations.peak, threads * 2);
}

}  // namespace
}  // namespace gpumem::test
