// vmm_pool_memory_resource: the conformance battery (on the backend's provider, alone and under a
// pool_memory_resource), then its own behaviour: bad options, growth and shrink of the device's memory,
// coalescing across growths, top growth that maps only the shortfall, moving wholly free slabs instead of
// creating, failure injection in create and map (simulated_vmm_provider), the physical cap, stream ordering,
// a random multi-stream sequence with patterns, four threads, and the ResNet-50 trace at 80 GiB scale.
#include "conformance/resource_battery.hpp"
#include "replay/log_files.hpp"
#include "support/gate.hpp"
#include "support/memory_checks.hpp"
#include "support/sub_allocator_checks.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/cuda_device_id.hpp>
#include <gpumem/cuda_stream.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/backend/virtual_memory_provider.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>
#include <gpumem/replay/allocation_log.hpp>
#include <gpumem/replay/replay.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

namespace gpumem::test {
namespace {

using mr::simulated_vmm_provider;
using mr::vmm_pool_memory_resource;
using mr::vmm_pool_options;

constexpr std::size_t granule = 2 * MiB;  // the simulated provider's granularity, and the host backend's

/// Slabs of `slab_size`, one per piece of physical memory (mapping_divisor 0): most tests here count slabs
/// and driver calls one by one.
vmm_pool_options slabs_of(std::size_t slab_size, std::optional<std::size_t> reservation = std::nullopt)
{
  vmm_pool_options options;
  options.slab_size = slab_size;
  options.reservation_size = reservation;
  options.mapping_divisor = 0;
  return options;
}

/// Slabs of `slab_size` in pieces of up to 1/divisor of the pool (the default's mechanism, at a divisor that
/// makes pieces of several slabs appear in small tests).
vmm_pool_options growing_pieces(std::size_t slab_size, std::size_t divisor)
{
  vmm_pool_options options = slabs_of(slab_size);
  options.mapping_divisor = divisor;
  return options;
}

/// A provider that forwards to a simulated_vmm_provider the test owns, so that its counters can be read after
/// the pool (which owns its provider) is gone.
class borrowed_provider final : public mr::virtual_memory_provider {
 public:
  explicit borrowed_provider(simulated_vmm_provider& inner) : inner_{inner} {}
  [[nodiscard]] std::string describe() const override { return inner_.describe(); }
  [[nodiscard]] int device() const noexcept override { return inner_.device(); }
  [[nodiscard]] std::size_t granularity() const noexcept override { return inner_.granularity(); }
  [[nodiscard]] memory_info mem_info() override { return inner_.mem_info(); }
  [[nodiscard]] std::uintptr_t reserve(std::size_t bytes) override { return inner_.reserve(bytes); }
  void unreserve(std::uintptr_t base, std::size_t bytes) noexcept override { inner_.unreserve(base, bytes); }
  [[nodiscard]] mr::physical_handle create(std::size_t bytes) override { return inner_.create(bytes); }
  void release(mr::physical_handle handle) noexcept override { inner_.release(handle); }
  void map(std::uintptr_t address, std::size_t bytes, mr::physical_handle handle) override
  {
    inner_.map(address, bytes, handle);
  }
  void unmap(std::uintptr_t address, std::size_t bytes) noexcept override { inner_.unmap(address, bytes); }

 private:
  simulated_vmm_provider& inner_;
};

std::unique_ptr<mr::virtual_memory_provider> borrow(simulated_vmm_provider& provider)
{
  return std::make_unique<borrowed_provider>(provider);
}

/// The pool's books agree with the provider's: every handle it holds is mapped once, none leaked, no misuse.
::testing::AssertionResult books_balance(vmm_pool_memory_resource const& pool, simulated_vmm_provider const& provider)
{
  try {
    pool.check_invariants();
  } catch (logic_error const& e) {
    return ::testing::AssertionFailure() << e.what();
  }
  if (provider.physical_bytes() != pool.physical_bytes() || provider.mapped_bytes() != pool.physical_bytes() ||
      provider.misuse_count() != 0) {
    return ::testing::AssertionFailure() << "pool physical " << pool.physical_bytes() << ", provider physical "
                                         << provider.physical_bytes() << ", mapped " << provider.mapped_bytes()
                                         << ", misuse " << provider.misuse_count();
  }
  if (pool.physical_bytes() != pool.slab_count() * pool.slab_size()) {
    return ::testing::AssertionFailure() << "physical " << pool.physical_bytes() << " != " << pool.slab_count()
                                         << " slabs of " << pool.slab_size();
  }
  return ::testing::AssertionSuccess();
}

std::uintptr_t address_of(void const* p) { return reinterpret_cast<std::uintptr_t>(p); }

// ---- the battery --------------------------------------------------------------------------------------------

struct vmm_factory {
  static std::unique_ptr<mr::device_memory_resource> make()
  {
    return std::make_unique<vmm_pool_memory_resource>(growing_pieces(4 * MiB, 2));
  }
  static constexpr char const* name = "vmm_pool_memory_resource";
  static constexpr bool oversubscription_safe = true;
};

/// pool_memory_resource over a vmm pool, as upstream RMM stacks its pool over any resource.
class pool_over_vmm final : public mr::device_memory_resource {
 public:
  pool_over_vmm() : vmm_{growing_pieces(4 * MiB, 2)}, pool_{&vmm_} {}

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override { return pool_.allocate(bytes, stream); }
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override
  {
    pool_.deallocate(ptr, bytes, stream);
  }
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override { return this == &other; }

