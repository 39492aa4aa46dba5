// stream_marks: the streams of the pieces of free ranges (mr/detail/stream_marks.hpp), by hand and against
// a per-byte model.
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/stream_marks.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <tuple>
#include <utility>
#include <algorithm>
#include <vector>

namespace gpumem::detail {
namespace {

using mark = std::tuple<std::uintptr_t, std::size_t, std::uint64_t>;

std::vector<mark> marks_of(stream_marks const& marks)
{
  std::vector<mark> result;
  marks.for_each([&](std::uintptr_t start, std::size_t size, std::uint64_t streams) { result.emplace_back(start, size, streams); });
  return result;
}

TEST(stream_marks, add_merges_touching_marks_of_the_same_streams_only)
{
  stream_marks marks;
  marks.add(100, 10, 0b01);
  marks.add(120, 10, 0b01);
  marks.add(110, 10, 0b01);  // joins both
  EXPECT_EQ(marks_of(marks), (std::vector<mark>{{100, 30, 0b01}}));
  marks.add(130, 5, 0b10);   // touches, other streams: apart
  marks.add(90, 10, 0b01);   // joins from the left
  EXPECT_EQ(marks_of(marks), (std::vector<mark>{{90, 40, 0b01}, {130, 5, 0b10}}));
  marks.check();
}

TEST(stream_marks, remove_gives_the_union_of_the_marks_it_overlaps_and_trims_those_across_its_edges)
{
  stream_marks marks;
  marks.add(0, 10, 0b001);
  marks.add(10, 10, 0b010);
  marks.add(30, 10, 0b100);
  EXPECT_EQ(marks.remove(20, 30), 0U) << "no mark there";
  EXPECT_EQ(marks.remove(5, 15), 0b011U);
  EXPECT_EQ(marks_of(marks), (std::vector<mark>{{0, 5, 0b001}, {15, 5, 0b010}, {30, 10, 0b100}}));
  EXPECT_EQ(marks.remove(32, 35), 0b100U) << "inside one mark: it splits in two";
  EXPECT_EQ(marks_of(marks), (std::vector<mark>{{0, 5, 0b001}, {15, 5, 0b010}, {30, 2, 0b100}, {35, 5, 0b100}}));
  EXPECT_EQ(marks.remove(0, 40), 0b111U);
  EXPECT_EQ(marks.count(), 0U);
  marks.check();
}

TEST(stream_marks, clear_drops_the_streams_and_the_marks_left_with_none)
{
  stream_marks marks;
  marks.add(0, 10, 0b011);
  marks.add(10, 10, 0b010);
  marks.add(20, 10, 0b100);
  marks.clear(0b010);
  EXPECT_EQ(marks_of(marks), (std::vector<mark>{{0, 10, 0b001}, {20, 10, 0b100}}));
  marks.erase_if([](std::uintptr_t start, std::size_t, std::uint64_t) { return start == 0; });
  EXPECT_EQ(marks_of(marks), (std::vector<mark>{{20, 10, 0b100}}));
  marks.check();
}

TEST(stream_marks, a_move_keeps_the_marks_and_their_spare_nodes)
{
  stream_marks first;
  first.add(0, 10, 0b01);
  first.add(20, 10, 0b10);
  EXPECT_EQ(first.remove(0, 10), 0b01U);  // a spare node now
  stream_marks second{std::move(first)};
  second.add(40, 10, 0b01);
  EXPECT_EQ(marks_of(second), (std::vector<mark>{{20, 10, 0b10}, {40, 10, 0b01}}));
  stream_marks third;
  third.add(100, 5, 0b100);
  third = std::move(second);
  EXPECT_EQ(marks_of(third), (std::vector<mark>{{20, 10, 0b10}, {40, 10, 0b01}}));
  third.add(60, 1, 0b1);
  EXPECT_EQ(third.remove(0, 100), 0b11U);
  third.check();
}

// 100,000 random adds of unmarked intervals and removes of any interval against a per-byte model: every
// union removed, and the marked bytes after every step.
TEST(stream_marks, random_adds_and_removes_match_a_per_byte_model)
{
  constexpr std::size_t bytes = 512;
  stream_marks marks;
  std::vector<std::uint64_t> model(bytes);
  std::mt19937_64 rng{7};
  for (int step = 0; step < 100'000; ++step) {
    std::size_t const start = rng() % bytes;
    std::size_t const size = 1 + rng() % std::min<std::size_t>(32, bytes - start);
    if (rng() % 2 == 0) {
      bool unmarked = true;
      for (std::size_t b = start; b < start + size; ++b) { unmarked = unmarked && model[b] == 0; }
      if (!unmarked) { continue; }
      std::uint64_t const streams = 1 + rng() % 3;
      marks.add(start, size, streams);
      for (std::size_t b = start; b < start + size; ++b) { model[b] = streams; }
    } else {
      std::uint64_t expected = 0;
      for (std::size_t b = start; b < start + size; ++b) { expected |= std::exchange(model[b], 0); }
      ASSERT_EQ(marks.remove(start, start + size), expected) << "step " << step;
    }
    std::vector<std::uint64_t> seen(bytes);
    marks.for_each([&](std::uintptr_t s, std::size_t n, std::uint64_t streams) {
      for (std::size_t b = s; b < s + n; ++b) { seen[b] = streams; }
    });
    ASSERT_EQ(seen, model) << "step " << step;
    if (step % 64 == 0) { ASSERT_NO_THROW(marks.check()); }
  }
}

}  // namespace
}  // namespace gpumem::detail
