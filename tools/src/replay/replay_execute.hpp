// What one planned operation does to the resource (internal to src/replay): the one definition of a row's
// effect, shared by the single-threaded replay (replay.cpp) and the workers of a replay on several threads
// (replay_threads.cpp). Each caller owns the slot table and the counts it passes in.
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include "replay/replay_plan.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

namespace gpumem::detail {

/// What a slot holds from the resource: the block, the size it was allocated with, and its stream's index.
struct replay_held {
  void* pointer{nullptr};
  std::size_t size{0};
  std::uint32_t stream{0};
};

/// The address that marks a slot whose allocation this resource failed (never dereferenced).
inline char replay_failed_marker;

[[nodiscard]] inline void* replay_failed() noexcept { return &replay_failed_marker; }

/// What a replay did, counted by whoever ran the operations.
struct replay_counts {
  std::size_t allocations{0};
  std::size_t deallocations{0};
  std::size_t failures{0};
  std::size_t reproduced{0};
  std::size_t skipped{0};
  std::size_t live_bytes{0};  // what the replay holds from the resource (kept only for timelines)

  replay_counts& operator+=(replay_counts const& o) noexcept
  {
    allocations += o.allocations;
    deallocations += o.deallocations;
    failures += o.failures;
    reproduced += o.reproduced;
    skipped += o.skipped;
    live_bytes += o.live_bytes;
    return *this;
  }
};

/**
 * Runs `o` against `resource` on `stream`; `slots` is the slot table (slots[o.slot] is read or written by
 * allocate and deallocate; probe_failure names no slot).
 * A failure of the resource (gpumem::bad_alloc) is counted, and the slot marked so that its free is skipped.
 * Cost: one allocate or deallocate call (two for probe_failure), and a few counter increments.
 * @throws what the resource throws besides gpumem::bad_alloc (gpumem::cuda_error).
 */
inline void execute_replay_op(mr::device_memory_resource& resource, cuda_stream_view stream, replay_op const& o,
                              replay_held* slots, replay_counts& c)
{
  switch (o.kind) {
    case replay_op_kind::allocate:
      ++c.allocations;
      try {
        slots[o.slot] = {resource.allocate(o.size, stream), o.size, o.stream};
        c.live_bytes += o.size;
      } catch (bad_alloc const&) {
        ++c.failures;
        slots[o.slot] = {replay_failed(), 0, 0};
      }
      break;
    case replay_op_kind::deallocate: {
      replay_held const block = std::exchange(slots[o.slot], replay_held{});
      if (block.pointer == replay_failed()) {
        ++c.skipped;
        break;
      }
      ++c.deallocations;
      c.live_bytes -= block.size;
      resource.deallocate(block.pointer, block.size, stream);
      break;
    }
    case replay_op_kind::probe_failure:
      ++c.allocations;
      try {
        void* const ptr = resource.allocate(o.size, stream);
        ++c.deallocations;
        resource.deallocate(ptr, o.size, stream);
      } catch (bad_alloc const&) {
        ++c.failures;
        ++c.reproduced;
      }
      break;
  }
}

/// Frees every block `slots` still holds, on the stream it was allocated on, and empties the slots: after
/// the last row, and on the way out of an exception. @pre no operation on `slots` is running.
inline void release_held(mr::device_memory_resource& resource, replay_planner const& planner,
                         std::span<replay_held> slots) noexcept
{
  for (replay_held& block : slots) {
    if (block.pointer != nullptr && block.pointer != replay_failed()) {
      resource.deallocate(block.pointer, block.size, planner.stream(block.stream));
    }
    block = {};
  }
}

}  // namespace gpumem::detail
