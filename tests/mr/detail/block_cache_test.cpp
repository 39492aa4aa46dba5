// block_cache: LIFO reuse per (stream, size), the capacity rule, spilling the older half of a full slot,
// round-robin eviction when every slot is taken, spill_all by stream, the errors (double free, misaligned
// address) leaving the cache unchanged; then a random sequence checked after every step against a model.
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/block_cache.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <tuple>
#include <vector>

namespace gpumem::test {
namespace {

using detail::block_cache;

constexpr std::uintptr_t base = std::uintptr_t{1} << 40;
constexpr std::uintptr_t stream_a = 0x1000;
constexpr std::uintptr_t stream_b = 0x2000;
constexpr std::size_t small = 256;

std::uintptr_t addr(std::size_t i) { return base + i * 4096; }

/// Records every spilled block, in spill order.
struct spill_log {
  struct entry {
    std::uintptr_t stream;
    std::size_t size;
    std::uintptr_t address;
  };
  std::vector<entry> blocks;
  int calls{};
  auto sink()
  {
    return [this](block_cache::spill_batch const& batch) noexcept {
      ++calls;
      for (std::uintptr_t a : batch.addresses) { blocks.push_back({batch.stream, batch.block_size, a}); }
    };
  }
};

TEST(block_cache, capacity_is_thirty_two_blocks_but_at_most_sixty_four_mib_and_at_least_one)
{
  EXPECT_EQ(block_cache::capacity_for(256), 32U);
  EXPECT_EQ(block_cache::capacity_for(std::size_t{2} << 20), 32U);
  EXPECT_EQ(block_cache::capacity_for(std::size_t{4} << 20), 16U);
  EXPECT_EQ(block_cache::capacity_for(std::size_t{64} << 20), 1U);
  EXPECT_EQ(block_cache::capacity_for(std::size_t{1} << 30), 1U);
}

TEST(block_cache, pops_the_most_recent_block_of_the_same_stream_and_size_only)
{
  block_cache cache;
  spill_log log;
  cache.push(stream_a, small, addr(1), log.sink());
  cache.push(stream_a, small, addr(2), log.sink());
  cache.push(stream_b, small, addr(3), log.sink());
  cache.push(stream_a, 2 * small, addr(4), log.sink());
  EXPECT_EQ(cache.cached_bytes(), 5 * small);
  EXPECT_EQ(cache.cached_blocks(), 4U);
  EXPECT_EQ(cache.largest(), 2 * small);
  cache.check_invariants();

  EXPECT_EQ(cache.pop(stream_a, small), addr(2));
  EXPECT_EQ(cache.pop(stream_a, small), addr(1));
  EXPECT_EQ(cache.pop(stream_a, small), std::nullopt) << "stream B's block must not serve stream A";
  EXPECT_EQ(cache.pop(stream_a, 3 * small), std::nullopt) << "a cache hands out exact sizes only";
  EXPECT_EQ(cache.pop(stream_b, small), addr(3));
  EXPECT_EQ(cache.pop(stream_a, 2 * small), addr(4));
  EXPECT_EQ(cache.cached_bytes(), 0U);
  EXPECT_EQ(log.calls, 0);
  cache.check_invariants();
}

TEST(block_cache, a_full_slot_spills_its_older_half_in_one_batch)
{
  block_cache cache;
  spill_log log;
  std::size_t const capacity = block_cache::capacity_for(small);
  for (std::size_t i = 0; i < capacity; ++i) { cache.push(stream_a, small, addr(i), log.sink()); }
  EXPECT_EQ(log.calls, 0);
  cache.push(stream_a, small, addr(capacity), log.sink());
  ASSERT_EQ(log.calls, 1);
  ASSERT_EQ(log.blocks.size(), capacity / 2);
  for (std::size_t i = 0; i < capacity / 2; ++i) {
    EXPECT_EQ(log.blocks[i].address, addr(i)) << "the oldest blocks leave first";
    EXPECT_EQ(log.blocks[i].stream, stream_a);
    EXPECT_EQ(log.blocks[i].size, small);
  }
  EXPECT_EQ(cache.cached_blocks(), capacity / 2 + 1);
  EXPECT_EQ(cache.cached_bytes(), (capacity / 2 + 1) * small);
  EXPECT_EQ(cache.pop(stream_a, small), addr(capacity)) << "the newest block is handed out first";
  cache.check_invariants();
}

TEST(block_cache, a_new_stream_and_size_evicts_whole_slots_round_robin_when_all_are_taken)
{
  block_cache cache;
  spill_log log;
  for (std::size_t s = 0; s < block_cache::slot_count; ++s) {
    cache.push(stream_a, small * (s + 1), addr(2 * s), log.sink());
    cache.push(stream_a, small * (s + 1), addr(2 * s + 1), log.sink());
  }
  EXPECT_EQ(log.calls, 0);
  cache.push(stream_b, small, addr(100), log.sink());  // a ninth (stream, size): slot 0 goes
  ASSERT_EQ(log.calls, 1);
  ASSERT_EQ(log.blocks.size(), 2U);
  EXPECT_EQ(log.blocks[0].size, small);
  EXPECT_EQ(log.blocks[0].address, addr(0));
  EXPECT_EQ(log.blocks[1].address, addr(1));
  cache.push(stream_b, 2 * small, addr(101), log.sink());  // a tenth: slot 1 goes
  ASSERT_EQ(log.calls, 2);
  EXPECT_EQ(log.blocks[2].size, 2 * small);
  EXPECT_EQ(cache.pop(stream_a, small), std::nullopt);
  EXPECT_EQ(cache.pop(stream_b, small), addr(100));
  cache.check_invariants();
}

TEST(block_cache, spill_all_empties_one_stream_or_every_stream)
{
  block_cache cache;
  spill_log log;
  cache.push(stream_a, small, addr(1), log.sink());
  cache.push(stream_b, small, addr(2), log.sink());
  cache.push(stream_a, 2 * small, addr(3), log.sink());
  cache.spill_all(stream_a, log.sink());
  EXPECT_EQ(log.blocks.size(), 2U);
  for (auto const& e : log.blocks) { EXPECT_EQ(e.stream, stream_a); }
  EXPECT_EQ(cache.cached_bytes(), small);
  EXPECT_EQ(cache.pop(stream_a, small), std::nullopt);
  cache.spill_all(std::nullopt, log.sink());
  EXPECT_EQ(log.blocks.size(), 3U);
  EXPECT_EQ(log.blocks.back().address, addr(2));
  EXPECT_EQ(cache.cached_bytes(), 0U);
  EXPECT_EQ(cache.cached_blocks(), 0U);
  cache.check_invariants();
}

TEST(block_cache, a_double_free_in_the_same_slot_is_refused_and_changes_nothing)
{
  block_cache cache;
  spill_log log;
  cache.push(stream_a, small, addr(1), log.sink());
  try {
    cache.push(stream_a, small, addr(1), log.sink());
    FAIL() << "a double free was accepted";
  } catch (logic_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("double free"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cache.cached_blocks(), 1U);
  EXPECT_THROW(cache.push(stream_a, small, addr(1) + 16, log.sink()), logic_error) << "misaligned";
  EXPECT_EQ(cache.cached_blocks(), 1U);
  cache.check_invariants();
}

// A random sequence against a model (per (stream, size): a stack of addresses, plus what was spilled): every
// pop returns the model's top, every block is in exactly one place, and the invariants hold after each step.
TEST(block_cache, random_sequences_match_a_model)
{
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    std::mt19937_64 rng{seed};
    block_cache cache;
    std::map<std::pair<std::uintptr_t, std::size_t>, std::vector<std::uintptr_t>> model;
    std::size_t spilled = 0;
    std::size_t next = 0;
    auto sink = [&](block_cache::spill_batch const& batch) noexcept {
      auto& stack = model[{batch.stream, batch.block_size}];
      for (std::uintptr_t a : batch.addresses) {
        auto const it = std::find(stack.begin(), stack.end(), a);
        ASSERT_NE(it, stack.end()) << "spilled a block the model does not hold";
        stack.erase(it);
        ++spilled;
      }
    };
    for (int step = 0; step < 20'000; ++step) {
      std::uintptr_t const stream = (rng() % 3) * 0x1000;
      std::size_t const size = small << (rng() % 12);  // 12 sizes: more (stream, size) pairs than slots
      if (rng() % 2 == 0) {
        std::uintptr_t const a = addr(next++);
        cache.push(stream, size, a, sink);
        model[{stream, size}].push_back(a);
      } else {
        auto const got = cache.pop(stream, size);
        auto& stack = model[{stream, size}];
        if (got) {
          ASSERT_FALSE(stack.empty()) << "seed " << seed << " step " << step;
          EXPECT_EQ(*got, stack.back()) << "seed " << seed << " step " << step;
          stack.pop_back();
        } else {
          ASSERT_TRUE(stack.empty()) << "seed " << seed << " step " << step << ": a cached block was not found";
        }
      }
      std::size_t model_bytes = 0;
      for (auto const& [key, stack] : model) { model_bytes += stack.size() * key.second; }
      ASSERT_EQ(cache.cached_bytes(), model_bytes) << "seed " << seed << " step " << step;
      if (step % 64 == 0) { cache.check_invariants(); }
    }
    EXPECT_GT(spilled, 1000U) << "the sequence must exercise spilling";
  }
}

}  // namespace
}  // namespace gpumem::test