  vmm_pool_memory_resource vmm_;
  mr::pool_memory_resource pool_;
};

struct pool_over_vmm_factory {
  static std::unique_ptr<mr::device_memory_resource> make() { return std::make_unique<pool_over_vmm>(); }
  static constexpr char const* name = "pool_memory_resource";
  static constexpr bool oversubscription_safe = true;
};

}  // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(vmm_pool_memory_resource, resource_battery, vmm_factory);
INSTANTIATE_TYPED_TEST_SUITE_P(pool_over_vmm_pool_memory_resource, resource_battery, pool_over_vmm_factory);

namespace {

// ---- construction ---------------------------------------------------------------------------------------------

TEST(vmm_pool_memory_resource, bad_options_are_logic_errors_naming_them)
{
  simulated_vmm_provider provider;
  auto expect_rejected = [&](vmm_pool_options const& options, std::string const& part) {
    try {
      vmm_pool_memory_resource pool{borrow(provider), options};
      ADD_FAILURE() << "accepted options that should name '" << part << "'";
    } catch (logic_error const& e) {
      EXPECT_NE(std::string{e.what()}.find(part), std::string::npos) << e.what();
    }
  };
  expect_rejected(slabs_of(0), "slab_size");
  expect_rejected(slabs_of(4 * MiB, 0), "reservation_size");
  vmm_pool_options capped = slabs_of(4 * MiB);
  capped.maximum_physical_size = 2 * MiB;
  expect_rejected(capped, "maximum_physical_size");
  EXPECT_THROW(vmm_pool_memory_resource(nullptr, slabs_of(4 * MiB)), logic_error);
  EXPECT_EQ(provider.physical_bytes(), 0U);
  EXPECT_EQ(provider.misuse_count(), 0U);
  vmm_pool_options peers;
  peers.peer_devices = {9999};
  EXPECT_THROW(vmm_pool_memory_resource{peers}, logic_error) << "a peer device that does not exist";
  vmm_pool_options small = slabs_of(4 * MiB);
  small.small_block_limit = 1000;
  expect_rejected(small, "small_block_limit");
  small.small_block_limit = 32 * MiB;
  expect_rejected(small, "small_block_limit");
  small.small_block_limit = 64 * 1024;
  small.thread_cache_limit = 128 * 1024;
  expect_rejected(small, "thread_cache_limit");
}

// ---- small blocks and thread caches -----------------------------------------------------------------------------

vmm_pool_options with_thread_caches(vmm_pool_options options)
{
  options.thread_cache_limit = 64 * 1024;  // off by default
  return options;
}

TEST(vmm_pool_memory_resource, small_blocks_share_a_page_that_goes_back_to_the_heap_when_empty_before_the_next_heap_operation)
{
  simulated_vmm_provider provider;
  vmm_pool_options options = slabs_of(granule);
  options.thread_cache_limit = 0;  // pages alone
  vmm_pool_memory_resource pool{borrow(provider), options};
  cuda_stream stream;
  std::vector<void*> blocks;
  for (int i = 0; i < 16; ++i) { blocks.push_back(pool.allocate(4096, stream.view())); }
  EXPECT_EQ(pool.small_page_count(), 1U) << "16 blocks of 4 KiB fit one page of a new pool (64 KiB)";
  EXPECT_EQ(pool.bytes_in_use(), 16U * 4096);
  for (std::size_t i = 1; i < blocks.size(); ++i) {
    EXPECT_EQ(static_cast<char*>(blocks[i]) - static_cast<char*>(blocks[i - 1]), 4096) << "carved in order";
  }
  void* const large = pool.allocate(MiB, stream.view());
  EXPECT_FALSE(static_cast<char*>(large) >= static_cast<char*>(blocks.front()) &&
               static_cast<char*>(large) < static_cast<char*>(blocks.front()) + 64 * 1024)
    << "a large block never comes from a page";
  for (void* b : blocks) { pool.deallocate(b, 4096, stream.view()); }
  EXPECT_EQ(pool.small_page_count(), 1U) << "the empty page stays until the pool's next heap operation";
  EXPECT_EQ(pool.bytes_in_use(), MiB);
  void* const again = pool.allocate(4096, stream.view());
  EXPECT_EQ(again, blocks.back()) << "from the kept page: the block freed last";
  pool.deallocate(again, 4096, stream.view());
  pool.deallocate(large, MiB, stream.view());
  EXPECT_EQ(pool.small_page_count(), 0U) << "freeing the large block retired the empty page first";
  pool.check_invariants();
  EXPECT_EQ(pool.largest_free_block(), pool.physical_bytes()) << "the page coalesced with the rest";
  void* const q = pool.allocate(4096, stream.view());
  EXPECT_THROW(pool.checked_deallocate(static_cast<char*>(q) + 256, 4096, stream.view()), logic_error)
    << "not the start of a block of its page";
  pool.deallocate(q, 4096, stream.view());
  EXPECT_THROW(pool.checked_deallocate(q, 4096, stream.view()), logic_error) << "a double free into its page";
  pool.check_invariants();
  EXPECT_EQ(pool.bytes_in_use(), 0U);
  (void)stream.synchronize();
}

TEST(vmm_pool_memory_resource, a_small_block_freed_on_a_default_stream_comes_back_from_the_thread_cache_on_that_stream_and_thread)
{
  simulated_vmm_provider provider;
  vmm_pool_memory_resource pool{borrow(provider), with_thread_caches(slabs_of(granule))};
  cuda_stream_view const a{};                     // the legacy default stream
  cuda_stream_view const b{cudaStreamPerThread};  // this thread's per-thread default stream
  void* const p = pool.allocate(1000, a);
  pool.deallocate(p, 1000, a);
  EXPECT_EQ(pool.bytes_in_thread_caches(), 1024U) << "a 1000-byte request is served by the 1 KiB class";
  EXPECT_EQ(pool.bytes_in_use(), 0U);
  EXPECT_EQ(pool.allocate(1024, a), p) << "same class, same stream, same thread: from the cache";
  EXPECT_EQ(pool.bytes_in_thread_caches(), 0U);
  pool.deallocate(p, 1024, a);
  void* const other_stream = pool.allocate(1024, b);
  EXPECT_NE(other_stream, p) << "another stream does not take a cached block";
  void* from_other_thread = nullptr;
  std::thread{[&] { from_other_thread = pool.allocate(1024, a); }}.join();
  EXPECT_NE(from_other_thread, p) << "nor does another thread";
  pool.deallocate(other_stream, 1024, b);
  pool.deallocate(from_other_thread, 1024, a);
  EXPECT_THROW(pool.checked_deallocate(p, 1024, a), logic_error) << "a double free found in the cache slot";
  EXPECT_EQ(pool.bytes_in_thread_caches(), 3U * 1024);
  pool.flush_thread_caches();
  EXPECT_EQ(pool.bytes_in_thread_caches(), 0U);
  EXPECT_EQ(pool.small_page_count(), 1U) << "flushed into its page, kept empty until the next heap operation";
  EXPECT_EQ(pool.release_unused(), pool.slab_size()) << "which release_unused is: the page went back, then its slab";
  EXPECT_EQ(pool.small_page_count(), 0U);
  pool.check_invariants();
  (void)b.synchronize();
}

TEST(vmm_pool_memory_resource, a_small_block_freed_on_an_explicit_stream_goes_to_its_page_not_a_cache)
{
  simulated_vmm_provider provider;
  vmm_pool_memory_resource pool{borrow(provider), with_thread_caches(slabs_of(granule))};
  cuda_stream s;
  void* const p = pool.allocate(4096, s.view());
  pool.deallocate(p, 4096, s.view());
  EXPECT_EQ(pool.bytes_in_thread_caches(), 0U);
  EXPECT_EQ(pool.small_page_count(), 1U) << "its page, empty, waits for the next heap operation";
  EXPECT_EQ(pool.bytes_in_use(), 0U);
  pool.check_invariants();
  (void)s.synchronize();
}

TEST(vmm_pool_memory_resource, cached_blocks_go_back_before_the_pool_grows)
{
  simulated_vmm_provider provider;
  vmm_pool_options options = with_thread_caches(slabs_of(granule));
  options.mapping_divisor = 0;
  vmm_pool_memory_resource pool{borrow(provider), options};
  std::vector<void*> blocks;
  for (int i = 0; i < 300; ++i) { blocks.push_back(pool.allocate(32 * 1024)); }  // 9.4 MiB in pages
  std::size_t const physical = pool.physical_bytes();
  for (void* b : blocks) { pool.deallocate(b, 32 * 1024); }
  EXPECT_GT(pool.bytes_in_thread_caches(), 0U) << "some blocks stay in this thread's cache";
  EXPECT_GT(pool.small_page_count(), 0U) << "and keep their pages";
  void* const big = pool.allocate(physical);  // all the pool holds: the cached blocks' pages too
  EXPECT_EQ(pool.physical_bytes(), physical) << "the cached blocks went back, so the big block needed no growth";
  EXPECT_EQ(pool.bytes_in_thread_caches(), 0U);
  pool.deallocate(big, physical);
  pool.check_invariants();
}

TEST(vmm_pool_memory_resource, a_threads_cache_goes_back_when_it_exits)
{
  simulated_vmm_provider provider;
  vmm_pool_memory_resource pool{borrow(provider), with_thread_caches(slabs_of(granule))};
  std::thread{[&] {
    void* p = pool.allocate(2048);
    pool.deallocate(p, 2048);
    EXPECT_EQ(pool.bytes_in_thread_caches(), 2048U);
  }}.join();
  EXPECT_EQ(pool.bytes_in_thread_caches(), 0U);
  EXPECT_EQ(pool.small_page_count(), 1U) << "in its page, kept empty";
  EXPECT_EQ(pool.bytes_in_use(), 0U);
  pool.check_invariants();
}

TEST(vmm_pool_memory_resource, a_reservation_smaller_than_a_slab_is_a_logic_error)
{
  simulated_vmm_provider provider;
  try {
    vmm_pool_memory_resource pool{borrow(provider), slabs_of(4 * MiB, 1 * MiB)};
    FAIL() << "a reservation of 1 MiB for slabs of 4 MiB was accepted (reservation_size() = "
           << pool.reservation_size() << ")";
  } catch (logic_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("reservation_size"), std::string::npos) << e.what();
  }
}

TEST(vmm_pool_memory_resource, rounds_the_slab_to_the_granularity_and_reserves_four_times_the_device)
{
  simulated_vmm_provider provider{80 * GiB};
  {
    vmm_pool_memory_resource pool{borrow(provider), slabs_of(3 * MiB)};
    EXPECT_EQ(pool.slab_size(), 4 * MiB);
    EXPECT_EQ(pool.reservation_size(), 320 * GiB);
    EXPECT_EQ(pool.physical_bytes(), 0U);
    EXPECT_EQ(pool.slab_count(), 0U);
    EXPECT_EQ(pool.bytes_in_use(), 0U);
    EXPECT_EQ(pool.free_bytes(), 0U);
    EXPECT_EQ(provider.create_calls(), 0U) << "nothing is created before the first allocation";
    EXPECT_EQ(pool.provider().describe(), "simulated");
    void* p = pool.allocate(1000);
    EXPECT_TRUE(detail::is_aligned(p, detail::allocation_alignment));
    EXPECT_EQ(address_of(p) % pool.slab_size(), 0U) << "the heap's base is aligned to the slab size";
    EXPECT_EQ(pool.bytes_in_use(), 1024U);
    EXPECT_EQ(pool.physical_bytes(), 4 * MiB);
    EXPECT_TRUE(books_balance(pool, provider));
    (void)pool.allocate(3 * MiB);  // outstanding at destruction on purpose
  }
  EXPECT_EQ(provider.physical_bytes(), 0U) << "the destructor must release every slab";
  EXPECT_EQ(provider.mapped_bytes(), 0U);
  EXPECT_EQ(provider.misuse_count(), 0U) << "unmapped, released and unreserved in the right order";
}

TEST(vmm_pool_memory_resource, is_equal_only_to_itself)
{
  simulated_vmm_provider provider;
  vmm_pool_memory_resource a{borrow(provider), slabs_of(granule)};
  vmm_pool_memory_resource b{borrow(provider), slabs_of(granule)};
  EXPECT_TRUE(a.is_equal(a));
  EXPECT_FALSE(a.is_equal(b));
}

// ---- growth and shrink on the backend's provider ----------------------------------------------------------------

TEST(vmm_pool_memory_resource, grows_and_shrinks_the_devices_free_memory)
{
  constexpr std::size_t n = 4;
  constexpr std::size_t block = 64 * MiB;
  constexpr std::size_t noise = 64 * MiB;  // a real GPU's free memory moves by a few MiB on its own
  vmm_pool_memory_resource pool{slabs_of(4 * MiB)};
  std::size_t const free_before = pool.provider().mem_info().free;
  backend_stream stream;
  std::vector<void*> blocks;
  for (std::size_t i = 0; i < n; ++i) { blocks.push_back(pool.allocate(block, stream.get())); }
  std::size_t const physical = pool.physical_bytes();
  EXPECT_GE(physical, n * block);
  EXPECT_LE(physical, n * block + pool.slab_size());
  EXPECT_EQ(pool.peak_physical_bytes(), physical);
  std::size_t const free_during = pool.provider().mem_info().free;
  ASSERT_LT(free_during, free_before);
  EXPECT_GE(free_before - free_during + noise, physical) << "the device's free memory did not fall by the slabs";
  EXPECT_LE(free_before - free_during, physical + noise);
  // The memory is really there: 8 MiB across the boundary of the last two blocks (and two slabs).
  void* const seam = static_cast<char*>(blocks.back()) - 4 * MiB;
  write_pattern(seam, 8 * MiB, 3, stream.get());
  EXPECT_TRUE(has_pattern(seam, 8 * MiB, 3, stream.get()));
  for (void* p : blocks) { pool.deallocate(p, block, stream.get()); }
  EXPECT_EQ(pool.physical_bytes(), physical) << "freeing alone keeps the slabs";
  std::size_t const released = pool.release_unused();
  EXPECT_EQ(released, physical);
  EXPECT_EQ(pool.physical_bytes(), 0U);
  EXPECT_EQ(pool.slab_count(), 0U);
  EXPECT_EQ(pool.slabs_released(), physical / pool.slab_size());
  std::size_t const free_after = pool.provider().mem_info().free;
  EXPECT_GE(free_after + noise, free_during + released) << "release_unused did not give the memory back";
  EXPECT_EQ(pool.peak_physical_bytes(), physical);
  pool.check_invariants();
  // And it grows again.
  void* p = pool.allocate(block, stream.get());
  void* const end = static_cast<char*>(p) + block - 8 * MiB;
  write_pattern(end, 8 * MiB, 4, stream.get());
  EXPECT_TRUE(has_pattern(end, 8 * MiB, 4, stream.get()));
  pool.deallocate(p, block, stream.get());
}

TEST(vmm_pool_memory_resource, cross_stream_takes_counts_the_allocations_that_wait_on_another_stream)
{
  cuda_stream a{cuda_stream::flags::non_blocking};
  cuda_stream b{cuda_stream::flags::non_blocking};
  for (std::size_t const bytes : {std::size_t{4} * KiB, std::size_t{1} * MiB}) {  // from a page, from the heap
    vmm_pool_memory_resource pool{slabs_of(granule)};
    std::size_t const before = pool.cross_stream_takes();
    EXPECT_EQ(before, 0U);
    void* const p = pool.allocate(bytes, a.view());
    pool.deallocate(p, bytes, a.view());
    void* const again = pool.allocate(bytes, a.view());
    EXPECT_EQ(pool.cross_stream_takes(), before) << bytes << " bytes: its own free needs no wait";
    pool.deallocate(again, bytes, a.view());
    void* const other = pool.allocate(bytes, b.view());
    EXPECT_EQ(other, again);
    EXPECT_EQ(pool.cross_stream_takes(), before + 1) << bytes << " bytes: a's free, taken on b";
    pool.deallocate(other, bytes, b.view());
    pool.check_invariants();
  }
}

// Blocks freed next to each other on two streams make one free range; a block cut from it waits only for the
// stream that freed the piece it is cut from.
TEST(vmm_pool_memory_resource, a_block_waits_only_for_the_streams_that_freed_the_pieces_it_is_cut_from)
{
  cuda_stream a{cuda_stream::flags::non_blocking};
  cuda_stream b{cuda_stream::flags::non_blocking};
  cuda_stream c{cuda_stream::flags::non_blocking};
  vmm_pool_memory_resource pool{slabs_of(granule)};
  std::size_t const bytes = 1 * MiB;  // from the heap
  void* const x = pool.allocate(bytes, a.view());
  void* const y = pool.allocate(bytes, a.view());
  ASSERT_EQ(static_cast<char*>(y), static_cast<char*>(x) + bytes) << "cut one after the other from one range";
  pool.deallocate(x, bytes, a.view());
  pool.deallocate(y, bytes, b.view());  // one free range now: x's piece freed on a, y's on b
  EXPECT_EQ(pool.cross_stream_waits(), 0U);
  void* const first = pool.allocate(bytes, c.view());
  EXPECT_EQ(first, x);
  EXPECT_EQ(pool.cross_stream_takes(), 1U);
  EXPECT_EQ(pool.cross_stream_waits(), 1U) << "x's place was freed on a only";
  void* const second = pool.allocate(bytes, c.view());
  EXPECT_EQ(second, y);
  EXPECT_EQ(pool.cross_stream_waits(), 2U) << "y's place was freed on b only";
  void* const own = pool.allocate(bytes, a.view());
  EXPECT_EQ(pool.cross_stream_takes(), 2U) << "what follows y was never freed on a stream";
  pool.deallocate(first, bytes, c.view());
  pool.deallocate(second, bytes, c.view());
  pool.deallocate(own, bytes, a.view());
  pool.check_invariants();
}

TEST(vmm_pool_memory_resource, free_ranges_coalesce_across_growths)
{
  constexpr std::size_t count = 7;
  constexpr std::size_t block = 3 * MiB;
  vmm_pool_memory_resource pool{slabs_of(granule)};  // 2 MiB slabs: each 3 MiB block needs a growth
  cuda_stream s1{cuda_stream::flags::non_blocking};
  cuda_stream s2{cuda_stream::flags::non_blocking};
  std::vector<void*> blocks;
  std::size_t growths = 0;
  for (std::size_t i = 0; i < count; ++i) {
    std::size_t const created = pool.slabs_created();
    blocks.push_back(pool.allocate(block, i % 2 == 0 ? s1.view() : s2.view()));
    growths += pool.slabs_created() > created ? 1 : 0;
    if (i > 0) { EXPECT_EQ(address_of(blocks[i]), address_of(blocks[i - 1]) + block) << "block " << i; }
  }
  EXPECT_GE(growths, count - 1) << "the test needs a growth for (nearly) every block";
  std::size_t const created = pool.slabs_created();
  std::size_t const physical = pool.physical_bytes();
  for (std::size_t i = 0; i < count; ++i) { pool.deallocate(blocks[i], block, i % 3 == 0 ? s1.view() : s2.view()); }
  EXPECT_EQ(pool.largest_free_block(), physical) << "the growths' free ranges did not coalesce into one";
  pool.check_invariants();
  void* all = pool.allocate(count * block, s1.view());
  EXPECT_EQ(all, blocks.front());
  EXPECT_EQ(pool.slabs_created(), created) << "the coalesced range should have served it without a new slab";
  EXPECT_EQ(pool.physical_bytes(), physical);
  write_pattern(all, count * block, 9, s1.value());  // contiguous across every slab boundary
  EXPECT_TRUE(has_pattern(all, count * block, 9, s1.value()));
  pool.deallocate(all, count * block, s1.view());
  pool.check_invariants();
}

TEST(vmm_pool_memory_resource, top_growth_maps_only_the_shortfall)
{
  simulated_vmm_provider provider;
  vmm_pool_memory_resource pool{borrow(provider), slabs_of(granule)};
  void* x = pool.allocate(100 * MiB);
  void* y = pool.allocate(300 * MiB);
  EXPECT_EQ(address_of(y), address_of(x) + 100 * MiB);
  pool.deallocate(y, 300 * MiB);  // 300 MiB free at the top
  std::size_t const creates = provider.create_calls();
  std::size_t const maps = provider.map_calls();
  void* z = pool.allocate(500 * MiB);
  EXPECT_EQ(z, y) << "the block should start in the free range at the top";
  EXPECT_EQ(provider.create_calls() - creates, 100U) << "500 MiB over 300 MiB free needs 200 MiB: 100 slabs";
  EXPECT_EQ(provider.map_calls() - maps, 100U);
  EXPECT_EQ(pool.physical_bytes(), 600 * MiB);
  EXPECT_EQ(pool.free_bytes(), 0U);
  EXPECT_TRUE(books_balance(pool, provider));
  pool.deallocate(z, 500 * MiB);
  pool.deallocate(x, 100 * MiB);
  EXPECT_EQ(pool.largest_free_block(), 600 * MiB);
  EXPECT_TRUE(books_balance(pool, provider));
}

// ---- moving wholly free slabs ------------------------------------------------------------------------------------

TEST(vmm_pool_memory_resource, wholly_free_slabs_in_the_middle_move_instead_of_new_slabs_being_created)
{
  simulated_vmm_provider provider;
  vmm_pool_memory_resource pool{borrow(provider), slabs_of(granule)};
  std::vector<void*> blocks;  // one slab each
  for (int i = 0; i < 5; ++i) { blocks.push_back(pool.allocate(granule)); }
  pool.deallocate(blocks[1], granule);
  pool.deallocate(blocks[3], granule);  // two wholly free slabs, apart: neither holds 4 MiB
  std::size_t const physical = pool.physical_bytes();
  std::size_t const creates = provider.create_calls();
  std::size_t const maps = provider.map_calls();
  std::size_t const unmaps = provider.unmap_calls();
  cuda_stream_view{}.synchronize();  // the frees' stream is idle: the moved slabs' old mappings go at once
  void* p = pool.allocate(2 * granule);
  EXPECT_EQ(address_of(p), address_of(blocks[4]) + granule) << "the growth goes above the top slab";
  EXPECT_EQ(pool.slabs_moved(), 2U);
  EXPECT_EQ(provider.create_calls(), creates) << "physical memory was created although two slabs were free";
  EXPECT_EQ(provider.unmap_calls() - unmaps, 2U);
  EXPECT_EQ(provider.map_calls() - maps, 2U);
  EXPECT_EQ(pool.physical_bytes(), physical);
  EXPECT_EQ(pool.peak_physical_bytes(), physical) << "moving must not count the memory twice";
  EXPECT_EQ(pool.slab_count(), 5U);
  EXPECT_EQ(pool.free_bytes(), 0U);
  EXPECT_TRUE(books_balance(pool, provider));
  // One wholly free slab next to a one-slab gap: the gap is filled (one new slab), nothing moves.
  pool.deallocate(blocks[0], granule);
  void* q = pool.allocate(2 * granule);
  EXPECT_EQ(q, blocks[0]);
  EXPECT_EQ(provider.create_calls(), creates + 1);
  EXPECT_EQ(pool.slabs_moved(), 2U);
  EXPECT_TRUE(books_balance(pool, provider));
  for (auto [b, bytes] : {std::pair{q, 2 * granule}, {blocks[2], granule}, {blocks[4], granule}, {p, 2 * granule}}) {
    pool.deallocate(b, bytes);
  }
  EXPECT_EQ(pool.release_unused(), physical + granule);
  EXPECT_TRUE(books_balance(pool, provider));
  EXPECT_EQ(provider.physical_bytes(), 0U);
}

TEST(vmm_pool_memory_resource, moved_slabs_hold_memory_on_the_backend_and_other_blocks_keep_theirs)
{
  vmm_pool_memory_resource pool{slabs_of(granule)};
  backend_stream stream;
  std::vector<void*> blocks;
  for (std::uint32_t i = 0; i < 5; ++i) {
    blocks.push_back(pool.allocate(granule, stream.get()));
    write_pattern(blocks.back(), granule, i + 1, stream.get());
  }
  pool.deallocate(blocks[1], granule, stream.get());
  pool.deallocate(blocks[3], granule, stream.get());
  std::size_t const physical = pool.physical_bytes();
  std::size_t const device_free = pool.provider().mem_info().free;
  void* p = pool.allocate(2 * granule, stream.get());
  EXPECT_EQ(pool.slabs_moved(), 2U);
  EXPECT_EQ(pool.physical_bytes(), physical);
  if (on_host_backend()) { EXPECT_EQ(pool.provider().mem_info().free, device_free) << "moving created memory"; }
  write_pattern(p, 2 * granule, 50, stream.get());
  EXPECT_TRUE(has_pattern(p, 2 * granule, 50, stream.get()));
  for (std::uint32_t const i : {0U, 2U, 4U}) {
    EXPECT_TRUE(has_pattern(blocks[i], granule, i + 1, stream.get())) << "block " << i;
  }
  pool.deallocate(p, 2 * granule, stream.get());
  for (std::uint32_t const i : {0U, 2U, 4U}) { pool.deallocate(blocks[i], granule, stream.get()); }
  EXPECT_EQ(pool.release_unused(), physical);
  EXPECT_EQ(pool.physical_bytes(), 0U);
}

// ---- failures ---------------------------------------------------------------------------------------------------

// ---- larger mappings (max_mapping_size) -------------------------------------------------------------------------

vmm_pool_options pieces_of(std::size_t slab_size, std::size_t max_mapping_size)
{
  vmm_pool_options options = slabs_of(slab_size);
  options.max_mapping_size = max_mapping_size;
  return options;
}

TEST(vmm_pool_memory_resource, growth_creates_pieces_of_up_to_max_mapping_size_and_they_go_back_whole)
{
  simulated_vmm_provider provider;
  vmm_pool_memory_resource pool{borrow(provider), pieces_of(granule, 4 * granule + granule / 2)};
  EXPECT_EQ(pool.max_mapping_size(), 4 * granule) << "rounded down to whole slabs";
  void* a = pool.allocate(10 * granule);  // 10 slabs: pieces of 4, 4 and 2
  EXPECT_EQ(provider.create_calls(), 3U);
  EXPECT_EQ(provider.map_calls(), 3U);
  EXPECT_EQ(pool.mapping_count(), 3U);
  EXPECT_EQ(pool.slab_count(), 10U);
  EXPECT_EQ(pool.slabs_created(), 10U);
  EXPECT_TRUE(books_balance(pool, provider));
  pool.deallocate(a, 10 * granule);
  // A block in the middle piece keeps that piece; the other two go back.
  void* b = pool.allocate(granule);                      // slab 0: the first piece stays
  EXPECT_EQ(b, a);
  EXPECT_EQ(pool.release_unused(), 6 * granule) << "pieces 2 (4 slabs) and 3 (2 slabs)";
  EXPECT_EQ(pool.mapping_count(), 1U);
  EXPECT_EQ(provider.physical_bytes(), 4 * granule);
  EXPECT_TRUE(books_balance(pool, provider));
  pool.deallocate(b, granule);
  EXPECT_EQ(pool.release_unused(), 4 * granule);
  EXPECT_EQ(provider.physical_bytes(), 0U);
  EXPECT_EQ(pool.slabs_released(), 10U);
  EXPECT_TRUE(books_balance(pool, provider));
}

// mapping_divisor: pieces grow with the pool (1/N of what it holds when it grows), capped by max_mapping_size.
TEST(vmm_pool_memory_resource, with_a_mapping_divisor_pieces_grow_with_the_pool)
{
  EXPECT_EQ(vmm_pool_options{}.mapping_divisor, 64U) << "the default";
  simulated_vmm_provider provider;
  vmm_pool_options options = growing_pieces(granule, 4);
  vmm_pool_memory_resource pool{borrow(provider), options};
  EXPECT_EQ(pool.mapping_divisor(), 4U);
  EXPECT_EQ(pool.max_mapping_size(), pool.reservation_size()) << "no cap but the reservation";
  void* first = pool.allocate(7 * granule);  // an empty pool: pieces of one slab
  EXPECT_EQ(pool.mapping_count(), 7U);
  void* second = pool.allocate(9 * granule);  // 7 slabs held: pieces of 7 / 4 = 1 slab
  EXPECT_EQ(pool.mapping_count(), 16U);
  void* third = pool.allocate(9 * granule);  // 16 slabs held: pieces of 4, 4 and 1
  EXPECT_EQ(pool.mapping_count(), 19U);
  EXPECT_EQ(pool.slab_count(), 25U);
  EXPECT_TRUE(books_balance(pool, provider));
  for (auto [p, bytes] : {std::pair{first, 7 * granule}, {second, 9 * granule}, {third, 9 * granule}}) { pool.deallocate(p, bytes); }
  EXPECT_EQ(pool.release_unused(), 25 * granule);
  EXPECT_EQ(provider.physical_bytes(), 0U);

  options.max_mapping_size = 2 * granule;  // the cap holds
  vmm_pool_memory_resource capped{borrow(provider), options};
  void* a = capped.allocate(16 * granule);
  void* b = capped.allocate(8 * granule);  // 16 slabs held: 1/4 is 4 slabs, capped at 2
  EXPECT_EQ(capped.mapping_count(), 16U + 4U);
  capped.deallocate(a, 16 * granule);
  capped.deallocate(b, 8 * granule);
  capped.check_invariants();
}

// A large request to a small pool: 1/N of the pool is one slab, but the growth makes at most
// max_pieces_per_growth pieces (each a driver call to create and one to map), larger ones.
TEST(vmm_pool_memory_resource, a_large_growth_makes_a_bounded_number_of_pieces)
{
  constexpr std::size_t most = vmm_pool_options::max_pieces_per_growth;
  simulated_vmm_provider provider;
  vmm_pool_memory_resource pool{borrow(provider), growing_pieces(granule, 64)};
  void* large = pool.allocate(8 * most * granule);  // an empty pool: pieces of 8 slabs, not 1
  EXPECT_EQ(pool.mapping_count(), most);
  EXPECT_EQ(pool.slab_count(), 8 * most);
  void* odd = pool.allocate((most + 1) * granule);  // 1/64 of 256 slabs is 4, more than 33 slabs / 32 (2)
  EXPECT_EQ(pool.mapping_count(), most + 9U) << "pieces of 4 slabs: 8 of them and one of 1";
  EXPECT_TRUE(books_balance(pool, provider));
  pool.deallocate(large, 8 * most * granule);
  pool.deallocate(odd, (most + 1) * granule);
  EXPECT_EQ(pool.release_unused(), (9 * most + 1) * granule);
  EXPECT_EQ(provider.physical_bytes(), 0U);

  vmm_pool_options capped_options = growing_pieces(granule, 64);
  capped_options.max_mapping_size = 2 * granule;  // the cap still holds
  vmm_pool_memory_resource capped{borrow(provider), capped_options};
  void* p = capped.allocate(8 * most * granule);
  EXPECT_EQ(capped.mapping_count(), 4 * most);
  capped.deallocate(p, 8 * most * granule);
  capped.check_invariants();
}

TEST(vmm_pool_memory_resource, a_wholly_free_piece_moves_whole_instead_of_memory_being_created)
{
  simulated_vmm_provider provider;
  vmm_pool_memory_resource pool{borrow(provider), pieces_of(granule, 3 * granule)};
  void* low = pool.allocate(granule);        // piece 1 (1 slab)
  void* piece = pool.allocate(3 * granule);  // piece 2 (3 slabs)
  void* top = pool.allocate(granule);        // piece 3 (1 slab)
  ASSERT_EQ(pool.mapping_count(), 3U);
  pool.deallocate(piece, 3 * granule);       // wholly free, between two used pieces
  std::size_t const creates = provider.create_calls();
  std::size_t const physical = pool.physical_bytes();
  cuda_stream_view{}.synchronize();          // the free's stream is idle: the old mapping goes at once
  void* big = pool.allocate(4 * granule);    // no free range holds it: the top grows by 4 slabs
  EXPECT_EQ(address_of(big), address_of(top) + granule);
  EXPECT_EQ(pool.slabs_moved(), 3U) << "the 3-slab piece moves whole";
  EXPECT_EQ(provider.create_calls() - creates, 1U) << "only the fourth slab is new";
  EXPECT_EQ(pool.physical_bytes(), physical + granule);
  EXPECT_TRUE(books_balance(pool, provider));
  for (auto [p, bytes] : {std::pair{low, granule}, {top, granule}, {big, 4 * granule}}) { pool.deallocate(p, bytes); }
  (void)pool.release_unused();
  EXPECT_EQ(provider.physical_bytes(), 0U);
  EXPECT_TRUE(books_balance(pool, provider));
}

TEST(vmm_pool_memory_resource, pieces_of_several_slabs_hold_memory_on_the_backend_across_their_boundaries)
{
  cuda_stream stream;
  vmm_pool_memory_resource pool{pieces_of(granule, 3 * granule)};
  void* a = pool.allocate(7 * granule + 512, stream.view());  // pieces of 3, 3 and 2 slabs
  EXPECT_EQ(pool.mapping_count(), 3U);
  write_pattern(a, 7 * granule + 512, 11, stream.value());
  EXPECT_TRUE(has_pattern(a, 7 * granule + 512, 11, stream.value()));
  pool.deallocate(a, 7 * granule + 512, stream.view());
  void* b = pool.allocate(4 * granule, stream.view());  // reuses the first two pieces in place
  EXPECT_EQ(b, a);
  EXPECT_EQ(pool.slabs_created(), 8U);
  write_pattern(b, 4 * granule, 12, stream.value());
  EXPECT_TRUE(has_pattern(b, 4 * granule, 12, stream.value()));
  EXPECT_EQ(pool.release_unused(), 2 * granule) << "only the last piece is wholly free";
  pool.deallocate(b, 4 * granule, stream.view());
  EXPECT_EQ(pool.release_unused(), 6 * granule);
  EXPECT_EQ(pool.physical_bytes(), 0U);
  pool.check_invariants();
}

/// A growth of 11 slabs whose creation fails after `creates` successful ones: out_of_memory naming the
/// request, nothing created for it kept, and the same request succeeds once creation works again.
void expect_a_create_failure_leaves_no_trace(vmm_pool_options const& options, std::size_t creates)
{
  simulated_vmm_provider provider;
  vmm_pool_memory_resource pool{borrow(provider), options};
  void* a = pool.allocate(granule);
  provider.fail_create_after(creates);
  constexpr std::size_t request = 10 * granule + 1024;
  try {
    void* p = pool.allocate(request);
    pool.deallocate(p, request);
    FAIL() << "the allocation succeeded although create failed";
  } catch (out_of_memory const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find("vmm_pool_memory_resource"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(request)), std::string::npos) << what;
    EXPECT_NE(what.find("no memory"), std::string::npos) << what;
  }
  EXPECT_TRUE(books_balance(pool, provider));
  EXPECT_EQ(pool.bytes_in_use(), granule);
  EXPECT_EQ(pool.physical_bytes(), granule) << "what was created for the failed request goes back to the device";
  EXPECT_EQ(provider.physical_bytes(), granule);
  provider.clear_failures();
  void* b = pool.allocate(request);
  EXPECT_TRUE(books_balance(pool, provider));
  pool.deallocate(b, request);
  pool.deallocate(a, granule);
  (void)pool.release_unused();
  EXPECT_EQ(provider.physical_bytes(), 0U);
  EXPECT_TRUE(books_balance(pool, provider));
}

