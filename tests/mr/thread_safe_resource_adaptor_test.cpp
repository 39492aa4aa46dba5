// thread_safe_resource_adaptor: the conformance battery, then 8 threads over an upstream that is not
// thread-safe and detects overlapping calls: through the adaptor it must never see two at once.
#include "conformance/resource_battery.hpp"
#include "support/sub_allocator_checks.hpp"

#include <gpumem/error.hpp>
#include <gpumem/mr/resource_adaptor_base.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>
#include <gpumem/mr/thread_safe_resource_adaptor.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <thread>
#include <vector>

namespace gpumem::test {
namespace {

struct thread_safe_factory {
  static std::unique_ptr<mr::device_memory_resource> make()
  {
    return std::make_unique<mr::thread_safe_resource_adaptor>(&cuda_upstream());
  }
  static constexpr char const* name = "cuda_memory_resource";
  static constexpr bool oversubscription_safe = true;
};

}  // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(thread_safe_resource_adaptor, resource_battery, thread_safe_factory);

namespace {

/// A resource that is not thread-safe (a plain counter), over a simulated one, that counts the calls that
/// found another call still running.
class unsynchronised_resource final : public mr::resource_adaptor_base {
 public:
  explicit unsynchronised_resource(mr::device_memory_resource* upstream) : resource_adaptor_base{upstream} {}
  [[nodiscard]] std::size_t overlaps() const noexcept { return overlaps_.load(); }
  [[nodiscard]] std::size_t calls() const noexcept { return calls_; }  // read after the threads ended

 private:
  struct entered {
    explicit entered(unsynchronised_resource& r) : r_{r}
    {
      if (r_.inside_.fetch_add(1) != 0) { r_.overlaps_.fetch_add(1); }
      std::this_thread::yield();  // widen the window in which a second call could enter
    }
    ~entered() { r_.inside_.fetch_sub(1); }
    entered(entered const&) = delete;
    entered& operator=(entered const&) = delete;
    unsynchronised_resource& r_;
  };

  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    entered const guard{*this};
    ++calls_;  // a data race (TSan reports it) unless the adaptor serialises the calls
    return resource_adaptor_base::do_allocate(bytes, stream);
  }
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override
  {
    entered const guard{*this};
    ++calls_;
    resource_adaptor_base::do_deallocate(ptr, bytes, stream);
  }

  std::atomic<int> inside_{0};
  std::atomic<std::size_t> overlaps_{0};
  std::size_t calls_{0};
};

TEST(thread_safe_resource_adaptor, eight_threads_never_overlap_in_the_upstream)
{
  constexpr int threads = 8;
  constexpr int rounds = 1000;
  mr::simulated_memory_resource simulated;
  unsynchronised_resource unsafe{&simulated};
  mr::thread_safe_resource_adaptor safe{&unsafe};
  EXPECT_EQ(safe.upstream_resource(), &unsafe);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&safe, t] {
      for (int i = 0; i < rounds; ++i) {
        std::size_t const bytes = static_cast<std::size_t>(256 * (1 + (t + i) % 5));
        void* p = safe.allocate(bytes);
        safe.deallocate(p, bytes);
      }
    });
  }
  for (auto& worker : workers) { worker.join(); }
  EXPECT_EQ(unsafe.overlaps(), 0U);
  EXPECT_EQ(unsafe.calls(), static_cast<std::size_t>(2 * threads * rounds));
  EXPECT_EQ(simulated.allocation_count(), 0U);
  EXPECT_EQ(simulated.invalid_deallocations(), 0U);
}

TEST(thread_safe_resource_adaptor, construction_and_equality)
{
  mr::simulated_memory_resource upstream;
  mr::simulated_memory_resource other;
  EXPECT_THROW(mr::thread_safe_resource_adaptor{nullptr}, logic_error);
  mr::thread_safe_resource_adaptor a{&upstream};
  mr::thread_safe_resource_adaptor b{&upstream};
  mr::thread_safe_resource_adaptor c{&other};
  EXPECT_TRUE(a.is_equal(b));
  EXPECT_FALSE(a.is_equal(c));
}

}  // namespace
}  // namespace gpumem::test
