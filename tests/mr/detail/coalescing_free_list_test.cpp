// coalescing_free_list: every merge case by hand (left, right, both, never across a head), best fit and its
// tie-break, the errors, merge_from and remove_whole_chunks; then long random sequences checked after every
// step against a model (a bitmap of 256-byte units): the list must hold exactly the maximal free runs of
// each chunk, and get_block must return the smallest run that fits, the lowest-addressed among equals.
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/coalescing_free_list.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <random>
#include <vector>

namespace gpumem::detail {
// Readable failures: "[+0x100, 512 B, head]" (offset from the test's base address).
inline void PrintTo(free_block const& b, std::ostream* os)
{
  *os << "[+0x" << std::hex << (b.address - (std::uintptr_t{1} << 40)) << std::dec << ", " << b.size << " B"
      << (b.is_head ? ", head]" : "]");
}
}  // namespace gpumem::detail

namespace gpumem::test {
namespace {

using detail::chunk_map;
using detail::coalescing_free_list;
using detail::free_block;

constexpr std::uintptr_t base = std::uintptr_t{1} << 40;
constexpr std::size_t unit = 256;

free_block blk(std::size_t first_unit, std::size_t units, bool is_head = false)
{
  return free_block{base + first_unit * unit, units * unit, is_head};
}

std::vector<free_block> contents(coalescing_free_list const& list)
{
  std::vector<free_block> blocks;
  list.for_each([&](free_block const& b) { blocks.push_back(b); });
  return blocks;
}

TEST(coalescing_free_list, starts_empty)
{
  coalescing_free_list list;
  EXPECT_TRUE(list.empty());
  EXPECT_EQ(list.size(), 0U);
  EXPECT_EQ(list.largest(), 0U);
  EXPECT_EQ(list.total_bytes(), 0U);
  EXPECT_FALSE(list.get_block(1).has_value());
  list.check_invariants();
}

TEST(coalescing_free_list, separate_blocks_stay_separate)
{
  coalescing_free_list list;
  list.insert(blk(0, 2, true));
  list.insert(blk(3, 1));  // a gap of one unit between them
  list.check_invariants();
  EXPECT_EQ(contents(list), (std::vector{blk(0, 2, true), blk(3, 1)}));
  EXPECT_EQ(list.total_bytes(), 3 * unit);
  EXPECT_EQ(list.largest(), 2 * unit);
}

TEST(coalescing_free_list, overlaps_sees_every_byte_of_every_block_and_nothing_else)
{
  coalescing_free_list list;
  list.insert(blk(2, 2, true));  // units 2 and 3
  list.insert(blk(6, 1));        // unit 6
  for (std::size_t u = 0; u < 9; ++u) {
    bool const free = u == 2 || u == 3 || u == 6;
    EXPECT_EQ(list.overlaps(base + u * unit, unit), free) << "unit " << u;
    EXPECT_EQ(list.overlaps(base + u * unit + unit - 1, 1), free) << "last byte of unit " << u;
  }
  EXPECT_TRUE(list.overlaps(base, 3 * unit)) << "reaches into unit 2";
  EXPECT_FALSE(list.overlaps(base + 4 * unit, 2 * unit)) << "units 4 and 5 lie between the blocks";
  EXPECT_TRUE(list.overlaps(base, 100 * unit));
}

TEST(coalescing_free_list, merges_with_the_block_on_the_left)
{
  coalescing_free_list list;
  list.insert(blk(0, 2, true));
  list.insert(blk(2, 3));
  list.check_invariants();
  EXPECT_EQ(contents(list), std::vector{blk(0, 5, true)});
}

TEST(coalescing_free_list, merges_with_the_block_on_the_right_and_keeps_the_head_flag_of_the_first_part)
{
  coalescing_free_list list;
  list.insert(blk(4, 2));
  list.insert(blk(1, 3));
  list.check_invariants();
  EXPECT_EQ(contents(list), std::vector{blk(1, 5)});
  coalescing_free_list heads;
  heads.insert(blk(4, 2));
  heads.insert(blk(0, 4, true));  // a head absorbs what follows it in its chunk
  heads.check_invariants();
  EXPECT_EQ(contents(heads), std::vector{blk(0, 6, true)});
}

TEST(coalescing_free_list, merges_with_both_neighbours_at_once)
{
  coalescing_free_list list;
  list.insert(blk(0, 1, true));
  list.insert(blk(3, 4));
  list.insert(blk(1, 2));
  list.check_invariants();
  EXPECT_EQ(contents(list), std::vector{blk(0, 7, true)});
  EXPECT_EQ(list.size(), 1U);
  EXPECT_EQ(list.total_bytes(), 7 * unit);
  EXPECT_EQ(list.largest(), 7 * unit);
}

TEST(coalescing_free_list, never_merges_across_a_chunk_boundary)
{
  // Two chunks that happen to be adjacent in the address space: [0, 4) and [4, 8).
  coalescing_free_list list;
  list.insert(blk(0, 4, true));
  list.insert(blk(4, 4, true));  // a head does not merge with the block on its left
  list.check_invariants();
  EXPECT_EQ(contents(list), (std::vector{blk(0, 4, true), blk(4, 4, true)}));

  coalescing_free_list right_side;
  right_side.insert(blk(4, 4, true));
  right_side.insert(blk(2, 2));  // a block does not merge into a head on its right
  right_side.check_invariants();
  EXPECT_EQ(contents(right_side), (std::vector{blk(2, 2), blk(4, 4, true)}));

  coalescing_free_list both_sides;  // [0,2) head, [2,4) free, [4,6) head: the middle joins the left only
  both_sides.insert(blk(0, 2, true));
  both_sides.insert(blk(4, 2, true));
  both_sides.insert(blk(2, 2));
  both_sides.check_invariants();
  EXPECT_EQ(contents(both_sides), (std::vector{blk(0, 4, true), blk(4, 2, true)}));
  EXPECT_FALSE(both_sides.get_block(5 * unit).has_value()) << "a block spanning two chunks was formed";
}

TEST(coalescing_free_list, get_block_is_best_fit_with_lowest_address_on_ties)
{
  coalescing_free_list list;
  list.insert(blk(0, 8, true));
  list.insert(blk(10, 3));
  list.insert(blk(20, 5));
  list.insert(blk(30, 3));
  list.insert(blk(40, 4));
  list.check_invariants();
  EXPECT_EQ(list.get_block(4 * unit), blk(40, 4));      // exact fit beats the larger blocks
  EXPECT_EQ(list.get_block(2 * unit + 1), blk(10, 3));  // smallest that fits; of two, the lower address
  EXPECT_EQ(list.get_block(3 * unit), blk(30, 3));
  EXPECT_EQ(list.get_block(1), blk(20, 5));
  EXPECT_FALSE(list.get_block(9 * unit).has_value());
  EXPECT_EQ(list.get_block(8 * unit), blk(0, 8, true));
  EXPECT_TRUE(list.empty());
  EXPECT_EQ(list.total_bytes(), 0U);
  list.check_invariants();
}

TEST(coalescing_free_list, bad_insertions_are_logic_errors_and_change_nothing)
{
  coalescing_free_list list;
  list.insert(blk(4, 4, true));
  std::vector<free_block> const before = contents(list);
  EXPECT_THROW(list.insert(blk(4, 4)), logic_error);      // the same block again: a double free
  EXPECT_THROW(list.insert(blk(6, 1)), logic_error);      // inside a free block
  EXPECT_THROW(list.insert(blk(2, 3)), logic_error);      // overlaps its start
  EXPECT_THROW(list.insert(blk(7, 2)), logic_error);      // overlaps its end
  EXPECT_THROW(list.insert(blk(0, 0)), logic_error);      // empty
  EXPECT_THROW(list.insert(free_block{base + 1, unit, false}), logic_error);  // misaligned address
  EXPECT_THROW(list.insert(free_block{base, 100, false}), logic_error);       // misaligned size
  try {
    list.insert(blk(5, 1));
  } catch (logic_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("freed twice"), std::string::npos) << e.what();
  }
  EXPECT_EQ(contents(list), before);
  list.check_invariants();
}

TEST(coalescing_free_list, remove_takes_out_exactly_one_free_block)
{
  coalescing_free_list list;
  list.insert(blk(0, 4, true));
  list.insert(blk(8, 2));
  EXPECT_THROW(list.remove(blk(0, 3)), logic_error);  // not a whole free block
  EXPECT_THROW(list.remove(blk(4, 4)), logic_error);  // not free
  list.remove(blk(0, 4, true));
  EXPECT_EQ(contents(list), std::vector{blk(8, 2)});
  EXPECT_EQ(list.total_bytes(), 2 * unit);
  list.check_invariants();
}

TEST(coalescing_free_list, merge_from_coalesces_across_the_two_lists_and_empties_the_other)
{
  coalescing_free_list mine;
  coalescing_free_list other;
  mine.insert(blk(0, 2, true));
  mine.insert(blk(6, 2));
  other.insert(blk(2, 4));   // joins both of mine
  other.insert(blk(8, 2, true));  // a head: stays apart
  other.insert(blk(20, 1));
  mine.merge_from(std::move(other));
  mine.check_invariants();
  other.check_invariants();
  EXPECT_TRUE(other.empty());
  EXPECT_EQ(other.total_bytes(), 0U);
  EXPECT_EQ(contents(mine), (std::vector{blk(0, 8, true), blk(8, 2, true), blk(20, 1)}));
  EXPECT_EQ(mine.total_bytes(), 11 * unit);

  coalescing_free_list clash;
  clash.insert(blk(1, 1));
  clash.insert(blk(30, 1));
  EXPECT_THROW(mine.merge_from(std::move(clash)), logic_error);
  mine.check_invariants();
  clash.check_invariants();
  EXPECT_EQ(mine.total_bytes() + clash.total_bytes(), 13 * unit) << "a block was lost by the failed merge";
}

TEST(coalescing_free_list, remove_whole_chunks_returns_only_wholly_free_chunks)
{
  chunk_map const chunks{{base, 4 * unit}, {base + 4 * unit, 4 * unit}, {base + 16 * unit, 2 * unit}};
  coalescing_free_list list;
  list.insert(blk(0, 4, true));   // chunk 1: wholly free
  list.insert(blk(4, 3, true));   // chunk 2: one unit still allocated
  list.insert(blk(16, 2, true));  // chunk 3: wholly free
  list.insert(blk(30, 2));        // not a head
  std::vector<free_block> const whole = list.remove_whole_chunks(chunks);
  EXPECT_EQ(whole, (std::vector{blk(0, 4, true), blk(16, 2, true)}));
  EXPECT_EQ(contents(list), (std::vector{blk(4, 3, true), blk(30, 2)}));
  list.check_invariants();
}

/// The model: which 256-byte units of a few adjacent chunks are free.
class model {
 public:
  explicit model(std::vector<std::size_t> chunk_units) : chunk_units_{std::move(chunk_units)}
  {
    std::size_t start = 0;
    for (std::size_t const units : chunk_units_) {
      heads_.push_back(start);
      start += units;
    }
    free_.assign(start, false);
  }

