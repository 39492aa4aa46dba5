// free_range_index: best fit by (size, address), neighbours, containment, in-place reshapes, and a long
// random sequence checked against a plain std::map model after every step.
#include <gpumem/mr/detail/free_range_index.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <iterator>
#include <map>
#include <random>
#include <utility>

namespace {

using gpumem::detail::free_range_index;

TEST(free_range_index, best_fit_is_the_smallest_range_that_holds_the_request_and_the_lowest_among_equals)
{
  free_range_index ranges;
  (void)ranges.insert(1000, 300, 0);
  (void)ranges.insert(2000, 100, 0);
  (void)ranges.insert(3000, 300, 0);
  (void)ranges.insert(500, 300, 0);
  EXPECT_EQ(ranges.best_fit(100)->start, 2000U);
  EXPECT_EQ(ranges.best_fit(101)->start, 500U);  // 300 at 500, 1000, 3000: the lowest address
  EXPECT_EQ(ranges.best_fit(300)->start, 500U);
  EXPECT_EQ(ranges.best_fit(301), nullptr);
  EXPECT_EQ(ranges.largest(), 300U);
  EXPECT_EQ(ranges.bytes(), 1000U);
  EXPECT_EQ(ranges.count(), 4U);
  ranges.check();
}

TEST(free_range_index, around_and_containing_find_the_neighbours_of_an_address)
{
  free_range_index ranges;
  (void)ranges.insert(100, 50, 1);
  (void)ranges.insert(300, 50, 2);
  auto const middle = ranges.around(200);
  ASSERT_NE(middle.before, nullptr);
  ASSERT_NE(middle.after, nullptr);
  EXPECT_EQ(middle.before->start, 100U);
  EXPECT_EQ(middle.after->start, 300U);
  EXPECT_EQ(ranges.around(300).after->start, 300U);  // "at or after"
  EXPECT_EQ(ranges.around(100).before, nullptr);
  EXPECT_EQ(ranges.around(400).after, nullptr);
  EXPECT_EQ(ranges.containing(110, 40)->start, 100U);
  EXPECT_EQ(ranges.containing(110, 41), nullptr);
  EXPECT_EQ(ranges.containing(99, 1), nullptr);
  EXPECT_EQ(ranges.containing(300, 50)->streams, 2U);
}

TEST(free_range_index, reshape_moves_a_range_in_both_indexes_and_erase_reuses_its_record)
{
  free_range_index ranges;
  auto const* a = ranges.insert(0, 1000, 1);
  (void)ranges.insert(5000, 500, 0);
  ranges.reshape(a, 600, 400, 3);  // a cut from the start: now smaller than the other range
  EXPECT_EQ(ranges.best_fit(1)->start, 600U);
  EXPECT_EQ(ranges.best_fit(1)->streams, 3U);
  EXPECT_EQ(ranges.bytes(), 900U);
  EXPECT_EQ(ranges.around(601).before, a);
  ranges.check();
  ranges.erase(a);
  EXPECT_EQ(ranges.count(), 1U);
  EXPECT_EQ(ranges.bytes(), 500U);
  auto const* b = ranges.insert(0, 10, 0);
  EXPECT_EQ(b, a);  // the erased record came back
  ranges.check();
}

TEST(free_range_index, a_moved_index_keeps_its_ranges_usable)
{
  free_range_index ranges;
  auto const* a = ranges.insert(0, 64, 0);
  free_range_index moved{std::move(ranges)};
  moved.reshape(a, 32, 32, 0);
  EXPECT_EQ(moved.best_fit(32)->start, 32U);
  moved.check();
}

TEST(free_range_index, a_long_random_sequence_matches_a_plain_model)
{
  // Random disjoint ranges on a line of 4096 units: insert into gaps, cut from starts, grow, erase.
  free_range_index ranges;
  std::map<std::uintptr_t, std::size_t> model;  // start -> size
  std::mt19937_64 random{7};
  auto gap_at = [&](std::uintptr_t address) -> std::pair<std::uintptr_t, std::uintptr_t> {
    auto next = model.upper_bound(address);
    std::uintptr_t const end = next == model.end() ? 4096 : next->first;
    std::uintptr_t begin = 0;
    if (next != model.begin()) {
      auto const previous = std::prev(next);
      begin = previous->first + previous->second;
      if (begin > address) { return {0, 0}; }  // inside a range
    }
    return {address, end};
  };
  for (int step = 0; step < 20000; ++step) {
    auto const action = random() % 4;
    if (action == 0 || model.empty()) {
      auto const [begin, end] = gap_at(random() % 4096);
      if (end > begin) {
        std::size_t const size = 1 + random() % (end - begin);
        (void)ranges.insert(begin, size, step);
        model[begin] = size;
      }
    } else {
      auto const request = 1 + random() % 64;
      auto const* fit = ranges.best_fit(request);
      // The model's best fit: smallest size, then lowest start.
      std::pair<std::size_t, std::uintptr_t> best{SIZE_MAX, 0};
      for (auto const& [start, size] : model) {
        if (size >= request && std::pair{size, start} < best) { best = {size, start}; }
      }
      if (best.first == SIZE_MAX) {
        ASSERT_EQ(fit, nullptr);
        continue;
      }
      ASSERT_NE(fit, nullptr);
      ASSERT_EQ(fit->start, best.second);
      ASSERT_EQ(fit->size, best.first);
      if (action == 1 && fit->size > request) {  // cut from the start
        model.erase(fit->start);
        model[fit->start + request] = fit->size - request;
        ranges.reshape(fit, fit->start + request, fit->size - request, fit->streams);
      } else if (action == 2) {  // grow to the right into the gap
        auto const next = model.upper_bound(fit->start);
        std::uintptr_t const limit = next == model.end() ? 4096 : next->first;
        std::size_t const size = fit->size + (limit - fit->end()) / 2;
        model[fit->start] = size;
        ranges.reshape(fit, fit->start, size, fit->streams);
      } else {
        model.erase(fit->start);
        ranges.erase(fit);
      }
    }
    ASSERT_NO_THROW(ranges.check());
    ASSERT_EQ(ranges.count(), model.size());
  }
}

}  // namespace
