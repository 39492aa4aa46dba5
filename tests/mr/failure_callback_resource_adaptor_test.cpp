// failure_callback_resource_adaptor: the conformance battery (a callback that gives up), then the retry
// protocol: a callback that frees memory and asks for a retry, one that gives up, the number of calls and
// their arguments, other exceptions passing through untouched, the exception type chosen by the template
// parameter (RMM's ExceptionType), and construction errors.
#include "conformance/resource_battery.hpp"
#include "support/sub_allocator_checks.hpp"

#include <gpumem/error.hpp>
#include <gpumem/mr/failure_callback_resource_adaptor.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace gpumem::test {
namespace {

struct failure_callback_factory {
  static std::unique_ptr<mr::device_memory_resource> make()
  {
    return std::make_unique<mr::failure_callback_resource_adaptor>(
      &cuda_upstream(), [](std::size_t, void*) { return false; }, nullptr);
  }
  static constexpr char const* name = "cuda_memory_resource";
  static constexpr bool oversubscription_safe = true;
};

}  // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(failure_callback_resource_adaptor, resource_battery, failure_callback_factory);

namespace {

/// A failure that is no bad_alloc (as a cuda_error is): constructible from a message.
struct cuda_error_like : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// What the callbacks below see and do: they count calls and, when asked, free the block they hold.
struct callback_state {
  mr::device_memory_resource* upstream{};
  void* held{};
  std::size_t held_bytes{};
  int calls{0};
  int retries_allowed{0};
  std::vector<std::size_t> requests{};
};

bool free_held_block_and_retry(std::size_t bytes, void* arg)
{
  auto* state = static_cast<callback_state*>(arg);
  ++state->calls;
  state->requests.push_back(bytes);
  if (state->held == nullptr) { return false; }
  state->upstream->deallocate(state->held, state->held_bytes);
  state->held = nullptr;
  return true;
}

TEST(failure_callback_resource_adaptor, a_callback_that_frees_memory_gets_the_allocation_retried)
{
  mr::simulated_memory_resource upstream{1 * MiB};
  callback_state state{.upstream = &upstream, .held = upstream.allocate(1 * MiB), .held_bytes = 1 * MiB};
  mr::failure_callback_resource_adaptor adaptor{&upstream, free_held_block_and_retry, &state};
  EXPECT_EQ(adaptor.upstream_resource(), &upstream);
  void* p = adaptor.allocate(512 * KiB);
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(state.calls, 1);
  ASSERT_EQ(state.requests.size(), 1U);
  EXPECT_EQ(state.requests[0], 512 * KiB);
  EXPECT_EQ(state.held, nullptr);
  EXPECT_EQ(upstream.injected_failures(), 0U);
  adaptor.deallocate(p, 512 * KiB);
  EXPECT_EQ(upstream.allocation_count(), 0U);
}

TEST(failure_callback_resource_adaptor, a_callback_that_gives_up_lets_out_of_memory_through)
{
  mr::simulated_memory_resource upstream{1 * MiB};
  callback_state state{.upstream = &upstream};
  mr::failure_callback_resource_adaptor adaptor{&upstream, free_held_block_and_retry, &state};
  try {
    (void)adaptor.allocate(2 * MiB);
    FAIL() << "the callback gave up";
  } catch (out_of_memory const& e) {
    EXPECT_NE(std::string{e.what()}.find(std::to_string(2 * MiB)), std::string::npos) << e.what();
  }
  EXPECT_EQ(state.calls, 1);
}

TEST(failure_callback_resource_adaptor, the_callback_is_called_after_every_failed_attempt)
{
  mr::simulated_memory_resource upstream;
  upstream.fail_after(0);
  callback_state state{.upstream = &upstream};
  state.retries_allowed = 3;
  auto const retry_three_times = [](std::size_t /*bytes*/, void* arg) {
    auto* s = static_cast<callback_state*>(arg);
    ++s->calls;
    return s->calls <= s->retries_allowed;
  };
  mr::failure_callback_resource_adaptor adaptor{&upstream, retry_three_times, &state};
  EXPECT_THROW((void)adaptor.allocate(256), out_of_memory);
  EXPECT_EQ(state.calls, 4);                   // three retries, then it gave up
  EXPECT_EQ(upstream.injected_failures(), 4U);  // the first attempt and three retries

  // The upstream recovers during the retries: the allocation succeeds on the retry after that.
  state.calls = 0;
  upstream.clear_failures();
  upstream.fail_every(1);  // every call fails ...
  auto const recover = [](std::size_t /*bytes*/, void* arg) {
    auto* s = static_cast<callback_state*>(arg);
    if (++s->calls == 2) { static_cast<mr::simulated_memory_resource*>(s->upstream)->clear_failures(); }
    return true;
  };
  mr::failure_callback_resource_adaptor recovering{&upstream, recover, &state};
  void* p = recovering.allocate(256);
  EXPECT_EQ(state.calls, 2);
  recovering.deallocate(p, 256);
}

TEST(failure_callback_resource_adaptor, other_exceptions_do_not_call_the_callback)
{
  mr::simulated_memory_resource upstream;
  int calls = 0;
  auto const count = [](std::size_t, void* arg) {
    ++*static_cast<int*>(arg);
    return true;
  };
  mr::failure_callback_resource_adaptor adaptor{&upstream, count, &calls};
  EXPECT_THROW((void)adaptor.allocate(100, std::size_t{3}), logic_error);  // bad alignment, from the base
  EXPECT_EQ(calls, 0);
  auto const throwing = [](std::size_t, void*) -> bool { throw std::runtime_error{"callback failed"}; };
  upstream.fail_after(0);
  mr::failure_callback_resource_adaptor throws{&upstream, throwing, nullptr};
  EXPECT_THROW((void)throws.allocate(256), std::runtime_error);
}

TEST(failure_callback_resource_adaptor, construction_and_equality)
{
  mr::simulated_memory_resource upstream;
  mr::simulated_memory_resource other;
  auto const no = [](std::size_t, void*) { return false; };
  EXPECT_THROW(mr::failure_callback_resource_adaptor(nullptr, no, nullptr), logic_error);
  EXPECT_THROW(mr::failure_callback_resource_adaptor(&upstream, mr::failure_callback_t{}, nullptr), logic_error);
  mr::failure_callback_resource_adaptor a{&upstream, no, nullptr};
  mr::failure_callback_resource_adaptor b{&upstream, no, nullptr};
  mr::failure_callback_resource_adaptor c{&other, no, nullptr};
  EXPECT_TRUE(a.is_equal(b));
  EXPECT_FALSE(a.is_equal(c));
}


/// Throws `Exception` from its first `failures` allocations, then forwards to an upstream.
template <class Exception>
class throwing_resource final : public mr::device_memory_resource {
 public:
  throwing_resource(mr::device_memory_resource* upstream, int failures) : upstream_{upstream}, failures_{failures} {}
  int attempts{0};

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    if (++attempts <= failures_) { throw Exception{"injected failure"}; }
    return upstream_->allocate(bytes, stream);
  }
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override
  {
    upstream_->deallocate(ptr, bytes, stream);
  }
  mr::device_memory_resource* upstream_;
  int failures_;
};

