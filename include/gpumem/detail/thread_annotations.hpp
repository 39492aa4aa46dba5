/**
 * @file thread_annotations.hpp
 * Locks the compiler checks: clang's thread-safety analysis (-Wthread-safety) proves that every member
 * marked GPUMEM_GUARDED_BY(m) is touched only with `m` held, and that every function marked
 * GPUMEM_REQUIRES(m) is called only with it held. The `thread-safety` CMake preset builds the library with
 * clang and makes every such finding an error. Under other compilers the macros expand to nothing and the
 * wrappers are std::mutex, std::shared_mutex and their locks under other names, at the same cost.
 *
 * The macros follow clang's documented mutex.h (clang.llvm.org/docs/ThreadSafetyAnalysis.html), as
 * abseil's thread_annotations.h does. The analysis cannot follow locks taken in a loop over a container,
 * or a capability reached through a lambda's captures; code that does so says why and uses the escape,
 * GPUMEM_NO_THREAD_SAFETY_ANALYSIS, or mutex::assert_held().
 */
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>

#if defined(__clang__)
#define GPUMEM_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define GPUMEM_THREAD_ANNOTATION(x)
#endif

/// On a class: its objects are locks (capabilities) named `x` in diagnostics.
#define GPUMEM_CAPABILITY(x) GPUMEM_THREAD_ANNOTATION(capability(x))
/// On a class: an RAII object that holds the capabilities its constructor acquires until it is destroyed.
#define GPUMEM_SCOPED_CAPABILITY GPUMEM_THREAD_ANNOTATION(scoped_lockable)
/// On a data member: read and written only with `x` held (reading with `x` held shared suffices).
#define GPUMEM_GUARDED_BY(x) GPUMEM_THREAD_ANNOTATION(guarded_by(x))
/// On a pointer member: what it points to is read and written only with `x` held.
#define GPUMEM_PT_GUARDED_BY(x) GPUMEM_THREAD_ANNOTATION(pt_guarded_by(x))
/// On a lock member: taken before the locks named, never while holding them.
#define GPUMEM_ACQUIRED_BEFORE(...) GPUMEM_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
/// On a function: called only with the locks held (exclusively), and returns with them held.
#define GPUMEM_REQUIRES(...) GPUMEM_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
/// On a function: called only with the locks held, at least shared.
#define GPUMEM_REQUIRES_SHARED(...) GPUMEM_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
/// On a function: takes the locks (none named: the object itself) and returns with them held.
#define GPUMEM_ACQUIRE(...) GPUMEM_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define GPUMEM_ACQUIRE_SHARED(...) GPUMEM_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
/// On a function: releases the locks (none named: the object itself).
#define GPUMEM_RELEASE(...) GPUMEM_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define GPUMEM_RELEASE_SHARED(...) GPUMEM_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
/// On a function: releases the locks, however they are held (a scoped lock's destructor).
#define GPUMEM_RELEASE_GENERIC(...) GPUMEM_THREAD_ANNOTATION(release_generic_capability(__VA_ARGS__))
/// On a function: takes the lock when it returns `result`.
#define GPUMEM_TRY_ACQUIRE(...) GPUMEM_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
/// On a function: called only without the locks held (it takes them itself).
#define GPUMEM_EXCLUDES(...) GPUMEM_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
/// On a function: checks at run time that the lock is held; the analysis assumes it from then on.
#define GPUMEM_ASSERT_CAPABILITY(x) GPUMEM_THREAD_ANNOTATION(assert_capability(x))
/// On a function: returns a reference to the lock `x`.
#define GPUMEM_RETURN_CAPABILITY(x) GPUMEM_THREAD_ANNOTATION(lock_returned(x))
/// On a function: not analysed. Every use says why the analysis cannot follow it.
#define GPUMEM_NO_THREAD_SAFETY_ANALYSIS GPUMEM_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace gpumem::detail {

/**
 * @brief std::mutex that the analysis knows as a lock.
 * Thread-safety: as std::mutex.
 */
class GPUMEM_CAPABILITY("mutex") mutex {
 public:
  mutex() = default;
  mutex(mutex const&) = delete;
  mutex& operator=(mutex const&) = delete;

