// The plain API (plain.hpp): alloc/zeros/free, the registry's error messages, sizes, OOM, threads, and that
// free() returns memory to the resource and device that allocated it.
#include "support/counting_resource.hpp"
#include "support/memory_checks.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/cuda_device_id.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/per_device_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>
#include <gpumem/plain.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace gpumem::test {
namespace {

/// Every test starts with the default resources and must leave no allocation behind.
class plain_api : public ::testing::Test {
 protected:
  void SetUp() override
  {
    mr::reset_all_device_resources();
    baseline_ = live_allocation_count();
  }
  void TearDown() override
  {
    mr::reset_all_device_resources();
    EXPECT_EQ(live_allocation_count(), baseline_) << "the test leaked plain allocations";
  }
  [[nodiscard]] std::size_t baseline() const { return baseline_; }

 private:
  std::size_t baseline_{};
};

/// Sets the current device's resource for a scope.
class scoped_current_resource {
 public:
  explicit scoped_current_resource(mr::device_memory_resource* resource)
    : previous_{mr::set_current_device_resource(resource)}
  {
  }
  ~scoped_current_resource() { (void)mr::set_current_device_resource(previous_); }
  scoped_current_resource(scoped_current_resource const&) = delete;
  scoped_current_resource& operator=(scoped_current_resource const&) = delete;