  [[nodiscard]] std::size_t units() const { return free_.size(); }
  [[nodiscard]] bool is_head(std::size_t u) const { return std::find(heads_.begin(), heads_.end(), u) != heads_.end(); }
  void set(std::size_t first, std::size_t count, bool value)
  {
    for (std::size_t u = first; u < first + count; ++u) {
      ASSERT_NE(free_[u], value) << "unit " << u;
      free_[u] = value;
    }
  }
  [[nodiscard]] bool is_free(std::size_t u) const { return free_[u]; }

  /// The maximal free runs, split at chunk heads: what the list must hold.
  [[nodiscard]] std::vector<free_block> runs() const
  {
    std::vector<free_block> result;
    for (std::size_t u = 0; u < free_.size();) {
      if (!free_[u]) {
        ++u;
        continue;
      }
      std::size_t end = u + 1;
      while (end < free_.size() && free_[end] && !is_head(end)) { ++end; }
      result.push_back(blk(u, end - u, is_head(u)));
      u = end;
    }
    return result;
  }

  [[nodiscard]] std::optional<free_block> best_fit(std::size_t bytes) const
  {
    std::optional<free_block> best;
    for (free_block const& run : runs()) {
      if (run.size >= bytes && (!best || run.size < best->size)) { best = run; }  // runs are in address order
    }
    return best;
  }

