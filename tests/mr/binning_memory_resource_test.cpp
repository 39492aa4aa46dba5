// binning_memory_resource: the conformance battery (over cuda_memory_resource, with large and with small
// bins), then its own behaviour: routing by size, caller-owned bins, the configuration rules, the
// out-of-memory message, a random sequence over a simulated upstream and a 16-thread stress with
// cross-thread frees.
#include "conformance/resource_battery.hpp"
#include "support/counting_resource.hpp"
#include "support/memory_checks.hpp"
#include "support/sub_allocator_checks.hpp"

#include <gpumem/error.hpp>
#include <gpumem/mr/binning_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/fixed_size_memory_resource.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace gpumem::test {
namespace {


struct binning_factory {  // RMM's usual configuration: bins of 256 KiB .. 4 MiB
  static std::unique_ptr<mr::device_memory_resource> make()
  {
    return std::make_unique<mr::binning_memory_resource>(&cuda_upstream(), 18, 22);
  }
  static constexpr char const* name = "binning_memory_resource";
  static constexpr bool oversubscription_safe = true;
};

struct small_binning_factory {  // bins of 256 B .. 64 KiB
  static std::unique_ptr<mr::device_memory_resource> make()
  {
    return std::make_unique<mr::binning_memory_resource>(&cuda_upstream(), 8, 16);
  }
  static constexpr char const* name = "binning_memory_resource";
  static constexpr bool oversubscription_safe = true;
};

}  // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(binning_memory_resource, resource_battery, binning_factory);
INSTANTIATE_TYPED_TEST_SUITE_P(binning_memory_resource_small_bins, resource_battery, small_binning_factory);

namespace {

TEST(binning_memory_resource, power_of_two_bins_and_routing_by_size)
{
  mr::simulated_memory_resource upstream;
  mr::binning_memory_resource r{&upstream, 0, 12};  // 2^0 .. 2^8 all round up to one 256-byte bin
  EXPECT_EQ(r.bin_sizes(), (std::vector<std::size_t>{256, 512, 1024, 2048, 4096}));
  EXPECT_EQ(r.upstream_resource(), &upstream);
  EXPECT_EQ(r.resource_for(1), r.resource_for(256));
  EXPECT_NE(r.resource_for(256), r.resource_for(257));
  EXPECT_EQ(r.resource_for(257), r.resource_for(512));
  EXPECT_EQ(r.resource_for(4096), r.resource_for(3000));
  EXPECT_EQ(r.resource_for(4097), &upstream);
  auto const* bin = dynamic_cast<mr::fixed_size_memory_resource const*>(r.resource_for(600));
  ASSERT_NE(bin, nullptr);
  EXPECT_EQ(bin->block_size(), 1024U);
  EXPECT_EQ(bin->pool_size(), 0U) << "owned bins fill on first use";

  void* small = r.allocate(600);
  EXPECT_EQ(bin->bytes_in_use(), 1024U);
  void* large = r.allocate(5000);
  EXPECT_EQ(upstream.allocation_count(), 2U) << "one batch for the bin, one fallback allocation";
  r.deallocate(large, 5000);
  EXPECT_EQ(upstream.allocation_count(), 1U) << "the fallback allocation went back to the upstream";
  r.deallocate(small, 600);
  EXPECT_EQ(bin->bytes_in_use(), 0U);
}

TEST(binning_memory_resource, caller_owned_bins_receive_their_sizes_and_the_matching_frees)
{
  mr::simulated_memory_resource upstream;
  counting_resource caller_bin{&upstream};
  mr::binning_memory_resource r{&upstream};
  EXPECT_TRUE(r.bin_sizes().empty());
  r.add_bin(1000, &caller_bin);  // rounded up to 1024
  r.add_bin(64 * KiB);
  EXPECT_EQ(r.bin_sizes(), (std::vector<std::size_t>{1024, 64 * KiB}));
  void* a = r.allocate(1);
  void* b = r.allocate(1024);
  void* c = r.allocate(1025);
  EXPECT_EQ(caller_bin.allocations(), 2U);
  r.deallocate(a, 1);
  r.deallocate(b, 1024);
  r.deallocate(c, 1025);
  EXPECT_EQ(caller_bin.deallocations(), 2U);
  EXPECT_TRUE(caller_bin.errors().empty());
  EXPECT_EQ(caller_bin.outstanding(), 0U);
}

TEST(binning_memory_resource, configuration_errors_are_logic_errors_naming_the_values)
{
  mr::simulated_memory_resource upstream;
  EXPECT_THROW(mr::binning_memory_resource(nullptr), logic_error);
  for (auto [lo, hi] : {std::pair{-1, 4}, {10, 9}, {8, 41}}) {
    try {
      mr::binning_memory_resource r{&upstream, lo, hi};
      ADD_FAILURE() << "exponents " << lo << " .. " << hi << " were accepted";
    } catch (logic_error const& e) {
      std::string const what = e.what();
      EXPECT_NE(what.find(std::to_string(lo)), std::string::npos) << what;
      EXPECT_NE(what.find(std::to_string(hi)), std::string::npos) << what;
    }
  }
  mr::binning_memory_resource r{&upstream, 10, 12};
  auto const sizes = r.bin_sizes();
  mr::fixed_size_memory_resource other{&upstream, 1024};
  r.add_bin(1000);           // rounds to 1024, which exists: nothing changes (RMM's documented behaviour)
  r.add_bin(1024, &other);   // nor with a resource given: the existing bin stays
  EXPECT_EQ(r.bin_sizes(), sizes);
  void* const q = r.allocate(1000);
  EXPECT_EQ(other.bytes_in_use(), 0U) << "the bin that existed must keep serving 1024 bytes";
  r.deallocate(q, 1000);
  EXPECT_THROW(r.add_bin(0), logic_error);
  void* p = r.allocate(100);
  try {
    r.add_bin(8192);
    ADD_FAILURE() << "a bin was added after the resource served a request";
  } catch (logic_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("8192"), std::string::npos) << e.what();
  }
  r.deallocate(p, 100);
}

