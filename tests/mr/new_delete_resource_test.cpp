// new_delete_resource: a small host-resource battery (alignments, zero bytes, distinct memory, threads,
// bad alignment, failure) and its pmr and CCCL interop.
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/host_memory_resource.hpp>
#include <gpumem/mr/new_delete_resource.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory_resource>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace gpumem::test {
namespace {

#ifdef GPUMEM_HAS_CUDA_MR
static_assert(cuda::mr::resource_with<mr::new_delete_resource, cuda::mr::host_accessible>);
static_assert(!cuda::mr::resource_with<mr::new_delete_resource, cuda::mr::device_accessible>,
              "host memory from operator new must not claim to be device-accessible");
#endif

TEST(new_delete_resource, honours_every_power_of_two_alignment_up_to_4096)
{
  mr::new_delete_resource r;
  for (std::size_t alignment = 1; alignment <= 4096; alignment *= 2) {
    for (std::size_t const bytes : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{4096},
                                    std::size_t{100'003}}) {
      void* p = r.allocate(bytes, alignment);
      ASSERT_NE(p, nullptr);
      EXPECT_TRUE(detail::is_aligned(p, alignment)) << bytes << " bytes, alignment " << alignment;
      std::memset(p, 0x77, bytes);
      r.deallocate(p, bytes, alignment);
    }
  }
}

TEST(new_delete_resource, zero_bytes_give_valid_unique_pointers)
{
  mr::new_delete_resource r;
  std::vector<void*> pointers;
  for (int i = 0; i < 32; ++i) {
    void* p = r.allocate(0, 16);
    ASSERT_NE(p, nullptr);
    pointers.push_back(p);
  }
  EXPECT_EQ(std::set<void*>(pointers.begin(), pointers.end()).size(), pointers.size()) << "duplicate pointers";
  for (void* p : pointers) { r.deallocate(p, 0, 16); }
}

TEST(new_delete_resource, allocations_are_distinct_and_keep_their_contents)
{
  mr::new_delete_resource r;
  struct live_block {
    unsigned char* ptr;
    std::size_t bytes;
  };
  std::vector<live_block> blocks;
  for (std::size_t i = 0; i < 200; ++i) {
    std::size_t const bytes = 1 + (i * 7919) % 5000;
    auto* p = static_cast<unsigned char*>(r.allocate(bytes, 64));
    std::memset(p, static_cast<int>(i & 0xFF), bytes);
    blocks.push_back({p, bytes});
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    auto const expected = static_cast<unsigned char>(i & 0xFF);
    EXPECT_TRUE(std::all_of(blocks[i].ptr, blocks[i].ptr + blocks[i].bytes,
                            [expected](unsigned char b) { return b == expected; }))
      << "block " << i << " was overwritten";
  }
  for (auto const& b : blocks) { r.deallocate(b.ptr, b.bytes, 64); }
}

TEST(new_delete_resource, many_threads)
{
  mr::new_delete_resource r;
  std::atomic<int> corrupted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&r, &corrupted, t] {
      for (int i = 0; i < 2000; ++i) {
        std::size_t const bytes = 1 + static_cast<std::size_t>((t * 131 + i * 17) % 3000);
        std::size_t const alignment = std::size_t{1} << ((t + i) % 10);
        auto* p = static_cast<unsigned char*>(r.allocate(bytes, alignment));
        if (!detail::is_aligned(p, alignment)) { corrupted.fetch_add(1); }
        std::memset(p, t, bytes);
        if (!std::all_of(p, p + bytes, [t](unsigned char b) { return b == t; })) { corrupted.fetch_add(1); }
        r.deallocate(p, bytes, alignment);
      }
    });
  }
  for (auto& thread : threads) { thread.join(); }
  EXPECT_EQ(corrupted.load(), 0);
}

TEST(new_delete_resource, alignment_that_is_not_a_power_of_two_is_a_logic_error_naming_it)
{
  mr::new_delete_resource r;
  for (std::size_t const alignment : {std::size_t{0}, std::size_t{3}, std::size_t{24}, std::size_t{1000}}) {
    try {
      void* p = r.allocate(64, alignment);
      r.deallocate(p, 64, alignment);
      ADD_FAILURE() << "alignment " << alignment << " was accepted";
    } catch (logic_error const& e) {
      std::string const what = e.what();
      EXPECT_NE(what.find("alignment " + std::to_string(alignment)), std::string::npos) << what;
      EXPECT_NE(what.find("power of two"), std::string::npos) << what;
    }
  }
}

TEST(new_delete_resource, an_impossible_request_is_gpumem_bad_alloc_naming_the_size)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizer's allocator aborts on an impossible request instead of failing it";
#endif
  mr::new_delete_resource r;
  std::size_t const huge = std::numeric_limits<std::size_t>::max() / 2;
  try {
    void* p = r.allocate(huge, 64);
    r.deallocate(p, huge, 64);
    FAIL() << "an impossible request was served";
  } catch (bad_alloc const& e) {
    EXPECT_NE(std::string{e.what()}.find(std::to_string(huge)), std::string::npos) << e.what();
  }
}

TEST(new_delete_resource, equal_to_every_new_delete_resource_only)
{
  mr::new_delete_resource a;
  mr::new_delete_resource b;
  mr::host_memory_resource& as_host = a;
  EXPECT_TRUE(a.is_equal(b));
  EXPECT_TRUE(as_host == b);
  EXPECT_FALSE(a.is_equal(*std::pmr::null_memory_resource()));
  EXPECT_FALSE(a.is_equal(*std::pmr::new_delete_resource()));
  void* p = a.allocate(100, 32);
  b.deallocate(p, 100, 32);  // equal resources free each other's memory
}

TEST(new_delete_resource, serves_pmr_containers)
{
  mr::new_delete_resource r;
  std::pmr::vector<std::pmr::string> words{&r};
  for (int i = 0; i < 1000; ++i) {
    words.emplace_back("a string long enough to leave the small buffer " + std::to_string(i));
  }
  EXPECT_EQ(words.size(), 1000U);
  EXPECT_EQ(words[999], "a string long enough to leave the small buffer 999");
  EXPECT_TRUE(words.get_allocator().resource()->is_equal(r));
  EXPECT_TRUE(words[5].get_allocator().resource()->is_equal(r));
}

#ifdef GPUMEM_HAS_CUDA_MR
TEST(new_delete_resource, works_through_a_cccl_resource_ref)
{
  mr::new_delete_resource r;
  cuda::mr::resource_ref<cuda::mr::host_accessible> ref{r};
  void* p = ref.allocate(1000, 128);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(detail::is_aligned(p, 128));
  std::memset(p, 1, 1000);
  ref.deallocate(p, 1000, 128);
}
#endif

}  // namespace
}  // namespace gpumem::test
