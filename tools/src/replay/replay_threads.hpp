// The concurrent half of a replay on several threads (internal to src/replay; replay.hpp states the
// contract): each batch the planner made (replay_plan.hpp) is split by lane, one worker thread per lane,
// and the workers run their operations at once, each in log order. A block freed on another lane than the
// one that allocated it must not be freed before it is allocated: every slot counts the operations done on
// it, and the operation numbered k on a slot waits until that count is k when its predecessor ran on
// another lane (spinning, then yielding). The wait comes before the resource's call, never inside it.
//
// Why it cannot deadlock: dependencies point from earlier rows to later ones, and every worker runs its
// operations in row order, so the earliest operation not yet done always has its predecessors done and
// is next on its worker.
#pragma once

#include <gpumem/bench/worker_team.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/replay/replay.hpp>

#include "replay/replay_execute.hpp"
#include "replay/replay_plan.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace gpumem::detail {

/**
 * @brief Checks replay_options::threads and what it needs: at most max_replay_threads, no timeline, and a
 * resource that may be called concurrently (replay_options::resource_thread_safe).
 * @param resource_name how the error names the resource.
 * @throws gpumem::logic_error naming the problem (and the resource, when it is not thread-safe).
 */
void check_replay_threads(replay_options const& options, std::string_view resource_name);

/// @return the dynamic type of `resource`, readable (demangled where the compiler allows).
[[nodiscard]] std::string resource_type_name(mr::device_memory_resource const& resource);

/**
 * @brief Worker threads that replay planned batches, one per lane, and the slot table they share.
 * Thread-safety: prepare(), run() and release_all() are called from one thread, one at a time; run() is
 * what runs the workers.
 */
class replay_workers {
 public:
  replay_workers(mr::device_memory_resource& resource, replay_planner const& planner) noexcept
    : resource_{resource}, planner_{planner}
  {
  }

  /**
   * @brief Splits `batch` by lane (replay_batch::lanes) and numbers each slot's operations; grows the slot
   * table to `slot_count` and starts workers up to `lanes` (those running are kept: a new team only when
   * the log shows more threads). Untimed.
   * @pre no run() in progress; batch.lanes has an entry per operation, each below `lanes`.
   */
  void prepare(replay_batch const& batch, std::size_t slot_count, std::size_t lanes);

  /**
   * @brief Runs the prepared batch on every worker at once and returns when all have finished.
   * @return the wall time from the workers' release to the last one's finish.
   * @throws the first exception an operation threw (gpumem::cuda_error): the other workers stop at their
   *         next wait, and every worker has stopped before it is thrown.
   */
  [[nodiscard]] std::chrono::steady_clock::duration run();

  /// Frees every block still held (replay_execute.hpp's release_held). @pre no run() in progress.
  void release_all() noexcept;

  /// @return the counts of all workers together.
  [[nodiscard]] replay_counts counts() const noexcept;
  /// @return the most bytes the workers held at once (replay_result::held_peak_bytes), over every run().
  [[nodiscard]] std::size_t held_peak_bytes() const noexcept
  {
    return static_cast<std::size_t>(held_bytes_.peak.load(std::memory_order_relaxed));
  }
  /// @return operations that found their predecessor on another lane not yet done, and waited for it.
  [[nodiscard]] std::size_t waits() const noexcept;
  /// @return the worker threads started.
  [[nodiscard]] std::size_t workers() const noexcept { return lanes_.size(); }

 private:
  struct lane_op {
    replay_op op;
    std::uint64_t seq;  // operations on op.slot before this one (unused by probe_failure)
    bool wait;          // its predecessor on the slot ran on another lane
  };
  // One worker's share; aligned so that workers' counters never share a cache line.
  struct alignas(64) lane {
    std::vector<lane_op> ops;
    replay_counts counts;
    std::size_t waits{0};
    std::exception_ptr error;
  };

  // The bytes of blocks whose allocation has returned and whose free has not been called yet, and their peak:
  // one atomic add per operation (lines of their own, apart from the lanes').
  struct alignas(64) held_counter {
    std::atomic<std::int64_t> now{0};
    std::atomic<std::int64_t> peak{0};
  };

  void work(lane& l) noexcept;
  void note_allocated(std::size_t bytes) noexcept;
  /// Waits until `slot` has `seq` operations done. @return false when the batch is aborted meanwhile.
  [[nodiscard]] bool wait_for(std::size_t slot, std::uint64_t seq) const noexcept;

  mr::device_memory_resource& resource_;
  replay_planner const& planner_;
  // Per slot: the block it holds (written by the lane whose turn it is, per done_), the operations done on
  // it (published with release after each; waited for with acquire), and, for planning, the operations
  // planned on it and the lane of the last one. Invariant between batches: done_[s] == next_seq_[s].
  std::vector<replay_held> held_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> done_;
  std::size_t done_capacity_{0};
  std::vector<std::uint64_t> next_seq_;
  std::vector<std::uint32_t> last_lane_;
  std::vector<lane> lanes_;
  std::atomic<bool> abort_{false};  // set by a worker whose operation threw; read by waiting workers
  held_counter held_bytes_;
  std::unique_ptr<bench::worker_team> team_;  // last member: its threads stop before the rest is destroyed
};

}  // namespace gpumem::detail
