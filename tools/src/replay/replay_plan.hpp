// The planning half of a replay (internal to src/replay; replay.cpp runs the plan): a log's rows, batch by
// batch, become operations on numbered slots, so that the timed loop is a walk over a flat array. What it
// keeps from one batch to the next is bounded by the log's live blocks and its streams, never by its length:
// a slot is reused once its block is freed, and the log's stream ids map onto a bounded pool of streams.
// For a replay on several threads, the log's thread ids map onto lanes (one worker thread each) the same way,
// and each lane reuses first the slots its own frees gave back, so that slot reuse seldom makes one worker
// wait for another (replay_threads.hpp): a lane keeps up to lane_free_slots of them, and gives the rest to
// a queue that any lane takes from, oldest first, when its own are used up. So a lane that only frees what
// others allocate (a producer and a consumer thread) does not make the slot table grow with the log.
#pragma once

#include <gpumem/cuda_stream.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/replay/allocation_log.hpp>

#include "replay/live_bytes.hpp"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <unordered_map>
#include <vector>

namespace gpumem::detail {

enum class replay_op_kind : std::uint8_t {
  allocate,       // slots[slot] = allocate(size, stream)
  deallocate,     // deallocate(slots[slot], size, stream)
  probe_failure,  // an `allocate failure` row: allocate(size, stream), then at once deallocate
};

struct replay_op {
  std::size_t size;
  std::size_t slot;      // unused by probe_failure
  std::uint32_t stream;  // index for replay_planner::stream()
  replay_op_kind kind;
};

/// One batch's operations, the log time of the row each came from (for timelines), and, when the planner
/// has more than one lane, the lane of each (the worker that runs it; empty with one lane).
struct replay_batch {
  std::vector<replay_op> ops;
  std::vector<std::int64_t> times;
  std::vector<std::uint32_t> lanes;
};

class replay_planner {
 public:
  /// Stream ids counted exactly up to this many; further new ids map onto the pool by their hash.
  static constexpr std::size_t max_counted_stream_ids = std::size_t{1} << 16;
  /// Thread ids mapped exactly up to this many; further new ids map onto the lanes by their hash.
  static constexpr std::size_t max_counted_thread_ids = std::size_t{1} << 16;
  /// With more than one lane: the free slots a lane keeps for its own allocations; the rest are shared.
  static constexpr std::size_t lane_free_slots = 256;

  /**
   * @param pool_size the most streams the log's stream ids (other than 0x0, 0x1 and 0x2) are mapped onto,
   *        in the order the ids first appear, round robin, so that each id keeps its order. @pre > 0.
   * @param lanes the most lanes the log's thread ids map onto, the same way (round robin in the order the
   *        ids first appear; beyond max_counted_thread_ids distinct ids, by their hash). 1: every operation
   *        on lane 0 and replay_batch::lanes left empty, the single-threaded replay. 0 counts as 1.
   */
  explicit replay_planner(std::size_t pool_size, std::size_t lanes = 1);

  /**
   * @brief Replaces `batch` with the operations for `events`. Streams the rows need are created here.
   * @throws gpumem::cuda_error when a stream cannot be created.
   */
  void plan(std::span<log_event const> events, replay_batch& batch);

  /// @return the stream of an operation. @pre index came from an operation of this planner.
  [[nodiscard]] cuda_stream_view stream(std::uint32_t index) const noexcept { return views_[index]; }
  /// @return the number of slots an executor needs for the operations planned so far.
  [[nodiscard]] std::size_t slot_count() const noexcept { return slot_size_.size(); }

  [[nodiscard]] std::size_t events() const noexcept { return events_; }
  [[nodiscard]] std::size_t unknown_frees() const noexcept { return unknown_frees_; }
  [[nodiscard]] std::size_t missing_frees() const noexcept { return missing_frees_; }
  [[nodiscard]] std::size_t log_failures() const noexcept { return log_failures_; }
  /// @return the blocks the log allocated and has not freed (so far).
  [[nodiscard]] std::size_t live_blocks() const noexcept { return live_.size(); }
  /// @return the distinct stream ids seen (exact up to max_counted_stream_ids).
  [[nodiscard]] std::size_t stream_ids() const noexcept { return stream_index_.size(); }
  [[nodiscard]] std::size_t peak_live_bytes() const noexcept { return meter_.peak(); }
  /// @return the lanes some operation was planned on so far (0 before the first row; at most `lanes`).
  [[nodiscard]] std::size_t lanes_used() const noexcept { return lanes_used_; }

 private:
  [[nodiscard]] std::uint32_t stream_of(std::uintptr_t id);
  [[nodiscard]] std::uint32_t pool_stream(std::size_t k);
  [[nodiscard]] std::uint32_t lane_of(std::uint64_t thread);
  [[nodiscard]] std::size_t take_slot(std::size_t size, std::uint32_t stream, std::uint32_t lane);
  void free_slot(std::size_t slot, std::uint32_t stream, std::uint32_t lane, replay_batch& batch);

  std::size_t pool_size_;
  std::vector<cuda_stream> pool_;          // created as ids need them; destroyed with the planner
  std::vector<cuda_stream_view> views_;    // [0] default, [1] legacy, [2] per-thread, then pool_
  std::unordered_map<std::uintptr_t, std::uint32_t> stream_index_;  // log stream id -> views_ index
  std::size_t pool_ids_{0};                // ids mapped onto the pool so far (round robin)

  std::unordered_map<std::uintptr_t, std::size_t> live_;  // log pointer -> slot
  std::vector<std::size_t> slot_size_;     // per slot: its block's size (while live)
  std::vector<std::uint32_t> slot_stream_; // per slot: the stream its block was allocated on
  std::vector<std::vector<std::size_t>> free_slots_;  // per lane: slots its frees gave back, for reuse
  std::deque<std::size_t> shared_free_slots_;         // lanes > 1: freed slots beyond a lane's own, oldest first
  std::unordered_map<std::uint64_t, std::uint32_t> thread_lane_;  // log thread id -> lane (lanes > 1 only)
  std::size_t lanes_used_{0};
  live_bytes_meter meter_;

  std::size_t events_{0};
  std::size_t unknown_frees_{0};
  std::size_t missing_frees_{0};
  std::size_t log_failures_{0};
};

}  // namespace gpumem::detail