 private:
  mr::device_memory_resource* previous_;
};

std::string message_of(auto&& call)
{
  try {
    call();
  } catch (logic_error const& e) {
    return e.what();
  }
  return "(no gpumem::logic_error was thrown)";
}

TEST_F(plain_api, alloc_records_the_size_and_free_forgets_it)
{
  backend_stream stream;
  void* p = alloc(1000, stream.get());
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(detail::is_aligned(p, 256));
  EXPECT_EQ(allocation_size(p), 1000U);
  EXPECT_EQ(live_allocation_count(), baseline() + 1);
  write_pattern(p, 1000, 4, stream.get());
  EXPECT_TRUE(has_pattern(p, 1000, 4, stream.get()));
  gpumem::free(p, stream.get());
  EXPECT_EQ(live_allocation_count(), baseline());
  EXPECT_THROW((void)allocation_size(p), logic_error);
}

TEST_F(plain_api, zeros_are_zero_in_stream_order)
{
  backend_stream stream;
  constexpr std::size_t bytes = (1U << 20) + 3;
  // Dirty some memory first, so that zeros cannot pass by reusing fresh zero pages.
  void* dirty = alloc(bytes, stream.get());
  write_pattern(dirty, bytes, 77, stream.get());
  gpumem::free(dirty, stream.get());

  void* p = zeros(bytes, stream.get());
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(allocation_size(p), bytes);
  EXPECT_TRUE(is_filled_with(p, bytes, 0, stream.get()));  // read on the same stream: ordered after the memset
  gpumem::free(p, stream.get());

  void* q = zeros(4096);  // legacy default stream
  EXPECT_TRUE(is_filled_with(q, 4096, 0, cuda_stream_default));
  gpumem::free(q);
}

TEST_F(plain_api, double_free_says_already_freed_and_does_not_touch_the_resource)
{
  mr::simulated_memory_resource simulated{std::size_t{1} << 30};
  scoped_current_resource const use{&simulated};
  void* p = alloc(512);
  gpumem::free(p);
  EXPECT_EQ(simulated.allocation_count(), 0U);
  std::string const what = message_of([p] { gpumem::free(p); });
  EXPECT_NE(what.find("already freed"), std::string::npos) << what;
  EXPECT_NE(what.find(format_pointer(p)), std::string::npos) << what;
  EXPECT_EQ(simulated.invalid_deallocations(), 0U) << "the double free reached the resource";
  std::string const size_what = message_of([p] { (void)allocation_size(p); });
  EXPECT_NE(size_what.find("already freed"), std::string::npos) << size_what;
}

TEST_F(plain_api, unknown_pointer_says_not_allocated_by_gpumem)
{
  mr::simulated_memory_resource simulated{std::size_t{1} << 30};
  scoped_current_resource const use{&simulated};
  void* p = alloc(1024);
  int on_the_stack = 0;
  for (void* unknown : {static_cast<void*>(&on_the_stack), static_cast<void*>(static_cast<char*>(p) + 256),
                        reinterpret_cast<void*>(std::uintptr_t{0xdead00})}) {
    std::string const what = message_of([unknown] { gpumem::free(unknown); });
    EXPECT_NE(what.find("was not allocated by gpumem::alloc/zeros"), std::string::npos) << what;
    EXPECT_NE(what.find(format_pointer(unknown)), std::string::npos) << what;
    EXPECT_THROW((void)allocation_size(unknown), logic_error);
  }
  EXPECT_EQ(simulated.invalid_deallocations(), 0U);
  EXPECT_EQ(simulated.allocation_count(), 1U);
  gpumem::free(p);
}

TEST_F(plain_api, null_and_zero_sizes)
{
  EXPECT_NO_THROW(gpumem::free(nullptr));
  EXPECT_EQ(alloc(0), nullptr);
  EXPECT_EQ(zeros(0), nullptr);
  EXPECT_EQ(live_allocation_count(), baseline());
}

TEST_F(plain_api, an_overflowing_size_is_bad_alloc)
{
  std::size_t const max = std::numeric_limits<std::size_t>::max();
  for (std::size_t const size : {max, max - 100}) {
    try {
      void* p = alloc(size);
      gpumem::free(p);
      ADD_FAILURE() << size << " bytes were served";
    } catch (out_of_memory const& e) {
      ADD_FAILURE() << "overflow must not read as out of memory: " << e.what();
    } catch (bad_alloc const& e) {
      EXPECT_NE(std::string{e.what()}.find(std::to_string(size)), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(live_allocation_count(), baseline());
}

TEST_F(plain_api, out_of_memory_propagates_with_the_device_capacity)
{
  detail::backend& backend = detail::get_backend();
  std::size_t const request = backend.mem_info(backend.current_device()).total * 2;
  try {
    void* p = alloc(request);
    gpumem::free(p);
    FAIL() << "twice the device's memory was served";
  } catch (out_of_memory const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find(std::to_string(request)), std::string::npos) << what;
    EXPECT_NE(what.find("total"), std::string::npos) << what;
  }
  EXPECT_EQ(live_allocation_count(), baseline());
}

TEST_F(plain_api, out_of_memory_of_a_small_resource_names_its_capacity)
{
  mr::simulated_memory_resource simulated{std::size_t{1} << 20};
  scoped_current_resource const use{&simulated};
  void* p = alloc(600'000);
  try {
    void* q = alloc(600'000);
    gpumem::free(q);
    FAIL() << "more than the capacity was served";
  } catch (out_of_memory const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find("simulated capacity"), std::string::npos) << what;
    EXPECT_NE(what.find(format_bytes(std::size_t{1} << 20)), std::string::npos) << what;
  }
  simulated.fail_after(0);
  EXPECT_THROW((void)alloc(256), out_of_memory);
  EXPECT_EQ(live_allocation_count(), baseline() + 1);
  gpumem::free(p);
}

TEST_F(plain_api, free_returns_memory_to_the_resource_that_allocated_it)
{
  auto const first = std::make_shared<mr::simulated_memory_resource>(std::size_t{1} << 30);
  auto const second = std::make_shared<mr::simulated_memory_resource>(std::size_t{1} << 30, std::uintptr_t{1} << 46);
  (void)mr::set_current_device_resource(first);
  void* const p = alloc(1000);
  (void)mr::set_current_device_resource(second);
  void* const q = alloc(2000);
  gpumem::free(p);  // the current resource is `second`, but p belongs to `first`
  EXPECT_EQ(first->allocation_count(), 0U);
  EXPECT_EQ(second->allocation_count(), 1U);
  (void)mr::set_current_device_resource(nullptr);
  gpumem::free(q);  // the current resource is the default now
  EXPECT_EQ(second->allocation_count(), 0U);
  EXPECT_EQ(first->invalid_deallocations() + second->invalid_deallocations(), 0U);
}

TEST_F(plain_api, a_resource_set_by_shared_ptr_lives_until_its_last_pointer_is_freed)
{
  bool destroyed = false;
  std::size_t outstanding_when_destroyed = 0;
  auto* const counting = new counting_resource{};  // NOLINT(cppcoreguidelines-owning-memory): owned by `shared`
  std::shared_ptr<mr::device_memory_resource> shared{counting, [&](mr::device_memory_resource* resource) {
                                                       outstanding_when_destroyed = counting->outstanding();
                                                       destroyed = true;
                                                       delete resource;  // NOLINT(cppcoreguidelines-owning-memory)
                                                     }};
  (void)mr::set_current_device_resource(shared);
  void* const p = alloc(1000);
  void* const q = zeros(3000);
  (void)mr::set_current_device_resource(nullptr);
  shared.reset();
  EXPECT_FALSE(destroyed) << "the plain API's pointers hold the resource";
  gpumem::free(p);
  EXPECT_FALSE(destroyed) << "one pointer is still live";
  gpumem::free(q);
  EXPECT_TRUE(destroyed) << "the last pointer was its last holder";
  EXPECT_EQ(outstanding_when_destroyed, 0U) << "every pointer went back before the resource went";
}

TEST_F(plain_api, freeing_into_a_replaced_raw_resource_is_a_logic_error_that_leaves_it_alone)
{
  counting_resource counting;
  void* p = nullptr;
  {
    scoped_current_resource const use{&counting};
    p = alloc(1000);
  }  // replaced: gpumem cannot know whether `counting` still exists
  std::string const what = message_of([p] { gpumem::free(p); });
  EXPECT_NE(what.find(format_pointer(p)), std::string::npos) << what;
  EXPECT_NE(what.find("set by raw pointer"), std::string::npos) << what;
  EXPECT_NE(what.find("replaced"), std::string::npos) << what;
  EXPECT_EQ(counting.deallocations(), 0U) << "the replaced resource must not be called";
  EXPECT_EQ(live_allocation_count(), baseline()) << "the pointer is forgotten";
  counting.deallocate(p, 1000);
  counting.expect_everything_returned();
}

TEST_F(plain_api, setting_the_same_raw_resource_again_keeps_its_pointers_freeable)
{
  counting_resource counting;
  scoped_current_resource const use{&counting};
  void* const p = alloc(1000);
  (void)mr::set_current_device_resource(&counting);
  gpumem::free(p);
  counting.expect_everything_returned();
}

TEST_F(plain_api, shared_resources_replaced_while_threads_allocate_are_freed_into_and_then_destroyed)
{
  constexpr int thread_count = 4;
  std::atomic<int> live_resources{0};
  std::atomic<bool> done{false};
  mr::device_memory_resource* const upstream = mr::get_current_device_resource();  // the default
  auto make_resource = [&live_resources, upstream] {
    live_resources.fetch_add(1);
    return std::shared_ptr<mr::device_memory_resource>{new counting_resource{upstream},  // NOLINT(cppcoreguidelines-owning-memory)
                                                       [&live_resources](mr::device_memory_resource* resource) {
                                                         EXPECT_EQ(static_cast<counting_resource*>(resource)->outstanding(), 0U);
                                                         delete resource;  // NOLINT(cppcoreguidelines-owning-memory)
                                                         live_resources.fetch_sub(1);
                                                       }};
  };
  std::thread setter{[&] {
    while (!done.load()) { (void)mr::set_current_device_resource(make_resource()); }
  }};
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([t] {
      std::mt19937_64 rng{static_cast<std::uint64_t>(t) + 11};
      std::vector<void*> live;
      for (int i = 0; i < 2000; ++i) {
        if (live.size() < 16 && rng() % 2 == 0) {
          live.push_back(alloc(256 + rng() % 4096));
        } else if (!live.empty()) {
          gpumem::free(live.back());
          live.pop_back();
        }
      }
      for (void* p : live) { gpumem::free(p); }
    });
  }
  for (auto& thread : threads) { thread.join(); }
  done.store(true);
  setter.join();
  mr::reset_all_device_resources();
  EXPECT_EQ(live_resources.load(), 0) << "every replaced resource is destroyed once its memory is back";
}

TEST_F(plain_api, free_passes_the_size_and_stream_through)
{
  counting_resource counting;  // over the default resource
  scoped_current_resource const use{&counting};
  backend_stream a;
  backend_stream b;
  void* p = alloc(12345, a.get());
  detail::get_backend().stream_synchronize(a.get());
  gpumem::free(p, b.get());
  auto const log = counting.deallocation_log();
  ASSERT_EQ(log.size(), 1U);
  EXPECT_EQ(log[0].ptr, p);
  EXPECT_EQ(log[0].bytes, 12345U);
  EXPECT_EQ(log[0].stream.value(), b.get());
  EXPECT_TRUE(counting.errors().empty());
}

TEST_F(plain_api, free_runs_on_the_device_that_allocated)
{
  detail::backend& backend = detail::get_backend();
  if (backend.device_count() < 2) { GTEST_SKIP() << "needs two devices (host backend: GPUMEM_HOST_DEVICES=2)"; }
  counting_resource counting{mr::get_per_device_resource(cuda_device_id{1})};
  (void)mr::set_per_device_resource(cuda_device_id{1}, &counting);
  void* p = nullptr;
  {
    cuda_set_device_raii const on_one{cuda_device_id{1}};
    p = alloc(4096);
  }
  cuda_set_device_raii const on_zero{cuda_device_id{0}};
  gpumem::free(p);
  EXPECT_EQ(backend.current_device(), 0) << "free must restore the current device";
  auto const log = counting.deallocation_log();
  ASSERT_EQ(log.size(), 1U);
  EXPECT_EQ(log[0].device, 1) << "the deallocation ran while device 0 was current";
}

TEST_F(plain_api, sixteen_threads_allocate_and_free_concurrently)
{
  constexpr int thread_count = 16;
  std::atomic<int> errors{0};
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([&errors, &ready, t] {
      ready.fetch_add(1);
      while (ready.load() < thread_count) { std::this_thread::yield(); }
      std::mt19937_64 rng{static_cast<std::uint64_t>(t) * 7 + 1};
      std::vector<std::pair<void*, std::size_t>> live;
      for (int i = 0; i < 1000; ++i) {
        if (live.size() < 32 && (live.empty() || rng() % 3 != 0)) {
          std::size_t const size = 1 + rng() % 65536;
          void* p = alloc(size);
          live.emplace_back(p, size);
        } else {
          std::size_t const index = rng() % live.size();
          if (allocation_size(live[index].first) != live[index].second) { errors.fetch_add(1); }
          gpumem::free(live[index].first);
          live[index] = live.back();
          live.pop_back();
        }
      }
      for (auto const& [p, size] : live) {
        if (allocation_size(p) != size) { errors.fetch_add(1); }
        gpumem::free(p);
      }
    });
  }
  for (auto& thread : threads) { thread.join(); }
  EXPECT_EQ(errors.load(), 0);
}

TEST_F(plain_api, racing_double_frees_free_exactly_once)
{
  mr::simulated_memory_resource simulated{std::size_t{1} << 30};
  scoped_current_resource const use{&simulated};
  for (int round = 0; round < 200; ++round) {
    void* p = alloc(256);
    std::atomic<int> freed{0};
    std::atomic<int> rejected{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        try {
          gpumem::free(p);
          freed.fetch_add(1);
        } catch (logic_error const&) {
          rejected.fetch_add(1);
        }
      });
    }
    for (auto& thread : threads) { thread.join(); }
    ASSERT_EQ(freed.load(), 1) << "round " << round;
    ASSERT_EQ(rejected.load(), 3) << "round " << round;
  }
  EXPECT_EQ(simulated.invalid_deallocations(), 0U);
  EXPECT_EQ(simulated.allocation_count(), 0U);
}

}  // namespace
}  // namespace gpumem::test

