// An emulated CUDA stream of the host backend: an in-order queue of operations run asynchronously by
// one worker thread. Operations run one at a time, in submission order; the submitting thread never waits
// (as with CUDA, the host returns at once). A failing operation is recorded and reported by the next
// synchronize(), like CUDA's asynchronous errors.
#pragma once

#include "completion.hpp"

#include <gpumem/detail/thread_annotations.hpp>

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <thread>

namespace gpumem::detail::host {

class capture_sequence;

class stream_queue {
 public:
  using operation = std::function<void()>;

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

  // Stream capture (capture_sequence.hpp): the capture this stream last took part in, or null. The stream
  // is in capture mode only while that capture is not over: a capture may end while another thread still
  // holds it from here, so callers ask the capture, not this pointer.
  [[nodiscard]] std::shared_ptr<capture_sequence> capture();
  void set_capture(std::shared_ptr<capture_sequence> capture);
  /// Forgets `which` if it is this stream's capture.
  void leave_capture(capture_sequence const* which);

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

  detail::mutex mutex_;
  std::condition_variable work_cv_;   // worker waits for ops_ or stop_
  std::condition_variable idle_cv_;   // synchronize() waits for ops_ empty and !running_
  std::deque<operation> ops_ GPUMEM_GUARDED_BY(mutex_);
  bool running_ GPUMEM_GUARDED_BY(mutex_){false};  // the worker is executing an operation
  bool stop_ GPUMEM_GUARDED_BY(mutex_){false};
  std::exception_ptr failure_ GPUMEM_GUARDED_BY(mutex_);  // first failure since the last synchronize()
  std::shared_ptr<capture_sequence> capture_ GPUMEM_GUARDED_BY(mutex_);
  std::thread worker_;                // last member: starts after everything above is constructed
};

}  // namespace gpumem::detail::host
