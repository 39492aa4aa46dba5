// A completion marker of the host backend: one point in a stream's work. Signalled (with a timestamp) by
// the stream's worker once all work submitted before it has run. Events and cross-stream waits hold these.
#pragma once

#include <gpumem/detail/thread_annotations.hpp>

#include <chrono>
#include <condition_variable>
#include <memory>

namespace gpumem::detail::host {

class completion {
 public:
  using clock = std::chrono::steady_clock;

  void signal() noexcept
  {
    {
      detail::lock_guard lock{mutex_};
      when_ = clock::now();
      done_ = true;
    }
    cv_.notify_all();
  }

  void wait()
  {
    detail::unique_lock lock{mutex_};
    while (!done_) { lock.wait(cv_); }
  }

  [[nodiscard]] bool done() const
  {
    detail::lock_guard lock{mutex_};
    return done_;
  }

  /// @pre done()
  [[nodiscard]] clock::time_point when() const
  {
    detail::lock_guard lock{mutex_};
    return when_;
  }

 private:
  mutable detail::mutex mutex_;
  std::condition_variable cv_;
  bool done_ GPUMEM_GUARDED_BY(mutex_){false};          // never goes back to false
  clock::time_point when_ GPUMEM_GUARDED_BY(mutex_){};  // set together with done_
};

using completion_ptr = std::shared_ptr<completion>;

}  // namespace gpumem::detail::host
