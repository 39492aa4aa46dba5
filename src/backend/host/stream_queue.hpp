// An emulated CUDA stream of the host backend: an in-order queue of operations run asynchronously by
// one worker thread. Operations run one at a time, in submission order; the submitting thread never waits
// (as with CUDA, the host returns at once). A failing operation is recorded and reported by the next
// synchronize(), like CUDA's asynchronous errors.
#pragma once

#include "completion.hpp"

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace gpumem::detail::host {

class stream_queue {
 public:
  using operation = std::function<void()>;
  /// A submission captured into a graph: re-submits its work to the stream named at launch.
  using node = std::function<void(void* stream)>;

  enum class role { created, legacy_default, per_thread_default };

  stream_queue(int device, unsigned flags, int priority, role r);
  ~stream_queue();  // runs all work submitted so far, then stops the worker
  stream_queue(stream_queue const&) = delete;
  stream_queue& operator=(stream_queue const&) = delete;

  void submit(operation op);
  /// @return a completion signalled once every operation submitted before it has run.
  [[nodiscard]] completion_ptr submit_marker();
  /// Blocks until every operation submitted so far has run. Rethrows the first failure of an operation.
  void synchronize();
  [[nodiscard]] bool idle();

  // Graph capture: while capturing, stream-ordered calls are recorded as nodes instead of being run.
  [[nodiscard]] bool capturing();
  void begin_capture();                  // @pre !capturing()
  [[nodiscard]] std::vector<node> end_capture();  // @pre capturing()
  /// @return true and records `n` if capturing; false (and does nothing) otherwise.
  [[nodiscard]] bool capture_if_capturing(node const& n);

  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] unsigned flags() const noexcept { return flags_; }
  [[nodiscard]] int priority() const noexcept { return priority_; }
  [[nodiscard]] role kind() const noexcept { return role_; }
  /// Blocking streams synchronise implicitly with the legacy default stream (CUDA's rule).
  [[nodiscard]] bool blocking() const noexcept;

 private:
  void run();

  int const device_;
  unsigned const flags_;
  int const priority_;
  role const role_;

  std::mutex mutex_;
  std::condition_variable work_cv_;   // worker waits for ops_ or stop_
  std::condition_variable idle_cv_;   // synchronize() waits for ops_ empty and !running_
  std::deque<operation> ops_;         // guarded by mutex_
  bool running_{false};               // guarded by mutex_: the worker is executing an operation
  bool stop_{false};                  // guarded by mutex_
  std::exception_ptr failure_;        // guarded by mutex_: first failure since the last synchronize()
  std::unique_ptr<std::vector<node>> capture_;  // guarded by mutex_: non-null while capturing
  std::thread worker_;                // last member: starts after everything above is constructed
};

}  // namespace gpumem::detail::host
