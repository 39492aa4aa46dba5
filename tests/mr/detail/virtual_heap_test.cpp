// virtual_heap (vmm_pool_memory_resource's algorithm): the constructor's checks, best fit and coalescing
// (across slab boundaries too), stream masks (union on merge, kept on split and on unback), give_back's
// errors, plan_growth's placement (top growth, gaps, a whole gap joined to its right neighbour, a full
// reservation) and its movable slabs, back/unback, wholly_free_slabs and forget_streams, each by hand;
// then a long random sequence that grows, moves and releases slabs the way the resource does, checked
// after every step against a model (a free flag and a stream mask per 256-byte unit).
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/virtual_heap.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace gpumem::test {
namespace {

using detail::virtual_heap;

constexpr std::uintptr_t base = std::uintptr_t{1} << 40;
constexpr std::size_t unit = 256;          // the alignment: every address and size is in units
constexpr std::size_t slab_units = 32;     // the examples' slab: 32 units (8 KiB)
constexpr std::size_t slab = slab_units * unit;

constexpr std::uintptr_t at(std::size_t first_unit) { return base + first_unit * unit; }
constexpr std::uintptr_t slab_at(std::size_t index) { return base + index * slab; }
constexpr std::uint64_t handle_of(std::size_t index) { return 1000 + index; }

/// The addresses of `mappings` (each one slab here unless a test says otherwise).
std::vector<std::uintptr_t> addresses(std::vector<virtual_heap::mapping> const& mappings)
{
  std::vector<std::uintptr_t> result;
  for (auto const& m : mappings) { result.push_back(m.address); }
  return result;
}

/// A heap of `slabs` slabs of 32 units each, the given ones backed (handle 1000 + index).
virtual_heap make_heap(std::size_t slabs, std::vector<std::size_t> const& backed = {})
{
  virtual_heap heap{base, slabs * slab, slab, unit};
  for (std::size_t const index : backed) { heap.back(slab_at(index), handle_of(index)); }
  heap.check_invariants();
  return heap;
}

/// take(units) must give the block at `first_unit` with `streams`.
::testing::AssertionResult takes(virtual_heap& heap, std::size_t units, std::size_t first_unit,
                                 std::uint64_t streams = 0)
{
  auto const b = heap.take(units * unit);
  if (!b) { return ::testing::AssertionFailure() << "take(" << units << " units) found nothing"; }
  if (b->address != at(first_unit) || b->streams != streams) {
    return ::testing::AssertionFailure() << "take(" << units << " units) gave unit "
                                         << static_cast<std::ptrdiff_t>((b->address - base) / unit)
                                         << (b->address % unit != 0 ? " (misaligned)" : "") << " streams "
                                         << b->streams << "; expected unit " << first_unit << " streams " << streams;
  }
  return ::testing::AssertionSuccess();
}

/// Takes `units` and expects it to succeed; returns the first unit.
std::size_t take_units(virtual_heap& heap, std::size_t units)
{
  auto const b = heap.take(units * unit);
  EXPECT_TRUE(b.has_value()) << units << " units";
  return b ? (b->address - base) / unit : 0;
}

/// Takes every free byte (largest range first), as blocks that are never given back whole.
void use_all(virtual_heap& heap)
{
  while (heap.largest_free_range() > 0) { ASSERT_TRUE(heap.take(heap.largest_free_range()).has_value()); }
}

void give(virtual_heap& heap, std::size_t first_unit, std::size_t units, std::uint64_t streams = 0)
{
  heap.give_back(at(first_unit), units * unit, streams);
}

/// The logic_error's message contains `part`.
template <class F>
::testing::AssertionResult throws_naming(F&& f, std::string const& part)
{
  try {
    f();
  } catch (logic_error const& e) {
    if (std::string{e.what()}.find(part) == std::string::npos) {
      return ::testing::AssertionFailure() << "the message does not name '" << part << "': " << e.what();
    }
    return ::testing::AssertionSuccess();
  } catch (std::exception const& e) {
    return ::testing::AssertionFailure() << "threw another exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw (expected a logic_error naming '" << part << "')";
}

// ---- construction -----------------------------------------------------------------------------------------

TEST(virtual_heap, constructor_checks_its_arguments_and_names_the_bad_one)
{
  EXPECT_TRUE(throws_naming([] { virtual_heap h(base, 4 * slab, slab, 0); }, "not a power of two"));
  EXPECT_TRUE(throws_naming([] { virtual_heap h(base, 4 * slab, slab, 384); }, "alignment 384"));
  EXPECT_TRUE(throws_naming([] { virtual_heap h(base, 4 * slab, 0, unit); }, "slab size 0"));
  EXPECT_TRUE(throws_naming([] { virtual_heap h(base, 4 * 300, 300, unit); }, "slab size 300"));
  EXPECT_TRUE(throws_naming([] { virtual_heap h(base + unit, 4 * slab, slab, unit); }, "base"));
  EXPECT_TRUE(throws_naming([] { virtual_heap h(base, 0, slab, unit); }, "size 0"));
  EXPECT_TRUE(throws_naming([] { virtual_heap h(base, slab + unit, slab, unit); }, "size " + std::to_string(slab + unit)));
  std::uintptr_t const top = std::numeric_limits<std::uintptr_t>::max() / slab * slab;  // the last slab address
  EXPECT_TRUE(throws_naming([top] { virtual_heap h(top, 2 * slab, slab, unit); }, "wraps around"));
  virtual_heap last{top - slab, slab, slab, unit};  // the very top of the address space is fine
  last.back(top - slab, 1);
  last.check_invariants();
  EXPECT_EQ(last.free_bytes(), slab);
}

TEST(virtual_heap, starts_with_nothing_backed_and_nothing_free)
{
  virtual_heap heap = make_heap(8);
  EXPECT_EQ(heap.base(), base);
  EXPECT_EQ(heap.size(), 8 * slab);
  EXPECT_EQ(heap.slab_size(), slab);
  EXPECT_EQ(heap.slab_count(), 0U);
  EXPECT_EQ(heap.backed_bytes(), 0U);
  EXPECT_EQ(heap.free_bytes(), 0U);
  EXPECT_EQ(heap.free_range_count(), 0U);
  EXPECT_EQ(heap.largest_free_range(), 0U);
  EXPECT_FALSE(heap.take(unit).has_value());
  EXPECT_TRUE(addresses(heap.wholly_free_mappings()).empty());
  heap.check_invariants();
}

// ---- back -------------------------------------------------------------------------------------------------------

TEST(virtual_heap, backed_slabs_are_free_and_adjacent_slabs_make_one_free_range)
{
  virtual_heap heap = make_heap(8);
  heap.back(slab_at(0), handle_of(0));
  heap.back(slab_at(1), handle_of(1));
  EXPECT_EQ(heap.free_range_count(), 1U) << "two adjacent backed slabs must make one free range";
  EXPECT_EQ(heap.largest_free_range(), 2 * slab);
  heap.back(slab_at(3), handle_of(3));
  EXPECT_EQ(heap.free_range_count(), 2U) << "slab 2 is not backed: slabs 1 and 3 do not touch";
  heap.back(slab_at(2), handle_of(2));  // fills the hole: one range of four slabs
  EXPECT_EQ(heap.free_range_count(), 1U);
  EXPECT_EQ(heap.largest_free_range(), 4 * slab);
  EXPECT_EQ(heap.free_bytes(), 4 * slab);
  EXPECT_EQ(heap.slab_count(), 4U);
  EXPECT_EQ(heap.backed_bytes(), 4 * slab);
  heap.check_invariants();
  // A block across the slab boundaries 0|1 and 1|2.
  EXPECT_TRUE(takes(heap, 3 * slab_units + 5, 0));
  std::vector<std::pair<std::uintptr_t, std::uint64_t>> slabs;
  heap.for_each_mapping([&](std::uintptr_t address, std::uint64_t handle, std::size_t bytes) {
    EXPECT_EQ(bytes, slab);
    slabs.emplace_back(address, handle);
  });
  EXPECT_EQ(slabs, (std::vector<std::pair<std::uintptr_t, std::uint64_t>>{
                     {slab_at(0), handle_of(0)}, {slab_at(1), handle_of(1)}, {slab_at(2), handle_of(2)},
                     {slab_at(3), handle_of(3)}}));
}

TEST(virtual_heap, back_rejects_misplaced_and_duplicate_slabs)
{
  virtual_heap heap = make_heap(4, {1});
  EXPECT_TRUE(throws_naming([&] { heap.back(slab_at(1), 7); }, "already backed"));
  EXPECT_TRUE(throws_naming([&] { heap.back(slab_at(2) + unit, 7); }, "not a slab address"));
  EXPECT_TRUE(throws_naming([&] { heap.back(slab_at(4), 7); }, "not a slab address"));   // one past the end
  EXPECT_TRUE(throws_naming([&] { heap.back(base - slab, 7); }, "not a slab address"));  // below the base
  EXPECT_EQ(heap.slab_count(), 1U);
  EXPECT_EQ(heap.free_bytes(), slab);
  heap.check_invariants();
}

// ---- take and give_back -----------------------------------------------------------------------------------------

TEST(virtual_heap, take_is_best_fit_with_the_lowest_address_on_ties_cut_from_the_range_start)
{
  virtual_heap heap = make_heap(4, {0, 1, 2, 3});  // 128 units, one range
  // Carve: [0,10) a, [10,15) used, [15,35) c, [35,40) used, [40,48) e, [48,53) used, [53,61) g, [61,64) used,
  // then [64,128) stays free.
  for (std::size_t const units : {10, 5, 20, 5, 8, 5, 8, 3}) { (void)take_units(heap, units); }
  give(heap, 0, 10);
  give(heap, 15, 20);
  give(heap, 40, 8);
  give(heap, 53, 8);
  heap.check_invariants();
  EXPECT_EQ(heap.free_range_count(), 5U);
  EXPECT_EQ(heap.free_bytes(), (10 + 20 + 8 + 8 + 64) * unit);
  EXPECT_TRUE(takes(heap, 8, 40));   // an exact fit beats the larger ranges; of the two 8s, the lower
  EXPECT_TRUE(takes(heap, 7, 53));   // the other 8: smallest that fits; the block is the range's start
  EXPECT_TRUE(takes(heap, 1, 60));   // the remaining unit of it
  EXPECT_TRUE(takes(heap, 9, 0));    // 10 is the smallest that holds 9
  EXPECT_TRUE(takes(heap, 1, 9));
  EXPECT_TRUE(takes(heap, 21, 64));  // only the top range holds 21
  EXPECT_TRUE(takes(heap, 20, 15));
  EXPECT_EQ(heap.free_range_count(), 1U);
  EXPECT_EQ(heap.largest_free_range(), 43 * unit);
  std::size_t const free_before = heap.free_bytes();
  EXPECT_FALSE(heap.take(44 * unit).has_value()) << "no free range holds 44 units";
  EXPECT_EQ(heap.free_bytes(), free_before) << "a failed take changed the heap";
  heap.check_invariants();
}

TEST(virtual_heap, give_back_merges_with_the_left_the_right_both_or_neither)
{
  virtual_heap heap = make_heap(2, {0, 1});  // 64 units
  for (int i = 0; i < 8; ++i) { (void)take_units(heap, 8); }  // 8 blocks of 8 units, nothing free
  EXPECT_EQ(heap.free_bytes(), 0U);
  give(heap, 8, 8);   // alone
  give(heap, 32, 8);  // alone: [24,32) between them is used
  EXPECT_EQ(heap.free_range_count(), 2U);
  give(heap, 16, 8);  // merges with the left [8,16)
  EXPECT_EQ(heap.free_range_count(), 2U);
  EXPECT_EQ(heap.largest_free_range(), 16 * unit);
  give(heap, 40, 8);  // merges with the left [32,40)
  give(heap, 0, 8);   // merges with the right [8,24)
  EXPECT_EQ(heap.free_range_count(), 2U);
  EXPECT_EQ(heap.largest_free_range(), 24 * unit);
  give(heap, 24, 8);  // the slab boundary is at 32: merges with both, across the boundary
  EXPECT_EQ(heap.free_range_count(), 1U);
  EXPECT_EQ(heap.largest_free_range(), 48 * unit);
  give(heap, 56, 8);
  give(heap, 48, 8);  // both again: everything is one range
  EXPECT_EQ(heap.free_range_count(), 1U);
  EXPECT_EQ(heap.free_bytes(), 2 * slab);
  heap.check_invariants();
  EXPECT_TRUE(takes(heap, 64, 0)) << "the whole of both slabs is one block again";
}

TEST(virtual_heap, a_block_cut_from_a_range_of_several_streams_carries_those_of_the_pieces_it_overlaps)
{
  virtual_heap heap = make_heap(4, {0, 1});
  for (int i = 0; i < 8; ++i) { (void)take_units(heap, 8); }
  give(heap, 0, 8, 0b0001);
  give(heap, 16, 8, 0b0100);           // apart from [0,8)
  give(heap, 8, 8, 0b0010);            // joins both: one range of 0b0111
  give(heap, 40, 8, 0b1000);           // apart
  EXPECT_EQ(heap.streams_in_use(), 0b1111U);
  EXPECT_TRUE(takes(heap, 8, 40, 0b1000));  // (the best fit for 8) never merged: its own streams only
  EXPECT_TRUE(takes(heap, 4, 0, 0b0001));   // inside the piece freed on stream 0
  EXPECT_TRUE(takes(heap, 6, 4, 0b0011));   // the rest of it and half of stream 1's
  heap.check_invariants();
  EXPECT_TRUE(takes(heap, 14, 10, 0b0110));
  EXPECT_EQ(heap.free_bytes(), 0U);
  heap.check_invariants();
  // A range of one stream carries it on every byte, also the bytes backed with none; joined to another
  // stream's piece, it keeps that stream for all its bytes, and the piece its own.
  give(heap, 0, 16, 0b0001);
  give(heap, 16, 8, 0b0001);  // the same stream: still a range of one
  give(heap, 24, 8, 0b0100);  // several now
  EXPECT_TRUE(takes(heap, 24, 0, 0b0001));
  EXPECT_TRUE(takes(heap, 8, 24, 0b0100));
  heap.check_invariants();
  // Newly backed bytes carry no stream; merging them into a range unites its streams with none.
  give(heap, 56, 8, 0b10000);
  heap.back(slab_at(2), handle_of(2));  // joins [56,64) across the boundary
  EXPECT_EQ(heap.free_range_count(), 1U);
  EXPECT_TRUE(takes(heap, 16, 56, 0b10000));
  heap.back(slab_at(3), handle_of(3));  // joins the rest of slab 2, [72,96)
  EXPECT_EQ(heap.free_range_count(), 1U);
  EXPECT_TRUE(takes(heap, 56, 72, 0b10000));
  heap.check_invariants();
}

// Memory moved from elsewhere is backed with the streams whose work may still use it: its bytes carry them, and
// a range it joins carries the union.
TEST(virtual_heap, bytes_backed_with_streams_carry_them_into_the_range_they_join)
{
  virtual_heap heap = make_heap(4, {0});
  for (int i = 0; i < 4; ++i) { (void)take_units(heap, 8); }
  give(heap, 24, 8, 0b0001);                          // the top of slab 0, free on stream 0
  heap.back(slab_at(1), handle_of(1), 1, 0b0100);     // joins it
  EXPECT_EQ(heap.free_range_count(), 1U);
  EXPECT_TRUE(takes(heap, 40, 24, 0b0101));
  heap.back(slab_at(3), handle_of(3), 1, 0b1000);     // apart: its own streams only
  EXPECT_TRUE(takes(heap, 32, 96, 0b1000));
  heap.check_invariants();
}

TEST(virtual_heap, forget_streams_clears_only_the_given_bits_and_streams_in_use_is_their_union)
{
  virtual_heap heap = make_heap(2, {0, 1});
  for (int i = 0; i < 8; ++i) { (void)take_units(heap, 8); }
  EXPECT_EQ(heap.streams_in_use(), 0U);
  give(heap, 0, 8, 0b0111);
  give(heap, 32, 8, 0b1100);
  EXPECT_EQ(heap.streams_in_use(), 0b1111U);
  heap.forget_streams(0b0101);
  EXPECT_EQ(heap.streams_in_use(), 0b1010U);
  heap.check_invariants();
  EXPECT_TRUE(takes(heap, 8, 0, 0b0010));
  EXPECT_TRUE(takes(heap, 8, 32, 0b1000));
}

TEST(virtual_heap, give_back_errors_are_logic_errors_and_change_nothing)
{
  virtual_heap heap = make_heap(8, {1, 2, 5});  // backed: units [32,96) and [160,192)
  (void)take_units(heap, 64);                    // [32,96) in use
  give(heap, 40, 8, 1);                          // [40,48) free
  std::size_t const free_before = heap.free_bytes();
  std::size_t const ranges_before = heap.free_range_count();
  auto unchanged = [&](char const* what) {
    EXPECT_EQ(heap.free_bytes(), free_before) << what;
    EXPECT_EQ(heap.free_range_count(), ranges_before) << what;
    heap.check_invariants();
  };
  EXPECT_TRUE(throws_naming([&] { give(heap, 40, 8); }, "freed twice"));
  unchanged("double free");
  EXPECT_TRUE(throws_naming([&] { give(heap, 36, 8); }, "freed twice"));  // overlaps the start of [40,48)
  unchanged("overlapping the start");
  EXPECT_TRUE(throws_naming([&] { give(heap, 44, 8); }, "freed twice"));  // overlaps the end
  unchanged("overlapping the end");
  EXPECT_TRUE(throws_naming([&] { give(heap, 42, 2); }, "freed twice"));  // inside
  unchanged("inside a free range");
  EXPECT_TRUE(throws_naming([&] { give(heap, 32, 32); }, "freed twice"));  // covers it
  unchanged("covering a free range");
  EXPECT_TRUE(throws_naming([&] { give(heap, 50, 0); }, "empty or not aligned"));
  EXPECT_TRUE(throws_naming([&] { heap.give_back(at(50) + 16, unit, 0); }, "empty or not aligned"));
  EXPECT_TRUE(throws_naming([&] { heap.give_back(at(50), unit + 16, 0); }, "empty or not aligned"));
  unchanged("misaligned");
  EXPECT_TRUE(throws_naming([&] { heap.give_back(base - slab, unit, 0); }, "outside the reservation"));
  EXPECT_TRUE(throws_naming([&] { heap.give_back(at(8 * slab_units), unit, 0); }, "outside the reservation"));
  EXPECT_TRUE(throws_naming([&] { give(heap, 8 * slab_units - 4, 8); }, "outside the reservation"));  // straddles the end
  EXPECT_TRUE(throws_naming([&] { heap.give_back(at(160), std::numeric_limits<std::size_t>::max() / unit * unit, 0); },
                            "outside the reservation"));
  unchanged("outside");
  EXPECT_TRUE(throws_naming([&] { give(heap, 0, 4); }, "not inside backed slabs"));      // slab 0 is unbacked
  EXPECT_TRUE(throws_naming([&] { give(heap, 120, 8); }, "not inside backed slabs"));    // slab 3
  EXPECT_TRUE(throws_naming([&] { give(heap, 90, 10); }, "not inside backed slabs"));    // slab 2 into slab 3
  EXPECT_TRUE(throws_naming([&] { give(heap, 28, 8); }, "not inside backed slabs"));     // slab 0 into slab 1
  unchanged("unbacked");
  give(heap, 48, 48, 2);  // the rest of the block is fine, and merges
  EXPECT_TRUE(takes(heap, 56, 40, 3));
}

// ---- plan_growth --------------------------------------------------------------------------------------------------

TEST(virtual_heap, plan_growth_in_an_empty_heap_starts_at_the_base)
{
  virtual_heap heap = make_heap(8);
  auto plan = heap.plan_growth(unit);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->address, base);
  EXPECT_EQ(plan->slabs, 1U);
  EXPECT_TRUE(plan->movable.empty());
  plan = heap.plan_growth(3 * slab + unit);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->slabs, 4U);
  plan = heap.plan_growth(8 * slab);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->slabs, 8U);
  EXPECT_FALSE(heap.plan_growth(8 * slab + unit).has_value()) << "larger than the reservation";
  EXPECT_EQ(heap.slab_count(), 0U) << "plan_growth must change nothing";
}

