/**
 * @file worker_team.hpp
 * Threads that run one job together when released, so that thread start-up stays outside a timed region
 * (the `random_mt` workload, bench/workload.hpp).
 */
#pragma once

#include <gpumem/export.hpp>

#include <barrier>
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace gpumem::bench {

/**
 * @brief `threads` workers started once; run(job) releases them all to call job(t), t = 0..threads-1, and
 * returns when every one has finished.
 * Thread-safety: run() is called from one thread at a time. A job must not throw (catch inside it).
 */
class GPUMEM_EXPORT worker_team {
 public:
  explicit worker_team(std::size_t threads);
  ~worker_team();
  worker_team(worker_team const&) = delete;
  worker_team& operator=(worker_team const&) = delete;

  /** @brief Runs job(t) on every worker t; @return the wall seconds from the release to the last finish. */
  double run(std::function<void(std::size_t)> job);

  [[nodiscard]] std::size_t size() const noexcept { return workers_.size(); }

 private:
  std::barrier<> start_;
  std::barrier<> done_;
  std::function<void(std::size_t)> job_;
  bool stop_{false};  // written before start_ is passed; the barrier orders it
  std::vector<std::thread> workers_;
};

/**
 * @brief The first error message any worker reported (jobs must not throw), and whether it was an
 * out-of-memory (so that the caller can report it as one). Thread-safe.
 */
class first_error {
 public:
  /** @brief Keeps `message` unless an earlier one was kept. */
  void set(std::string message, bool out_of_memory = false)
  {
    if (message.empty()) { return; }
    std::lock_guard const lock{mutex_};
    if (message_.empty()) {
      message_ = std::move(message);
      out_of_memory_ = out_of_memory;
    }
  }
  /** @return the kept message (empty: none). */
  [[nodiscard]] std::string get() const
  {
    std::lock_guard const lock{mutex_};
    return message_;
  }
  /** @return whether the kept message reports an out-of-memory. */
  [[nodiscard]] bool out_of_memory() const
  {
    std::lock_guard const lock{mutex_};
    return out_of_memory_;
  }
  /** @return the kept message, and forgets it. */
  [[nodiscard]] std::string take()
  {
    std::lock_guard const lock{mutex_};
    out_of_memory_ = false;
    return std::exchange(message_, {});
  }

 private:
  mutable std::mutex mutex_;
  std::string message_;
  bool out_of_memory_{false};
};

}  // namespace gpumem::bench
