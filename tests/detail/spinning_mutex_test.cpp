// detail::spinning_mutex (gpumem/detail/spinning_mutex.hpp): mutual exclusion, try_lock, and threads that
// find it held for long (beyond the spinners) sleep until it is free.
#include <gpumem/detail/spinning_mutex.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <thread>
#include <vector>

namespace gpumem::detail {
namespace {

TEST(spinning_mutex, many_threads_increment_a_plain_counter_under_it_without_losing_one)
{
  spinning_mutex m;
  std::size_t counter = 0;  // not atomic: only the lock orders the increments
  constexpr int threads = 8;
  constexpr int increments = 20'000;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      for (int i = 0; i < increments; ++i) {
        lock_guard lock{m};
        ++counter;
      }
    });
  }
  for (auto& w : workers) { w.join(); }
  EXPECT_EQ(counter, std::size_t{threads} * increments);
}

TEST(spinning_mutex, try_lock_fails_while_another_thread_holds_it)
{
  spinning_mutex m;
  m.lock();
  bool taken = true;
  std::thread other{[&] { taken = m.try_lock(); }};
  other.join();
  EXPECT_FALSE(taken);
  m.unlock();
  std::thread again{[&] {
    taken = false;
    if (m.try_lock()) {
      taken = true;
      m.unlock();
    }
  }};
  again.join();
  EXPECT_TRUE(taken);
}

// More waiters than may spin, held far longer than a spin lasts: every waiter ends up asleep in the
// underlying mutex, and every one gets the lock once it is released.
TEST(spinning_mutex, waiters_beyond_the_spinners_sleep_and_all_get_it_after_a_long_hold)
{
  spinning_mutex m;
  std::atomic<int> done{0};
  m.lock();
  std::vector<std::thread> waiters;
  for (int t = 0; t < 3 * spinning_mutex::max_spinners + 2; ++t) {
    waiters.emplace_back([&] {
      lock_guard lock{m};
      done.fetch_add(1);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds{50});
  EXPECT_EQ(done.load(), 0) << "a waiter got the lock while it was held";
  m.unlock();
  for (auto& w : waiters) { w.join(); }
  EXPECT_EQ(done.load(), static_cast<int>(waiters.size()));
}

}  // namespace
}  // namespace gpumem::detail
