// aligned_resource_adaptor: the conformance battery (4 KiB alignment), then the alignment of the pointers
// for several alignments and thresholds over a simulated upstream whose pointers are only 256-aligned, the
// size asked of the upstream, correct deallocation (the upstream sees no invalid deallocation and ends
// empty), construction errors, and 8 threads at once.
#include "conformance/resource_battery.hpp"
#include "support/sub_allocator_checks.hpp"

#include <gpumem/error.hpp>
#include <gpumem/mr/aligned_resource_adaptor.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

namespace gpumem::test {
namespace {

struct aligned_factory {
  static std::unique_ptr<mr::device_memory_resource> make()
  {
    return std::make_unique<mr::aligned_resource_adaptor>(&cuda_upstream(), 4096);
  }
  static constexpr char const* name = "cuda_memory_resource";
  static constexpr bool oversubscription_safe = true;
};

struct aligned_above_threshold_factory {
  static std::unique_ptr<mr::device_memory_resource> make()
  {
    return std::make_unique<mr::aligned_resource_adaptor>(&cuda_upstream(), 65536, 1 * MiB);
  }
  static constexpr char const* name = "cuda_memory_resource";
  static constexpr bool oversubscription_safe = true;
};

}  // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(aligned_resource_adaptor, resource_battery, aligned_factory);
INSTANTIATE_TYPED_TEST_SUITE_P(aligned_resource_adaptor_threshold, resource_battery, aligned_above_threshold_factory);

namespace {

bool aligned_to(void const* p, std::size_t alignment) { return detail::is_aligned(p, alignment); }

TEST(aligned_resource_adaptor, pointers_are_aligned_and_given_back_correctly)
{
  std::vector<std::size_t> const sizes{1, 255, 256, 1000, 1023, 1024, 1025, 4096, 65536, 100'000, 1 << 20};
  for (std::size_t const alignment : {std::size_t{512}, std::size_t{4096}, std::size_t{65536}, std::size_t{1} << 21}) {
    for (std::size_t const threshold : {std::size_t{0}, std::size_t{1024}, std::size_t{65536}}) {
      SCOPED_TRACE("alignment " + std::to_string(alignment) + ", threshold " + std::to_string(threshold));
      mr::simulated_memory_resource upstream;
      mr::aligned_resource_adaptor aligned{&upstream, alignment, threshold};
      EXPECT_EQ(aligned.alignment(), alignment);
      EXPECT_EQ(aligned.alignment_threshold(), threshold);
      std::vector<std::pair<void*, std::size_t>> live;
      for (int round = 0; round < 3; ++round) {
        for (std::size_t const bytes : sizes) {
          void* p = aligned.allocate(bytes);
          ASSERT_NE(p, nullptr);
          EXPECT_TRUE(aligned_to(p, bytes >= threshold ? alignment : detail::allocation_alignment))
            << bytes << " bytes at " << format_pointer(p);
          EXPECT_TRUE(upstream.owns(p));
          EXPECT_TRUE(upstream.owns(static_cast<char*>(p) + bytes - 1)) << "the block must lie in the upstream's";
          live.emplace_back(p, bytes);
        }
        // Free every other block so that later rounds start from unaligned upstream addresses.
        std::vector<std::pair<void*, std::size_t>> kept;
        for (std::size_t i = 0; i < live.size(); ++i) {
          if (i % 2 == 0) {
            aligned.deallocate(live[i].first, live[i].second);
          } else {
            kept.push_back(live[i]);
          }
        }
        live = std::move(kept);
      }
      for (auto const& [p, bytes] : live) { aligned.deallocate(p, bytes); }
      EXPECT_EQ(upstream.invalid_deallocations(), 0U);
      EXPECT_EQ(upstream.allocation_count(), 0U);
      upstream.check_invariants();
    }
  }
}

TEST(aligned_resource_adaptor, asks_the_upstream_for_alignment_minus_256_more_bytes)
{
  mr::simulated_memory_resource upstream;
  mr::aligned_resource_adaptor aligned{&upstream, 4096, 1000};
  void* small = aligned.allocate(999);  // below the threshold: passes through
  EXPECT_EQ(upstream.bytes_in_use(), 1024U);
  void* large = aligned.allocate(1000);
  EXPECT_EQ(upstream.bytes_in_use(), 1024U + detail::align_up(1000 + 4096 - 256, 256));
  EXPECT_TRUE(aligned_to(large, 4096));
  aligned.deallocate(small, 999);
  aligned.deallocate(large, 1000);
  EXPECT_EQ(upstream.bytes_in_use(), 0U);
  EXPECT_EQ(upstream.invalid_deallocations(), 0U);
}

TEST(aligned_resource_adaptor, alignments_up_to_256_pass_through)
{
  mr::simulated_memory_resource upstream;
  for (std::size_t alignment = 1; alignment <= 256; alignment *= 2) {
    mr::aligned_resource_adaptor aligned{&upstream, alignment};
    void* p = aligned.allocate(300);
    EXPECT_EQ(upstream.bytes_in_use(), 512U);
    aligned.deallocate(p, 300);
  }
  EXPECT_EQ(upstream.invalid_deallocations(), 0U);
}

TEST(aligned_resource_adaptor, errors)
{
  mr::simulated_memory_resource upstream;
  EXPECT_THROW(mr::aligned_resource_adaptor(nullptr, 4096), logic_error);
  EXPECT_THROW(mr::aligned_resource_adaptor(&upstream, 3000), logic_error);
  EXPECT_THROW(mr::aligned_resource_adaptor(&upstream, 0), logic_error);
  mr::aligned_resource_adaptor aligned{&upstream, 4096};
  EXPECT_THROW((void)aligned.allocate(std::numeric_limits<std::size_t>::max() - 1024), bad_alloc);
  mr::simulated_memory_resource small{1 * MiB};
  mr::aligned_resource_adaptor over_small{&small, 4096};
  EXPECT_THROW((void)over_small.allocate(1 * MiB), out_of_memory);  // 1 MiB + 3840 does not fit
  EXPECT_EQ(small.allocation_count(), 0U);
}

TEST(aligned_resource_adaptor, equality_needs_the_same_alignment_and_threshold)
{
  mr::simulated_memory_resource upstream;
  mr::aligned_resource_adaptor a{&upstream, 4096};
  mr::aligned_resource_adaptor b{&upstream, 4096};
  mr::aligned_resource_adaptor c{&upstream, 8192};
  mr::aligned_resource_adaptor d{&upstream, 4096, 100};
  EXPECT_TRUE(a.is_equal(b));
  EXPECT_FALSE(a.is_equal(c));
  EXPECT_FALSE(a.is_equal(d));
}

TEST(aligned_resource_adaptor, eight_threads_allocate_and_free)
{
  constexpr int threads = 8;
  constexpr int rounds = 1000;
  mr::simulated_memory_resource upstream;
  mr::aligned_resource_adaptor aligned{&upstream, 8192};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&aligned, t] {
      std::vector<std::pair<void*, std::size_t>> mine;
      for (int i = 0; i < rounds; ++i) {
        std::size_t const bytes = static_cast<std::size_t>(100 * (1 + (t * 7 + i) % 13));
        void* p = aligned.allocate(bytes);
        EXPECT_TRUE(aligned_to(p, 8192));
        mine.emplace_back(p, bytes);
        if (mine.size() == 3) {
          for (auto const& [q, size] : mine) { aligned.deallocate(q, size); }
          mine.clear();
        }
      }
      for (auto const& [q, size] : mine) { aligned.deallocate(q, size); }
    });
  }
  for (auto& worker : workers) { worker.join(); }
  EXPECT_EQ(upstream.invalid_deallocations(), 0U);
  EXPECT_EQ(upstream.allocation_count(), 0U);
}

}  // namespace
}  // namespace gpumem::test