TEST(vmm_pool_memory_resource, a_create_failure_is_out_of_memory_and_the_pool_works_again_after)
{
  expect_a_create_failure_leaves_no_trace(slabs_of(granule), 3);
}

TEST(vmm_pool_memory_resource, a_create_failure_in_a_growth_of_several_pieces_gives_the_pieces_back)
{
  expect_a_create_failure_leaves_no_trace(pieces_of(granule, 4 * granule), 2);  // 4 + 4 slabs, then a failure
}

TEST(vmm_pool_memory_resource, a_map_failure_is_a_cuda_error_and_leaks_no_handle)
{
  simulated_vmm_provider provider;
  vmm_pool_memory_resource pool{borrow(provider), slabs_of(granule)};
  provider.fail_map_after(2);
  try {
    void* p = pool.allocate(5 * granule);
    pool.deallocate(p, 5 * granule);
    FAIL() << "the allocation succeeded although map failed";
  } catch (cuda_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("cuMemMap"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(books_balance(pool, provider)) << "the handle whose mapping failed must be released";
  EXPECT_EQ(pool.bytes_in_use(), 0U);
  EXPECT_EQ(provider.release_calls(), 3U) << "the handle whose mapping failed and the two slabs backed before it";
  EXPECT_EQ(pool.physical_bytes(), 0U);
  provider.clear_failures();
  void* p = pool.allocate(5 * granule);
  EXPECT_TRUE(books_balance(pool, provider));
  pool.deallocate(p, 5 * granule);
  (void)pool.release_unused();
  EXPECT_EQ(provider.physical_bytes(), 0U);
}

TEST(vmm_pool_memory_resource, a_map_failure_while_moving_releases_the_moved_memory)
{
  simulated_vmm_provider provider;
  vmm_pool_memory_resource pool{borrow(provider), slabs_of(granule)};
  std::vector<void*> blocks;
  for (int i = 0; i < 5; ++i) { blocks.push_back(pool.allocate(granule)); }
  pool.deallocate(blocks[1], granule);
  pool.deallocate(blocks[3], granule);
  provider.fail_map_after(0);
  EXPECT_THROW((void)pool.allocate(2 * granule), cuda_error);
  EXPECT_TRUE(books_balance(pool, provider)) << "a slab unmapped to move must not be lost";
  EXPECT_EQ(pool.slab_count(), 3U);
  provider.clear_failures();
  void* p = pool.allocate(2 * granule);
  EXPECT_TRUE(books_balance(pool, provider));
  pool.deallocate(p, 2 * granule);
  for (int const i : {0, 2, 4}) { pool.deallocate(blocks[static_cast<std::size_t>(i)], granule); }
  EXPECT_TRUE(books_balance(pool, provider));
}

TEST(vmm_pool_memory_resource, the_physical_cap_is_out_of_memory_naming_it_but_moving_needs_no_new_memory)
{
  simulated_vmm_provider provider;
  vmm_pool_options options = slabs_of(granule);
  options.maximum_physical_size = 4 * granule;
  vmm_pool_memory_resource pool{borrow(provider), options};
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) { blocks.push_back(pool.allocate(granule)); }  // at the cap
  try {
    void* p = pool.allocate(granule);
    pool.deallocate(p, granule);
    FAIL() << "the pool went over its maximum_physical_size";
  } catch (out_of_memory const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find(std::to_string(granule)), std::string::npos) << what;
    EXPECT_NE(what.find("maximum_physical_size"), std::string::npos) << what;
    EXPECT_NE(what.find(format_bytes(4 * granule)), std::string::npos) << what;
  }
  EXPECT_TRUE(books_balance(pool, provider));
  pool.deallocate(blocks[1], granule);  // one movable slab, but 4 MiB need two
  EXPECT_THROW((void)pool.allocate(2 * granule), out_of_memory);
  EXPECT_TRUE(books_balance(pool, provider));
  pool.deallocate(blocks[3], granule);  // the top slab is free: with slab 1 moved above it, 4 MiB fit
  void* p = pool.allocate(2 * granule);
  EXPECT_EQ(p, blocks[3]);
  EXPECT_EQ(pool.physical_bytes(), 4 * granule);
  EXPECT_EQ(pool.slabs_moved(), 1U);
  EXPECT_LE(pool.peak_physical_bytes(), 4 * granule);
  EXPECT_TRUE(books_balance(pool, provider));
  pool.deallocate(p, 2 * granule);
  pool.deallocate(blocks[0], granule);
  pool.deallocate(blocks[2], granule);
}

