// small_pages: classes, carving, retirement, refusals, streams, and a randomized model check.
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/small_pages.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <vector>

namespace gpumem::test {
namespace {

using detail::small_pages;

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::uintptr_t base = std::uintptr_t{1} << 40;
constexpr std::size_t large_pool = std::size_t{1} << 30;  // a pool whose pages have the largest size

/// The page a pool of large_pool bytes adds for requests of `bytes`.
std::size_t page_for(small_pages const& pages, std::size_t bytes) { return pages.page_bytes_for(pages.class_of(bytes), large_pool); }
/// Adds the page a pool of large_pool bytes adds.
small_pages::block add(small_pages& pages, std::uintptr_t address, std::size_t bytes, std::uint64_t streams)
{
  return pages.add_page(address, bytes, page_for(pages, bytes), streams);
}

TEST(small_pages, classes_cover_the_request_waste_less_than_a_step_and_are_aligned)
{
  small_pages const pages{{}};
  EXPECT_EQ(pages.class_of(1), 256U);
  EXPECT_EQ(pages.class_of(256), 256U);
  EXPECT_EQ(pages.class_of(768), 768U) << "every multiple of 256 up to 1 KiB is a class";
  EXPECT_EQ(pages.class_of(1025), 1280U);
  EXPECT_EQ(pages.class_of(2049), 2560U) << "steps of 512 between 2 and 4 KiB";
  std::size_t previous = 0;
  for (std::size_t bytes = 256; bytes <= 128 * KiB; bytes += 256) {
    std::size_t const c = pages.class_of(bytes);
    EXPECT_GE(c, bytes);
    EXPECT_EQ(c % 256, 0U);
    EXPECT_LT(c - bytes, std::max<std::size_t>(256, c / 4)) << bytes;
    EXPECT_GE(c, previous) << "classes grow with the request";
    previous = c;
    for (std::size_t const pool : {std::size_t{0}, std::size_t{16} << 20, large_pool}) {
      std::size_t const page = pages.page_bytes_for(c, pool);
      EXPECT_EQ(page % c, 0U) << "whole blocks only";
      EXPECT_GE(page, pool == large_pool ? 512 * KiB : 64 * KiB);
      EXPECT_GE(page / c, 4U);
    }
  }
  EXPECT_TRUE(pages.serves(128 * KiB));
  EXPECT_FALSE(pages.serves(128 * KiB + 1));
  EXPECT_FALSE(pages.serves(0));
}

TEST(small_pages, classes_are_the_documented_rounding_for_every_request_and_shape)
{
  for (std::size_t const alignment : {std::size_t{256}, std::size_t{512}}) {
    for (unsigned const per_doubling : {1U, 2U, 4U, 8U, 16U}) {
      small_pages const pages{{.small_limit = 128 * KiB, .classes_per_doubling = per_doubling, .alignment = alignment}};
      for (std::size_t bytes = 1; bytes <= 128 * KiB; ++bytes) {
        // The header's rule, by division: the alignment's multiple, then one of per_doubling equal steps of
        // the request's power of two.
        std::size_t const rounded = (bytes + alignment - 1) / alignment * alignment;
        std::size_t const step = std::bit_floor(rounded) / per_doubling;
        std::size_t const expected =
            rounded <= alignment * per_doubling ? rounded : (rounded + step - 1) / step * step;
        ASSERT_EQ(pages.class_of(bytes), expected) << bytes << " bytes, alignment " << alignment << ", "
                                                   << per_doubling << " classes per doubling";
      }
    }
  }
}

TEST(small_pages, bad_options_are_refused_naming_them)
{
  EXPECT_THAT([] { small_pages{{.alignment = 384}}; }, testing::ThrowsMessage<logic_error>(testing::HasSubstr("alignment 384")));
  EXPECT_THAT([] { small_pages{{.classes_per_doubling = 3}}; },
              testing::ThrowsMessage<logic_error>(testing::HasSubstr("classes_per_doubling 3")));
  EXPECT_THAT([] { small_pages{{.small_limit = 100}}; }, testing::ThrowsMessage<logic_error>(testing::HasSubstr("small_limit 100")));
  EXPECT_THAT([] { small_pages{{.min_blocks_per_page = 0}}; }, testing::ThrowsMessage<logic_error>(testing::HasSubstr("min_blocks_per_page")));
  EXPECT_THAT([] { small_pages{{.max_page_bytes = std::size_t{1} << 32}}; },
              testing::ThrowsMessage<logic_error>(testing::HasSubstr("4 GiB or more (small_limit 131072, max_page_bytes 4294967296")));
  EXPECT_THAT([] { small_pages{{.min_page_bytes = 1024 * KiB}}; },
              testing::ThrowsMessage<logic_error>(testing::HasSubstr("max_page_bytes 524288 is not a multiple of the alignment of at least min_page_bytes 1048576")));
  EXPECT_THAT([] { small_pages{{.pool_divisor = 0}}; }, testing::ThrowsMessage<logic_error>(testing::HasSubstr("pool_divisor is 0")));
  EXPECT_THAT([] { small_pages{{.min_blocks_per_page = std::size_t{1} << 16}}; },
              testing::ThrowsMessage<logic_error>(testing::HasSubstr("min_blocks_per_page 65536)")))
    << "65536 blocks of 128 KiB: a page of 8 GiB";
}

// A small pool takes small pages: the 32 classes with one block each would pin 16 MiB in pages of 512 KiB.
TEST(small_pages, pages_grow_with_the_pool_from_the_smallest_to_the_largest_size)
{
  small_pages pages{{}};  // pages of 64 KiB to 512 KiB, about 1/128 of the pool
  constexpr std::size_t MiB = std::size_t{1} << 20;
  EXPECT_EQ(pages.page_bytes_for(256, 0), 64 * KiB);
  EXPECT_EQ(pages.page_bytes_for(256, 8 * MiB), 64 * KiB);
  EXPECT_EQ(pages.page_bytes_for(256, 16 * MiB), 128 * KiB);
  EXPECT_EQ(pages.page_bytes_for(256, 48 * MiB), 256 * KiB) << "a power of two: 48 MiB / 128 rounds down";
  EXPECT_EQ(pages.page_bytes_for(256, 64 * MiB), 512 * KiB);
  EXPECT_EQ(pages.page_bytes_for(256, std::numeric_limits<std::size_t>::max()), 512 * KiB);
  EXPECT_EQ(pages.page_bytes_for(768, 0), 64 * KiB + 512) << "whole blocks: 86 blocks of 768 bytes";
  EXPECT_EQ(pages.page_bytes_for(64 * KiB, 0), 256 * KiB) << "at least min_blocks_per_page blocks";
  EXPECT_EQ(pages.page_bytes_for(96 * KiB, large_pool), 576 * KiB) << "512 KiB rounded up to whole blocks";
  std::size_t small_pool_pages = 0;
  std::size_t classes = 0;
  for (std::size_t c = 256; c <= 128 * KiB; c = pages.class_of(c + 1)) {
    small_pool_pages += pages.page_bytes_for(c, 0);
    ++classes;
  }
  EXPECT_EQ(classes, 32U);
  EXPECT_LT(small_pool_pages, 8 * MiB) << "one page of every class in a new pool";
  // A page must have a size some pool gives: anything else is the owner's mistake, refused with nothing changed.
  EXPECT_THAT([&] { (void)pages.add_page(base, 256, 100 * KiB, 0); },
              testing::ThrowsMessage<logic_error>(testing::HasSubstr("a page of 102400 bytes for blocks of 256 bytes has no size")));
  EXPECT_THAT([&] { (void)pages.add_page(base, 256, 1024 * KiB, 0); }, testing::Throws<logic_error>());
  EXPECT_EQ(pages.page_count(), 0U);
  for (std::size_t const page : {64 * KiB, 128 * KiB, 256 * KiB, 512 * KiB}) {
    auto const b = pages.add_page(base + 4 * page, 256, page, 0);
    EXPECT_EQ(b.address, base + 4 * page);
    EXPECT_TRUE(pages.owns(base + 4 * page + page - 1));
    EXPECT_FALSE(pages.owns(base + 4 * page + page)) << "the page spans the bytes it was given";
  }
  EXPECT_EQ(pages.page_bytes(), 960 * KiB);
  pages.check_invariants();
}

// Every class has a list of its own: with one page of every class, each request is served from its class's page
// (for every shape of classes), and a block freed in one page never serves another class.
TEST(small_pages, every_class_is_served_from_its_own_pages)
{
  for (unsigned const per_doubling : {1U, 2U, 4U, 8U, 16U}) {
    small_pages pages{{.small_limit = 128 * KiB, .classes_per_doubling = per_doubling}};
    std::map<std::size_t, std::uintptr_t> page_of_class;  // class -> its page's address
    std::uintptr_t next = base;
    for (std::size_t bytes = 256; bytes <= 128 * KiB; bytes += 256) {
      std::size_t const size = pages.class_of(bytes);
      if (page_of_class.contains(size)) { continue; }
      page_of_class[size] = next;
      (void)add(pages, next, size, 0);
      next += page_for(pages, size);
    }
    pages.check_invariants();
    for (std::size_t bytes = 256; bytes <= 128 * KiB; bytes += 256) {
      std::size_t const size = pages.class_of(bytes);
      std::uintptr_t const page = page_of_class.at(size);
      auto const b = pages.take(bytes);
      ASSERT_TRUE(b) << bytes << " bytes, " << per_doubling << " classes per doubling";
      ASSERT_GE(b->address, page) << bytes << " bytes came from another class's page";
      ASSERT_LT(b->address, page + page_for(pages, size)) << bytes << " bytes came from another class's page";
      EXPECT_EQ((b->address - page) % size, 0U);
      EXPECT_FALSE(pages.give_back(b->address, 0));
    }
    pages.check_invariants();
  }
}

// give_back finds the page a block was last taken from without a search; a retired page must not stay found.
TEST(small_pages, an_address_of_a_retired_page_is_refused_even_right_after_its_last_block_was_freed)
{
  small_pages pages{{}};
  auto const b = add(pages, base, 4 * KiB, 0);
  EXPECT_FALSE(pages.give_back(b.address, 0));
  ASSERT_TRUE(pages.retire_empty_page());
  EXPECT_THAT([&] { (void)pages.give_back(b.address, 0); },
              testing::ThrowsMessage<logic_error>(testing::HasSubstr("is in no page")));
  // A new page at the same place, of another class, is the one found.
  auto const c = add(pages, base, 8 * KiB, 0);
  EXPECT_EQ(c.address, base);
  EXPECT_THAT([&] { (void)pages.give_back(base + 4 * KiB, 0); },
              testing::ThrowsMessage<logic_error>(testing::HasSubstr("is not the start of a block of 8192 bytes")));
  EXPECT_FALSE(pages.give_back(c.address, 0));
  pages.check_invariants();
}

TEST(small_pages, a_page_is_carved_in_order_refilled_last_in_first_out_kept_when_empty_and_retired_by_the_owner)
{
  small_pages pages{{}};
  EXPECT_FALSE(pages.take(4 * KiB)) << "no page yet";
  std::size_t const page = page_for(pages, 4 * KiB);
  auto const first = add(pages, base, 4 * KiB, 0);
  EXPECT_EQ(first.address, base);
  std::vector<std::uintptr_t> blocks{first.address};
  for (std::size_t i = 1; i < page / (4 * KiB); ++i) {
    auto const b = pages.take(4 * KiB);
    ASSERT_TRUE(b);
    EXPECT_EQ(b->address, base + i * 4 * KiB);
    blocks.push_back(b->address);
  }
  EXPECT_FALSE(pages.take(4 * KiB)) << "the page is full";
  EXPECT_FALSE(pages.take(3 * KiB + 512)) << "3.5 KiB is served by the 4 KiB class, whose page is full";
  EXPECT_EQ(pages.used_bytes(), page);
  pages.check_invariants();
  EXPECT_FALSE(pages.give_back(blocks[3], 0));
  EXPECT_FALSE(pages.give_back(blocks[7], 0));
  EXPECT_EQ(pages.take(4 * KiB)->address, blocks[7]) << "the most recently freed block first";
  EXPECT_EQ(pages.take(4 * KiB)->address, blocks[3]);
  for (std::size_t i = 0; i + 1 < blocks.size(); ++i) { EXPECT_FALSE(pages.give_back(blocks[i], 0)); }
  pages.check_invariants();
  EXPECT_FALSE(pages.give_back(blocks.back(), 0)) << "the empty page is kept until the owner retires it";
  EXPECT_EQ(pages.empty_page_count(), 1U);
  pages.check_invariants();
  auto const reused = pages.take(4 * KiB);
  ASSERT_TRUE(reused) << "a kept page serves its class";
  EXPECT_EQ(reused->address, blocks.back());
  EXPECT_EQ(pages.empty_page_count(), 0U) << "in use again";
  EXPECT_FALSE(pages.retire_empty_page()) << "no page is empty";
  EXPECT_FALSE(pages.give_back(reused->address, 0));
  auto const retired = pages.retire_empty_page();
  ASSERT_TRUE(retired) << "the owner retires the empty page before its next heap operation";
  EXPECT_EQ(retired->address, base);
  EXPECT_EQ(retired->bytes, page);
  EXPECT_FALSE(pages.retire_empty_page());
  EXPECT_EQ(pages.page_count(), 0U);
  EXPECT_EQ(pages.page_bytes(), 0U);
  EXPECT_FALSE(pages.owns(base));
  EXPECT_FALSE(pages.take(4 * KiB)) << "a retired page serves nothing";
  pages.check_invariants();
}

TEST(small_pages, double_frees_foreign_and_inner_addresses_are_refused_and_nothing_changes)
{
  small_pages pages{{}};
  auto const a = add(pages, base, 1 * KiB, 0);
  auto const b = pages.take(1 * KiB);
  ASSERT_TRUE(b);
  EXPECT_FALSE(pages.give_back(b->address, 0));
  EXPECT_THAT([&] { (void)pages.give_back(b->address, 0); }, testing::ThrowsMessage<logic_error>(testing::HasSubstr("double free")));
  EXPECT_THAT([&] { (void)pages.give_back(base + (std::uintptr_t{1} << 30), 0); },
              testing::ThrowsMessage<logic_error>(testing::HasSubstr("in no page")));
  EXPECT_THAT([&] { (void)pages.give_back(base - 256, 0); }, testing::ThrowsMessage<logic_error>(testing::HasSubstr("in no page")));
  EXPECT_THAT([&] { (void)pages.give_back(a.address + 256, 0); },
              testing::ThrowsMessage<logic_error>(testing::HasSubstr("not the start of a block")));
  EXPECT_THAT([&] { (void)pages.give_back(a.address + 4 * KiB, 0); },
              testing::ThrowsMessage<logic_error>(testing::HasSubstr("double free"))) << "an uncarved block is not in use";
  EXPECT_EQ(pages.used_bytes(), 1 * KiB);
  pages.check_invariants();
  EXPECT_THAT([&] { (void)add(pages, base + 256 * KiB, 1 * KiB, 0); },
              testing::ThrowsMessage<logic_error>(testing::HasSubstr("overlaps")));
  EXPECT_THAT([&] { (void)add(pages, base - 256 * KiB, 1 * KiB, 0); },
              testing::ThrowsMessage<logic_error>(testing::HasSubstr("overlaps")));
  EXPECT_EQ(pages.page_count(), 1U);
  pages.check_invariants();
}

TEST(small_pages, a_block_carries_the_streams_of_its_last_free_and_a_retired_page_all_of_them)
{
  small_pages pages{{}};
  auto const a = add(pages, base, 64 * KiB, 0b1000);
  EXPECT_EQ(a.streams, 0b1000U) << "a new block follows the heap range's streams";
  auto const b = pages.take(64 * KiB);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->streams, 0b1000U);
  EXPECT_FALSE(pages.give_back(b->address, 0b01));
  auto const again = pages.take(64 * KiB);
  EXPECT_EQ(again->address, b->address);
  EXPECT_EQ(again->streams, 0b01U) << "the streams of its last free only";
  EXPECT_EQ(pages.streams_in_use(), 0b1001U);
  pages.forget_streams(0b1000);
  EXPECT_EQ(pages.streams_in_use(), 0b0001U);
  auto const c = pages.take(64 * KiB);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->streams, 0U) << "forgotten";
  EXPECT_FALSE(pages.give_back(c->address, 0b100));
  EXPECT_FALSE(pages.give_back(a.address, 0b10));
  pages.check_invariants();
  EXPECT_FALSE(pages.give_back(b->address, 0)) << "kept empty";
  auto const retired = pages.retire_empty_page();
  ASSERT_TRUE(retired);
  EXPECT_EQ(retired->streams, 0b110U) << "the union of its blocks' last frees (the first ones were forgotten)";
}

