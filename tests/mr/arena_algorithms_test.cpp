// The pure algorithms under arena_memory_resource (mr/detail/arena/): free_range_set (coalescing, best fit,
// the may_join rule), local_arena (superblock boundaries, emptiness) and global_arena (accounting), checked
// against a brute-force model of byte ownership over random sequences.
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/detail/arena/address_range.hpp>
#include <gpumem/mr/detail/arena/arena_policy.hpp>
#include <gpumem/mr/detail/arena/free_range_set.hpp>
#include <gpumem/mr/detail/arena/global_arena.hpp>
#include <gpumem/mr/detail/arena/local_arena.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

namespace gpumem::test {
namespace {

using detail::address_range;
using detail::free_range_set;
using detail::global_arena;
using detail::local_arena;

constexpr std::uintptr_t base = std::uintptr_t{1} << 40;
constexpr std::size_t unit = 256;

TEST(arena_free_range_set, coalesces_neighbours_on_both_sides_and_detects_overlap)
{
  free_range_set set;
  ASSERT_TRUE(set.insert({base, unit}));
  ASSERT_TRUE(set.insert({base + 2 * unit, unit}));
  EXPECT_EQ(set.range_count(), 2U);
  auto const merged = set.insert({base + unit, unit});  // fills the hole: one range of three units
  ASSERT_TRUE(merged);
  EXPECT_EQ(*merged, (address_range{base, 3 * unit}));
  EXPECT_EQ(set.range_count(), 1U);
  EXPECT_EQ(set.total_bytes(), 3 * unit);
  EXPECT_FALSE(set.insert({base + unit, unit})) << "a range inside free space is a double free";
  EXPECT_FALSE(set.insert({base + 2 * unit, 2 * unit})) << "a range overlapping free space is a double free";
  EXPECT_EQ(set.total_bytes(), 3 * unit) << "a refused insert changes nothing";
  set.check_invariants();
}

TEST(arena_free_range_set, best_fit_takes_the_smallest_range_that_fits_lowest_address_first)
{
  free_range_set set;
  ASSERT_TRUE(set.insert({base, 8 * unit}));
  ASSERT_TRUE(set.insert({base + 10 * unit, 2 * unit}));
  ASSERT_TRUE(set.insert({base + 20 * unit, 4 * unit}));
  ASSERT_TRUE(set.insert({base + 30 * unit, 2 * unit}));
  EXPECT_EQ(set.take_best_fit(2 * unit), base + 10 * unit) << "exact fit, lower of two equal ranges";
  EXPECT_EQ(set.take_best_fit(2 * unit), base + 30 * unit);
  EXPECT_EQ(set.take_best_fit(3 * unit), base + 20 * unit) << "4 units is the smallest that holds 3";
  EXPECT_EQ(set.range_containing(base + 23 * unit), (address_range{base + 23 * unit, unit})) << "the rest stays";
  EXPECT_FALSE(set.take_best_fit(9 * unit));
  EXPECT_EQ(set.largest(), 8 * unit);
  set.check_invariants();
}

TEST(arena_free_range_set, may_join_keeps_ranges_apart_at_forbidden_boundaries)
{
  auto const fence = base + 4 * unit;
  auto const rule = [fence](std::uintptr_t boundary) { return boundary != fence; };
  free_range_set set;
  ASSERT_TRUE(set.insert({base, 4 * unit}, rule));
  ASSERT_TRUE(set.insert({fence, 4 * unit}, rule));
  EXPECT_EQ(set.range_count(), 2U) << "touching at the fence, but not merged";
  EXPECT_TRUE(set.take_whole({fence, 4 * unit}));
  EXPECT_FALSE(set.take_whole({base, 2 * unit})) << "only whole ranges are taken";
  set.check_invariants(rule);
  ASSERT_TRUE(set.insert({fence, 4 * unit}, rule));
  EXPECT_THROW(set.check_invariants(), std::logic_error) << "under the merge-always rule the two should be one";
}

/// Model: which 256-byte units are free. The set must agree with it after every operation.
TEST(arena_free_range_set, random_inserts_and_takes_agree_with_a_unit_bitmap)
{
  constexpr std::size_t units = 512;
  for (std::uint64_t seed : {1U, 2U, 3U}) {
    std::mt19937_64 rng{seed};
    free_range_set set;
    std::vector<bool> free(units, false);
    std::vector<address_range> taken;
    ASSERT_TRUE(set.insert({base, units * unit}));
    std::fill(free.begin(), free.end(), true);
    for (int op = 0; op < 4000; ++op) {
      if (taken.empty() || rng() % 2 == 0) {
        std::size_t const want = (1 + rng() % 16) * unit;
        auto const got = set.take_best_fit(want);
        // Best fit: the smallest maximal free run of the model that holds `want`, lowest first.
        std::size_t best_size = 0;
        std::size_t best_start = 0;
        for (std::size_t i = 0; i < units;) {
          if (!free[i]) { ++i; continue; }
          std::size_t j = i;
          while (j < units && free[j]) { ++j; }
          std::size_t const run = (j - i) * unit;
          if (run >= want && (best_size == 0 || run < best_size)) { best_size = run; best_start = i; }
          i = j;
        }
        if (best_size == 0) {
          ASSERT_FALSE(got) << "seed " << seed << ", op " << op;
          continue;
        }
        ASSERT_TRUE(got);
        ASSERT_EQ(*got, base + best_start * unit) << "seed " << seed << ", op " << op;
        for (std::size_t u = 0; u < want / unit; ++u) { free[best_start + u] = false; }
        taken.push_back({*got, want});
      } else {
        std::size_t const index = rng() % taken.size();
        address_range const r = taken[index];
        taken[index] = taken.back();
        taken.pop_back();
        ASSERT_TRUE(set.insert(r));
        for (std::size_t u = 0; u < r.size / unit; ++u) { free[(r.begin - base) / unit + u] = true; }
      }
      if (op % 97 == 0) { set.check_invariants(); }
      ASSERT_EQ(set.total_bytes(), static_cast<std::size_t>(std::count(free.begin(), free.end(), true)) * unit);
    }
    for (auto const& r : taken) { ASSERT_TRUE(set.insert(r)); }
    EXPECT_EQ(set.range_count(), 1U);
    set.check_invariants();
  }
}

TEST(arena_local_arena, free_space_never_merges_across_superblocks_so_each_comes_back_whole)
{
  constexpr std::size_t sb = 16 * unit;
  local_arena arena;
  arena.add_superblock({base, sb});
  arena.add_superblock({base + sb, sb});  // adjacent
  EXPECT_EQ(arena.owned_bytes(), 2 * sb);
  EXPECT_EQ(arena.largest_free(), sb) << "two adjacent empty superblocks stay two free ranges";
  EXPECT_FALSE(arena.allocate(sb + unit)) << "no block spans two superblocks";
  auto const a = arena.allocate(sb);
  auto const b = arena.allocate(4 * unit);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(arena.free_bytes(), sb - 4 * unit);
  EXPECT_FALSE(arena.remove_empty_superblock({base + sb, sb})) << "it has a live block";
  auto const freed = arena.deallocate({*a, sb});
  EXPECT_EQ(freed.status, local_arena::free_status::superblock_empty);
  EXPECT_EQ(freed.superblock, (address_range{*a, sb}));
  EXPECT_EQ(arena.deallocate({*a, sb}).status, local_arena::free_status::double_free);
  EXPECT_EQ(arena.deallocate({base + 4 * sb, unit}).status, local_arena::free_status::not_owned);
  arena.check_invariants();
  EXPECT_TRUE(arena.remove_empty_superblock({*a, sb}));
  EXPECT_EQ(arena.deallocate({*b, 4 * unit}).status, local_arena::free_status::superblock_empty);
  EXPECT_EQ(arena.first_empty_superblock(), (address_range{*b, sb}));
  EXPECT_TRUE(arena.remove_empty_superblock({*b, sb}));
  EXPECT_EQ(arena.owned_bytes(), 0U);
  EXPECT_EQ(arena.free_bytes(), 0U);
  arena.check_invariants();
}

TEST(arena_global_arena, superblocks_and_blocks_account_for_every_byte_and_coalesce_back)
{
  constexpr std::size_t sb = 16 * unit;
  global_arena arena{{base, 10 * sb}, sb};
  std::vector<address_range> superblocks;
  for (int i = 0; i < 4; ++i) {
    auto const s = arena.acquire_superblock();
    ASSERT_TRUE(s);
    superblocks.push_back(*s);
  }
  auto const large = arena.allocate_block(5 * sb + unit);
  ASSERT_TRUE(large);
  EXPECT_FALSE(arena.acquire_superblock()) << "only 1 superblock minus 256 bytes is left";
  arena.check_invariants();
  EXPECT_FALSE(arena.release_superblock({base + 20 * sb, sb})) << "outside the arena";
  EXPECT_FALSE(arena.release_superblock({superblocks[0].begin, unit})) << "not a superblock's size";
  for (auto const& s : superblocks) { ASSERT_TRUE(arena.release_superblock(s)); }
  EXPECT_FALSE(arena.release_superblock(superblocks[0])) << "released twice";
  ASSERT_TRUE(arena.deallocate_block({*large, 5 * sb + unit}));
  EXPECT_EQ(arena.free_bytes(), 10 * sb);
  EXPECT_EQ(arena.free_range_count(), 1U);
  arena.check_invariants();
}

TEST(arena_policy, superblock_threshold_and_keep_free_follow_the_arena_size)
{
  auto const big = detail::arena_policy::for_arena(std::size_t{80} << 30);
  EXPECT_EQ(big.superblock_size, std::size_t{4} << 20);
  EXPECT_EQ(big.large_threshold, std::size_t{1} << 20);
  EXPECT_EQ(big.keep_free, big.superblock_size);
  auto const small = detail::arena_policy::for_arena((std::size_t{3} << 20) + 512);
  EXPECT_EQ(small.superblock_size, std::size_t{128} << 10) << "1/16 of the arena, down to a power of two";
  EXPECT_EQ(small.large_threshold % 256, 0U);
  EXPECT_LT(small.large_threshold, small.superblock_size);
  for (std::size_t size = detail::arena_policy::minimum_arena_size; size <= (std::size_t{1} << 36);
       size = detail::align_down(size + size / 3, 256)) {
    auto const policy = detail::arena_policy::for_arena(size);
    EXPECT_GE(size / policy.superblock_size, detail::arena_policy::minimum_superblock_count)
      << size << " bytes: too few superblocks for as many threads or streams";
    EXPECT_LE(policy.superblock_size, detail::arena_policy::default_superblock_size);
    EXPECT_EQ(policy.superblock_size % 256, 0U);
    EXPECT_EQ(policy.large_threshold % 256, 0U);
  }
}

}  // namespace
}  // namespace gpumem::test
