// simulated_memory_resource: address arithmetic at "80 GiB" scale, first fit, coalescing, failure injection,
// invalid deallocations, and concurrent use. The pointers are never dereferenced here.
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace gpumem::test {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t GiB = std::size_t{1} << 30;

std::uintptr_t address(void const* p) { return reinterpret_cast<std::uintptr_t>(p); }

TEST(simulated_memory_resource, defaults_are_one_tib_at_two_to_the_44)
{
  mr::simulated_memory_resource r;
  EXPECT_EQ(r.capacity(), std::size_t{1} << 40);
  EXPECT_EQ(r.base_address(), std::uintptr_t{1} << 44);
  EXPECT_EQ(r.free_range_count(), 1U);
  EXPECT_EQ(r.largest_free_range(), r.capacity());
  EXPECT_EQ(r.bytes_in_use(), 0U);
  void* p = r.allocate(1);
  EXPECT_EQ(address(p), std::uintptr_t{1} << 44) << "first fit starts at the base";
  r.deallocate(p, 1);
  r.check_invariants();
}

TEST(simulated_memory_resource, rejects_bad_construction_arguments_by_name)
{
  auto expect_error = [](std::size_t capacity, std::uintptr_t base, std::string const& needle) {
    try {
      mr::simulated_memory_resource r{capacity, base};
      ADD_FAILURE() << "capacity " << capacity << ", base " << base << " were accepted";
    } catch (logic_error const& e) {
      EXPECT_NE(std::string{e.what()}.find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(0, 1U << 20, "capacity 0");
  expect_error(1000, 1U << 20, "capacity 1000");
  expect_error(GiB, 0, "base address");
  expect_error(GiB, 100, "base address 0x64");
  expect_error(GiB, std::numeric_limits<std::uintptr_t>::max() - 255, "overflows");
}

TEST(simulated_memory_resource, eighty_gib_in_256_mib_blocks_fill_it_exactly_and_coalesce_back)
{
  mr::simulated_memory_resource r{80 * GiB};
  constexpr std::size_t block = 256 * MiB;
  std::vector<void*> blocks;
  for (int i = 0; i < 320; ++i) {
    void* p = r.allocate(block);
    ASSERT_EQ(address(p), r.base_address() + static_cast<std::uintptr_t>(i) * block) << "first fit is sequential";
    blocks.push_back(p);
  }
  EXPECT_EQ(r.bytes_in_use(), 80 * GiB);
  EXPECT_EQ(r.free_range_count(), 0U);
  EXPECT_EQ(r.largest_free_range(), 0U);
  EXPECT_THROW((void)r.allocate(1), out_of_memory);
  r.check_invariants();

  std::mt19937_64 rng{80};
  std::shuffle(blocks.begin(), blocks.end(), rng);
  std::size_t max_ranges = 0;
  for (void* p : blocks) {
    r.deallocate(p, block);
    max_ranges = std::max(max_ranges, r.free_range_count());
    r.check_invariants();
  }
  EXPECT_GT(max_ranges, 10U) << "random order should fragment before it coalesces";
  EXPECT_EQ(r.free_range_count(), 1U) << "everything free must coalesce into one range";
  EXPECT_EQ(r.largest_free_range(), 80 * GiB);
  EXPECT_EQ(r.bytes_in_use(), 0U);
  EXPECT_EQ(r.peak_bytes_in_use(), 80 * GiB);
  EXPECT_EQ(r.total_allocations(), 320U);
  EXPECT_EQ(r.allocation_count(), 0U);
  EXPECT_EQ(r.invalid_deallocations(), 0U);
  void* whole = r.allocate(80 * GiB);
  EXPECT_EQ(address(whole), r.base_address());
  r.deallocate(whole, 80 * GiB);
}

TEST(simulated_memory_resource, first_fit_reuses_the_lowest_hole_and_rounds_to_256)
{
  mr::simulated_memory_resource r{GiB};
  void* a = r.allocate(1000);  // reserves 1024
  void* b = r.allocate(3000);  // reserves 3072
  void* c = r.allocate(256);
  EXPECT_EQ(address(b) - address(a), 1024U);
  EXPECT_EQ(address(c) - address(b), 3072U);
  EXPECT_EQ(r.bytes_in_use(), 1024U + 3072U + 256U);
  r.deallocate(b, 3000);
  void* small = r.allocate(2000);  // fits in b's hole
  EXPECT_EQ(small, b);
  void* rest = r.allocate(1024);  // the remaining 1024 of the hole
  EXPECT_EQ(address(rest), address(b) + 2048);
  void* next = r.allocate(1);  // the hole is full: after c
  EXPECT_EQ(address(next), address(c) + 256);
  std::vector<std::pair<void*, std::size_t>> const live{{a, 1000}, {small, 2000}, {rest, 1024}, {c, 256}, {next, 1}};
  for (auto const& [p, n] : live) {
    r.deallocate(p, n);
    r.check_invariants();
  }
  EXPECT_EQ(r.free_range_count(), 1U);
}

TEST(simulated_memory_resource, coalesces_with_the_previous_the_next_and_both_neighbours)
{
  mr::simulated_memory_resource r{GiB};
  std::vector<void*> p;
  for (int i = 0; i < 6; ++i) { p.push_back(r.allocate(MiB)); }
  // Free 1 and 3: two holes (plus the tail).
  r.deallocate(p[1], MiB);
  r.deallocate(p[3], MiB);
  EXPECT_EQ(r.free_range_count(), 3U);
  r.deallocate(p[2], MiB);  // merges with both neighbours
  EXPECT_EQ(r.free_range_count(), 2U);
  EXPECT_EQ(r.largest_free_range(), GiB - 6 * MiB);  // the tail is still larger than the 3 MiB hole
  r.deallocate(p[4], MiB);  // merges with the previous hole (1..3)
  EXPECT_EQ(r.free_range_count(), 2U);
  r.deallocate(p[5], MiB);  // merges the hole with the tail
  EXPECT_EQ(r.free_range_count(), 1U);
  EXPECT_EQ(r.largest_free_range(), GiB - MiB);
  r.deallocate(p[0], MiB);  // merges with the next range only
  EXPECT_EQ(r.free_range_count(), 1U);
  EXPECT_EQ(r.largest_free_range(), GiB);
  r.check_invariants();
}

TEST(simulated_memory_resource, out_of_memory_names_the_size_and_the_simulated_capacity)
{
  mr::simulated_memory_resource r{GiB};
  void* p = r.allocate(GiB - MiB);
  try {
    (void)r.allocate(2 * MiB);
    FAIL() << "served more than the capacity";
  } catch (out_of_memory const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find("simulated_memory_resource"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(2 * MiB)), std::string::npos) << what;
    EXPECT_NE(what.find("simulated capacity"), std::string::npos) << what;
    EXPECT_NE(what.find(format_bytes(GiB)), std::string::npos) << what;
    EXPECT_NE(what.find("free"), std::string::npos) << what;
  }
  EXPECT_EQ(r.bytes_in_use(), GiB - MiB);
  void* last = r.allocate(MiB);  // exactly what is left
  EXPECT_EQ(r.free_range_count(), 0U);
  r.deallocate(last, MiB);
  r.deallocate(p, GiB - MiB);
  r.check_invariants();
}

TEST(simulated_memory_resource, an_overflowing_size_is_bad_alloc_not_out_of_memory)
{
  mr::simulated_memory_resource r;
  try {
    (void)r.allocate(std::numeric_limits<std::size_t>::max());
    FAIL();
  } catch (out_of_memory const&) {
    FAIL() << "overflow must not read as out of memory";
  } catch (bad_alloc const&) {
  }
  EXPECT_EQ(r.allocation_count(), 0U);
}

TEST(simulated_memory_resource, fail_after_n_serves_n_then_fails_and_stays_consistent)
{
  mr::simulated_memory_resource r{GiB};
  std::vector<void*> live;
  live.push_back(r.allocate(MiB));  // before the rule: not counted
  r.fail_after(3);
  for (int i = 0; i < 3; ++i) { live.push_back(r.allocate(MiB)); }
  for (int i = 0; i < 4; ++i) {
    try {
      (void)r.allocate(MiB);
      ADD_FAILURE() << "call " << i + 4 << " after fail_after(3) succeeded";
    } catch (out_of_memory const& e) {
      EXPECT_NE(std::string{e.what()}.find("fail_after(3)"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(r.injected_failures(), 4U);
  EXPECT_EQ(r.allocation_count(), 4U);
  EXPECT_EQ(r.bytes_in_use(), 4 * MiB);
  EXPECT_EQ(r.total_allocations(), 4U);
  r.check_invariants();
  r.deallocate(live.back(), MiB);  // deallocation is never injected
  live.pop_back();
  r.clear_failures();
  live.push_back(r.allocate(MiB));
  for (void* p : live) { r.deallocate(p, MiB); }
  EXPECT_EQ(r.bytes_in_use(), 0U);
  EXPECT_EQ(r.free_range_count(), 1U);
  r.check_invariants();

  r.fail_after(0);
  EXPECT_THROW((void)r.allocate(1), out_of_memory);
  EXPECT_EQ(r.allocate(0), nullptr) << "a zero-byte request never reaches the resource";
}

TEST(simulated_memory_resource, fail_every_k_fails_exactly_every_kth_call)
{
  mr::simulated_memory_resource r{GiB};
  r.fail_every(3);
  std::vector<int> failed_calls;
  std::vector<void*> live;
  for (int call = 1; call <= 12; ++call) {
    try {
      live.push_back(r.allocate(4096));
    } catch (out_of_memory const&) {
      failed_calls.push_back(call);
    }
  }
  EXPECT_EQ(failed_calls, (std::vector<int>{3, 6, 9, 12}));
  EXPECT_EQ(r.allocation_count(), 8U);
  EXPECT_THROW(r.fail_every(0), logic_error);
  for (void* p : live) { r.deallocate(p, 4096); }
  r.check_invariants();
}

std::vector<bool> failure_pattern(double probability, std::uint64_t seed, int calls)
{
  mr::simulated_memory_resource r{GiB};
  r.fail_randomly(probability, seed);
  std::vector<bool> failed;
  for (int i = 0; i < calls; ++i) {
    try {
      void* p = r.allocate(256);
      r.deallocate(p, 256);
      failed.push_back(false);
    } catch (out_of_memory const&) {
      failed.push_back(true);
    }
  }
  EXPECT_EQ(r.bytes_in_use(), 0U);
  r.check_invariants();
  return failed;
}

TEST(simulated_memory_resource, fail_randomly_is_seeded_and_close_to_its_probability)
{
  std::vector<bool> const first = failure_pattern(0.25, 7, 10'000);
  EXPECT_EQ(failure_pattern(0.25, 7, 10'000), first) << "the same seed must fail the same calls";
  EXPECT_NE(failure_pattern(0.25, 8, 10'000), first) << "another seed should fail other calls";
  auto const failures = static_cast<double>(std::count(first.begin(), first.end(), true));
  // 10'000 draws at p = 0.25: the standard deviation is about 43; allow about 7 of them.
  EXPECT_NEAR(failures, 2500.0, 300.0);
  auto const none = failure_pattern(0.0, 1, 1000);
  EXPECT_EQ(std::count(none.begin(), none.end(), true), 0);
  auto const all = failure_pattern(1.0, 1, 1000);
  EXPECT_EQ(std::count(all.begin(), all.end(), true), 1000);

  mr::simulated_memory_resource r;
  EXPECT_THROW(r.fail_randomly(-0.1, 1), logic_error);
  EXPECT_THROW(r.fail_randomly(1.5, 1), logic_error);
  EXPECT_THROW(r.fail_randomly(std::nan(""), 1), logic_error);
}

TEST(simulated_memory_resource, rules_combine_until_cleared)
{
  mr::simulated_memory_resource r{GiB};
  r.fail_every(2);
  r.fail_after(4);
  std::vector<int> failed_calls;
  for (int call = 1; call <= 6; ++call) {
    try {
      void* p = r.allocate(256);
      r.deallocate(p, 256);
    } catch (out_of_memory const&) {
      failed_calls.push_back(call);
    }
  }
  EXPECT_EQ(failed_calls, (std::vector<int>{2, 4, 5, 6}));
  r.clear_failures();
  void* p = r.allocate(256);
  r.deallocate(p, 256);
  EXPECT_EQ(r.injected_failures(), 4U);
}

TEST(simulated_memory_resource, invalid_deallocations_are_counted_and_change_nothing)
{
  mr::simulated_memory_resource r{GiB};
  void* p = r.allocate(1000);
  void* q = r.allocate(5000);
  r.deallocate(reinterpret_cast<void*>(r.base_address() + 512 * MiB), 256);  // never allocated
  r.deallocate(static_cast<char*>(p) + 256, 744);                            // inside an allocation
  r.deallocate(p, 1024);                                                     // wrong size (the rounded one)
  r.deallocate(q, 4999);                                                     // wrong size
  EXPECT_EQ(r.invalid_deallocations(), 4U);
  EXPECT_EQ(r.allocation_count(), 2U);
  EXPECT_EQ(r.bytes_in_use(), 1024U + 5120U);
  r.check_invariants();
  r.deallocate(p, 1000);
  r.deallocate(p, 1000);  // double free
  EXPECT_EQ(r.invalid_deallocations(), 5U);
  r.deallocate(q, 5000);
  EXPECT_EQ(r.bytes_in_use(), 0U);
  EXPECT_EQ(r.free_range_count(), 1U);
  r.check_invariants();
}

TEST(simulated_memory_resource, owns_exactly_the_bytes_of_live_allocations)
{
  mr::simulated_memory_resource r{GiB};
  void* p = r.allocate(300);  // reserves 512
  auto* bytes = static_cast<char*>(p);
  EXPECT_TRUE(r.owns(p));
  EXPECT_TRUE(r.owns(bytes + 299));
  EXPECT_TRUE(r.owns(bytes + 511));
  EXPECT_FALSE(r.owns(bytes + 512));
  EXPECT_FALSE(r.owns(bytes - 1));
  EXPECT_FALSE(r.owns(nullptr));
  r.deallocate(p, 300);
  EXPECT_FALSE(r.owns(p));
}

TEST(simulated_memory_resource, a_custom_base_is_honoured)
{
  std::uintptr_t const base = std::uintptr_t{0x7000} << 32;
  mr::simulated_memory_resource r{4 * GiB, base};
  void* p = r.allocate(GiB);
  void* q = r.allocate(GiB);
  EXPECT_EQ(address(p), base);
  EXPECT_EQ(address(q), base + GiB);
  EXPECT_TRUE(detail::is_aligned(q, 256));
  r.deallocate(p, GiB);
  r.deallocate(q, GiB);
}

TEST(simulated_memory_resource, equals_only_itself)
{
  mr::simulated_memory_resource a;
  mr::simulated_memory_resource b;
  EXPECT_TRUE(a == a);
  EXPECT_FALSE(a == b);
}

TEST(simulated_memory_resource, many_threads_keep_it_consistent)
{
  mr::simulated_memory_resource r;  // 1 TiB: eight threads' worst case fits
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&r, t] {
      std::mt19937_64 rng{static_cast<std::uint64_t>(t)};
      std::vector<std::pair<void*, std::size_t>> live;
      for (int i = 0; i < 5000; ++i) {
        if (live.empty() || rng() % 2 == 0) {
          std::size_t const bytes = 1 + rng() % (64 * MiB);
          live.emplace_back(r.allocate(bytes), bytes);
        } else {
          std::size_t const index = rng() % live.size();
          r.deallocate(live[index].first, live[index].second);
          live[index] = live.back();
          live.pop_back();
        }
      }
      for (auto const& [p, n] : live) { r.deallocate(p, n); }
    });
  }
  for (auto& thread : threads) { thread.join(); }
  r.check_invariants();
  EXPECT_EQ(r.bytes_in_use(), 0U);
  EXPECT_EQ(r.allocation_count(), 0U);
  EXPECT_EQ(r.free_range_count(), 1U);
  EXPECT_EQ(r.invalid_deallocations(), 0U);
}

}  // namespace
}  // namespace gpumem::test