TEST(vmm_pool_memory_resource, set_maximum_physical_size_caps_growth_and_lowering_it_gives_nothing_back)
{
  simulated_vmm_provider provider;
  vmm_pool_memory_resource pool{borrow(provider), slabs_of(granule)};
  EXPECT_FALSE(pool.maximum_physical_size().has_value());
  std::vector<void*> blocks;
  for (int i = 0; i < 3; ++i) { blocks.push_back(pool.allocate(granule)); }
  pool.set_maximum_physical_size(2 * granule);  // below what the pool holds: nothing goes back
  EXPECT_EQ(pool.maximum_physical_size(), std::optional<std::size_t>{2 * granule});
  EXPECT_EQ(pool.physical_bytes(), 3 * granule);
  try {
    void* p = pool.allocate(granule);
    pool.deallocate(p, granule);
    FAIL() << "the pool grew over the maximum_physical_size set later";
  } catch (out_of_memory const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find("maximum_physical_size"), std::string::npos) << what;
    EXPECT_NE(what.find(format_bytes(2 * granule)), std::string::npos) << what;
  }
  EXPECT_TRUE(books_balance(pool, provider));
  pool.deallocate(blocks[2], granule);  // a free slab inside the pool is reused without growth
  blocks[2] = pool.allocate(granule);
  pool.set_maximum_physical_size(4 * granule);  // raised: the pool grows again
  blocks.push_back(pool.allocate(granule));
  EXPECT_EQ(pool.physical_bytes(), 4 * granule);
  pool.set_maximum_physical_size(std::nullopt);  // no cap
  blocks.push_back(pool.allocate(granule));
  EXPECT_EQ(pool.physical_bytes(), 5 * granule);
  EXPECT_THROW(pool.set_maximum_physical_size(granule - 1), logic_error);
  EXPECT_FALSE(pool.maximum_physical_size().has_value()) << "a refused cap must leave the old one";
  for (void* p : blocks) { pool.deallocate(p, granule); }
  EXPECT_TRUE(books_balance(pool, provider));
}

