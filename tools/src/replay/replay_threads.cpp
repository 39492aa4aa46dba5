// replay_threads.hpp: worker threads over a shared slot table; a slot's operations in row order across lanes.
#include "replay/replay_threads.hpp"

#include <gpumem/error.hpp>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <typeinfo>
#include <utility>

#if defined(__GNUG__)
#include <cxxabi.h>
#endif

namespace gpumem::detail {

namespace {

/// Spins before a waiting worker starts yielding its core: about a microsecond, what another worker's
/// allocate call takes, so that a short wait stays off the scheduler and a long one (more workers than
/// cores) does not burn the core the other worker needs.
constexpr unsigned spins_before_yield = 256;

inline void cpu_relax() noexcept
{
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

std::string resource_type_name(mr::device_memory_resource const& resource)
{
  char const* const mangled = typeid(resource).name();
#if defined(__GNUG__)
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> const readable{abi::__cxa_demangle(mangled, nullptr, nullptr, &status),
                                                         std::free};
  if (status == 0 && readable) { return readable.get(); }
#endif
  return mangled;
}

void check_replay_threads(replay_options const& options, std::string_view resource_name)
{
  if (options.threads == 1) { return; }
  std::string const threads = "threads = " + std::to_string(options.threads);
  expects(options.threads <= max_replay_threads,
          "replay: " + threads + " is more than " + std::to_string(max_replay_threads) +
            " (max_replay_threads; 0 gives one per log thread up to that)");
  expects(options.timeline == nullptr,
          "replay: a timeline times every operation in log order and needs threads = 1, not " + threads);
  expects(options.resource_thread_safe,
          "replay: the resource '" + std::string{resource_name} +
            "' is not thread-safe (replay_options::resource_thread_safe is false), so " + threads +
            " cannot share it: replay it with threads = 1, or wrap it in mr::thread_safe_resource_adaptor");
}

void replay_workers::prepare(replay_batch const& batch, std::size_t slot_count, std::size_t lanes)
{
  if (lanes > lanes_.size()) {
    team_.reset();  // joins the workers that ran so far
    lanes_.resize(lanes);
    team_ = std::make_unique<bench::worker_team>(lanes);
  }
  if (slot_count > held_.size()) {
    held_.resize(slot_count);
    next_seq_.resize(slot_count, 0);
    last_lane_.resize(slot_count, 0);
  }
  if (slot_count > done_capacity_) {
    std::size_t const capacity = std::max(slot_count, 2 * done_capacity_);
    auto grown = std::make_unique<std::atomic<std::uint64_t>[]>(capacity);
    for (std::size_t s = 0; s < done_capacity_; ++s) {
      grown[s].store(done_[s].load(std::memory_order_relaxed), std::memory_order_relaxed);
    }
    done_ = std::move(grown);
    done_capacity_ = capacity;
  }
  for (lane& l : lanes_) { l.ops.clear(); }
  for (std::size_t i = 0; i < batch.ops.size(); ++i) {
    replay_op const& op = batch.ops[i];
    std::uint32_t const on = batch.lanes[i];
    lane_op planned{op, 0, false};
    if (op.kind != replay_op_kind::probe_failure) {
      planned.seq = next_seq_[op.slot]++;
      planned.wait = planned.seq > 0 && last_lane_[op.slot] != on;
      last_lane_[op.slot] = on;
    }
    lanes_[on].ops.push_back(planned);
  }
}

bool replay_workers::wait_for(std::size_t slot, std::uint64_t seq) const noexcept
{
  for (unsigned spins = 0; done_[slot].load(std::memory_order_acquire) < seq; ++spins) {
    if (abort_.load(std::memory_order_relaxed)) { return false; }
    if (spins < spins_before_yield) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
  return true;
}

void replay_workers::work(lane& l) noexcept
{
  try {
    for (lane_op const& planned : l.ops) {
      replay_op const& op = planned.op;
      if (planned.wait && done_[op.slot].load(std::memory_order_acquire) < planned.seq) {
        ++l.waits;
        if (!wait_for(op.slot, planned.seq)) { return; }
      }
      if (op.kind == replay_op_kind::deallocate) {  // no longer held once its free is called
        replay_held const& block = held_[op.slot];
        if (block.pointer != nullptr && block.pointer != replay_failed()) {
          held_bytes_.now.fetch_sub(static_cast<std::int64_t>(block.size), std::memory_order_relaxed);
        }
      }
      execute_replay_op(resource_, planner_.stream(op.stream), op, held_.data(), l.counts);
      if (op.kind == replay_op_kind::allocate && held_[op.slot].pointer != replay_failed()) {
        note_allocated(op.size);  // before the slot's count: a free on another lane comes after it
      }
      if (op.kind != replay_op_kind::probe_failure) {
        done_[op.slot].store(planned.seq + 1, std::memory_order_release);
      }
    }
  } catch (...) {
    l.error = std::current_exception();
    abort_.store(true, std::memory_order_relaxed);
  }
}

void replay_workers::note_allocated(std::size_t bytes) noexcept
{
  auto const size = static_cast<std::int64_t>(bytes);
  std::int64_t const now = held_bytes_.now.fetch_add(size, std::memory_order_relaxed) + size;
  std::int64_t seen = held_bytes_.peak.load(std::memory_order_relaxed);
  while (now > seen && !held_bytes_.peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {}
}

std::chrono::steady_clock::duration replay_workers::run()
{
  if (!team_) { return {}; }
  abort_.store(false, std::memory_order_relaxed);
  double const seconds = team_->run([this](std::size_t t) { work(lanes_[t]); });
  for (lane& l : lanes_) {
    if (l.error) { std::rethrow_exception(std::exchange(l.error, nullptr)); }
  }
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>{seconds});
}

void replay_workers::release_all() noexcept { release_held(resource_, planner_, held_); }

replay_counts replay_workers::counts() const noexcept
{
  replay_counts total;
  for (lane const& l : lanes_) { total += l.counts; }
  return total;
}

std::size_t replay_workers::waits() const noexcept
{
  std::size_t total = 0;
  for (lane const& l : lanes_) { total += l.waits; }
  return total;
}

}  // namespace gpumem::detail