TEST(small_pages, more_empty_pages_than_the_limit_retire_the_oldest)
{
  small_pages pages{{}};
  std::size_t const page = page_for(pages, 1 * KiB);
  std::vector<std::uintptr_t> firsts;
  for (std::size_t i = 0; i <= small_pages::empty_limit; ++i) {
    firsts.push_back(add(pages, base + i * page, 1 * KiB, 0).address);
  }
  for (std::size_t i = 0; i < small_pages::empty_limit; ++i) {
    EXPECT_FALSE(pages.give_back(firsts[i], std::uint64_t{1} << i)) << "kept";
  }
  EXPECT_EQ(pages.empty_page_count(), small_pages::empty_limit);
  auto const oldest = pages.give_back(firsts.back(), 0);
  ASSERT_TRUE(oldest) << "one more empty page than the limit";
  EXPECT_EQ(oldest->address, firsts.front());
  EXPECT_EQ(oldest->streams, 1U);
  EXPECT_EQ(pages.empty_page_count(), small_pages::empty_limit);
  pages.check_invariants();
  std::size_t retired = 0;
  while (pages.retire_empty_page()) { ++retired; }
  EXPECT_EQ(retired, small_pages::empty_limit);
  EXPECT_EQ(pages.page_count(), 0U);
  pages.check_invariants();
}