TEST(virtual_heap, top_growth_extends_the_free_range_touching_the_top)
{
  virtual_heap heap = make_heap(8, {0});
  (void)take_units(heap, 12);  // slab 0: 20 units free at its top
  auto plan = heap.plan_growth(50 * unit);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->address, slab_at(1));
  EXPECT_EQ(plan->slabs, 1U) << "20 free units + one slab of 32 hold 50 units";
  EXPECT_TRUE(plan->movable.empty());
  plan = heap.plan_growth(52 * unit);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->slabs, 1U) << "52 = 20 + 32 exactly";
  plan = heap.plan_growth(53 * unit);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->slabs, 2U);
  // Carried out, the request fits in one block that starts in the old slab.
  heap.back(slab_at(1), handle_of(1));
  EXPECT_TRUE(takes(heap, 50, 12));
  heap.check_invariants();
}

TEST(virtual_heap, plan_growth_uses_gaps_between_slabs_fewest_slabs_first_then_lowest_address)
{
  virtual_heap heap = make_heap(8, {0, 3});
  use_all(heap);  // slabs 0 and 3 in use; a gap of two slabs [1,3), the top gap [4,8)
  auto plan = heap.plan_growth(unit);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->address, slab_at(1)) << "both gaps need one slab: the lower one";
  EXPECT_EQ(plan->slabs, 1U);
  plan = heap.plan_growth(2 * slab);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->address, slab_at(1));
  EXPECT_EQ(plan->slabs, 2U);
  plan = heap.plan_growth(2 * slab + unit);  // three slabs: only the top gap holds them
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->address, slab_at(4));
  EXPECT_EQ(plan->slabs, 3U);
  plan = heap.plan_growth(4 * slab);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->address, slab_at(4));
  EXPECT_EQ(plan->slabs, 4U);
  EXPECT_FALSE(heap.plan_growth(4 * slab + unit).has_value()) << "no gap holds five slabs";
  // A free range touching the top gap makes it cheaper than the lower gap.
  give(heap, 3 * slab_units + 2, 30);  // slab 3's top 30 units
  plan = heap.plan_growth(40 * unit);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->address, slab_at(4)) << "30 free + 1 slab at the top beats 2 slabs in the gap";
  EXPECT_EQ(plan->slabs, 1U);
  EXPECT_TRUE(plan->movable.empty());
}

