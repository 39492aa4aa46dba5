// A completion marker of the host backend: one point in a stream's work. Signalled (with a timestamp) by
// the stream's worker once all work submitted before it has run. Events and cross-stream waits hold these.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>

namespace gpumem::detail::host {

class completion {
 public:
  using clock = std::chrono::steady_clock;

  void signal() noexcept
  {
    {
      std::lock_guard lock{mutex_};
      when_ = clock::now();
      done_ = true;
    }
    cv_.notify_all();
  }

  void wait()
  {
    std::unique_lock lock{mutex_};
    cv_.wait(lock, [this] { return done_; });
  }

  [[nodiscard]] bool done() const
  {
    std::lock_guard lock{mutex_};
    return done_;
  }

  /// @pre done()
  [[nodiscard]] clock::time_point when() const
  {
    std::lock_guard lock{mutex_};
    return when_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_{false};          // guarded by mutex_; never goes back to false
  clock::time_point when_{};  // guarded by mutex_; set together with done_
};

using completion_ptr = std::shared_ptr<completion>;

}  // namespace gpumem::detail::host