TEST(vmm_pool_memory_resource, reset_peak_physical_bytes_sets_the_peak_to_the_memory_held_now)
{
  simulated_vmm_provider provider;
  vmm_pool_memory_resource pool{borrow(provider), slabs_of(granule)};
  void* a = pool.allocate(granule);
  void* b = pool.allocate(2 * granule);
  pool.deallocate(b, 2 * granule);
  EXPECT_EQ(pool.release_unused(), 2 * granule);
  EXPECT_EQ(pool.peak_physical_bytes(), 3 * granule);
  pool.reset_peak_physical_bytes();
  EXPECT_EQ(pool.peak_physical_bytes(), granule);
  b = pool.allocate(granule);
  EXPECT_EQ(pool.peak_physical_bytes(), 2 * granule);
  pool.deallocate(a, granule);
  pool.deallocate(b, granule);
}

// The device is full and the only wholly free slab is the one the growth extends: no other slab can make
// room, so the request fails as out of memory. Releasing that slab to retry the creation cannot help (the
// growth then lacks exactly what it released): the pool should keep it and say that the device is full.
TEST(vmm_pool_memory_resource, a_full_device_is_out_of_memory_saying_so_and_keeps_the_slab_it_would_extend)
{
  simulated_vmm_provider provider{3 * granule};
  vmm_pool_memory_resource pool{borrow(provider), slabs_of(granule)};
  void* a = pool.allocate(granule);
  void* b = pool.allocate(granule);
  void* c = pool.allocate(granule);
  pool.deallocate(c, granule);  // the top slab is wholly free
  try {
    void* p = pool.allocate(2 * granule);
    pool.deallocate(p, 2 * granule);
    FAIL() << "served 4 MiB on a device of 6 MiB with 4 MiB in use";
  } catch (out_of_memory const& e) {
    std::string const what = e.what();
    EXPECT_EQ(what.find("internal error"), std::string::npos) << what;
    EXPECT_NE(what.find("no memory"), std::string::npos) << what;
  }
  EXPECT_EQ(pool.slabs_released(), 0U) << "released the free slab that the growth extends";
  EXPECT_TRUE(books_balance(pool, provider));
  void* d = pool.allocate(granule);
  EXPECT_EQ(d, c);
  for (void* p : {a, b, d}) { pool.deallocate(p, granule); }
}

// A request that would take the pool beyond the device's total memory fails before any memory is
// created (growing slab by slab until the device says no would take all its memory for a moment).
TEST(vmm_pool_memory_resource, a_request_larger_than_the_device_is_out_of_memory_before_creating_anything)
{
  simulated_vmm_provider provider{4 * granule};
  vmm_pool_memory_resource pool{borrow(provider), slabs_of(granule, 64 * granule)};
  void* a = pool.allocate(granule);
  try {
    void* p = pool.allocate(4 * granule);
    pool.deallocate(p, 4 * granule);
    FAIL() << "served 8 MiB more on a device of 8 MiB";
  } catch (out_of_memory const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find("more than the device's total memory"), std::string::npos) << what;
    EXPECT_NE(what.find("device free"), std::string::npos) << what;
  }
  EXPECT_EQ(pool.slabs_created(), 1U) << "created memory for a request that could never fit";
  EXPECT_EQ(pool.peak_physical_bytes(), granule);
  EXPECT_TRUE(books_balance(pool, provider));
  pool.deallocate(a, granule);
}

TEST(vmm_pool_memory_resource, a_request_larger_than_the_reservation_is_out_of_memory_at_once)
{
  simulated_vmm_provider provider;
  vmm_pool_memory_resource pool{borrow(provider), slabs_of(granule, 64 * MiB)};
  constexpr std::size_t request = 64 * MiB + 256;
  try {
    void* p = pool.allocate(request);
    pool.deallocate(p, request);
    FAIL() << "served more than the reservation";
  } catch (out_of_memory const& e) {
    EXPECT_NE(std::string{e.what()}.find(std::to_string(request)), std::string::npos) << e.what();
  }
  EXPECT_EQ(provider.create_calls(), 0U);
  void* p = pool.allocate(64 * MiB);  // exactly the reservation
  EXPECT_TRUE(books_balance(pool, provider));
  pool.deallocate(p, 64 * MiB);
}

// DESIGN.md: the out-of-memory message names the requested size, i.e. the caller's, not the size rounded
// up to 256 bytes.
TEST(vmm_pool_memory_resource, out_of_memory_names_the_size_the_caller_asked_for)
{
  simulated_vmm_provider provider;
  vmm_pool_options options = slabs_of(granule);
  options.maximum_physical_size = granule;
  vmm_pool_memory_resource pool{borrow(provider), options};
  void* a = pool.allocate(granule);
  for (std::size_t const request : {std::size_t{1000}, 3 * granule + 1}) {
    try {
      void* p = pool.allocate(request);
      pool.deallocate(p, request);
      ADD_FAILURE() << "served " << request << " bytes over the cap";
    } catch (out_of_memory const& e) {
      EXPECT_NE(std::string{e.what()}.find(std::to_string(request)), std::string::npos) << e.what();
    }
  }
  pool.deallocate(a, granule);
}

// ---- stream ordering ---------------------------------------------------------------------------------------------

vmm_pool_options one_slab_only()
{
  vmm_pool_options options = slabs_of(granule);
  options.maximum_physical_size = granule;
  return options;
}

TEST(vmm_pool_memory_resource, a_block_freed_on_a_busy_stream_reaches_another_stream_only_after_that_work)
{
  vmm_pool_memory_resource pool{one_slab_only()};
  expect_block_reaches_another_stream_only_after_pending_work(pool, granule);
  pool.check_invariants();
}

TEST(vmm_pool_memory_resource, the_same_when_the_freeing_thread_has_ended)
{
  vmm_pool_memory_resource pool{one_slab_only()};
  expect_block_reaches_another_stream_only_after_pending_work(pool, granule, {}, true);
  pool.check_invariants();
}

// A wholly free slab whose stream still has work on it (held back by a gate) moves at once: its memory is mapped
// at the new place while the old mapping stays until that work is done (on the host backend an early unmap would
// make the pending memset fault), and the new block's stream waits for that work before its own.
TEST(vmm_pool_memory_resource, moving_a_slab_does_not_wait_for_the_work_of_the_stream_that_freed_it)
{
  vmm_pool_memory_resource pool{slabs_of(granule)};
  backend_stream a;
  backend_stream b;
  void* x = pool.allocate(granule, a.get());
  void* y = pool.allocate(granule, a.get());
  void* z = pool.allocate(granule, a.get());
  gate held;
  held.hold(a.get());
  detail::backend& be = detail::get_backend();
  be.memset_async(y, 0xAA, granule, a.get());
  pool.deallocate(y, granule, a.get());  // slab 1: wholly free, A's work pending
  std::atomic<bool> done{false};
  void* w = nullptr;
  std::thread grower{[&] {
    w = pool.allocate(2 * granule, b.get());  // moves slab 1 above slab 2
    done.store(true);
  }};
  bool const returned = eventually([&] { return done.load(); }, std::chrono::milliseconds{2000});
  if (returned) { be.memset_async(w, 0x55, 2 * granule, b.get()); }  // must run after A's memset
  std::this_thread::sleep_for(std::chrono::milliseconds{50});          // time for B to run it too early
  held.release();
  grower.join();
  ASSERT_TRUE(returned) << "the move waited for the freeing stream's work";
  EXPECT_EQ(pool.slabs_moved(), 1U);
  EXPECT_EQ(address_of(w), address_of(z) + granule);
  std::vector<unsigned char> host(2 * granule);
  be.memcpy_async(host.data(), w, host.size(), b.get());
  be.stream_synchronize(b.get());
  EXPECT_EQ(std::count(host.begin(), host.end(), 0x55), static_cast<std::ptrdiff_t>(host.size()))
    << "the freeing stream's memset landed after the new user's: the new block did not wait for it";
  pool.deallocate(w, 2 * granule, b.get());
  pool.deallocate(x, granule, a.get());
  pool.deallocate(z, granule, a.get());
  EXPECT_EQ(pool.release_unused(), 4 * granule);
  pool.check_invariants();
}

// The old mapping of a piece that moved while its stream's work was pending stays until that work is done, and
// goes at the pool's next growth or release_unused() after that, without a wait.
TEST(vmm_pool_memory_resource, the_old_mapping_of_a_moved_piece_goes_once_its_streams_work_is_done)
{
  simulated_vmm_provider provider;
  vmm_pool_memory_resource pool{borrow(provider), slabs_of(granule)};
  backend_stream a;
  std::vector<void*> blocks;  // one slab each
  for (int i = 0; i < 4; ++i) { blocks.push_back(pool.allocate(granule, a.get())); }
  gate held;
  held.hold(a.get());
  pool.deallocate(blocks[1], granule, a.get());  // wholly free, its stream held back
  void* p = pool.allocate(2 * granule, a.get());  // moves it above the top slab
  EXPECT_EQ(pool.slabs_moved(), 1U);
  EXPECT_EQ(provider.mapped_bytes(), pool.physical_bytes() + granule) << "the old mapping must stay meanwhile";
  EXPECT_EQ(provider.physical_bytes(), pool.physical_bytes()) << "moving creates no memory";
  held.release();
  detail::get_backend().stream_synchronize(a.get());
  void* q = pool.allocate(3 * granule, a.get());  // a growth: the old mapping's streams are done now
  EXPECT_TRUE(books_balance(pool, provider));
  for (auto [b, bytes] : {std::pair{p, 2 * granule}, {q, 3 * granule}, {blocks[0], granule}, {blocks[2], granule},
                          {blocks[3], granule}}) {
    pool.deallocate(b, bytes, a.get());
  }
  (void)pool.release_unused();
  EXPECT_TRUE(books_balance(pool, provider));
  EXPECT_EQ(provider.mapped_bytes(), 0U);
}

