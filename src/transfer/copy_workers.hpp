// A small persistent pool of host threads for the staged copies (transfer.hpp, staged_copy.cpp), which
// spread their host-side memcpy into and out of pinned staging chunks over it. Fork-join only:
// run(count, task) calls task(0) .. task(count - 1), each once, and returns when every call has returned.
//
// The calling thread takes part: it claims the tasks that no worker has started yet, so run() completes even
// when every worker is busy with another caller's tasks (no task waits for another task), and a task may
// itself call run() without deadlock. Workers are created on demand (count - 1 of them at most, never more
// than max_threads) and then kept, parked on a condition variable; nothing else runs on them.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gpumem::detail {

class copy_workers {
 public:
  /// The most worker threads a pool creates (transfer_config::threads is at most 64, the caller included).
  static constexpr std::size_t max_threads = 63;

  copy_workers() = default;
  /// Stops and joins the workers. @pre no run() is in progress.
  ~copy_workers();
  copy_workers(copy_workers const&) = delete;
  copy_workers& operator=(copy_workers const&) = delete;
  copy_workers(copy_workers&&) = delete;
  copy_workers& operator=(copy_workers&&) = delete;

  /**
   * @brief Calls task(i) once for each i in [0, count), on up to count - 1 workers and the calling thread,
   * and returns when every call has returned.
   * Thread-safety: any number of threads may call run() at once; their tasks share the workers.
   * @throws the first exception a task threw (std::bad_alloc or std::system_error if the job cannot be set
   *         up), after every task of this call has returned. The other tasks still run: a task that should
   *         stop early when another fails checks a flag of its own.
   */
  void run(std::size_t count, std::function<void(std::size_t)> const& task);

  /** @return the number of worker threads started so far. */
  [[nodiscard]] std::size_t thread_count();

 private:
  struct job;

  /// A worker's loop: claims a task of the oldest job with unclaimed tasks, runs it, repeats.
  void work();
  /// Claims the next task of `j`; removes `j` from the queue when that was its last. Caller holds mutex_.
  [[nodiscard]] std::size_t claim(job& j);
  /// Runs task `index` of `j` and records its end (and its exception). Called without mutex_.
  void execute(job& j, std::size_t index);

  std::mutex mutex_;
  std::condition_variable work_cv_;  // workers wait for queue_ non-empty or stop_
  std::deque<job*> queue_;           // guarded by mutex_: jobs with unclaimed tasks, oldest first
  bool stop_{false};                 // guarded by mutex_
  std::vector<std::thread> threads_;  // guarded by mutex_ (grown under it; joined by the destructor)
};

/** @brief The process's pool, created on first use and never destroyed (like the default pinned pool). */
[[nodiscard]] copy_workers& get_copy_workers();

}  // namespace gpumem::detail
