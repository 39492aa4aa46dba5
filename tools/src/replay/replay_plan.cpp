// replay_plan.hpp: live pointers to slots (reused once freed), stream ids to a bounded pool of streams.
#include "replay/replay_plan.hpp"

#include <gpumem/error.hpp>

#include <algorithm>
#include <exception>
#include <string>

namespace gpumem::detail {

namespace {

constexpr std::uint32_t first_pool_view = 3;  // after the default, legacy and per-thread streams

/// SplitMix64's finaliser: spreads ids that differ in a few bits over the pool.
[[nodiscard]] constexpr std::uint64_t mix(std::uint64_t x) noexcept
{
  x = (x ^ (x >> 30U)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27U)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31U);
}

}  // namespace

replay_planner::replay_planner(std::size_t pool_size, std::size_t lanes)
  : pool_size_{pool_size == 0 ? 1 : pool_size}, free_slots_(lanes == 0 ? 1 : lanes)
{
  pool_.reserve(pool_size_);
  views_ = {cuda_stream_default, cuda_stream_legacy, cuda_stream_per_thread};
}

std::uint32_t replay_planner::pool_stream(std::size_t k)
{
  while (pool_.size() <= k) {
    try {
      pool_.emplace_back();
    } catch (std::exception const& e) {
      std::string const message = "replay: cannot create stream " + std::to_string(pool_.size() + 1) + " of the " +
                                  std::to_string(pool_size_) + " that the log's stream ids are mapped onto: " +
                                  e.what();
      if (auto const* const cuda = dynamic_cast<cuda_error const*>(&e)) { throw cuda_error(cuda->code(), message); }
      throw cuda_error(cudaErrorUnknown, message);
    }
    views_.push_back(pool_.back().view());
  }
  return first_pool_view + static_cast<std::uint32_t>(k);
}

std::uint32_t replay_planner::stream_of(std::uintptr_t id)
{
  if (auto const it = stream_index_.find(id); it != stream_index_.end()) { return it->second; }
  bool const counted = stream_index_.size() < max_counted_stream_ids;
  std::uint32_t index = 0;
  if (id == 0) {
    index = 0;
  } else if (id == reinterpret_cast<std::uintptr_t>(cuda_stream_legacy.value())) {
    index = 1;
  } else if (id == reinterpret_cast<std::uintptr_t>(cuda_stream_per_thread.value())) {
    index = 2;
  } else if (counted) {
    index = pool_stream(pool_ids_++ % pool_size_);
  } else {
    // Not remembered, so its stream must follow from the id alone to keep the id's order.
    index = pool_stream(static_cast<std::size_t>(mix(id) % pool_size_));
  }
  if (counted) { stream_index_.emplace(id, index); }
  return index;
}

std::uint32_t replay_planner::lane_of(std::uint64_t thread)
{
  std::size_t const lanes = free_slots_.size();
  if (lanes == 1) {
    lanes_used_ = 1;
    return 0;
  }
  if (auto const it = thread_lane_.find(thread); it != thread_lane_.end()) { return it->second; }
  std::uint32_t lane = 0;
  if (thread_lane_.size() < max_counted_thread_ids) {
    lane = static_cast<std::uint32_t>(thread_lane_.size() % lanes);
    thread_lane_.emplace(thread, lane);
  } else {
    // Not remembered, so its lane must follow from the id alone to keep the thread's order.
    lane = static_cast<std::uint32_t>(mix(thread) % lanes);
  }
  lanes_used_ = std::max(lanes_used_, std::size_t{lane} + 1);
  return lane;
}

std::size_t replay_planner::take_slot(std::size_t size, std::uint32_t stream, std::uint32_t lane)
{
  std::size_t slot = 0;
  std::vector<std::size_t>& free_slots = free_slots_[lane];
  if (free_slots.empty() && !shared_free_slots_.empty()) {
    free_slots.push_back(shared_free_slots_.front());
    shared_free_slots_.pop_front();
  }
  if (free_slots.empty()) {
    slot = slot_size_.size();
    slot_size_.push_back(size);
    slot_stream_.push_back(stream);
  } else {
    slot = free_slots.back();
    free_slots.pop_back();
    slot_size_[slot] = size;
    slot_stream_[slot] = stream;
  }
  meter_.add(size);
  return slot;
}

void replay_planner::free_slot(std::size_t slot, std::uint32_t stream, std::uint32_t lane, replay_batch& batch)
{
  // The size it was allocated with (a resource needs that one), on the stream given.
  batch.ops.push_back(replay_op{slot_size_[slot], slot, stream, replay_op_kind::deallocate});
  meter_.subtract(slot_size_[slot]);
  std::vector<std::size_t>& free_slots = free_slots_[lane];
  if (free_slots_.size() > 1 && free_slots.size() >= lane_free_slots) {
    shared_free_slots_.push_back(slot);
  } else {
    free_slots.push_back(slot);
  }
}

void replay_planner::plan(std::span<log_event const> events, replay_batch& batch)
{
  batch.ops.clear();
  batch.times.clear();
  batch.lanes.clear();
  bool const lanes = free_slots_.size() > 1;
  for (log_event const& e : events) {
    ++events_;
    std::uint32_t const stream = stream_of(e.stream);
    std::uint32_t const lane = lane_of(e.thread);
    switch (e.action) {
      case log_action::allocate: {
        auto const [it, inserted] = live_.try_emplace(e.pointer, 0);
        if (!inserted) {  // the log lost the free of the block that lived here before
          ++missing_frees_;
          free_slot(it->second, slot_stream_[it->second], lane, batch);
        }
        it->second = take_slot(e.size, stream, lane);
        batch.ops.push_back(replay_op{e.size, it->second, stream, replay_op_kind::allocate});
        break;
      }
      case log_action::free: {
        auto const it = live_.find(e.pointer);
        if (it == live_.end()) {
          ++unknown_frees_;
          break;
        }
        free_slot(it->second, stream, lane, batch);
        live_.erase(it);
        break;
      }
      case log_action::allocate_failure:
        ++log_failures_;
        batch.ops.push_back(replay_op{e.size, 0, stream, replay_op_kind::probe_failure});
        break;
    }
    batch.times.resize(batch.ops.size(), e.time_ns);  // the operations this row added happen at its time
    if (lanes) { batch.lanes.resize(batch.ops.size(), lane); }  // and on its thread's lane
  }
}

}  // namespace gpumem::detail
