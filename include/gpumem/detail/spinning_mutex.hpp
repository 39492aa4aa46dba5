/**
 * @file spinning_mutex.hpp
 * A lock for short critical sections that many threads take at once (the VMM pool's). std::mutex puts a
 * thread that finds it held to sleep in the kernel, and its holder then pays a system call to wake it at
 * unlock: with critical sections of a few hundred nanoseconds, those hand-overs, not the work, set how many
 * operations per second the threads get through. Here a thread that finds the lock held first retries it for
 * a short while (up to `spin_tries` tries, a pause instruction between them) and sleeps only after that. At
 * most `max_spinners` threads spin at once; the others sleep at once, so that spinning threads never keep the
 * holder, or each other, from a core.
 *
 * Cost: uncontended, one atomic compare-exchange to lock and one to unlock, as std::mutex; contended, the
 * spinner count's two atomic additions and up to spin_tries compare-exchanges before sleeping as std::mutex.
 * Thread-safety: as std::mutex (the analysis of thread_annotations.hpp knows it as a lock).
 */
#pragma once

#include <gpumem/detail/thread_annotations.hpp>

#include <atomic>
#include <mutex>

namespace gpumem::detail {

/** @brief See the file comment. */
class GPUMEM_CAPABILITY("mutex") spinning_mutex {
 public:
  static constexpr int spin_tries = 100;
  static constexpr int max_spinners = 2;

  spinning_mutex() = default;
  spinning_mutex(spinning_mutex const&) = delete;
  spinning_mutex& operator=(spinning_mutex const&) = delete;

  void lock() GPUMEM_ACQUIRE()
  {
    if (mutex_.try_lock()) { return; }
    if (spinners_.load(std::memory_order_relaxed) < max_spinners) {
      spinners_.fetch_add(1, std::memory_order_relaxed);
      for (int i = 0; i < spin_tries; ++i) {
        pause();
        if (mutex_.try_lock()) {
          spinners_.fetch_sub(1, std::memory_order_relaxed);
          return;
        }
      }
      spinners_.fetch_sub(1, std::memory_order_relaxed);
    }
    mutex_.lock();
  }
  void unlock() GPUMEM_RELEASE() { mutex_.unlock(); }
  [[nodiscard]] bool try_lock() GPUMEM_TRY_ACQUIRE(true) { return mutex_.try_lock(); }

 private:
  /// Tells the core that this thread spins (it yields the pipeline to the core's other thread).
  static void pause() noexcept
  {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
  }

  std::mutex mutex_;
  std::atomic<int> spinners_{0};
};

}  // namespace gpumem::detail
