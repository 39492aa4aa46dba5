// Debug checks (mr/detail/invariant_checks.hpp): which calls are sampled, what a violation does, and that
// every sub-allocator runs its check_invariants() after its calls when the checks are on (and never when off).
#include <gpumem/error.hpp>
#include <gpumem/mr/arena_memory_resource.hpp>
#include <gpumem/mr/binning_memory_resource.hpp>
#include <gpumem/mr/detail/invariant_checks.hpp>
#include <gpumem/mr/fixed_size_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <new>

namespace gpumem::test {
namespace {

using detail::invariant_sampler;

std::uint64_t sampled_in(std::uint64_t first, std::uint64_t last)
{
  std::uint64_t count = 0;
  for (std::uint64_t call = first; call <= last; ++call) { count += invariant_sampler::is_sampled(call) ? 1 : 0; }
  return count;
}

TEST(InvariantSampler, ChecksEveryEarlyCallThenAFixedNumberPerDoubling)
{
  constexpr std::uint64_t k = invariant_sampler::checks_per_doubling;
  static_assert(invariant_sampler::is_sampled(1) && invariant_sampler::is_sampled(2 * k - 1));
  EXPECT_EQ(sampled_in(1, 2 * k - 1), 2 * k - 1);
  EXPECT_EQ(sampled_in(2 * k, 4 * k - 1), k);
  EXPECT_EQ(sampled_in(std::uint64_t{1} << 24, (std::uint64_t{2} << 24) - 1), k);
  EXPECT_FALSE(invariant_sampler::is_sampled(2 * k + 1));
  EXPECT_TRUE(invariant_sampler::is_sampled(2 * k + 2));

  invariant_sampler sampler;
  for (std::uint64_t i = 1; i < 2 * k; ++i) { ASSERT_TRUE(sampler.due()); }
  EXPECT_TRUE(sampler.due());   // call 2k
  EXPECT_FALSE(sampler.due());  // call 2k + 1
}

struct fake_resource {
  std::function<void()> check;
  void check_invariants() const { check(); }
};

void run_check(fake_resource const& r)
{
  detail::run_invariant_check(
    "fake_resource", "deallocate", [](void const* p) { static_cast<fake_resource const*>(p)->check_invariants(); }, &r);
}

TEST(InvariantChecksDeathTest, ABrokenInvariantAbortsNamingTheResourceTheCallAndTheInvariant)
{
  fake_resource const broken{[] { throw logic_error("fake_resource::check_invariants: the books do not balance"); }};
  EXPECT_DEATH(run_check(broken),
               "gpumem: fake_resource::deallocate broke an invariant: .*the books do not balance");
}

TEST(InvariantChecks, ACheckThatRunsOutOfMemoryIsSkipped)
{
  std::uint64_t const before = detail::invariant_checks_on_this_thread();
  run_check(fake_resource{[] { throw std::bad_alloc{}; }});
  run_check(fake_resource{[] {}});
  EXPECT_EQ(detail::invariant_checks_on_this_thread() - before, 2u);
}

TEST(InvariantChecks, AtExitRunsOnlyWhenDebugChecksAreOn)
{
  int calls = 0;
  fake_resource const counted{[&calls] { ++calls; }};
  invariant_sampler sampler;
  { detail::invariant_check_at_exit<fake_resource> const check{counted, sampler, "fake_resource", "allocate"}; }
  EXPECT_EQ(calls, detail::debug_checks ? 1 : 0);
}

/// How many invariant checks one allocate and one deallocate of `r` run on this thread.
std::uint64_t checks_for_one_allocation(mr::device_memory_resource& r)
{
  std::uint64_t const before = detail::invariant_checks_on_this_thread();
  void* const p = r.allocate(1000);
  r.deallocate(p, 1000);
  return detail::invariant_checks_on_this_thread() - before;
}

void expect_checked(mr::device_memory_resource& r)
{
  std::uint64_t const checks = checks_for_one_allocation(r);
  if constexpr (detail::debug_checks) {
    EXPECT_GE(checks, 2u) << "allocate and deallocate each check the invariants";
  } else {
    EXPECT_EQ(checks, 0u) << "the checks are compiled out";
  }
}

TEST(InvariantChecks, EverySubAllocatorChecksAfterItsCalls)
{
  mr::simulated_memory_resource upstream{std::uint64_t{1} << 34};
  expect_checked(upstream);
  {
    mr::pool_memory_resource pool{&upstream, 1 << 20};
    expect_checked(pool);
  }
  {
    mr::fixed_size_memory_resource fixed{&upstream, 1024};
    expect_checked(fixed);
  }
  {
    mr::binning_memory_resource binning{&upstream, 8, 12};
    expect_checked(binning);
  }
  {
    mr::arena_memory_resource arena{&upstream, std::size_t{64} << 20};
    expect_checked(arena);
  }
  {
    mr::vmm_pool_memory_resource vmm{};
    expect_checked(vmm);
  }
}

}  // namespace
}  // namespace gpumem::test
