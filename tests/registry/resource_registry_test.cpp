// The one registry of resources by name (tools: registry/resource_registry.hpp).
#include <gpumem/error.hpp>
#include <gpumem/registry/resource_registry.hpp>

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gpumem::registry {
namespace {

std::string names_of(bool (*keep)(resource_info const&))
{
  return resource_names([keep](resource_info const& i) { return keep(i); });
}

TEST(resource_registry, one_list_in_one_order)
{
  EXPECT_EQ(resource_names(), "pool, vmm, arena, binning, fixed_size, cuda_async, cuda_async_default, cuda");
  EXPECT_EQ(names_of([](auto const& i) { return i.replays_by_default(); }), "pool, vmm, arena, binning, cuda_async, cuda");
  EXPECT_EQ(names_of([](auto const& i) { return i.simulatable; }), "pool, vmm, arena, binning, fixed_size");
  EXPECT_EQ(names_of([](auto const& i) { return i.peer; }), "cuda_async_default, cuda");
  ASSERT_NE(find_resource("binning"), nullptr);
  EXPECT_NE(find_resource("binning")->description.find("256 KiB..4 MiB"), std::string_view::npos)
    << "one meaning of binning everywhere: RMM's benchmark bins";
  EXPECT_EQ(find_resource("tlsf"), nullptr);
}

TEST(resource_registry, unknown_names_are_refused_with_the_known_ones)
{
  try {
    (void)make_resource("tlsf");
    FAIL();
  } catch (logic_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("unknown resource 'tlsf'; known resources: pool, vmm, arena"),
              std::string::npos)
      << e.what();
  }
}

TEST(resource_registry, peers_cannot_be_simulated)
{
  for (char const* name : {"cuda", "cuda_async", "cuda_async_default"}) {
    try {
      (void)make_resource(name, {.simulate = true});
      FAIL() << name;
    } catch (logic_error const& e) {
      EXPECT_NE(std::string{e.what()}.find(
                  "cannot run over a simulated upstream; resources that can: pool, vmm, arena, binning, fixed_size"),
                std::string::npos)
        << e.what();
    }
  }
}

TEST(resource_registry, fixed_size_needs_the_largest_request)
{
  EXPECT_THROW((void)make_resource("fixed_size", {.simulate = true}), logic_error);
  resource_handle r = make_resource("fixed_size", {.simulate = true, .max_request = 4096});
  void* const p = r.get().allocate(4096);
  EXPECT_NE(p, nullptr);
  ASSERT_TRUE(r.peak_upstream_bytes().has_value());
  EXPECT_GE(*r.peak_upstream_bytes(), 4096U);
  ASSERT_TRUE(r.upstream_allocations().has_value());
  EXPECT_GE(*r.upstream_allocations(), 1U);
  r.get().deallocate(p, 4096);
}

TEST(resource_registry, every_resource_builds_allocates_and_counts)
{
  for (auto const& info : resources()) {
    SCOPED_TRACE(std::string{info.name});
    resource_handle r = make_resource(info.name, {.max_request = 1 << 20});
    ASSERT_TRUE(r);
    EXPECT_EQ(r.name(), info.name);
    void* const p = r.get().allocate(1 << 20);
    ASSERT_NE(p, nullptr);
    if (info.measures_upstream) {
      ASSERT_TRUE(r.peak_upstream_bytes().has_value());
      EXPECT_GE(*r.peak_upstream_bytes(), std::size_t{1} << 20);
      ASSERT_TRUE(r.upstream_bytes().has_value());
    } else {
      EXPECT_FALSE(r.peak_upstream_bytes().has_value());
    }
    r.get().deallocate(p, 1 << 20);
    resource_handle moved = std::move(r);
    EXPECT_FALSE(r);  // NOLINT(bugprone-use-after-move): a moved-from handle is empty
    EXPECT_TRUE(moved);
  }
}

}  // namespace
}  // namespace gpumem::registry
