// The size options of every resource, one table: each bad value (one that overflows size_t when the
// resource rounds it, or that no allocation could ever satisfy) is a gpumem::logic_error naming the option
// and the value, never a crash, a division by zero or a wrapped-around size. Then the requests whose
// rounding inside a resource (to slabs, chunks) would overflow.
#include <gpumem/buffer/spill_manager.hpp>
#include <gpumem/buffer/unified_buffer_pool.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/aligned_resource_adaptor.hpp>
#include <gpumem/mr/arena_memory_resource.hpp>
#include <gpumem/mr/binning_memory_resource.hpp>
#include <gpumem/mr/cuda_async_memory_resource.hpp>
#include <gpumem/mr/fixed_size_memory_resource.hpp>
#include <gpumem/mr/limiting_resource_adaptor.hpp>
#include <gpumem/mr/pinned_memory_pool.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>
#include <gpumem/backend/virtual_memory_provider.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <functional>
#include <limits>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace gpumem::test {
namespace {

constexpr std::size_t size_max = std::numeric_limits<std::size_t>::max();
constexpr std::size_t MiB = std::size_t{1} << 20;

/// One bad option: `build` constructs the resource with it; the error must name `option` and `value`.
struct bad_option {
  std::string name;
  std::function<void()> build;
  std::string option;
  std::string value;
};

std::ostream& operator<<(std::ostream& out, bad_option const& row) { return out << row.name; }

mr::vmm_pool_options vmm_options(std::size_t slab_size)
{
  mr::vmm_pool_options options;
  options.slab_size = slab_size;
  return options;
}

std::vector<bad_option> bad_options()
{
  static mr::simulated_memory_resource upstream{std::size_t{1} << 40};
  auto vmm = [](mr::vmm_pool_options const& options, std::size_t capacity = std::size_t{1} << 40) {
    return [options, capacity] {
      mr::vmm_pool_memory_resource pool{std::make_unique<mr::simulated_vmm_provider>(capacity), options};
    };
  };
  mr::vmm_pool_options reservation_max = vmm_options(2 * MiB);
  reservation_max.reservation_size = size_max;
  mr::vmm_pool_options reservation_without_room = vmm_options(2 * MiB);
  reservation_without_room.reservation_size = size_max - 2 * MiB + 1;  // whole slabs, but no room for one more
  mr::vmm_pool_options physical_below_a_slab = vmm_options(4 * MiB);
  physical_below_a_slab.maximum_physical_size = 2 * MiB;
  return {
    {"pool_initial_size_overflows", [] { mr::pool_memory_resource pool{&upstream, size_max - 1}; },
     "initial_pool_size", std::to_string(size_max - 1)},
    {"pool_maximum_of_zero", [] { mr::pool_memory_resource pool{&upstream, 0, 0}; }, "maximum_pool_size", "0"},
    {"pool_maximum_below_a_block", [] { mr::pool_memory_resource pool{&upstream, 0, 255}; }, "maximum_pool_size",
     "255"},
    {"fixed_size_block_overflows", [] { mr::fixed_size_memory_resource r{&upstream, size_max - 1}; }, "block size",
     std::to_string(size_max - 1)},
    {"fixed_size_batch_overflows", [] { mr::fixed_size_memory_resource r{&upstream, MiB, size_max / MiB + 1}; },
     "batch", std::to_string(size_max / MiB + 1)},
    {"binning_bin_overflows", [] { mr::binning_memory_resource{&upstream}.add_bin(size_max - 1); }, "add_bin",
     std::to_string(size_max - 1)},
    {"binning_bin_batch_overflows", [] { mr::binning_memory_resource{&upstream}.add_bin(size_max / 4); },
     "add_bin", std::to_string(size_max / 4)},
    {"binning_exponent_too_large", [] { mr::binning_memory_resource r{&upstream, 8, 64}; }, "exponents", "64"},
    {"vmm_slab_overflows", vmm(vmm_options(size_max - 4095)), "slab_size", std::to_string(size_max - 4095)},
    {"vmm_slab_of_zero", vmm(vmm_options(0)), "slab_size", "0"},
    {"vmm_reservation_overflows", vmm(reservation_max), "reservation_size", std::to_string(size_max)},
    {"vmm_reservation_leaves_no_room_to_align", vmm(reservation_without_room), "reservation_size",
     std::to_string(size_max - 2 * MiB + 1)},
    {"vmm_default_reservation_overflows", vmm(vmm_options(2 * MiB), std::size_t{1} << 63),
     "default reservation_size", std::to_string(std::size_t{1} << 63)},
    {"vmm_physical_below_a_slab", vmm(physical_below_a_slab), "maximum_physical_size", std::to_string(2 * MiB)},
    {"cuda_async_initial_overflows", [] { mr::cuda_async_memory_resource r{size_max}; }, "initial_pool_size",
     std::to_string(size_max)},
    {"cuda_async_maximum_of_zero",
     [] { mr::cuda_async_memory_resource r{std::nullopt, std::nullopt, std::nullopt, std::size_t{0}}; },
     "maximum_pool_size", "0"},
    {"arena_below_the_minimum", [] { mr::arena_memory_resource r{&upstream, MiB - 256}; }, "arena size",
     std::to_string(MiB - 256)},
    {"limiting_alignment_not_a_power_of_two", [] { mr::limiting_resource_adaptor r{&upstream, MiB, 3}; },
     "alignment", "3"},
    {"aligned_alignment_not_a_power_of_two", [] { mr::aligned_resource_adaptor r{&upstream, 768}; }, "alignment",
     "768"},
    {"pinned_pool_chunk_of_zero", [] { mr::pinned_memory_pool pool{mr::pinned_pool_options{0, 0}}; }, "chunk_size",
     ""},
    {"pinned_pool_maximum_below_a_block", [] { mr::pinned_memory_pool pool{mr::pinned_pool_options{MiB, 255}}; },
     "maximum_bytes", "255"},
    {"spill_budget_of_zero", [] { spill_manager manager{&upstream, 0}; }, "budget", ""},
    {"unified_pool_count_overflows", [] { (void)unified_buffer_pool<double>{}.acquire(size_max / 8); }, "acquire",
     std::to_string(size_max / 8)},
  };
}

class size_options : public ::testing::TestWithParam<bad_option> {};

TEST_P(size_options, a_bad_value_is_a_logic_error_naming_the_option_and_the_value)
{
  bad_option const& row = GetParam();
  try {
    row.build();
    ADD_FAILURE() << row.name << ": accepted";
  } catch (logic_error const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find(row.option), std::string::npos) << what;
    EXPECT_NE(what.find(row.value), std::string::npos) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(every_resource, size_options, ::testing::ValuesIn(bad_options()),
                         [](::testing::TestParamInfo<bad_option> const& param) { return param.param.name; });

// ---- requests whose rounding inside a resource would overflow ----------------------------------------------

// The request is oversized on purpose; GCC sees the constant through std::pmr::memory_resource::allocate's
// alloc_size attribute and would reject the call.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Walloc-size-larger-than="
#endif
TEST(size_options, a_pinned_request_whose_chunk_would_overflow_fails_before_pinning_anything)
{
  mr::pinned_memory_pool pool;
  std::size_t const bytes = size_max - MiB;  // a whole block, but its 2 MiB chunk overflows
  try {
    void* p = pool.allocate(bytes);
    pool.deallocate(p, bytes);
    ADD_FAILURE() << "served";
  } catch (out_of_memory const& e) {
    EXPECT_NE(std::string{e.what()}.find(std::to_string(bytes)), std::string::npos) << e.what();
  }
  EXPECT_EQ(pool.usage().reserved, 0U) << "the pool pinned memory for a request it could never serve";
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

TEST(size_options, a_simulated_reservation_beyond_the_address_space_is_out_of_memory)
{
  mr::simulated_vmm_provider provider;
  std::size_t const bytes = size_max - provider.granularity() + 1;  // a multiple of the granularity
  EXPECT_THROW((void)provider.reserve(bytes), out_of_memory);
  std::uintptr_t const base = provider.reserve(provider.granularity());
  provider.unreserve(base, provider.granularity());
  EXPECT_EQ(provider.misuse_count(), 0U);
}

}  // namespace
}  // namespace gpumem::test
