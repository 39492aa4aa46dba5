// resource_adaptor_base: an application's adaptor that overrides one call passes the conformance battery;
// then what the base does for it: the null check, the accessor, forwarding of the call it does not override,
// equality by type and upstream, no copies, and the non-blocking calls left unforwarded.
#include "conformance/resource_battery.hpp"
#include "support/sub_allocator_checks.hpp"

#include <gpumem/error.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/resource_adaptor_base.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>
#include <gpumem/mr/statistics_resource_adaptor.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <type_traits>

namespace gpumem::test {
namespace {

/// An application's adaptor with one concern: it counts the allocate calls that reach it.
class allocate_counter final : public mr::resource_adaptor_base {
 public:
  explicit allocate_counter(mr::device_memory_resource* upstream) : resource_adaptor_base{upstream} {}
  [[nodiscard]] std::size_t calls() const noexcept { return calls_.load(); }

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    calls_.fetch_add(1);
    return resource_adaptor_base::do_allocate(bytes, stream);
  }

  std::atomic<std::size_t> calls_{0};
};

struct allocate_counter_factory {
  static std::unique_ptr<mr::device_memory_resource> make()
  {
    return std::make_unique<allocate_counter>(&cuda_upstream());
  }
  static constexpr char const* name = "cuda_memory_resource";
  static constexpr bool oversubscription_safe = true;
};

}  // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(resource_adaptor_base, resource_battery, allocate_counter_factory);

namespace {

static_assert(!std::is_copy_constructible_v<allocate_counter> && !std::is_move_constructible_v<allocate_counter>);
static_assert(!std::is_copy_assignable_v<allocate_counter> && !std::is_move_assignable_v<allocate_counter>);
static_assert(!std::is_constructible_v<mr::resource_adaptor_base, mr::device_memory_resource*>,
              "the base alone forwards without a concern: only a derived adaptor is made");

TEST(resource_adaptor_base, a_null_upstream_is_rejected)
{
  EXPECT_THROW(allocate_counter{nullptr}, logic_error);
}

TEST(resource_adaptor_base, forwards_what_the_adaptor_does_not_override)
{
  mr::simulated_memory_resource upstream;
  allocate_counter counter{&upstream};
  EXPECT_EQ(counter.upstream_resource(), &upstream);
  void* const p = counter.allocate(1000);
  EXPECT_EQ(counter.calls(), 1U);
  EXPECT_EQ(upstream.bytes_in_use(), 1024U);  // rounded up to 256
  EXPECT_TRUE(upstream.owns(p));
  counter.deallocate(p, 1000);
  EXPECT_EQ(upstream.bytes_in_use(), 0U) << "deallocate must reach the upstream";
  EXPECT_EQ(upstream.invalid_deallocations(), 0U);
}

TEST(resource_adaptor_base, equal_for_the_same_type_over_equal_upstreams)
{
  mr::simulated_memory_resource upstream;
  mr::simulated_memory_resource other_upstream;
  allocate_counter a{&upstream};
  allocate_counter b{&upstream};
  allocate_counter elsewhere{&other_upstream};
  mr::statistics_resource_adaptor other_kind{&upstream};
  EXPECT_TRUE(a.is_equal(b));
  EXPECT_TRUE(b.is_equal(a));
  EXPECT_FALSE(a.is_equal(elsewhere)) << "simulated resources are equal only to themselves";
  EXPECT_FALSE(a.is_equal(other_kind)) << "another kind of adaptor over the same upstream";
  EXPECT_FALSE(other_kind.is_equal(a));
  EXPECT_FALSE(a.is_equal(upstream)) << "an adaptor is not its upstream";
}

TEST(resource_adaptor_base, the_non_blocking_calls_are_not_forwarded)
{
  mr::simulated_memory_resource upstream;
  mr::pool_memory_resource pool{&upstream, 4 * MiB};
  allocate_counter counter{&pool};
  void* const p = pool.allocate(1000);
  void* const q = pool.allocate(1000);
  pool.deallocate(p, 1000);  // this thread's cache now has a slot of 1024-byte blocks
  ASSERT_TRUE(pool.try_deallocate_without_blocking(q, 1000));
  EXPECT_EQ(counter.try_allocate_without_blocking(1000), nullptr)
    << "forwarded, the attempt would bypass the adaptor's own concern";
  EXPECT_EQ(counter.calls(), 0U);
  void* const r = pool.allocate(1000);
  EXPECT_FALSE(counter.try_deallocate_without_blocking(r, 1000));
  EXPECT_EQ(pool.bytes_in_use(), 1024U) << "the refused attempt must leave the block allocated";
  pool.deallocate(r, 1000);
}

}  // namespace
}  // namespace gpumem::test