TEST(binning_memory_resource, out_of_memory_names_the_binning_resource_and_the_bin)
{
  mr::simulated_memory_resource upstream{8 * MiB};
  mr::binning_memory_resource r{&upstream};
  r.add_bin(1 * MiB);  // batches of 128 MiB: more than the upstream has, and one block fits
  void* p = r.allocate(1 * MiB);  // the bin asks for smaller batches until one fits
  upstream.fail_after(0);
  try {
    for (int i = 0; i < 64; ++i) { (void)r.allocate(1 * MiB); }
    FAIL() << "the upstream never ran out";
  } catch (out_of_memory const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find("binning_memory_resource"), std::string::npos) << what;
    EXPECT_NE(what.find("bin of " + std::to_string(1 * MiB)), std::string::npos) << what;
    EXPECT_NE(what.find("fixed_size_memory_resource"), std::string::npos) << what;
  }
  try {
    (void)r.allocate(2 * MiB);
    FAIL() << "the upstream served a request although it fails every call";
  } catch (out_of_memory const& e) {
    EXPECT_NE(std::string{e.what()}.find("upstream"), std::string::npos) << e.what();
  }
  upstream.clear_failures();
  r.deallocate(p, 1 * MiB);
}

// Random sizes across bins and the fallback, over a simulated 80 GiB upstream: no two live blocks overlap,
// and once everything is freed and the resource destroyed the upstream holds nothing.
TEST(binning_memory_resource, random_sequences_route_consistently_and_return_everything)
{
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    mr::simulated_memory_resource upstream{80 * GiB};
    {
      mr::binning_memory_resource r{&upstream, 8, 22};
      backend_stream s;
      std::mt19937_64 rng{seed};
      std::map<std::uintptr_t, std::size_t> live;
      auto occupied = [&r](std::size_t bytes) {
        auto const* bin = dynamic_cast<mr::fixed_size_memory_resource const*>(r.resource_for(bytes));
        return bin != nullptr ? bin->block_size() : detail::align_up(bytes, detail::allocation_alignment);
      };
      for (int step = 0; step < 20'000; ++step) {
        if (live.empty() || (live.size() < 300 && rng() % 100 < 55)) {
          std::size_t const bytes = log_uniform_size(rng, 26.0);
          auto const address = reinterpret_cast<std::uintptr_t>(r.allocate(bytes, s.get()));
          auto const next = live.lower_bound(address);
          ASSERT_TRUE(next == live.end() || address + occupied(bytes) <= next->first) << "step " << step;
          ASSERT_TRUE(next == live.begin() || std::prev(next)->first + occupied(std::prev(next)->second) <= address)
            << "step " << step;
          live.emplace(address, bytes);
        } else {
          auto it = live.begin();
          std::advance(it, static_cast<std::ptrdiff_t>(rng() % live.size()));
          r.deallocate(reinterpret_cast<void*>(it->first), it->second, s.get());  // NOLINT
          live.erase(it);
        }
      }
      for (auto const& [address, bytes] : live) { r.deallocate(reinterpret_cast<void*>(address), bytes, s.get()); }  // NOLINT
      for (std::size_t const size : r.bin_sizes()) {
        auto const* bin = dynamic_cast<mr::fixed_size_memory_resource const*>(r.resource_for(size));
        ASSERT_NE(bin, nullptr);
        EXPECT_EQ(bin->bytes_in_use(), 0U);
        bin->check_invariants();
      }
    }
    EXPECT_EQ(upstream.bytes_in_use(), 0U) << "seed " << seed;
    EXPECT_EQ(upstream.invalid_deallocations(), 0U) << "seed " << seed;
  }
}

// 16 threads, mixed sizes across bins and the fallback, blocks written on the allocating stream and freed
// by a random other thread on its own stream (a quarter of the threads on the per-thread default stream).
TEST(binning_memory_resource, sixteen_threads_with_cross_thread_frees)
{
  mr::binning_memory_resource r{&cuda_upstream(), 8, 16};
  // Sizes up to 256 KiB: the bins (256 B .. 64 KiB) and the fallback.
  EXPECT_EQ(run_cross_thread_stress(r, 16, 120, 300, [](std::mt19937_64& rng) { return log_uniform_size(rng, 18.0); }), 0);
  for (std::size_t const size : r.bin_sizes()) {
    auto const* bin = dynamic_cast<mr::fixed_size_memory_resource const*>(r.resource_for(size));
    ASSERT_NE(bin, nullptr);
    EXPECT_EQ(bin->bytes_in_use(), 0U) << "bin " << size;
    bin->check_invariants();
  }
}

}  // namespace
}  // namespace gpumem::test