TEST(virtual_heap, a_gap_filled_completely_also_uses_the_free_range_after_it)
{
  virtual_heap heap = make_heap(8, {0, 2});
  use_all(heap);
  give(heap, 22, 10);  // slab 0's top 10 units
  give(heap, 64, 10);  // slab 2's first 10 units
  auto plan = heap.plan_growth(50 * unit);  // 10 + 32 + 10 = 52 >= 50
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->address, slab_at(1));
  EXPECT_EQ(plan->slabs, 1U) << "the top gap would need two slabs";
  EXPECT_TRUE(plan->movable.empty());
  plan = heap.plan_growth(53 * unit);  // the gap is not enough even with both neighbours
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->address, slab_at(3));
  EXPECT_EQ(plan->slabs, 2U);
  heap.back(slab_at(1), handle_of(1));
  EXPECT_TRUE(takes(heap, 52, 22)) << "the three pieces are one free range";
  heap.check_invariants();
}

TEST(virtual_heap, plan_growth_is_nullopt_when_the_reservation_is_full)
{
  virtual_heap heap = make_heap(4, {0, 1, 2, 3});
  (void)take_units(heap, 4 * slab_units);
  EXPECT_FALSE(heap.plan_growth(unit).has_value());
  give(heap, 0, 10);
  EXPECT_FALSE(heap.plan_growth(11 * unit).has_value()) << "free memory but no unbacked address";
  virtual_heap three = make_heap(4, {0, 1, 3});
  use_all(three);
  EXPECT_FALSE(three.plan_growth(slab + unit).has_value()) << "the only gap holds one slab";
  ASSERT_TRUE(three.plan_growth(slab).has_value());
}