// 200 000 random steps against a model: live blocks never overlap, lie in owned pages, the byte counts agree,
// pages come from a simulated heap and retire to it (kept empty pages before every heap operation, as the owner
// does); invariants after every step of the first 20 000.
TEST(small_pages, random_steps_agree_with_a_model)
{
  small_pages pages{{.small_limit = 128 * KiB, .min_page_bytes = 64 * KiB}};
  std::map<std::size_t, std::vector<std::uintptr_t>> heap_free;  // page bytes -> retired page addresses
  std::uintptr_t heap_top = base;
  std::map<std::uintptr_t, std::size_t> live;  // address -> class
  std::size_t live_bytes = 0;
  std::mt19937_64 rng{12345};
  std::size_t retired = 0;
  for (int step = 0; step < 200'000; ++step) {
    if (live.empty() || (live.size() < 3000 && rng() % 100 < 52)) {
      std::size_t const bytes = 256 + rng() % (128 * KiB - 255);
      std::size_t const cls = pages.class_of(bytes);
      auto b = pages.take(bytes);
      if (!b) {
        while (auto const r = pages.retire_empty_page()) {  // before the heap operation
          ++retired;
          ASSERT_FALSE(pages.owns(r->address));
          heap_free[r->bytes].push_back(r->address);
        }
        // Pools of every size along the way: pages of several sizes per class, each of them reused.
        constexpr std::array<std::size_t, 4> pools{0, std::size_t{16} << 20, std::size_t{32} << 20, large_pool};
        std::size_t const page = pages.page_bytes_for(cls, pools[rng() % pools.size()]);
        std::uintptr_t address = 0;
        if (auto& spare = heap_free[page]; !spare.empty()) {
          address = spare.back();
          spare.pop_back();
        } else {
          address = heap_top;
          heap_top += page;
        }
        b = pages.add_page(address, bytes, page, 0);
      }
      auto const after = live.lower_bound(b->address);
      ASSERT_TRUE(after == live.end() || after->first >= b->address + cls) << "overlaps the next live block";
      ASSERT_TRUE(after == live.begin() || std::prev(after)->first + std::prev(after)->second <= b->address)
        << "overlaps the previous live block";
      ASSERT_TRUE(pages.owns(b->address) && pages.owns(b->address + cls - 1));
      live.emplace(b->address, cls);
      live_bytes += cls;
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<std::ptrdiff_t>(rng() % live.size()));
      if (auto const r = pages.give_back(it->first, 0)) {
        ++retired;
        ASSERT_FALSE(pages.owns(r->address));
        heap_free[r->bytes].push_back(r->address);
      }
      live_bytes -= it->second;
      live.erase(it);
    }
    ASSERT_EQ(pages.used_bytes(), live_bytes);
    if (step < 20'000 || step % 1000 == 0) { pages.check_invariants(); }
  }
  EXPECT_GT(retired, 100U) << "pages retire along the way";
  for (auto const& [address, cls] : live) { (void)pages.give_back(address, 0); }
  EXPECT_EQ(pages.page_count(), pages.empty_page_count()) << "only kept empty pages stay";
  while (pages.retire_empty_page()) {}
  EXPECT_EQ(pages.page_count(), 0U) << "every page retired once its blocks were freed";
  EXPECT_EQ(pages.page_bytes(), 0U);
  pages.check_invariants();
}

}  // namespace
}  // namespace gpumem::test