// release_unused() too: the slab's memory goes back to the device only after the freeing stream's work.
TEST(vmm_pool_memory_resource, release_unused_waits_for_the_work_of_the_stream_that_freed_the_slab)
{
  vmm_pool_memory_resource pool{slabs_of(granule)};
  backend_stream a;
  void* x = pool.allocate(granule, a.get());
  void* y = pool.allocate(granule, a.get());
  gate held;
  held.hold(a.get());
  detail::get_backend().memset_async(y, 0xAA, granule, a.get());
  pool.deallocate(y, granule, a.get());
  std::atomic<bool> done{false};
  std::size_t released = 0;
  std::thread releaser{[&] {
    released = pool.release_unused();
    done.store(true);
  }};
  bool const early = eventually([&] { return done.load(); }, std::chrono::milliseconds{200});
  held.release();
  releaser.join();
  EXPECT_FALSE(early) << "the slab was released while the freeing stream's work was pending";
  EXPECT_EQ(released, granule);
  EXPECT_EQ(pool.physical_bytes(), granule);
  pool.deallocate(x, granule, a.get());
  pool.check_invariants();
}

/// Whether deallocating on a stream whose work is held back returns without waiting for that work.
bool free_returns_while_the_stream_is_held(vmm_pool_memory_resource& pool)
{
  cuda_stream x{cuda_stream::flags::non_blocking};
  void* p = pool.allocate(MiB, x.view());
  gate held;
  held.hold(x.value());
  std::atomic<bool> freed{false};
  std::thread t{[&] {
    pool.deallocate(p, MiB, x.view());
    freed.store(true);
  }};
  bool const returned = eventually([&] { return freed.load(); }, std::chrono::milliseconds{500});
  held.release();
  t.join();
  x.synchronize();
  return returned;
}

// The pool tracks up to 63 streams "at once": streams that were destroyed must give their slots back, or a
// program that makes short-lived streams ends up synchronising every free after the 63rd.
TEST(vmm_pool_memory_resource, slots_of_destroyed_streams_are_reused)
{
  simulated_vmm_provider provider;
  vmm_pool_memory_resource pool{borrow(provider), slabs_of(granule)};
  ASSERT_TRUE(free_returns_while_the_stream_is_held(pool)) << "a free on a tracked stream must not wait";
  for (int i = 0; i < 70; ++i) {
    cuda_stream s{cuda_stream::flags::non_blocking};
    void* p = pool.allocate(MiB, s.view());
    pool.deallocate(p, MiB, s.view());
  }  // each stream is destroyed here (cuda_stream notifies the pool)
  pool.check_invariants();
  EXPECT_TRUE(free_returns_while_the_stream_is_held(pool))
    << "after 70 streams came and went, a new stream's free synchronised it (no slot was free)";
}

// Streams gpumem did not create: their frees record the slot's event during the call, because the pool may
// not touch the stream later (the host backend aborts on a destroyed one).
TEST(vmm_pool_memory_resource, a_foreign_stream_destroyed_after_its_frees_is_never_touched_again)
{
  simulated_vmm_provider provider;
  vmm_pool_memory_resource pool{borrow(provider), slabs_of(granule)};
  detail::backend& backend = detail::get_backend();
  for (int i = 0; i < 70; ++i) {
    cudaStream_t const stream = backend.stream_create(cudaStreamNonBlocking, 0);
    void* p = pool.allocate(MiB, cuda_stream_view{stream});
    pool.deallocate(p, MiB, cuda_stream_view{stream});
    backend.stream_synchronize(stream);
    backend.stream_destroy(stream);
    void* q = pool.allocate(MiB, cuda_stream_default);  // takes the block, waiting on the slot's event
    pool.deallocate(q, MiB, cuda_stream_default);
  }
  pool.check_invariants();
  (void)pool.release_unused();
}

TEST(vmm_pool_memory_resource, a_double_free_is_refused_and_the_pool_is_unchanged)
{
  simulated_vmm_provider provider;
  vmm_pool_memory_resource pool{borrow(provider), slabs_of(granule)};
  void* const p = pool.allocate(MiB);
  void* const q = pool.allocate(MiB);
  pool.deallocate(p, MiB);
  EXPECT_THROW(pool.checked_deallocate(p, MiB), logic_error);
  pool.deallocate(p, MiB);  // logged, ignored
  pool.check_invariants();
  EXPECT_EQ(pool.bytes_in_use(), MiB);
  pool.deallocate(q, MiB);
  EXPECT_EQ(pool.bytes_in_use(), 0U);
}

// The same for the per-thread default streams of threads that have ended: those streams are gone too.
TEST(vmm_pool_memory_resource, slots_of_the_per_thread_default_streams_of_ended_threads_are_reused)
{
  simulated_vmm_provider provider;
  vmm_pool_memory_resource pool{borrow(provider), slabs_of(granule)};
  for (int i = 0; i < 70; ++i) {
    std::thread{[&pool] {
      void* p = pool.allocate(MiB, cuda_stream_per_thread);
      pool.deallocate(p, MiB, cuda_stream_per_thread);
    }}.join();
  }
  pool.check_invariants();
  EXPECT_TRUE(free_returns_while_the_stream_is_held(pool))
    << "after 70 threads freed on their per-thread default streams and ended, a new stream's free synchronised it";
}

// ---- random sequences and threads ---------------------------------------------------------------------------------

// 4,000 operations over five streams (three created ones, the legacy and the per-thread default stream),
// sizes log-uniform up to 2 MiB, a pattern written into every fourth block and checked when it is freed (on
// a random stream), release_unused() every 500 operations, check_invariants() after every step.
TEST(vmm_pool_memory_resource, random_sequence_on_several_streams_keeps_contents_and_invariants)
{
  vmm_pool_memory_resource pool{slabs_of(granule, 2 * GiB)};
  cuda_stream s1{cuda_stream::flags::non_blocking};
  cuda_stream s2{cuda_stream::flags::non_blocking};
  cuda_stream s3{cuda_stream::flags::sync_default};
  std::vector<cuda_stream_view> const streams{s1.view(), s2.view(), s3.view(), cuda_stream_default,
                                              cuda_stream_per_thread};
  std::mt19937_64 rng{0xC0FFEE};
  struct live_block {
    void* ptr;
    std::size_t bytes;
    std::uint32_t seed;  // 0: no pattern
  };
  std::vector<live_block> live;
  std::uint32_t next_seed = 1;
  std::size_t checked = 0;
  std::size_t released = 0;
  for (int op = 0; op < 4000; ++op) {
    cuda_stream_view const stream = streams[rng() % streams.size()];
    if (live.empty() || (live.size() < 120 && rng() % 100 < 55)) {
      std::size_t const bytes = log_uniform_size(rng, 21.0);
      void* p = pool.allocate(bytes, stream);
      ASSERT_TRUE(detail::is_aligned(p, detail::allocation_alignment));
      std::uint32_t seed = 0;
      if (rng() % 4 == 0) {
        seed = next_seed++;
        write_pattern(p, bytes, seed, stream.value());
      }
      live.push_back({p, bytes, seed});
    } else {
      std::size_t const index = static_cast<std::size_t>(rng() % live.size());
      live_block const b = live[index];
      live[index] = live.back();
      live.pop_back();
      if (b.seed != 0) {
        EXPECT_TRUE(has_pattern(b.ptr, b.bytes, b.seed, stream.value())) << "op " << op;
        ++checked;
      }
      pool.deallocate(b.ptr, b.bytes, stream);
    }
    if (op % 500 == 499) {
      std::size_t const before = pool.physical_bytes();
      std::size_t const bytes = pool.release_unused();
      EXPECT_EQ(pool.physical_bytes(), before - bytes);
      released += bytes;
    }
    ASSERT_NO_THROW(pool.check_invariants()) << "op " << op;
    if (op % 100 == 0) {
      std::vector<block> blocks;
      for (auto const& b : live) { blocks.push_back({b.ptr, b.bytes}); }
      ASSERT_TRUE(do_not_overlap(blocks)) << "op " << op;
    }
  }
  for (auto const& b : live) {
    if (b.seed != 0) { EXPECT_TRUE(has_pattern(b.ptr, b.bytes, b.seed, s1.value())); }
    pool.deallocate(b.ptr, b.bytes, s1.view());
  }
  EXPECT_EQ(pool.bytes_in_use(), 0U);
  pool.check_invariants();
  (void)pool.release_unused();
  EXPECT_EQ(pool.physical_bytes(), 0U);
  EXPECT_GT(checked, 100U);
  EXPECT_GT(released, 0U) << "the sequence never released a slab";
}

TEST(vmm_pool_memory_resource, four_threads_allocate_and_free_concurrently)
{
  constexpr int thread_count = 4;
  vmm_pool_memory_resource pool{slabs_of(granule, 1 * GiB)};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([&pool, &failures, t] {
      cuda_stream stream{cuda_stream::flags::non_blocking};
      std::mt19937_64 rng{static_cast<std::uint64_t>(t) + 100};
      struct live_block {
        void* ptr;
        std::size_t bytes;
        std::uint32_t seed;
      };
      std::vector<live_block> live;
      for (int i = 0; i < 1500; ++i) {
        if (live.empty() || (live.size() < 40 && rng() % 2 == 0)) {
          std::size_t const bytes = log_uniform_size(rng, 20.0);
          void* p = pool.allocate(bytes, stream.view());
          std::uint32_t seed = 0;
          if (rng() % 8 == 0) {
            seed = static_cast<std::uint32_t>(t * 100'000 + i + 1);
            write_pattern(p, bytes, seed, stream.value());
          }
          live.push_back({p, bytes, seed});
        } else {
          std::size_t const index = static_cast<std::size_t>(rng() % live.size());
          live_block const b = live[index];
          live[index] = live.back();
          live.pop_back();
          if (b.seed != 0 && !has_pattern(b.ptr, b.bytes, b.seed, stream.value())) { failures.fetch_add(1); }
          pool.deallocate(b.ptr, b.bytes, stream.view());
        }
        if (t == 0 && i % 200 == 199) { (void)pool.release_unused(); }
      }
      for (auto const& b : live) { pool.deallocate(b.ptr, b.bytes, stream.view()); }
    });
  }
  for (auto& thread : threads) { thread.join(); }
  EXPECT_EQ(failures.load(), 0) << "a block's contents changed while it was live: handed out twice?";
  pool.check_invariants();
  EXPECT_EQ(pool.bytes_in_use(), 0U);
  (void)pool.release_unused();
  EXPECT_EQ(pool.physical_bytes(), 0U);
}

/// Rounds a combining test repeats its threads' work until some call was run by another thread (combined):
/// on a loaded machine the threads may run one after the other, and a waiter whose holder lost its core takes
/// its call back. A test whose calls were never combined checks what it can and is skipped, saying so.
constexpr int max_rounds_to_combine = 20;
constexpr char const* not_combined = "no call was run by another thread (the machine ran the threads one after the "
                                     "other): combining was not exercised";