bool retry_always(std::size_t /*bytes*/, void* arg)
{
  ++*static_cast<int*>(arg);
  return true;
}

TEST(failure_callback_resource_adaptor, the_exception_type_chooses_what_is_retried)
{
  static_assert(std::is_same_v<mr::failure_callback_resource_adaptor::exception_type, out_of_memory>,
                "RMM's default: retry when the memory is not there");
  mr::simulated_memory_resource upstream;
  {  // bad_alloc is not out_of_memory: the default adaptor lets it through without calling back
    throwing_resource<bad_alloc> failing{&upstream, 1};
    int calls = 0;
    mr::failure_callback_resource_adaptor adaptor{&failing, retry_always, &calls};
    EXPECT_THROW((void)adaptor.allocate(256), bad_alloc);
    EXPECT_EQ(calls, 0);
  }
  {  // an adaptor for gpumem::bad_alloc retries it, and out_of_memory (derived from it) too
    throwing_resource<bad_alloc> failing{&upstream, 2};
    int calls = 0;
    mr::basic_failure_callback_resource_adaptor<bad_alloc> adaptor{&failing, retry_always, &calls};
    static_assert(std::is_same_v<decltype(adaptor)::exception_type, bad_alloc>);
    void* p = adaptor.allocate(256);
    EXPECT_EQ(calls, 2);
    EXPECT_EQ(failing.attempts, 3);
    adaptor.deallocate(p, 256);
    throwing_resource<out_of_memory> exhausted{&upstream, 1};
    mr::basic_failure_callback_resource_adaptor<bad_alloc> derived{&exhausted, retry_always, &calls};
    p = derived.allocate(256);
    EXPECT_EQ(calls, 3);
    derived.deallocate(p, 256);
  }
  {  // std::bad_alloc, and any exception at all
    throwing_resource<cuda_error_like> failing{&upstream, 1};
    int calls = 0;
    mr::basic_failure_callback_resource_adaptor<std::bad_alloc> on_bad_alloc{&failing, retry_always, &calls};
    EXPECT_THROW((void)on_bad_alloc.allocate(256), std::runtime_error) << "not a bad_alloc: passes through";
    EXPECT_EQ(calls, 0);
    mr::basic_failure_callback_resource_adaptor<std::exception> on_anything{&failing, retry_always, &calls};
    failing.attempts = 0;
    void* p = on_anything.allocate(256);
    EXPECT_EQ(calls, 1);
    on_anything.deallocate(p, 256);
  }
  {  // the callback gives up: the caught exception is rethrown as it was
    throwing_resource<bad_alloc> failing{&upstream, 5};
    mr::basic_failure_callback_resource_adaptor<bad_alloc> adaptor{
      &failing, [](std::size_t, void*) { return false; }, nullptr};
    EXPECT_THROW((void)adaptor.allocate(256), bad_alloc);
  }
  EXPECT_EQ(upstream.allocation_count(), 0U);
}

TEST(failure_callback_resource_adaptor, adaptors_of_different_exception_types_are_not_equal)
{
  mr::simulated_memory_resource upstream;
  auto const no = [](std::size_t, void*) { return false; };
  mr::failure_callback_resource_adaptor a{&upstream, no, nullptr};
  mr::basic_failure_callback_resource_adaptor<bad_alloc> b{&upstream, no, nullptr};
  mr::basic_failure_callback_resource_adaptor<bad_alloc> c{&upstream, no, nullptr};
  EXPECT_FALSE(a.is_equal(b));
  EXPECT_TRUE(b.is_equal(c)) << "the same type over equal upstreams";
}

}  // namespace
}  // namespace gpumem::test