TEST(virtual_heap, movable_lists_wholly_free_slabs_elsewhere_highest_first_at_most_the_growth)
{
  // Slabs 0..7 backed: slab 1 wholly free, slabs 3 and 4 wholly free (one range), slab 6's top 16 units and
  // slab 7 free (one range touching the top gap); the rest in use.
  virtual_heap heap = make_heap(16, {0, 1, 2, 3, 4, 5, 6, 7});
  (void)take_units(heap, 8 * slab_units);
  give(heap, 1 * slab_units, slab_units);
  give(heap, 3 * slab_units, 2 * slab_units);
  give(heap, 6 * slab_units + 16, 16 + slab_units);
  heap.check_invariants();
  EXPECT_EQ(addresses(heap.wholly_free_mappings()), (std::vector{slab_at(7), slab_at(4), slab_at(3), slab_at(1)}));
  auto plan = heap.plan_growth(100 * unit);  // 48 free at the top: 52 missing, two slabs
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->address, slab_at(8));
  EXPECT_EQ(plan->slabs, 2U);
  EXPECT_EQ(addresses(plan->movable), (std::vector{slab_at(4), slab_at(3)}))
    << "slab 7 belongs to the range the plan extends; at most two";
  plan = heap.plan_growth(160 * unit);  // 112 missing: four slabs, three movable
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->slabs, 4U);
  EXPECT_EQ(addresses(plan->movable), (std::vector{slab_at(4), slab_at(3), slab_at(1)}));
  // Carried out as the resource does: unmap the movable slabs, map their handles at the new place.
  std::vector<std::uint64_t> handles;
  for (auto const& m : plan->movable) { handles.push_back(heap.unback(m.address).handle); }
  EXPECT_EQ(handles, (std::vector<std::uint64_t>{handle_of(4), handle_of(3), handle_of(1)}));
  for (std::size_t i = 0; i < plan->slabs; ++i) {
    heap.back(plan->address + i * slab, i < handles.size() ? handles[i] : 99);
  }
  heap.check_invariants();
  EXPECT_EQ(heap.slab_count(), 9U);
  EXPECT_TRUE(takes(heap, 160, 6 * slab_units + 16));
}

TEST(virtual_heap, movable_never_takes_slabs_of_the_right_neighbour_the_plan_joins)
{
  // Slab 0's top 10 units free; slab 1 a gap; slab 2 wholly free and slab 3's first 5 units free (one
  // range after the gap); slab 3's rest in use; above it nothing is backed.
  virtual_heap heap = make_heap(8, {0, 2, 3});
  use_all(heap);
  give(heap, 22, 10);
  give(heap, 2 * slab_units, slab_units + 5);
  EXPECT_EQ(addresses(heap.wholly_free_mappings()), std::vector{slab_at(2)});
  // 50 units: the gap at slab 1 with both neighbours (10 + 32 + 37) needs one slab, the top gap two.
  auto plan = heap.plan_growth(50 * unit);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->address, slab_at(1));
  EXPECT_EQ(plan->slabs, 1U);
  EXPECT_TRUE(plan->movable.empty()) << "slab 2 is part of the range the plan joins";
  // A wholly free slab 5: the gap at slab 4 (0 + 32 + 32) and the top gap (32 + 32) need one slab too; the
  // lowest address wins, and slab 5 may move there.
  heap.back(slab_at(5), handle_of(5));
  plan = heap.plan_growth(50 * unit);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->address, slab_at(1));
  EXPECT_EQ(plan->slabs, 1U);
  EXPECT_EQ(addresses(plan->movable), std::vector{slab_at(5)});
  // Carried out: slab 5's memory moves to slab 1; the request fits in the joined range.
  auto const [handle, slabs, streams] = heap.unback(slab_at(5));
  EXPECT_EQ(handle, handle_of(5));
  EXPECT_EQ(slabs, 1U);
  EXPECT_EQ(streams, 0U);
  heap.back(slab_at(1), handle);
  EXPECT_TRUE(takes(heap, 50, 22));
  heap.check_invariants();
}

// ---- mappings of several slabs ----------------------------------------------------------------------------------

TEST(virtual_heap, a_mapping_of_several_slabs_backs_them_all_and_goes_back_only_whole)
{
  virtual_heap heap = make_heap(8, {0});
  heap.back(slab_at(1), 77, 3);  // slabs 1..3, one piece
  heap.check_invariants();
  EXPECT_EQ(heap.slab_count(), 4U);
  EXPECT_EQ(heap.mapping_count(), 2U);
  EXPECT_EQ(heap.backed_bytes(), 4 * slab);
  EXPECT_EQ(heap.free_range_count(), 1U) << "slab 0 and the mapping touch: one free range";
  std::vector<std::pair<std::uintptr_t, std::size_t>> seen;
  heap.for_each_mapping([&](std::uintptr_t address, std::uint64_t, std::size_t bytes) { seen.emplace_back(address, bytes); });
  EXPECT_EQ(seen, (std::vector<std::pair<std::uintptr_t, std::size_t>>{{slab_at(0), slab}, {slab_at(1), 3 * slab}}));
  // Every slab of it counts as backed; none can be backed again, and a mapping past the end is refused.
  EXPECT_TRUE(throws_naming([&] { heap.back(slab_at(3), 7); }, "already backed"));
  EXPECT_TRUE(throws_naming([&] { heap.back(slab_at(4), 7, 5); }, "do not fit"));
  EXPECT_TRUE(throws_naming([&] { heap.back(slab_at(4), 7, 0); }, "no slabs"));
  heap.check_invariants();
  // One unit in use anywhere in it keeps it; a slab inside it is no mapping of its own.
  std::size_t const first = take_units(heap, slab_units + 1);  // slab 0 and the mapping's first unit
  EXPECT_EQ(first, 0U);
  EXPECT_EQ(addresses(heap.wholly_free_mappings()), std::vector<std::uintptr_t>{})
    << "slabs 2 and 3 are free, but their mapping is not wholly free";
  EXPECT_TRUE(throws_naming([&] { (void)heap.unback(slab_at(1)); }, "not wholly free"));
  EXPECT_TRUE(throws_naming([&] { (void)heap.unback(slab_at(2)); }, "no mapping"));
  give(heap, 0, slab_units + 1, 0b10);
  EXPECT_EQ(addresses(heap.wholly_free_mappings()), (std::vector{slab_at(1), slab_at(0)}));
  auto const taken = heap.unback(slab_at(1));
  EXPECT_EQ(taken.handle, 77U);
  EXPECT_EQ(taken.slabs, 3U);
  EXPECT_EQ(taken.streams, 0b10U);
  EXPECT_EQ(heap.slab_count(), 1U);
  EXPECT_EQ(heap.free_bytes(), slab);
  heap.check_invariants();
  heap.back(slab_at(2), 78, 2);  // the slabs are free to back again, in another shape
  EXPECT_EQ(heap.slab_count(), 3U);
  heap.check_invariants();
}

