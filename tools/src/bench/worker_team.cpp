// bench/worker_team.hpp: workers parked on a barrier between jobs.
#include <gpumem/bench/worker_team.hpp>

#include <chrono>
#include <utility>

namespace gpumem::bench {

worker_team::worker_team(std::size_t threads)
  : start_{static_cast<std::ptrdiff_t>(threads + 1)}, done_{static_cast<std::ptrdiff_t>(threads + 1)}
{
  workers_.reserve(threads);
  for (std::size_t t = 0; t < threads; ++t) {
    workers_.emplace_back([this, t] {
      for (;;) {
        start_.arrive_and_wait();
        if (stop_) { return; }
        job_(t);
        done_.arrive_and_wait();
      }
    });
  }
}

worker_team::~worker_team()
{
  stop_ = true;
  start_.arrive_and_wait();
  for (auto& w : workers_) { w.join(); }
}

double worker_team::run(std::function<void(std::size_t)> job)
{
  job_ = std::move(job);
  auto const start = std::chrono::steady_clock::now();
  start_.arrive_and_wait();
  done_.arrive_and_wait();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace gpumem::bench