// Threads that find the mutex held publish their calls for its holder (combining): with more threads than
// cores, many calls are run by another thread, and every block still stays whole and every byte comes back.
TEST(vmm_pool_memory_resource, calls_run_by_the_mutexs_holder_for_waiting_threads_keep_every_block_whole)
{
  constexpr int thread_count = 8;
  vmm_pool_memory_resource pool{slabs_of(granule, 1 * GiB)};
  std::atomic<int> failures{0};
  // A loaded machine may run the threads one after the other: rounds until some call was combined.
  for (int round = 0; round < max_rounds_to_combine && pool.combined_operations() == 0; ++round) {
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([&pool, &failures, t, round] {
      cuda_stream stream{cuda_stream::flags::non_blocking};
      std::mt19937_64 rng{static_cast<std::uint64_t>(t + round * thread_count) + 700};
      std::vector<std::tuple<void*, std::size_t, std::uint32_t>> live;
      for (int i = 0; i < 3000; ++i) {
        if (live.empty() || (live.size() < 30 && rng() % 2 == 0)) {
          std::size_t const bytes = log_uniform_size(rng, 18.0);
          void* p = pool.allocate(bytes, stream.view());
          auto const seed = static_cast<std::uint32_t>(t * 100'000 + i + 1);
          if (i % 16 == 0) { write_pattern(p, bytes, seed, stream.value()); }
          live.emplace_back(p, bytes, i % 16 == 0 ? seed : 0);
        } else {
          std::size_t const index = static_cast<std::size_t>(rng() % live.size());
          auto const [p, bytes, seed] = live[index];
          live[index] = live.back();
          live.pop_back();
          if (seed != 0 && !has_pattern(p, bytes, seed, stream.value())) { failures.fetch_add(1); }
          pool.deallocate(p, bytes, stream.view());
        }
      }
      for (auto const& [p, bytes, seed] : live) { pool.deallocate(p, bytes, stream.view()); }
    });
  }
  for (auto& thread : threads) { thread.join(); }
  }
  EXPECT_EQ(failures.load(), 0) << "a block's contents changed while it was live: handed out twice?";
  pool.check_invariants();
  EXPECT_EQ(pool.bytes_in_use(), 0U);
  (void)pool.release_unused();
  EXPECT_EQ(pool.physical_bytes(), 0U);
  if (pool.combined_operations() == 0) { GTEST_SKIP() << not_combined; }
}

// A double free that another thread runs for its caller is still refused and reported to the caller
// (checked_deallocate throws there), while other threads keep the mutex busy; the pool is unchanged by it.
TEST(vmm_pool_memory_resource, a_double_free_run_by_the_mutexs_holder_is_reported_to_the_thread_that_made_it)
{
  vmm_pool_memory_resource pool{slabs_of(granule, 1 * GiB)};
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  // The busy threads use another class, and each keeps one block, so their page never empties and they never
  // take memory that the double frees below name (a block reused in between would be freed for real).
  for (int t = 0; t < 4; ++t) {
    busy.emplace_back([&pool, &stop] {
      cuda_stream stream{cuda_stream::flags::non_blocking};
      void* const kept = pool.allocate(8192, stream.view());
      while (!stop.load()) {
        void* p = pool.allocate(8192, stream.view());
        pool.deallocate(p, 8192, stream.view());
      }
      pool.deallocate(kept, 8192, stream.view());
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds{20});  // every busy thread holds its block
  cuda_stream stream{cuda_stream::flags::non_blocking};
  int refused = 0;
  int tries = 0;
  std::size_t const combined_before = pool.combined_operations();
  for (int round = 0; round < max_rounds_to_combine && pool.combined_operations() == combined_before; ++round) {
    for (int i = 0; i < 400; ++i, ++tries) {
      std::size_t const bytes = i % 2 == 0 ? 4096 : 1 * MiB;  // a page's block, then the heap's
      void* p = pool.allocate(bytes, stream.view());
      pool.deallocate(p, bytes, stream.view());
      try {
        pool.checked_deallocate(p, bytes, stream.view());
      } catch (logic_error const&) {
        ++refused;
      }
    }
  }
  stop = true;
  for (auto& thread : busy) { thread.join(); }
  EXPECT_EQ(refused, tries) << "every double free is refused in the thread that made it";
  pool.check_invariants();
  EXPECT_EQ(pool.bytes_in_use(), 0U);
  if (pool.combined_operations() == combined_before) { GTEST_SKIP() << not_combined; }
}

// Streams that gpumem may not use after a call (made with the backend's stream_create, as CuPy, PyTorch or raw
// CUDA make them) record their event during every free; the mutex's holder leaves those frees to their own
// thread. Each thread destroys its stream right after its last free: a record or wait on a destroyed stream
// aborts on the host backend.
TEST(vmm_pool_memory_resource, frees_on_foreign_streams_of_waiting_threads_stay_on_their_threads)
{
  vmm_pool_memory_resource pool{slabs_of(granule, 1 * GiB)};
  detail::backend& backend = detail::get_backend();
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&pool, &backend, t] {
      std::mt19937_64 rng{static_cast<std::uint64_t>(t) + 900};
      for (int round = 0; round < 20; ++round) {
        cudaStream_t const raw = backend.stream_create(cudaStreamNonBlocking, 0);
        cuda_stream_view const stream{raw};
        std::vector<std::pair<void*, std::size_t>> live;
        for (int i = 0; i < 60; ++i) {
          std::size_t const bytes = log_uniform_size(rng, 18.0);
          live.emplace_back(pool.allocate(bytes, stream), bytes);
          if (i % 3 == 2) {
            pool.deallocate(live.front().first, live.front().second, stream);
            live.erase(live.begin());
          }
        }
        for (auto const& [p, bytes] : live) { pool.deallocate(p, bytes, stream); }
        backend.stream_destroy(raw);
      }
    });
  }
  for (auto& thread : threads) { thread.join(); }
  pool.check_invariants();
  EXPECT_EQ(pool.bytes_in_use(), 0U);
}

// A holder that runs a waiting thread's allocation may plan an event record on the stream that freed the block,
// which the waiter makes after its call; a stream's destruction waits, holding the mutex, for such records. A
// waiter that slept on the mutex with its call still published could thus wait for a destruction that waits for
// it. Here every thread frees blocks of one class on a stream it then destroys, while the others take those
// blocks on theirs (cross-stream takes), with more threads than the host has cores, so that waiters run out of
// spins. It must finish (a pool whose waiters sleep with their call published deadlocks here in most runs); a
// deadlock fails it after two minutes instead of hanging the suite.
TEST(vmm_pool_memory_resource, a_waiter_served_by_the_holder_makes_its_records_before_a_stream_destruction_waits_for_them)
{
  constexpr int thread_count = 8;
  vmm_pool_memory_resource pool{slabs_of(granule, 1 * GiB)};
  std::atomic<int> finished{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([&pool, &finished] {
      // 600 rounds, and more (up to max_rounds_to_combine times as many) until both a take across streams and a
      // combined call happened: a loaded machine may run the threads one after the other.
      auto const exercised = [&pool] { return pool.cross_stream_takes() > 0 && pool.combined_operations() > 0; };
      for (int round = 0; round < 600 || (round < 600 * max_rounds_to_combine && !exercised()); ++round) {
        cuda_stream stream{cuda_stream::flags::non_blocking};  // announced: records at need, before destruction
        std::array<void*, 24> blocks{};
        for (void*& p : blocks) { p = pool.allocate(4096, stream.view()); }
        for (void* p : blocks) { pool.deallocate(p, 4096, stream.view()); }
      }  // the stream is destroyed at the end of each round, while other threads take its blocks
      finished.fetch_add(1);
    });
  }
  auto const deadline = std::chrono::steady_clock::now() + std::chrono::minutes{2};
  while (finished.load() < thread_count && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
  if (finished.load() < thread_count) {
    ADD_FAILURE() << thread_count - finished.load() << " threads did not finish in two minutes: a deadlock";
    std::fflush(stdout);
    std::_Exit(1);  // the stuck threads cannot be joined
  }
  for (auto& thread : threads) { thread.join(); }
  pool.check_invariants();
  EXPECT_EQ(pool.bytes_in_use(), 0U);
  if (pool.cross_stream_takes() == 0) { GTEST_SKIP() << "no block changed streams: the scenario was not exercised"; }
  if (pool.combined_operations() == 0) { GTEST_SKIP() << not_combined; }
}

/// Holds `stream` back for `ms` milliseconds: the work queued after it runs that much later.
void delay_stream(cudaStream_t stream, int ms)
{
  detail::get_backend().launch_host_func(
    stream, [](void* m) { std::this_thread::sleep_for(std::chrono::milliseconds{reinterpret_cast<std::intptr_t>(m)}); },
    reinterpret_cast<void*>(static_cast<std::intptr_t>(ms)));  // NOLINT(performance-no-int-to-ptr)
}

// A block cut from a free range of two streams' frees waits only for the stream that freed the piece it is
// cut from: the other stream is held back here, and the block's stream must not be held with it.
TEST(vmm_pool_memory_resource, a_block_cut_from_an_idle_streams_piece_does_not_wait_for_the_busy_stream_next_to_it)
{
  cuda_stream a{cuda_stream::flags::non_blocking};
  cuda_stream b{cuda_stream::flags::non_blocking};
  cuda_stream c{cuda_stream::flags::non_blocking};
  vmm_pool_memory_resource pool{slabs_of(granule)};
  std::size_t const bytes = 1 * MiB;  // two fill the slab: one free range once both are free
  void* const low = pool.allocate(bytes, a.view());
  void* const high = pool.allocate(bytes, a.view());
  ASSERT_EQ(static_cast<char*>(high), static_cast<char*>(low) + bytes);
  pool.deallocate(low, bytes, b.view());  // b has no work
  delay_stream(a.value(), 3000);
  pool.deallocate(high, bytes, a.view());  // behind three seconds of work on a
  void* const block = pool.allocate(bytes, c.view());
  EXPECT_EQ(block, low) << "best fit cuts from the range's start: the piece freed on b";
  detail::backend& be = detail::get_backend();
  auto const deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds{1000};
  while (!be.stream_query(c.value()) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds{1});
  }
  EXPECT_TRUE(be.stream_query(c.value())) << "c waits for a, whose piece the block does not overlap";
  EXPECT_FALSE(be.stream_query(a.value())) << "a's delay should still run";
  pool.deallocate(block, bytes, c.view());
  a.synchronize();
  pool.check_invariants();
}

// The waits that order a block for another stream run after the mutex is released. Pairs of threads pass a
// block back and forth, each on a stream of its own. A thread frees the block with a write still queued 2 ms
// later on its stream; the other takes it on its stream and checks its own pattern 4 ms after writing it, so a
// missing or early wait lets the first thread's write land in between. Every few blocks a thread replaces its
// stream just after passing the block on, so the stream dies while the other thread records its event: a
// record on a destroyed stream aborts on the host backend. Two pairs pass a small block (a page's), two a
// block of the heap.
TEST(vmm_pool_memory_resource, a_block_passed_between_threads_on_short_lived_streams_follows_the_pending_work)
{
  constexpr int pair_count = 4;
  constexpr int passes = 48;          // blocks each thread allocates
  constexpr int blocks_per_stream = 6;
  constexpr std::array<std::size_t, pair_count> sizes{4096, 8192, 256 * 1024, 512 * 1024};
  vmm_pool_memory_resource pool{slabs_of(granule, 1 * GiB)};
  std::atomic<int> failures{0};
  std::atomic<int> same_block{0};
  std::array<std::atomic<int>, pair_count> turn{};
  std::array<std::atomic<std::uintptr_t>, pair_count> freed{};
  std::vector<std::thread> threads;
  for (int pair = 0; pair < pair_count; ++pair) {
    for (int role = 0; role < 2; ++role) {
      threads.emplace_back([&, pair, role] {
        std::size_t const bytes = sizes[static_cast<std::size_t>(pair)];
        std::optional<cuda_stream> stream{std::in_place, cuda_stream::flags::non_blocking};
        for (int i = 0; i < passes; ++i) {
          while (turn[pair].load(std::memory_order_acquire) != role) { std::this_thread::yield(); }
          void* p = pool.allocate(bytes, stream->view());
          if (reinterpret_cast<std::uintptr_t>(p) == freed[pair].load()) { same_block.fetch_add(1); }
          auto const seed = static_cast<std::uint32_t>((pair * 2 + role) * passes + i + 1);
          write_pattern(p, bytes, seed, stream->value());
          delay_stream(stream->value(), 4);
          if (!has_pattern(p, bytes, seed, stream->value())) { failures.fetch_add(1); }
          delay_stream(stream->value(), 2);
          detail::get_backend().memset_async(p, 0xA5, bytes, stream->value());  // still queued at the free
          pool.deallocate(p, bytes, stream->view());
          freed[pair].store(reinterpret_cast<std::uintptr_t>(p));
          turn[pair].store(1 - role, std::memory_order_release);
          // The old stream dies while the other thread takes the block and records the old stream's event.
          if ((i + 1) % blocks_per_stream == 0) { stream.emplace(cuda_stream::flags::non_blocking); }
        }
      });
    }
  }
  for (auto& thread : threads) { thread.join(); }
  EXPECT_EQ(failures.load(), 0) << "a block's pattern was overwritten: a stream used it before the work of "
                                   "the stream that freed it";
  // A quarter of the allocations: a pair's page can retire between its turns (another pair's heap operation
  // retires empty pages first) and come back elsewhere.
  EXPECT_GT(same_block.load(), pair_count * passes / 2) << "the threads of a pair rarely got each other's block: "
                                                           "the test did not test the waits";
  pool.check_invariants();
  EXPECT_EQ(pool.bytes_in_use(), 0U);
}