TEST(virtual_heap, movable_mappings_fit_what_the_growth_still_needs_or_one_larger_moves_whole)
{
  // Slabs 0..5 in use; a wholly free mapping of 3 slabs at 6..8 and one of 1 slab at 10 (9 in use).
  virtual_heap heap = make_heap(32, {0, 1, 2, 3, 4, 5});
  heap.back(slab_at(6), 60, 3);
  heap.back(slab_at(9), handle_of(9));
  heap.back(slab_at(10), handle_of(10));
  heap.back(slab_at(11), handle_of(11));
  use_all(heap);
  give(heap, 6 * slab_units, 3 * slab_units);
  give(heap, 10 * slab_units, slab_units);
  heap.check_invariants();
  EXPECT_EQ(heap.wholly_free_mappings(), (std::vector<virtual_heap::mapping>{{slab_at(10), 1}, {slab_at(6), 3}}));
  // 4 slabs (more than any free range): both fit, the top grows by 4 with nothing created.
  auto plan = heap.plan_growth(4 * slab);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->address, slab_at(12));
  EXPECT_EQ(plan->slabs, 4U);
  EXPECT_EQ(plan->movable, (std::vector<virtual_heap::mapping>{{slab_at(10), 1}, {slab_at(6), 3}}));
  // 5 slabs: both move, one slab is still to create.
  plan = heap.plan_growth(5 * slab);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->slabs, 5U);
  EXPECT_EQ(plan->movable.size(), 2U);
  // Take the one-slab mapping out of play: a 2-slab growth can then only move the 3-slab mapping, whole.
  auto const one = heap.take(slab);
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->address, slab_at(10));
  plan = heap.plan_growth(2 * slab);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->address, slab_at(12));
  EXPECT_EQ(plan->movable, (std::vector<virtual_heap::mapping>{{slab_at(6), 3}}));
  EXPECT_EQ(plan->slabs, 3U) << "the growth backs the whole moved mapping";
  // Carried out as the resource does.
  auto const taken = heap.unback(slab_at(6));
  heap.back(plan->address, taken.handle, taken.slabs);
  heap.check_invariants();
  EXPECT_TRUE(takes(heap, 2 * slab_units, 12 * slab_units));
  EXPECT_EQ(heap.free_bytes(), slab);
}

TEST(virtual_heap, a_larger_mapping_does_not_move_into_a_gap_too_small_for_it)
{
  // Slab 0 free next to a one-slab hole at 1; slabs 2, 3 and 7 in use; a wholly free 3-slab mapping at 4..6.
  // Two slabs fit best in the hole (one new slab); the mapping cannot go there whole, so the plan creates.
  virtual_heap heap = make_heap(16, {0, 2, 3, 7});
  heap.back(slab_at(4), 40, 3);
  use_all(heap);
  give(heap, 0, slab_units);
  give(heap, 4 * slab_units, 3 * slab_units);
  heap.check_invariants();
  auto const plan = heap.plan_growth(2 * slab);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->address, slab_at(1));
  EXPECT_EQ(plan->slabs, 1U);
  EXPECT_TRUE(plan->movable.empty()) << "three slabs do not fit a one-slab hole";
}

// ---- unback and wholly_free_slabs ---------------------------------------------------------------------------------

TEST(virtual_heap, unback_in_the_middle_of_a_free_range_keeps_both_sides_with_their_streams)
{
  virtual_heap heap = make_heap(4, {0, 1, 2});
  (void)take_units(heap, 3 * slab_units);
  give(heap, 16, 64, 0b101);  // slab 0's top half, slab 1, slab 2's first half: one range
  auto const [handle, slabs, streams] = heap.unback(slab_at(1));
  EXPECT_EQ(handle, handle_of(1));
  EXPECT_EQ(slabs, 1U);
  EXPECT_EQ(streams, 0b101U);
  heap.check_invariants();
  EXPECT_EQ(heap.slab_count(), 2U);
  EXPECT_EQ(heap.free_range_count(), 2U);
  EXPECT_EQ(heap.free_bytes(), 32 * unit);
  EXPECT_TRUE(takes(heap, 16, 16, 0b101));
  EXPECT_TRUE(takes(heap, 16, 64, 0b101));
  EXPECT_EQ(heap.free_bytes(), 0U);
  // Back again: the slab is free with no stream, and touches nothing free.
  heap.back(slab_at(1), 42);
  EXPECT_TRUE(takes(heap, 32, 32, 0));
}

TEST(virtual_heap, unback_gives_the_streams_of_the_pieces_in_the_mapping_and_the_rest_keeps_its_own)
{
  virtual_heap heap = make_heap(3, {0, 1, 2});
  (void)take_units(heap, 3 * slab_units);
  give(heap, 0, slab_units + 4, 0b001);                   // slab 0 and the start of slab 1
  give(heap, slab_units + 4, slab_units - 4, 0b010);      // the rest of slab 1
  give(heap, 2 * slab_units, slab_units, 0b100);          // slab 2: one range of three streams
  auto const middle = heap.unback(slab_at(1));
  EXPECT_EQ(middle.streams, 0b011U);
  heap.check_invariants();
  EXPECT_EQ(heap.free_range_count(), 2U);
  EXPECT_TRUE(takes(heap, slab_units, 0, 0b001));
  EXPECT_TRUE(takes(heap, slab_units, 2 * slab_units, 0b100));
  heap.check_invariants();
}

// A stream made safe for every stream leaves the pieces too; a range left with one stream carries it whole.
TEST(virtual_heap, forget_streams_clears_the_pieces_streams_as_well)
{
  virtual_heap heap = make_heap(2, {0, 1});
  (void)take_units(heap, 2 * slab_units);
  give(heap, 0, 8, 0b001);
  give(heap, 8, 8, 0b010);
  give(heap, 16, 16, 0b100);
  heap.forget_streams(0b010);
  heap.check_invariants();
  EXPECT_TRUE(takes(heap, 8, 0, 0b001));
  EXPECT_TRUE(takes(heap, 8, 8, 0b000)) << "the piece freed on stream 1 is safe now";
  heap.forget_streams(0b100);  // the rest, [16, 32), carried streams 0 and 2: stream 0 is left
  heap.check_invariants();
  EXPECT_TRUE(takes(heap, 16, 16, 0b001)) << "a range of one stream left: it carries it on every byte";
  heap.check_invariants();
}