  void lock() GPUMEM_ACQUIRE() { mutex_.lock(); }
  void unlock() GPUMEM_RELEASE() { mutex_.unlock(); }
  [[nodiscard]] bool try_lock() GPUMEM_TRY_ACQUIRE(true) { return mutex_.try_lock(); }
  /// Tells the analysis that the calling thread holds the lock (where it cannot see it taken).
  void assert_held() const GPUMEM_ASSERT_CAPABILITY(this) {}

 private:
  friend class unique_lock;  // waits on a std::condition_variable, which needs the std::mutex itself
  std::mutex mutex_;
};

/**
 * @brief std::shared_mutex that the analysis knows as a lock with shared (reader) holders.
 * Thread-safety: as std::shared_mutex.
 */
class GPUMEM_CAPABILITY("shared_mutex") shared_mutex {
 public:
  shared_mutex() = default;
  shared_mutex(shared_mutex const&) = delete;
  shared_mutex& operator=(shared_mutex const&) = delete;

  void lock() GPUMEM_ACQUIRE() { mutex_.lock(); }
  void unlock() GPUMEM_RELEASE() { mutex_.unlock(); }
  void lock_shared() GPUMEM_ACQUIRE_SHARED() { mutex_.lock_shared(); }
  void unlock_shared() GPUMEM_RELEASE_SHARED() { mutex_.unlock_shared(); }

 private:
  std::shared_mutex mutex_;
};

/**
 * @brief std::lock_guard for any lock the analysis knows (mutex, shared_mutex, or a class of its own
 * marked GPUMEM_CAPABILITY with lock() and unlock()).
 */
template <class Mutex>
class GPUMEM_SCOPED_CAPABILITY lock_guard {
 public:
  explicit lock_guard(Mutex& m) GPUMEM_ACQUIRE(m) : mutex_{m} { mutex_.lock(); }
  ~lock_guard() GPUMEM_RELEASE() { mutex_.unlock(); }
  lock_guard(lock_guard const&) = delete;
  lock_guard& operator=(lock_guard const&) = delete;

 private:
  Mutex& mutex_;
};

/// std::shared_lock over a shared_mutex: holds it shared until destroyed.
class GPUMEM_SCOPED_CAPABILITY shared_lock {
 public:
  explicit shared_lock(shared_mutex& m) GPUMEM_ACQUIRE_SHARED(m) : mutex_{m} { mutex_.lock_shared(); }
  ~shared_lock() GPUMEM_RELEASE() { mutex_.unlock_shared(); }
  shared_lock(shared_lock const&) = delete;
  shared_lock& operator=(shared_lock const&) = delete;

 private:
  shared_mutex& mutex_;
};

/**
 * @brief std::unique_lock over a mutex: held from construction, may be released and taken again, and waits
 * on a std::condition_variable. The analysis treats the lock as held across wait() (as the caller sees it).
 */
class GPUMEM_SCOPED_CAPABILITY unique_lock {
 public:
  explicit unique_lock(mutex& m) GPUMEM_ACQUIRE(m) : lock_{m.mutex_} {}
  ~unique_lock() GPUMEM_RELEASE() = default;
  unique_lock(unique_lock const&) = delete;
  unique_lock& operator=(unique_lock const&) = delete;

  void lock() GPUMEM_ACQUIRE() { lock_.lock(); }
  void unlock() GPUMEM_RELEASE() { lock_.unlock(); }

  /// Releases the lock until `cv` is notified (or wakes spuriously), then takes it again. Callers loop
  /// on their condition: a predicate passed here would run where the analysis cannot see the lock held.
  void wait(std::condition_variable& cv) { cv.wait(lock_); }
  /// As wait(cv), until `deadline` at the latest.
  template <class Clock, class Duration>
  std::cv_status wait_until(std::condition_variable& cv, std::chrono::time_point<Clock, Duration> const& deadline)
  {
    return cv.wait_until(lock_, deadline);
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

/**
 * @brief The reverse of lock_guard: releases a held lock for the scope (around a call that may block or call
 * back in, such as an upstream allocation) and takes it again at scope exit, by exception too.
 */
class GPUMEM_SCOPED_CAPABILITY unlock_guard {
 public:
  explicit unlock_guard(mutex& m) GPUMEM_RELEASE(m) : mutex_{m} { mutex_.unlock(); }
  ~unlock_guard() GPUMEM_RELEASE_GENERIC() { mutex_.lock(); }
  unlock_guard(unlock_guard const&) = delete;
  unlock_guard& operator=(unlock_guard const&) = delete;

 private:
  mutex& mutex_;
};

}  // namespace gpumem::detail
