/**
 * @file spinning_mutex.hpp
 * A lock for short critical sections that many threads take at once (the VMM pool's). A lock that puts a
 * thread that finds it held to sleep in the kernel at once makes its holder pay a system call to wake it at
 * unlock: with critical sections of a few hundred nanoseconds, those hand-overs, not the work, set how many
 * operations per second the threads get through. Here a thread that finds the lock held first retries it for
 * a short while (up to `spin_tries` tries, a pause instruction between them) and sleeps only after that. At
 * most `max_spinners` threads spin at once; the others sleep at once, so that spinning threads never keep the
 * holder, or each other, from a core.
 *
 * The lock is one 32-bit atomic word: 0 free, 1 held, 2 held with sleepers possible. A sleeper waits on the
 * word (a futex on Linux, std::atomic::wait elsewhere) after setting it to 2, and an unlock that finds 2 wakes one.
 *
 * Cost: uncontended, one atomic compare-exchange to lock and one atomic exchange to unlock, inline, with no
 * call into the C library; contended, the spinner count's two atomic additions and up to spin_tries loads
 * and compare-exchanges before sleeping; an unlock with sleepers wakes one (a system call).
 * Thread-safety: as std::mutex (the analysis of thread_annotations.hpp knows it as a lock). Not recursive;
 * unlock() only by the holder.
 */
#pragma once

#include <gpumem/detail/thread_annotations.hpp>

#include <atomic>
#include <cstdint>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

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
    if (try_lock()) { return; }
    lock_contended();
  }
  void unlock() GPUMEM_RELEASE()
  {
    if (state_.exchange(free, std::memory_order_release) == contended) { wake_one(); }
  }
  [[nodiscard]] bool try_lock() GPUMEM_TRY_ACQUIRE(true)
  {
    std::uint32_t expected = free;
    return state_.compare_exchange_strong(expected, held, std::memory_order_acquire, std::memory_order_relaxed);
  }

 private:
  static constexpr std::uint32_t free = 0;
  static constexpr std::uint32_t held = 1;
  static constexpr std::uint32_t contended = 2;  // held, and a thread may sleep on the word

  /// The lock's slow path: spin (when fewer than max_spinners do), then sleep until it is ours.
  void lock_contended() GPUMEM_ACQUIRE() GPUMEM_NO_THREAD_SAFETY_ANALYSIS
  {
    if (spinners_.load(std::memory_order_relaxed) < max_spinners) {
      spinners_.fetch_add(1, std::memory_order_relaxed);
      for (int i = 0; i < spin_tries; ++i) {
        pause();
        if (state_.load(std::memory_order_relaxed) == free && try_lock()) {
          spinners_.fetch_sub(1, std::memory_order_relaxed);
          return;
        }
      }
      spinners_.fetch_sub(1, std::memory_order_relaxed);
    }
    // Marking the word contended before sleeping makes the holder's unlock wake a sleeper. Taking it with 2
    // (not 1) may cost one needless wake later, never a lost one.
    while (state_.exchange(contended, std::memory_order_acquire) != free) { sleep_while_contended(); }
  }

  /// Sleeps until an unlock wakes this thread, or at once when the word is no longer `contended`.
  void sleep_while_contended() noexcept
  {
#if defined(__linux__)
    // The futex itself: std::atomic::wait spins and yields first, and keeps a count of waiters in a shared table.
    (void)syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&state_), FUTEX_WAIT_PRIVATE, contended, nullptr, nullptr, 0);
#else
    state_.wait(contended, std::memory_order_relaxed);
#endif
  }
  /// Wakes one thread sleeping on the word.
  void wake_one() noexcept
  {
#if defined(__linux__)
    (void)syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&state_), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
#else
    state_.notify_one();
#endif
  }

  /// Tells the core that this thread spins (it yields the pipeline to the core's other thread).
  static void pause() noexcept
  {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
  }

  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t) &&
                std::atomic<std::uint32_t>::is_always_lock_free, "the futex is the atomic word itself");
  std::atomic<std::uint32_t> state_{free};
  std::atomic<int> spinners_{0};
};

}  // namespace gpumem::detail