TEST(virtual_heap, unback_at_either_end_of_a_free_range_and_of_a_whole_range)
{
  virtual_heap heap = make_heap(4, {0, 1, 2, 3});
  (void)take_units(heap, 4 * slab_units);
  give(heap, 0, 4 * slab_units, 0b11);
  for (std::size_t const index : {std::size_t{0}, std::size_t{3}, std::size_t{1}}) {  // start, end, start
    auto const [handle, slabs, streams] = heap.unback(slab_at(index));
    EXPECT_EQ(handle, handle_of(index));
    EXPECT_EQ(slabs, 1U);
    EXPECT_EQ(streams, 0b11U);
    heap.check_invariants();
    EXPECT_EQ(heap.free_range_count(), 1U) << "after slab " << index;
  }
  EXPECT_EQ(heap.free_bytes(), slab);
  auto const whole = heap.unback(slab_at(2));  // a whole range
  EXPECT_EQ(whole.handle, handle_of(2));
  EXPECT_EQ(whole.slabs, 1U);
  EXPECT_EQ(whole.streams, 0b11U);
  EXPECT_EQ(heap.free_range_count(), 0U);
  EXPECT_EQ(heap.free_bytes(), 0U);
  EXPECT_EQ(heap.slab_count(), 0U);
  heap.check_invariants();
  EXPECT_TRUE(throws_naming([&] { (void)heap.unback(slab_at(2)); }, "no mapping"));
}

TEST(virtual_heap, unback_of_a_slab_not_wholly_free_throws_and_changes_nothing)
{
  virtual_heap heap = make_heap(4, {0, 1, 2});
  (void)take_units(heap, 3 * slab_units);
  give(heap, 0, 31);                   // slab 0 but its last unit
  give(heap, 33, 2 * slab_units - 1);  // slab 1 but its first unit, and slab 2
  std::size_t const free_before = heap.free_bytes();
  EXPECT_TRUE(throws_naming([&] { (void)heap.unback(slab_at(0)); }, "not wholly free"));
  EXPECT_TRUE(throws_naming([&] { (void)heap.unback(slab_at(1)); }, "not wholly free"));
  EXPECT_TRUE(throws_naming([&] { (void)heap.unback(slab_at(3)); }, "no mapping"));
  EXPECT_TRUE(throws_naming([&] { (void)heap.unback(slab_at(1) + unit); }, "no mapping"));
  EXPECT_EQ(heap.free_bytes(), free_before);
  EXPECT_EQ(heap.slab_count(), 3U);
  heap.check_invariants();
  EXPECT_EQ(addresses(heap.wholly_free_mappings()), std::vector{slab_at(2)});
  EXPECT_EQ(heap.unback(slab_at(2)).handle, handle_of(2));
  EXPECT_TRUE(takes(heap, 31, 0));
  EXPECT_TRUE(takes(heap, 31, 33));
}

TEST(virtual_heap, wholly_free_slabs_are_the_slabs_inside_one_free_range_highest_first)
{
  virtual_heap heap = make_heap(8, {0, 1, 2, 3, 5, 6});  // free: [0,128) and [160,224)
  EXPECT_EQ(addresses(heap.wholly_free_mappings()),
            (std::vector{slab_at(6), slab_at(5), slab_at(3), slab_at(2), slab_at(1), slab_at(0)}));
  EXPECT_TRUE(takes(heap, 40, 160));  // slab 5 and the start of slab 6
  EXPECT_EQ(addresses(heap.wholly_free_mappings()), (std::vector{slab_at(3), slab_at(2), slab_at(1), slab_at(0)}));
  EXPECT_TRUE(takes(heap, 33, 0));    // slab 0 and the first unit of slab 1
  EXPECT_EQ(addresses(heap.wholly_free_mappings()), (std::vector{slab_at(3), slab_at(2)}));
  give(heap, 160, 40, 1);
  EXPECT_EQ(addresses(heap.wholly_free_mappings()), (std::vector{slab_at(6), slab_at(5), slab_at(3), slab_at(2)}));
  give(heap, 0, 33, 2);
  EXPECT_EQ(addresses(heap.wholly_free_mappings()),
            (std::vector{slab_at(6), slab_at(5), slab_at(3), slab_at(2), slab_at(1), slab_at(0)}));
  heap.check_invariants();
}

// ---- a long random sequence against a model -------------------------------------------------------------------------

/// The heap as plain arrays: per 256-byte unit whether it is free and (when free) the streams of its range,
/// its mark and the streams it was freed on; per slab its handle (0: not backed). A free range is a maximal
/// run of free units; every unit of a run carries the run's streams. In a run of several streams, a unit's
/// mark is what virtual_heap.hpp says a block cut there waits for: the streams it was freed on, or, for a
/// unit of a run of one stream (or none) that joined it, that run's streams.
class heap_model {
 public:
  heap_model(std::size_t slabs, std::size_t slab_units)
    : slab_units_{slab_units}, free_(slabs * slab_units), mask_(slabs * slab_units), mark_(slabs * slab_units),
      freed_on_(slabs * slab_units), handle_(slabs)
  {
  }

  /// The streams a block of [first, first + n), all free units of one run, waits for.
  [[nodiscard]] std::uint64_t streams_of(std::size_t first, std::size_t n) const
  {
    if (std::popcount(mask_[first]) <= 1) { return mask_[first]; }
    std::uint64_t streams = 0;
    for (std::size_t u = first; u < first + n; ++u) { streams |= mark_[u]; }
    return streams;
  }
  /// The streams [first, first + n) was freed on: what a block cut there must wait for at least.
  [[nodiscard]] std::uint64_t freed_on(std::size_t first, std::size_t n) const
  {
    std::uint64_t streams = 0;
    for (std::size_t u = first; u < first + n; ++u) { streams |= freed_on_[u]; }
    return streams;
  }

  [[nodiscard]] std::size_t units() const { return free_.size(); }
  [[nodiscard]] std::size_t slabs() const { return handle_.size(); }
  [[nodiscard]] std::size_t slab_units() const { return slab_units_; }
  [[nodiscard]] bool is_free(std::size_t u) const { return free_[u] != 0; }
  [[nodiscard]] std::uint64_t streams(std::size_t u) const { return mask_[u]; }
  [[nodiscard]] std::uint64_t handle(std::size_t index) const { return handle_[index]; }
  [[nodiscard]] std::size_t free_units() const { return free_units_; }
  [[nodiscard]] std::size_t backed_slabs() const
  {
    return static_cast<std::size_t>(std::count_if(handle_.begin(), handle_.end(), [](auto h) { return h != 0; }));
  }

  /// The free runs, (first unit, units), in address order.
  [[nodiscard]] std::vector<std::pair<std::size_t, std::size_t>> runs() const
  {
    // Raw loops: this scan is most of the random test's time in a Debug build.
    std::vector<std::pair<std::size_t, std::size_t>> result;
    std::uint8_t const* const f = free_.data();
    std::size_t const n = free_.size();
    for (std::size_t u = 0; u < n;) {
      if (f[u] == 0) {
        ++u;
        continue;
      }
      std::size_t const first = u;
      while (u < n && f[u] != 0) { ++u; }
      result.emplace_back(first, u - first);
    }
    return result;
  }

  /// Best fit: the smallest run that holds `n` units, the lowest among equals.
  [[nodiscard]] std::optional<std::size_t> best_fit(std::size_t n) const
  {
    std::optional<std::pair<std::size_t, std::size_t>> best;  // (units, first)
    for (auto const& [first, length] : runs()) {
      if (length >= n && (!best || length < best->first)) { best = std::pair{length, first}; }
    }
    return best ? std::optional{best->second} : std::nullopt;
  }

  void take(std::size_t first, std::size_t n)
  {
    for (std::size_t u = first; u < first + n; ++u) { free_[u] = 0; }
    free_units_ -= n;
  }

