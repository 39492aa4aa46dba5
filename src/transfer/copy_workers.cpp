// copy_workers: see copy_workers.hpp. One mutex guards the queue and every job's counters; a job lives on
// its caller's stack, and run() returns only after the last task's end was recorded under the mutex, so no
// worker touches a job after its caller has moved on.
#include "transfer/copy_workers.hpp"

#include <algorithm>
#include <exception>
#include <utility>

namespace gpumem::detail {

/// One run() call. Invariant (under mutex_): finished <= next <= count; queued while next < count.
struct copy_workers::job {
  job(std::function<void(std::size_t)> const& t, std::size_t n) : task{&t}, count{n} {}

  std::function<void(std::size_t)> const* task;
  std::size_t count;
  std::size_t next{0};         // guarded by mutex_: tasks claimed so far (the next one to claim)
  std::size_t finished{0};     // guarded by mutex_: tasks that have returned
  std::exception_ptr failure;  // guarded by mutex_: the first exception a task threw
  std::condition_variable done_cv;  // the caller waits here for finished == count
};

copy_workers::~copy_workers()
{
  {
    std::lock_guard const lock{mutex_};
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& thread : threads_) { thread.join(); }
}

std::size_t copy_workers::claim(job& j)
{
  std::size_t const index = j.next++;
  if (j.next == j.count) {
    if (auto const it = std::find(queue_.begin(), queue_.end(), &j); it != queue_.end()) { queue_.erase(it); }
  }
  return index;
}

void copy_workers::execute(job& j, std::size_t index)
{
  std::exception_ptr failure;
  try {
    (*j.task)(index);
  } catch (...) {
    failure = std::current_exception();
  }
  std::lock_guard const lock{mutex_};
  if (failure && !j.failure) { j.failure = std::move(failure); }
  // Notified under the lock: the caller cannot return (and destroy the job) before this thread lets go.
  if (++j.finished == j.count) { j.done_cv.notify_all(); }
}

void copy_workers::work()
{
  std::unique_lock lock{mutex_};
  for (;;) {
    work_cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) { return; }  // stop_, and nothing left to do
    job& j = *queue_.front();
    std::size_t const index = claim(j);
    lock.unlock();
    execute(j, index);
    lock.lock();
  }
}

void copy_workers::run(std::size_t count, std::function<void(std::size_t)> const& task)
{
  if (count == 0) { return; }
  if (count == 1) {
    task(0);
    return;
  }
  job j{task, count};
  std::unique_lock lock{mutex_};
  std::size_t const helpers = std::min(count - 1, max_threads);
  // Grow first: if a thread cannot be started, nothing of this job has been queued yet.
  while (threads_.size() < helpers) { threads_.emplace_back([this] { work(); }); }
  queue_.push_back(&j);
  lock.unlock();
  for (std::size_t i = 0; i < helpers; ++i) { work_cv_.notify_one(); }
  lock.lock();
  // The caller runs whatever no worker has claimed yet.
  while (j.next < j.count) {
    std::size_t const index = claim(j);
    lock.unlock();
    execute(j, index);
    lock.lock();
  }
  j.done_cv.wait(lock, [&j] { return j.finished == j.count; });
  if (j.failure) { std::rethrow_exception(j.failure); }
}

std::size_t copy_workers::thread_count()
{
  std::lock_guard const lock{mutex_};
  return threads_.size();
}

copy_workers& get_copy_workers()
{
  static auto* const workers = new copy_workers{};  // never destroyed: copies may run from static destructors
  return *workers;
}

}  // namespace gpumem::detail