 private:
  std::vector<std::size_t> chunk_units_;
  std::vector<std::size_t> heads_;
  std::vector<bool> free_;
};

/// Random get_block / split / insert sequences over 4 adjacent chunks, checked against the model at every step.
void run_random_sequence(std::uint64_t seed, int steps)
{
  std::mt19937_64 rng{seed};
  std::vector<std::size_t> chunk_units;
  for (int c = 0; c < 4; ++c) { chunk_units.push_back(1 + rng() % 64); }
  model m{chunk_units};
  coalescing_free_list list;
  std::size_t first = 0;
  for (std::size_t const units : chunk_units) {
    list.insert_chunk(base + first * unit, units * unit);
    m.set(first, units, true);
    first += units;
  }
  struct live {
    std::size_t first;
    std::size_t units;
  };
  std::vector<live> allocated;
  for (int step = 0; step < steps; ++step) {
    if (allocated.empty() || rng() % 2 == 0) {
      std::size_t const bytes = 1 + rng() % (24 * unit);
      std::optional<free_block> const expected = m.best_fit(bytes);
      std::optional<free_block> const got = list.get_block(bytes);
      ASSERT_EQ(got, expected) << "seed " << seed << ", step " << step << ", request " << bytes;
      if (got) {
        // Split as the pool does: the aligned request is allocated, the remainder goes back.
        std::size_t const units = (bytes + unit - 1) / unit;
        std::size_t const start = (got->address - base) / unit;
        m.set(start, units, false);
        allocated.push_back({start, units});
        if (got->size > units * unit) { list.insert(free_block{got->address + units * unit, got->size - units * unit, false}); }
      }
    } else {
      // Free a random allocation, sometimes in two pieces (any sub-range of a block may come back alone).
      std::size_t const index = rng() % allocated.size();
      live const a = allocated[index];
      allocated[index] = allocated.back();
      allocated.pop_back();
      std::size_t const split = a.units > 1 && rng() % 4 == 0 ? 1 + rng() % (a.units - 1) : a.units;
      list.insert(blk(a.first, split, m.is_head(a.first)));
      m.set(a.first, split, true);
      if (split < a.units) {
        list.insert(blk(a.first + split, a.units - split, false));
        m.set(a.first + split, a.units - split, true);
      }
    }
    ASSERT_NO_THROW(list.check_invariants()) << "seed " << seed << ", step " << step;
    ASSERT_EQ(contents(list), m.runs()) << "seed " << seed << ", step " << step;
  }
  // Everything back: exactly the chunks again.
  for (live const& a : allocated) {
    list.insert(blk(a.first, a.units, m.is_head(a.first)));
    m.set(a.first, a.units, true);
  }
  list.check_invariants();
  EXPECT_EQ(list.size(), chunk_units.size());
  chunk_map chunks;
  first = 0;
  for (std::size_t const units : chunk_units) {
    chunks.emplace(base + first * unit, units * unit);
    first += units;
  }
  EXPECT_EQ(list.remove_whole_chunks(chunks).size(), chunk_units.size());
  EXPECT_TRUE(list.empty());
}

TEST(coalescing_free_list, random_sequences_match_the_model_at_every_step)
{
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    run_random_sequence(seed, 4000);
    if (HasFatalFailure()) { return; }
  }
}

TEST(coalescing_free_list, random_merges_of_two_lists_equal_one_list_of_all_blocks)
{
  std::mt19937_64 rng{77};
  for (int round = 0; round < 200; ++round) {
    coalescing_free_list a;
    coalescing_free_list b;
    coalescing_free_list all;
    // A chunk of 64 units, then a random half of its units freed, each into a or b (runs of 1..3 units).
    all.insert_chunk(base, unit);
    (rng() % 2 == 0 ? a : b).insert_chunk(base, unit);
    for (std::size_t u = 1; u < 64;) {
      std::size_t const run = std::min<std::size_t>(1 + rng() % 3, 64 - u);
      if (rng() % 2 == 0) {
        all.insert(blk(u, run));
        (rng() % 2 == 0 ? a : b).insert(blk(u, run));
      }
      u += run;
    }
    a.merge_from(std::move(b));
    a.check_invariants();
    EXPECT_TRUE(b.empty());
    ASSERT_EQ(contents(a), contents(all)) << "round " << round;
  }
}

}  // namespace
}  // namespace gpumem::test
