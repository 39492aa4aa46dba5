// Test helper: a gate that a host function submitted to a stream waits on, so a test can hold a stream's
// work back and observe what the library does meanwhile, then release it. Works on both backends.
#pragma once

#include <gpumem/backend/backend.hpp>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace gpumem::test {

class gate {
 public:
  /// Submits "wait until released" to `stream`.
  void hold(cudaStream_t stream) { detail::get_backend().launch_host_func(stream, &gate::wait_on, this); }
  void release()
  {
    {
      std::lock_guard lock{mutex_};
      open_ = true;
    }
    cv_.notify_all();
  }

 private:
  static void wait_on(void* self)
  {
    auto* g = static_cast<gate*>(self);
    std::unique_lock lock{g->mutex_};
    g->cv_.wait(lock, [g] { return g->open_; });
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  bool open_{false};
};

/// Submits a host function to `stream` that runs `fn()`; `fn` must outlive the stream's work.
template <class Fn>
void on_stream(cudaStream_t stream, Fn& fn)
{
  detail::get_backend().launch_host_func(stream, [](void* f) { (*static_cast<Fn*>(f))(); }, &fn);
}

[[nodiscard]] inline bool on_host_backend() { return detail::get_backend().kind() == backend_kind::host; }

/// Polls `condition` for up to `timeout`. @return whether it became true.
template <class Condition>
[[nodiscard]] bool eventually(Condition condition, std::chrono::milliseconds timeout = std::chrono::seconds{5})
{
  auto const deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) { return true; }
    std::this_thread::sleep_for(std::chrono::milliseconds{1});
  }
  return condition();
}

}  // namespace gpumem::test
