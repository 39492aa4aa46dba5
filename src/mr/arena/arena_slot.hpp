// arena_slot: one local arena of arena_memory_resource (a thread's, for the default streams, or a stream's)
// with its mutex and its fence, the event that says when the arena's free space is no longer used by any
// stream's work. The fence rules are the stream-ordering half of arena_memory_resource.hpp's contract:
//
// - per-stream arena (stream S): every free into it is on S (frees from elsewhere are synchronised first),
//   so recording the fence on S at each free and synchronising it covers every free so far.
// - per-thread arena (thread T): its frees are on T's default streams, which order with each other (the
//   legacy default stream and blocking streams synchronise implicitly). Recording the fence on the stream
//   of T's current free covers all of T's frees; from another thread, T's per-thread stream cannot be named,
//   so the fence goes on the legacy default stream, which orders after every blocking stream's earlier work.
//   No record at each free: the fast path of the default streams stays free of backend calls.
#pragma once

#include <gpumem/backend/backend.hpp>
#include <gpumem/detail/thread_annotations.hpp>
#include <gpumem/mr/detail/arena/local_arena.hpp>

#include <cuda_runtime_api.h>

#include <optional>

namespace gpumem::detail {

class arena_slot {
 public:
  enum class kind { per_thread, per_stream };

  /// @param stream the stream of a per-stream arena; ignored for a per-thread one.
  /// @throws cuda_error if the fence event cannot be created.
  arena_slot(kind k, cudaStream_t stream)
    : kind_{k}, stream_{k == kind::per_stream ? stream : nullptr}, fence_{get_backend().event_create(cudaEventDisableTiming)}
  {
  }
  ~arena_slot() { get_backend().event_destroy(fence_); }
  arena_slot(arena_slot const&) = delete;
  arena_slot& operator=(arena_slot const&) = delete;
  arena_slot(arena_slot&&) = delete;
  arena_slot& operator=(arena_slot&&) = delete;

  [[nodiscard]] kind arena_kind() const noexcept { return kind_; }
  /// The stream of a per-stream arena; nullptr for a per-thread one.
  [[nodiscard]] cudaStream_t stream() const noexcept { return stream_; }

  /// `freeing_stream` is the stream of a free into this arena that is about to happen.
  /// Per-stream: records the fence on it. Per-thread: nothing (see the file comment).
  /// @return false when the record failed (the caller must not make the block reusable elsewhere).
  [[nodiscard]] bool note_free(cudaStream_t freeing_stream) noexcept GPUMEM_REQUIRES(mutex)
  {
    if (kind_ == kind::per_thread) { return true; }
    try {
      get_backend().event_record(fence_, freeing_stream);
      return true;
    } catch (...) {
      return false;
    }
  }

  /// Blocks until no stream's work submitted before now uses this arena's free space.
  /// @param freeing_stream the stream of the free that calls this on the arena's own thread or stream;
  ///        nullopt when called from anywhere else (defragment).
  /// @throws cuda_error if the backend fails.
  void wait_for_streams(std::optional<cudaStream_t> freeing_stream) GPUMEM_REQUIRES(mutex)
  {
    backend& b = get_backend();
    if (kind_ == kind::per_thread) { b.event_record(fence_, freeing_stream.value_or(cudaStreamLegacy)); }
    b.event_synchronize(fence_);
  }

  detail::mutex mutex;
  local_arena arena GPUMEM_GUARDED_BY(mutex);

 private:
  kind const kind_;
  cudaStream_t const stream_;
  // Per-stream: recorded on stream_ at every free into `arena`, under `mutex`: its latest record follows
  // every free, so once it completes no work on stream_ uses the arena's free space.
  // Per-thread: recorded only by wait_for_streams, under `mutex`.
  cudaEvent_t const fence_;
};

}  // namespace gpumem::detail