// ---- as an upstream -----------------------------------------------------------------------------------------------

TEST(vmm_pool_memory_resource, under_a_pool_memory_resource_released_chunks_go_back_to_the_device)
{
  simulated_vmm_provider provider;
  vmm_pool_memory_resource vmm{borrow(provider), slabs_of(granule)};
  {
    mr::pool_memory_resource pool{&vmm};
    std::vector<std::pair<void*, std::size_t>> blocks;
    for (std::size_t const bytes : {MiB, 3 * MiB, 10 * MiB, std::size_t{100}, 7 * MiB}) { blocks.emplace_back(pool.allocate(bytes), bytes); }
    EXPECT_GT(vmm.bytes_in_use(), 0U);
    for (auto const& [p, bytes] : blocks) { pool.deallocate(p, bytes); }
    pool.release();
    EXPECT_EQ(vmm.bytes_in_use(), 0U) << "the pool's chunks went back to the vmm pool";
  }
  EXPECT_GT(vmm.physical_bytes(), 0U);
  vmm.flush_thread_caches();  // the 1 MiB chunk went to this thread's cache
  EXPECT_EQ(vmm.bytes_in_thread_caches(), 0U);
  EXPECT_EQ(vmm.largest_free_block(), vmm.physical_bytes()) << "the chunks coalesced in the vmm pool";
  (void)vmm.release_unused();
  EXPECT_EQ(provider.physical_bytes(), 0U);
  EXPECT_TRUE(books_balance(vmm, provider));
}

// ---- the ResNet-50 trace ------------------------------------------------------------------------------------------

TEST(vmm_pool_memory_resource, resnet50_trace_at_80_gib_peaks_within_5_percent_of_the_live_bytes)
{
  auto const trace = resnet50_trace();
  if (trace.empty()) {
    GTEST_SKIP() << "shared trace pytorch_resnet50_train.csv.gz not found under '" << traces_dir().string() << "'";
  }
  allocation_log const log = read_allocation_log(trace);
  simulated_vmm_provider provider{80 * GiB};
  vmm_pool_memory_resource pool{borrow(provider), vmm_pool_options{}};
  replay_result const result = replay(log, pool, {.peak_upstream_bytes = [&] { return pool.peak_physical_bytes(); }});
  EXPECT_EQ(result.ops, 41'696U);
  EXPECT_EQ(result.failures, 0U);
  EXPECT_EQ(result.unknown_frees, 0U);
  EXPECT_EQ(result.peak_live_bytes, 9'386'021'008U);
  ASSERT_TRUE(result.fragmentation.has_value());
  double const ratio = static_cast<double>(pool.peak_physical_bytes()) / static_cast<double>(result.peak_live_bytes);
  std::printf("[ replay   ] vmm_pool %8.1f ns/op (host, Debug)  peak physical %zu  peak live %zu  ratio %.4f  "
              "slabs created %zu moved %zu released %zu\n",
              result.ns_per_op, pool.peak_physical_bytes(), result.peak_live_bytes, ratio, pool.slabs_created(),
              pool.slabs_moved(), pool.slabs_released());
  EXPECT_GE(ratio, 1.0);
  EXPECT_LE(ratio, 1.05);
  EXPECT_EQ(pool.bytes_in_use(), 0U);
  EXPECT_TRUE(books_balance(pool, provider));
}

}  // namespace
// ---- the release threshold ----------------------------------------------------------------------------------------

TEST(vmm_pool_memory_resource, with_a_release_threshold_of_zero_freed_slabs_go_back_to_the_device_by_themselves)
{
  vmm_pool_options options = slabs_of(granule);
  options.release_threshold = 0;
  vmm_pool_memory_resource pool{options};
  detail::backend& be = detail::get_backend();
  int const device = be.current_device();
  std::size_t const free_before = be.mem_info(device).free;
  void* big = pool.allocate(3 * granule);
  EXPECT_EQ(pool.physical_bytes(), 3 * granule);
  EXPECT_LE(be.mem_info(device).free, free_before - 3 * granule + granule) << "the slabs are device memory";
  pool.deallocate(big, 3 * granule);  // releases the three slabs (after the stream's work)
  EXPECT_EQ(pool.physical_bytes(), 0U);
  EXPECT_GE(pool.slabs_released(), 3U);
  EXPECT_GE(be.mem_info(device).free + granule, free_before) << "the device's free memory rose again";
  pool.check_invariants();
}

TEST(vmm_pool_memory_resource, a_release_threshold_keeps_that_many_bytes_of_wholly_free_slabs)
{
  simulated_vmm_provider provider;
  vmm_pool_options options = slabs_of(granule);
  options.release_threshold = 2 * granule;
  vmm_pool_memory_resource pool{borrow(provider), options};
  void* big = pool.allocate(6 * granule);
  pool.deallocate(big, 6 * granule);
  EXPECT_EQ(pool.physical_bytes(), 2 * granule) << "down to the threshold, not below";
  EXPECT_EQ(provider.physical_bytes(), 2 * granule);
  pool.check_invariants();
}


// ---- failure injection over the backend's own provider (the driver's cuMem* calls on a GPU) ----------------------

/// The backend's provider, with create() reporting out-of-memory and map() failing on command; counts the
/// handles it has live so that a test sees a leak of real device memory.
class failing_device_provider final : public mr::virtual_memory_provider {
 public:
  failing_device_provider() : inner_{mr::make_device_vmm_provider(detail::get_backend().current_device())} {}
  std::atomic<int> creates_left{1 << 30};
  std::atomic<int> maps_left{1 << 30};
  std::atomic<long> live_handles{0};

  [[nodiscard]] std::string describe() const override { return "failing " + inner_->describe(); }
  [[nodiscard]] int device() const noexcept override { return inner_->device(); }
  [[nodiscard]] std::size_t granularity() const noexcept override { return inner_->granularity(); }
  [[nodiscard]] memory_info mem_info() override { return inner_->mem_info(); }
  [[nodiscard]] std::uintptr_t reserve(std::size_t bytes) override { return inner_->reserve(bytes); }
  void unreserve(std::uintptr_t base, std::size_t bytes) noexcept override { inner_->unreserve(base, bytes); }
  [[nodiscard]] mr::physical_handle create(std::size_t bytes) override
  {
    if (creates_left.fetch_sub(1) <= 0) { return 0; }
    mr::physical_handle const handle = inner_->create(bytes);
    if (handle != 0) { ++live_handles; }
    return handle;
  }
  void release(mr::physical_handle handle) noexcept override
  {
    --live_handles;
    inner_->release(handle);
  }
  void map(std::uintptr_t address, std::size_t bytes, mr::physical_handle handle) override
  {
    if (maps_left.fetch_sub(1) <= 0) { throw cuda_error(cudaErrorInvalidValue, "injected cuMemMap failure"); }
    inner_->map(address, bytes, handle);
  }
  void unmap(std::uintptr_t address, std::size_t bytes) noexcept override { inner_->unmap(address, bytes); }

 private:
  std::unique_ptr<mr::virtual_memory_provider> inner_;
};

TEST(vmm_pool_memory_resource, injected_create_and_map_failures_on_the_backend_provider_leak_no_device_memory)
{
  auto owned = std::make_unique<failing_device_provider>();
  failing_device_provider& provider = *owned;
  std::size_t const slab = provider.granularity();
  vmm_pool_memory_resource pool{std::move(owned), slabs_of(slab)};
  void* first = pool.allocate(slab);
  write_pattern(first, slab, 3, nullptr);
  provider.creates_left = 2;  // the third slab of the next request cannot be created
  EXPECT_THROW((void)pool.allocate(4 * slab), out_of_memory);
  EXPECT_EQ(provider.live_handles.load(), 1) << "the slabs made for the failed request went back";
  EXPECT_EQ(pool.physical_bytes(), slab);
  provider.creates_left = 1 << 30;
  provider.maps_left = 1;  // the second mapping fails
  EXPECT_THROW((void)pool.allocate(4 * slab), cuda_error);
  EXPECT_EQ(provider.live_handles.load(), 1);
  pool.check_invariants();
  provider.maps_left = 1 << 30;
  void* second = pool.allocate(4 * slab);  // works again, on real memory
  write_pattern(second, 4 * slab, 5, nullptr);
  EXPECT_TRUE(has_pattern(second, 4 * slab, 5, nullptr));
  EXPECT_TRUE(has_pattern(first, slab, 3, nullptr)) << "the failures did not disturb the live block";
  pool.deallocate(second, 4 * slab);
  pool.deallocate(first, slab);
  (void)pool.release_unused();
  EXPECT_EQ(provider.live_handles.load(), 0);
}


// ---- peer access --------------------------------------------------------------------------------------------------

TEST(vmm_pool_memory_resource, a_peer_device_reads_and_writes_the_pool_memory_when_asked_for)
{
  detail::backend& be = detail::get_backend();
  if (be.device_count() < 2) { GTEST_SKIP() << "needs two devices (host backend: GPUMEM_HOST_DEVICES=2)"; }
  cuda_set_device_raii const on_zero{cuda_device_id{0}};
  vmm_pool_options options = slabs_of(4 * MiB);
  options.peer_devices = {1};
  vmm_pool_memory_resource pool{options};
  EXPECT_EQ(pool.provider().device(), 0);
  constexpr std::size_t bytes = 6 * MiB;  // across a slab boundary
  void* const p = pool.allocate(bytes);
  write_pattern(p, bytes, 11, nullptr);
  be.device_synchronize();
  {
    // On device 1's own stream: its copy engine reads device 0's pool memory and writes it back changed.
    cuda_set_device_raii const on_one{cuda_device_id{1}};
    cuda_stream stream{cuda_stream::flags::non_blocking};
    EXPECT_TRUE(has_pattern(p, bytes, 11, stream.value()));
    write_pattern(p, bytes, 12, stream.value());
    stream.synchronize();
  }
  EXPECT_TRUE(has_pattern(p, bytes, 12, nullptr));
  pool.deallocate(p, bytes);
}

TEST(vmm_pool_memory_resource, a_peer_device_that_does_not_exist_is_a_logic_error_naming_it)
{
  vmm_pool_options options = slabs_of(4 * MiB);
  options.peer_devices = {detail::get_backend().device_count() + 3};
  try {
    vmm_pool_memory_resource pool{options};
    FAIL() << "a pool with a peer that does not exist was built";
  } catch (logic_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("peer device " + std::to_string(options.peer_devices[0])), std::string::npos)
      << e.what();
  }
}


}  // namespace gpumem::test