namespace gpumem::test {
namespace {

TEST_F(plain_api, non_blocking_alloc_and_free_are_recorded_as_the_others)
{
  mr::simulated_memory_resource upstream;
  mr::pool_memory_resource pool{&upstream, 4 * 1024 * 1024};
  scoped_current_resource const current{&pool};
  EXPECT_EQ(try_alloc_without_blocking(4096), nullptr) << "nothing cached yet: the caller must call alloc()";
  void* const a = alloc(4096);
  void* const b = alloc(4096);
  free(a);  // cached by this thread
  EXPECT_TRUE(try_free_without_blocking(b));
  EXPECT_EQ(live_allocation_count(), baseline());
  void* const c = try_alloc_without_blocking(4000);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(allocation_size(c), 4000U) << "recorded as alloc() records";
  EXPECT_TRUE(try_free_without_blocking(nullptr));
  EXPECT_EQ(try_alloc_without_blocking(0), nullptr);
  EXPECT_TRUE(try_free_without_blocking(c));
  EXPECT_NE(message_of([&] { (void)try_free_without_blocking(c); }).find("was already freed"), std::string::npos);
  EXPECT_NE(message_of([&] { free(c); }).find("was already freed"), std::string::npos);
  pool.flush_thread_caches();
  EXPECT_EQ(pool.bytes_in_use(), 0U);
}

TEST_F(plain_api, non_blocking_attempts_refuse_on_resources_without_a_fast_path)
{
  void* const p = alloc(512);  // the default resource (cudaMalloc-shaped): no non-blocking path
  EXPECT_EQ(try_alloc_without_blocking(512), nullptr);
  EXPECT_FALSE(try_free_without_blocking(p)) << "refused: the pointer must stay live";
  EXPECT_EQ(allocation_size(p), 512U);
  free(p);
}

}  // namespace
}  // namespace gpumem::test
