// stream_queue: see stream_queue.hpp.
#include "stream_queue.hpp"

#include <cuda_runtime_api.h>

#include <utility>

namespace gpumem::detail::host {

stream_queue::stream_queue(int device, unsigned flags, int priority, role r)
  : device_{device}, flags_{flags}, priority_{priority}, role_{r}, worker_{[this] { run(); }}
{
}

stream_queue::~stream_queue()
{
  {
    detail::lock_guard lock{mutex_};
    stop_ = true;
  }
  work_cv_.notify_all();
  worker_.join();
}

bool stream_queue::blocking() const noexcept
{
  return role_ != role::legacy_default && (flags_ & cudaStreamNonBlocking) == 0;
}

void stream_queue::submit(operation op)
{
  {
    detail::lock_guard lock{mutex_};
    ops_.push_back(std::move(op));
  }
  work_cv_.notify_one();
}

completion_ptr stream_queue::submit_marker()
{
  auto marker = std::make_shared<completion>();
  submit([marker] { marker->signal(); });
  return marker;
}

void stream_queue::synchronize()
{
  detail::unique_lock lock{mutex_};
  while (!ops_.empty() || running_) { lock.wait(idle_cv_); }
  if (failure_) { std::rethrow_exception(std::exchange(failure_, nullptr)); }
}

bool stream_queue::idle()
{
  detail::lock_guard lock{mutex_};
  return ops_.empty() && !running_;
}

std::shared_ptr<capture_sequence> stream_queue::capture()
{
  detail::lock_guard lock{mutex_};
  return capture_;
}

void stream_queue::set_capture(std::shared_ptr<capture_sequence> capture)
{
  std::shared_ptr<capture_sequence> previous;  // released outside the lock
  detail::lock_guard lock{mutex_};
  previous = std::exchange(capture_, std::move(capture));
}

void stream_queue::leave_capture(capture_sequence const* which)
{
  std::shared_ptr<capture_sequence> previous;  // released outside the lock
  detail::lock_guard lock{mutex_};
  if (capture_.get() == which) { previous = std::move(capture_); }
}

void stream_queue::run()
{
  detail::unique_lock lock{mutex_};
  for (;;) {
    while (!stop_ && ops_.empty()) { lock.wait(work_cv_); }
    if (ops_.empty()) { break; }  // stop_ and drained: all submitted work has run
    operation op = std::move(ops_.front());
    ops_.pop_front();
    running_ = true;
    lock.unlock();
    std::exception_ptr failed;
    try {
      op();
    } catch (...) {
      failed = std::current_exception();
    }
    op = nullptr;  // release captured state outside the lock
    lock.lock();
    running_ = false;
    if (failed && !failure_) { failure_ = failed; }
    if (ops_.empty()) { idle_cv_.notify_all(); }
  }
  idle_cv_.notify_all();
}

}  // namespace gpumem::detail::host