  /// Frees [first, first + n) with `streams`; the run it joins gets the union of the streams.
  void give(std::size_t first, std::size_t n, std::uint64_t streams)
  {
    std::size_t begin = first;
    while (begin > 0 && is_free(begin - 1)) { --begin; }
    std::size_t end = first + n;
    while (end < units() && is_free(end)) { ++end; }
    std::uint64_t const left = begin < first ? mask_[first - 1] : 0;
    std::uint64_t const right = end > first + n ? mask_[first + n] : 0;
    std::uint64_t const all = left | streams | right;
    for (std::size_t u = first; u < first + n; ++u) {
      free_[u] = 1;
      mark_[u] = streams;
      freed_on_[u] = streams;
    }
    free_units_ += n;
    if (std::popcount(all) > 1) {  // a run of one stream (or none) joining others: its units get its streams
      if (std::popcount(left) <= 1) { std::fill(mark_.begin() + static_cast<std::ptrdiff_t>(begin), mark_.begin() + static_cast<std::ptrdiff_t>(first), left); }
      if (std::popcount(right) <= 1) { std::fill(mark_.begin() + static_cast<std::ptrdiff_t>(first + n), mark_.begin() + static_cast<std::ptrdiff_t>(end), right); }
    }
    for (std::size_t u = begin; u < end; ++u) { mask_[u] = all; }
  }

  void back(std::size_t index, std::uint64_t handle)
  {
    handle_[index] = handle;
    give(index * slab_units_, slab_units_, 0);
  }

  /// @return the handle and the streams of the run the slab was in.
  std::pair<std::uint64_t, std::uint64_t> unback(std::size_t index)
  {
    std::uint64_t const streams = streams_of(index * slab_units_, slab_units_);
    take(index * slab_units_, slab_units_);
    return {std::exchange(handle_[index], 0), streams};
  }

  [[nodiscard]] bool wholly_free(std::size_t index) const
  {
    if (handle_[index] == 0) { return false; }
    for (std::size_t u = index * slab_units_; u < (index + 1) * slab_units_; ++u) {
      if (!is_free(u)) { return false; }
    }
    return true;
  }

  /// Slab indices, highest first.
  [[nodiscard]] std::vector<std::size_t> wholly_free_slabs() const
  {
    std::vector<std::size_t> result;
    for (std::size_t s = slabs(); s-- > 0;) {
      if (wholly_free(s)) { result.push_back(s); }
    }
    return result;
  }

  void forget(std::uint64_t mask)
  {
    for (auto* masks : {&mask_, &mark_, &freed_on_}) {
      for (auto& m : *masks) { m &= ~mask; }
    }
  }

  struct plan {
    std::size_t slab;
    std::size_t count;
    std::vector<std::size_t> movable;
  };

  /// virtual_heap.hpp's placement, written from its words: for each gap of unbacked slabs, `left` free
  /// units end at its start; it needs ceil((n - left) / slab) slabs, or, when more than the gap, the whole
  /// gap if left + gap + the free units after it hold n. Fewest slabs, then lowest address. Movable: wholly
  /// free slabs, highest first, at most `count`, none in the free ranges the growth joins.
  [[nodiscard]] std::optional<plan> plan_growth(std::size_t n) const
  {
    std::optional<plan> best;
    std::size_t keep_begin = 0;
    std::size_t keep_end = 0;
    for (std::size_t s = 0; s < slabs();) {
      if (handle_[s] != 0) {
        ++s;
        continue;
      }
      std::size_t const gap_first = s;
      while (s < slabs() && handle_[s] == 0) { ++s; }
      std::size_t const gap_slabs = s - gap_first;
      std::size_t const begin = gap_first * slab_units_;
      std::size_t const end = s * slab_units_;
      std::size_t left = 0;
      while (left < begin && is_free(begin - left - 1)) { ++left; }
      std::size_t right = 0;
      while (end + right < units() && is_free(end + right)) { ++right; }
      std::size_t const missing = n > left ? n - left : 0;
      std::size_t count = (missing + slab_units_ - 1) / slab_units_;
      bool joins_right = false;
      if (count > gap_slabs) {
        if (left + gap_slabs * slab_units_ + right < n) { continue; }
        count = gap_slabs;
        joins_right = true;
      }
      if (count == 0) { continue; }
      if (!best || count < best->count) {
        best = plan{gap_first, count, {}};
        keep_begin = begin - left;
        keep_end = joins_right ? end + right : begin;
      }
    }
    if (!best) { return std::nullopt; }
    for (std::size_t const s : wholly_free_slabs()) {
      if (best->movable.size() == best->count) { break; }
      std::size_t const first = s * slab_units_;
      if (first + slab_units_ > keep_begin && first < keep_end) { continue; }
      best->movable.push_back(s);
    }
    return best;
  }

 private:
  std::size_t slab_units_;
  std::vector<std::uint8_t> free_;
  std::vector<std::uint64_t> mask_;
  std::vector<std::uint64_t> mark_;
  std::vector<std::uint64_t> freed_on_;
  std::vector<std::uint64_t> handle_;
  std::size_t free_units_{};
};

/// The heap against the model: byte counts, slab count, and (every `full` call) every free range.
::testing::AssertionResult matches(virtual_heap const& heap, heap_model const& model, bool full)
{
  if (heap.free_bytes() != model.free_units() * unit) {
    return ::testing::AssertionFailure() << "free bytes " << heap.free_bytes() << ", model " << model.free_units() * unit;
  }
  if (heap.slab_count() != model.backed_slabs()) {
    return ::testing::AssertionFailure() << "slabs " << heap.slab_count() << ", model " << model.backed_slabs();
  }
  if (!full) { return ::testing::AssertionSuccess(); }
  auto const runs = model.runs();
  std::size_t largest = 0;
  for (auto const& [first, length] : runs) { largest = std::max(largest, length); }
  if (heap.free_range_count() != runs.size() || heap.largest_free_range() != largest * unit) {
    return ::testing::AssertionFailure() << "free ranges " << heap.free_range_count() << " (largest "
                                         << heap.largest_free_range() << "), model " << runs.size() << " (largest "
                                         << largest * unit << ")";
  }
  std::uint64_t streams = 0;
  for (auto const& [first, length] : runs) { streams |= model.streams(first); }
  if (heap.streams_in_use() != streams) {
    return ::testing::AssertionFailure() << "streams in use " << heap.streams_in_use() << ", model " << streams;
  }
  std::vector<std::uintptr_t> expected;
  for (std::size_t const s : model.wholly_free_slabs()) { expected.push_back(base + s * model.slab_units() * unit); }
  if (addresses(heap.wholly_free_mappings()) != expected) {
    return ::testing::AssertionFailure() << "wholly free slabs differ from the model's";
  }
  bool handles_match = true;
  heap.for_each_mapping([&](std::uintptr_t address, std::uint64_t handle, std::size_t bytes) {
    std::size_t const s = (address - base) / (model.slab_units() * unit);
    handles_match = handles_match && bytes == model.slab_units() * unit;
    handles_match = handles_match && model.handle(s) == handle;
  });
  if (!handles_match) { return ::testing::AssertionFailure() << "a slab's handle differs from the model's"; }
  return ::testing::AssertionSuccess();
}

