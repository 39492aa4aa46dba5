// per_device_resource: the default resource, set/get/reset, shared ownership and holds, invalid devices, and
// concurrent use.
#include <gpumem/backend/backend.hpp>
#include <gpumem/cuda_device_id.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/per_device_resource.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace gpumem::test {
namespace {

/// Every test starts and ends with the default resources.
class per_device_resource : public ::testing::Test {
 protected:
  void SetUp() override { mr::reset_all_device_resources(); }
  void TearDown() override { mr::reset_all_device_resources(); }
};

TEST_F(per_device_resource, default_is_a_process_lifetime_cuda_memory_resource_per_device)
{
  int const count = detail::get_backend().device_count();
  for (int device = 0; device < count; ++device) {
    mr::device_memory_resource* first = mr::get_per_device_resource(cuda_device_id{device});
    ASSERT_NE(first, nullptr);
    EXPECT_NE(dynamic_cast<mr::cuda_memory_resource*>(first), nullptr) << "device " << device;
    EXPECT_EQ(mr::get_per_device_resource(cuda_device_id{device}), first) << "the default must be stable";
  }
  mr::device_memory_resource* current = mr::get_current_device_resource();
  EXPECT_EQ(current, mr::get_per_device_resource(cuda_device_id{detail::get_backend().current_device()}));
  void* p = current->allocate(1U << 20);
  ASSERT_NE(p, nullptr);
  current->deallocate(p, 1U << 20);
}

TEST_F(per_device_resource, set_returns_the_previous_resource_and_nullptr_restores_the_default)
{
  cuda_device_id const device{detail::get_backend().current_device()};
  mr::device_memory_resource* const original = mr::get_per_device_resource(device);
  mr::simulated_memory_resource first;
  mr::simulated_memory_resource second;

  EXPECT_EQ(mr::set_per_device_resource(device, &first), original);
  EXPECT_EQ(mr::get_per_device_resource(device), &first);
  EXPECT_EQ(mr::get_current_device_resource(), &first);
  EXPECT_EQ(mr::set_current_device_resource(&second), &first);
  EXPECT_EQ(mr::get_current_device_resource(), &second);
  EXPECT_EQ(mr::set_per_device_resource(device, nullptr), &second);
  EXPECT_EQ(mr::get_per_device_resource(device), original) << "nullptr must restore the same default";
  EXPECT_EQ(mr::set_current_device_resource(nullptr), original) << "the previous is never nullptr";
}

TEST_F(per_device_resource, a_shared_resource_is_held_while_set_and_by_holds)
{
  cuda_device_id const device{detail::get_backend().current_device()};
  auto shared = std::make_shared<mr::simulated_memory_resource>();
  std::weak_ptr<mr::simulated_memory_resource> const watch = shared;
  mr::device_memory_resource* const original = mr::set_per_device_resource(device, shared);
  shared.reset();
  ASSERT_FALSE(watch.expired()) << "the registry holds it while it is set";
  mr::resource_hold hold = mr::hold_per_device_resource(device);
  EXPECT_EQ(hold.resource, watch.lock().get());
  EXPECT_EQ(hold.owner.get(), hold.resource);
  EXPECT_EQ(hold.raw_setting, 0U) << "a shared resource needs no setting check";
  EXPECT_EQ(mr::set_per_device_resource(device, nullptr), hold.resource);
  EXPECT_EQ(mr::get_per_device_resource(device), original);
  EXPECT_FALSE(watch.expired()) << "the hold keeps it";
  hold = {};
  EXPECT_TRUE(watch.expired()) << "replaced and no longer held: destroyed";
}

TEST_F(per_device_resource, set_if_unset_sets_only_over_the_default_and_is_set_tells_which)
{
  cuda_device_id const device{0};
  EXPECT_FALSE(mr::is_per_device_resource_set(device));
  auto first = std::make_shared<mr::cuda_memory_resource>();
  EXPECT_TRUE(mr::set_per_device_resource_if_unset(device, first));
  EXPECT_EQ(mr::get_per_device_resource(device), first.get());
  EXPECT_TRUE(mr::is_per_device_resource_set(device));
  auto second = std::make_shared<mr::cuda_memory_resource>();
  EXPECT_FALSE(mr::set_per_device_resource_if_unset(device, second)) << "a set resource must be kept";
  EXPECT_EQ(mr::get_per_device_resource(device), first.get());
  EXPECT_EQ(second.use_count(), 1) << "a resource that was not set must not be held";
  (void)mr::set_per_device_resource(device, nullptr);
  EXPECT_FALSE(mr::is_per_device_resource_set(device)) << "restoring the default unsets it";
  mr::cuda_memory_resource raw;
  (void)mr::set_per_device_resource(device, &raw);
  EXPECT_TRUE(mr::is_per_device_resource_set(device)) << "a raw-pointer setting counts as set";
  EXPECT_FALSE(mr::set_per_device_resource_if_unset(device, second));
  EXPECT_EQ(mr::get_per_device_resource(device), &raw);
  (void)mr::set_per_device_resource(device, nullptr);
  EXPECT_THROW((void)mr::set_per_device_resource_if_unset(device, nullptr), logic_error);
  EXPECT_THROW((void)mr::is_per_device_resource_set(cuda_device_id{1 << 20}), logic_error);
}

TEST_F(per_device_resource, an_empty_shared_ptr_is_a_logic_error)
{
  cuda_device_id const device{detail::get_backend().current_device()};
  mr::device_memory_resource* const original = mr::get_per_device_resource(device);
  EXPECT_THROW((void)mr::set_per_device_resource(device, std::shared_ptr<mr::device_memory_resource>{}), logic_error);
  EXPECT_THROW((void)mr::set_current_device_resource(std::shared_ptr<mr::device_memory_resource>{}), logic_error);
  EXPECT_EQ(mr::get_per_device_resource(device), original);
}

TEST_F(per_device_resource, a_raw_setting_is_current_until_the_device_gets_another_resource)
{
  cuda_device_id const device{detail::get_backend().current_device()};
  mr::simulated_memory_resource first;
  mr::simulated_memory_resource second;
  EXPECT_EQ(mr::hold_per_device_resource(device).raw_setting, 0U) << "the default is gpumem's own";
  (void)mr::set_per_device_resource(device, &first);
  mr::resource_hold const hold = mr::hold_per_device_resource(device);
  EXPECT_EQ(hold.resource, &first);
  EXPECT_EQ(hold.owner, nullptr);
  ASSERT_NE(hold.raw_setting, 0U);
  EXPECT_TRUE(mr::is_current_raw_setting(device, hold.raw_setting));
  (void)mr::set_per_device_resource(device, &first);
  EXPECT_TRUE(mr::is_current_raw_setting(device, hold.raw_setting)) << "the same pointer again changes nothing";
  (void)mr::set_per_device_resource(device, &second);
  EXPECT_FALSE(mr::is_current_raw_setting(device, hold.raw_setting));
  (void)mr::set_per_device_resource(device, &first);
  EXPECT_FALSE(mr::is_current_raw_setting(device, hold.raw_setting)) << "a new setting, though the same resource";
  mr::resource_hold const again = mr::hold_per_device_resource(device);
  mr::reset_all_device_resources();
  EXPECT_FALSE(mr::is_current_raw_setting(device, again.raw_setting)) << "a reset replaces it too";
  EXPECT_FALSE(mr::is_current_raw_setting(cuda_device_id{-1}, again.raw_setting));
  EXPECT_FALSE(mr::is_current_raw_setting(device, 0));
}

TEST_F(per_device_resource, reset_all_restores_every_default)
{
  int const count = detail::get_backend().device_count();
  std::vector<mr::device_memory_resource*> defaults;
  for (int device = 0; device < count; ++device) {
    defaults.push_back(mr::get_per_device_resource(cuda_device_id{device}));
  }
  mr::simulated_memory_resource simulated;
  for (int device = 0; device < count; ++device) {
    (void)mr::set_per_device_resource(cuda_device_id{device}, &simulated);
  }
  EXPECT_EQ(mr::get_current_device_resource(), &simulated);
  mr::reset_all_device_resources();
  for (int device = 0; device < count; ++device) {
    EXPECT_EQ(mr::get_per_device_resource(cuda_device_id{device}), defaults[static_cast<std::size_t>(device)]);
  }
}

TEST_F(per_device_resource, setting_one_device_leaves_the_others_alone)
{
  detail::backend& backend = detail::get_backend();
  if (backend.device_count() < 2) { GTEST_SKIP() << "needs two devices (host backend: GPUMEM_HOST_DEVICES=2)"; }
  mr::device_memory_resource* const default1 = mr::get_per_device_resource(cuda_device_id{1});
  mr::simulated_memory_resource simulated;
  (void)mr::set_per_device_resource(cuda_device_id{0}, &simulated);
  EXPECT_EQ(mr::get_per_device_resource(cuda_device_id{0}), &simulated);
  EXPECT_EQ(mr::get_per_device_resource(cuda_device_id{1}), default1);
  EXPECT_NE(mr::get_per_device_resource(cuda_device_id{1}), mr::get_per_device_resource(cuda_device_id{0}));
  cuda_set_device_raii const on_one{cuda_device_id{1}};
  EXPECT_EQ(mr::get_current_device_resource(), default1);
}

TEST_F(per_device_resource, an_invalid_device_is_a_logic_error_naming_it_and_the_count)
{
  int const count = detail::get_backend().device_count();
  mr::simulated_memory_resource simulated;
  for (int const device : {-1, count, count + 7}) {
    try {
      (void)mr::get_per_device_resource(cuda_device_id{device});
      ADD_FAILURE() << "device " << device << " was accepted";
    } catch (logic_error const& e) {
      std::string const what = e.what();
      EXPECT_NE(what.find("device " + std::to_string(device)), std::string::npos) << what;
      EXPECT_NE(what.find(std::to_string(count) + " device"), std::string::npos) << what;
    }
    EXPECT_THROW((void)mr::set_per_device_resource(cuda_device_id{device}, &simulated), logic_error);
  }
  EXPECT_NE(mr::get_current_device_resource(), &simulated) << "a failed set must change nothing";
}

TEST_F(per_device_resource, concurrent_set_get_and_hold_always_see_a_whole_resource)
{
  cuda_device_id const device{detail::get_backend().current_device()};
  mr::device_memory_resource* const original = mr::get_per_device_resource(device);
  mr::simulated_memory_resource a;
  mr::simulated_memory_resource b;
  auto const shared = std::make_shared<mr::simulated_memory_resource>();
  auto known = [&](mr::device_memory_resource const* r) { return r == &a || r == &b || r == shared.get() || r == original; };
  std::atomic<int> unexpected{0};
  std::atomic<int> ready{0};
  (void)mr::set_per_device_resource(device, shared);
  // Setters cycle a, b and the shared resource until every reader has made its rounds and seen the shared
  // one at least once (however the scheduler interleaves them), then leave the shared one set.
  std::atomic<int> readers_done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < 8) { std::this_thread::yield(); }  // all at once: setters race the readers
      if (t % 2 == 0) {
        for (int i = 0; readers_done.load() < 4; ++i) {
          mr::device_memory_resource* const previous =
            i % 3 == 2 ? mr::set_per_device_resource(device, shared)
                       : mr::set_per_device_resource(device, (i % 3 == 0) ? &a : &b);
          if (!known(previous)) { unexpected.fetch_add(1); }
        }
        (void)mr::set_per_device_resource(device, shared);
        return;
      }
      bool saw_shared = false;
      for (int i = 0; i < 20000 || !saw_shared; ++i) {
        if (!known(mr::get_per_device_resource(device))) { unexpected.fetch_add(1); }
        mr::resource_hold const hold = mr::hold_per_device_resource(device);
        bool const is_shared = hold.resource == shared.get();
        saw_shared = saw_shared || is_shared;
        bool const consistent = known(hold.resource) && (hold.owner == (is_shared ? shared : nullptr)) &&
                                ((hold.raw_setting != 0) == (hold.resource == &a || hold.resource == &b));
        if (!consistent) { unexpected.fetch_add(1); }
      }
      readers_done.fetch_add(1);
    });
  }
  for (auto& thread : threads) { thread.join(); }
  EXPECT_EQ(unexpected.load(), 0);
}

}  // namespace
}  // namespace gpumem::test