// 200,000 steps on a reservation of 48 slabs of 16 units, driven the way vmm_pool_memory_resource drives
// the heap: take; when nothing fits, plan_growth, unback the movable slabs and back the plan's slabs with
// their handles (new handles for the rest), then take again; give_back on one of six streams;
// forget_streams; release wholly free slabs (one, or all as release_unused does); and a double free or a
// free of unbacked memory now and then, which must throw and change nothing. The live-block target
// swings between 10 and 150 every 5,000 steps, so the pool grows to the reservation and shrinks again.
// Every step: every result against the model (best fit, streams, plans, handles), the byte and slab
// counts; every 8th step check_invariants() and the full range list; every 1,000th the live blocks (no
// overlap, all in backed slabs).
TEST(virtual_heap, random_sequence_with_growth_moves_and_releases_matches_a_model)
{
  constexpr std::size_t slabs = 48;
  constexpr std::size_t units_per_slab = 16;
  constexpr std::size_t slab_bytes = units_per_slab * unit;
  constexpr int steps = 200'000;
  virtual_heap heap{base, slabs * slab_bytes, slab_bytes, unit};
  heap_model model{slabs, units_per_slab};
  std::mt19937_64 rng{0x5eed'1234};
  struct live_block {
    std::size_t first;
    std::size_t units;
  };
  std::vector<live_block> live;
  std::uint64_t next_handle = 1;
  std::size_t grown = 0;
  std::size_t moved = 0;
  std::size_t released = 0;
  std::size_t refused = 0;
  std::size_t errors = 0;
  std::size_t several = 0;   // takes from ranges of several streams
  std::size_t narrower = 0;  // takes that wait for fewer streams than their range's
  auto slab_address = [](std::size_t s) { return base + s * slab_bytes; };
  auto slab_index = [](std::uintptr_t address) { return static_cast<std::size_t>((address - base) / slab_bytes); };
  auto unback = [&](std::size_t s) {
    auto const taken = heap.unback(slab_address(s));
    EXPECT_EQ(taken.slabs, 1U);
    auto const got = std::pair{taken.handle, taken.streams};
    auto const expected = model.unback(s);
    EXPECT_EQ(got, expected) << "unback of slab " << s << " (handle, streams)";
    return got.first;
  };
  auto request_units = [&]() -> std::size_t {
    switch (rng() % 8) {
      case 0: return 1 + rng() % (3 * units_per_slab);      // up to three slabs
      case 1: case 2: return 1 + rng() % units_per_slab;    // up to a slab
      default: return 1 + rng() % 6;                        // small
    }
  };
  for (int step = 0; step < steps; ++step) {
    std::size_t const target = (step / 5000) % 2 == 0 ? 150 : 10;
    unsigned const op = static_cast<unsigned>(rng() % 100);
    if (op < 55 && (live.size() < target || op < 10)) {
      std::size_t const n = request_units();
      auto const expected = model.best_fit(n);
      auto got = heap.take(n * unit);
      if (!got) {
        ASSERT_FALSE(expected.has_value()) << "step " << step << ": take(" << n << " units) found nothing";
        auto const plan = heap.plan_growth(n * unit);
        auto const model_plan = model.plan_growth(n);
        ASSERT_EQ(plan.has_value(), model_plan.has_value()) << "step " << step << ": plan_growth(" << n << " units)";
        if (!plan) {
          ++refused;
        } else {
          ASSERT_EQ(slab_index(plan->address), model_plan->slab) << "step " << step;
          ASSERT_EQ(plan->address % slab_bytes, 0U);
          ASSERT_EQ(plan->slabs, model_plan->count) << "step " << step;
          std::vector<std::size_t> movable;
          for (auto const& m : plan->movable) {
            ASSERT_EQ(m.slabs, 1U);
            movable.push_back(slab_index(m.address));
          }
          ASSERT_EQ(movable, model_plan->movable) << "step " << step;
          std::vector<std::uint64_t> handles;
          for (std::size_t const s : movable) { handles.push_back(unback(s)); }
          for (std::size_t i = 0; i < plan->slabs; ++i) {
            std::uint64_t const handle = i < handles.size() ? handles[i] : next_handle++;
            std::size_t const s = model_plan->slab + i;
            heap.back(slab_address(s), handle);
            model.back(s, handle);
          }
          grown += plan->slabs;
          moved += handles.size();
          got = heap.take(n * unit);
          ASSERT_TRUE(got.has_value()) << "step " << step << ": the planned growth did not make room for " << n
                                       << " units";
        }
      }
      if (got) {
        std::size_t const first = (got->address - base) / unit;
        auto const fit = model.best_fit(n);
        ASSERT_TRUE(fit.has_value());
        ASSERT_EQ(got->address % unit, 0U);
        ASSERT_EQ(first, *fit) << "step " << step << ": not the best fit for " << n << " units";
        ASSERT_EQ(got->streams, model.streams_of(first, n)) << "step " << step;
        ASSERT_EQ(model.freed_on(first, n) & ~got->streams, 0U) << "step " << step << ": a stream the block was freed on is missing";
        if (std::popcount(model.streams(first)) > 1) { ++several; }
        if (got->streams != model.streams(first)) { ++narrower; }
        model.take(first, n);
        live.push_back({first, n});
      }
    } else if (op < 90) {
      if (live.empty()) { continue; }
      std::size_t const index = static_cast<std::size_t>(rng() % live.size());
      live_block const b = live[index];
      live[index] = live.back();
      live.pop_back();
      std::uint64_t const streams = std::uint64_t{1} << (rng() % 6);
      heap.give_back(at(b.first), b.units * unit, streams);
      model.give(b.first, b.units, streams);
    } else if (op < 93) {
      auto const candidates = model.wholly_free_slabs();
      if (candidates.empty()) { continue; }
      (void)unback(candidates[static_cast<std::size_t>(rng() % candidates.size())]);
      ++released;
    } else if (op < 95) {
      std::uint64_t const mask = rng() & 0x3F;
      heap.forget_streams(mask);
      model.forget(mask);
    } else if (op < 97) {
      // A double free of free memory, or a free of unbacked memory: an error that changes nothing.
      std::size_t const u = static_cast<std::size_t>(rng() % model.units());
      std::size_t const n = 1 + rng() % 4;
      bool const any_free_or_unbacked = [&] {
        for (std::size_t i = u; i < std::min(u + n, model.units()); ++i) {
          if (model.is_free(i) || model.handle(i / units_per_slab) == 0) { return true; }
        }
        return false;
      }();
      if (!any_free_or_unbacked) { continue; }
      std::size_t const free_before = heap.free_bytes();
      EXPECT_THROW(heap.give_back(at(u), n * unit, 1), logic_error) << "step " << step << ": unit " << u;
      EXPECT_EQ(heap.free_bytes(), free_before);
      ++errors;
    } else if (op < 98) {
      for (std::size_t const s : model.wholly_free_slabs()) {  // release_unused
        (void)unback(s);
        ++released;
      }
    }
    ASSERT_TRUE(matches(heap, model, step % 8 == 0)) << "step " << step;
    if (step % 8 == 0) { ASSERT_NO_THROW(heap.check_invariants()) << "step " << step; }
    if (step % 1000 == 0) {
      std::vector<std::uint8_t> owned(model.units());
      for (auto const& b : live) {
        for (std::size_t u = b.first; u < b.first + b.units; ++u) {
          ASSERT_EQ(owned[u], 0) << "step " << step << ": two live blocks share unit " << u;
          ASSERT_NE(model.handle(u / units_per_slab), 0U) << "step " << step << ": a live block in an unbacked slab";
          ASSERT_FALSE(model.is_free(u));
          owned[u] = 1;
        }
      }
    }
  }
  // Everything freed: the free ranges are exactly the runs of backed slabs.
  for (auto const& b : live) {
    heap.give_back(at(b.first), b.units * unit, 1);
    model.give(b.first, b.units, 1);
  }
  heap.check_invariants();
  EXPECT_TRUE(matches(heap, model, true));
  EXPECT_EQ(heap.free_bytes(), heap.backed_bytes());
  // The sequence must have exercised every path.
  EXPECT_GT(grown, 1000U);
  EXPECT_GT(moved, 100U);
  EXPECT_GT(released, 1000U);
  EXPECT_GT(refused, 100U);
  EXPECT_GT(errors, 1000U);
  EXPECT_GT(several, 10'000U);
  EXPECT_GT(narrower, 5'000U);
}
}  // namespace
}  // namespace gpumem::test
