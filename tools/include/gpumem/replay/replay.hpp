/**
 * @file replay.hpp
 * Replays an allocation log (allocation_log.hpp) against a device memory resource, single-threaded and in
 * log order, or with the log's threads replayed concurrently as recorded (replay_options::threads; see
 * "Replay on several threads" below), and reports the time per operation and how much memory the resource
 * took to serve it (docs/formats.md describes the result's fields; docs/benchmarks.md's `replay/<log>`
 * workload).
 *
 * What the replay does with each row:
 * - `allocate`: allocate(size, stream). A failure of the resource (gpumem::bad_alloc, including
 *   gpumem::out_of_memory) is counted in `failures` and the replay goes on; the later free of that pointer is
 *   skipped (`skipped_frees`).
 * - `free` of a pointer that is live in the log: deallocate(p, size allocated, stream of the free row).
 *   A free of a pointer the log never allocated, or already freed, is counted in `unknown_frees` and skipped.
 * - `allocate failure`: the program's allocator failed here. The request is replayed (allocate, then at once
 *   deallocate: the program never used it) to see whether this resource fails too (`log_failures_reproduced`).
 * - An `allocate` at an address that is still live in the log (the log lost a free) first frees the older
 *   block (`missing_frees`).
 * - Stream ids: 0x0 is the default stream, 0x1 the legacy default stream, 0x2 the per-thread default stream;
 *   the others map onto a pool of at most replay_options::max_streams gpumem::cuda_stream (created as ids
 *   first appear, outside the timed loop), round robin in the order the ids first appear, so that each id
 *   keeps its order: a log with thousands of stream ids needs no thousands of streams (on the host backend,
 *   threads).
 * After the last row, every block still live is freed (`live_at_end`), outside the timed loop.
 *
 * The log is read in batches of rows; each batch is first turned into a flat array of operations
 * (pointers resolved to slots) outside the timed loop, so the timed loop costs one indirect call per
 * operation plus an array access: the time per op is the resource's. Memory is bounded by the log's live
 * blocks and its stream ids, never by its length (a slot is reused once its block is freed): a log of any
 * length replays from allocation_log_reader (log_reader.hpp) or from a log_source (log_source.hpp).
 * Memory is never touched (no memset, no copy), so a resource over a simulated upstream replays safely.
 *
 * Replay on several threads (replay_options::threads != 1):
 * - The log's thread ids (its Thread column) map onto worker threads, round robin in the order the ids
 *   first appear (threads = 0: one worker per log thread, up to max_replay_threads); workers are started
 *   outside the timed loop as the log shows more threads, so a log of one thread has one worker. Each worker
 *   replays its threads' rows in log order, on the streams the rows name (the mapping above, shared by all).
 * - Each batch is planned as above, split by worker, and run by all workers at once; the next batch is read
 *   once every worker has finished (a barrier), so memory stays bounded as above.
 * - A block allocated on one worker and freed on another (a cross-thread free, or the free of a lost-free
 *   block at another thread's allocation) is freed only after its allocation ran: the freeing worker waits
 *   for it (each slot counts the operations done on it; the waiting worker spins briefly, then yields) and
 *   the wait is counted in `cross_thread_waits`. Waits are never inside a resource call. The slot a freed block
 *   leaves is reused first by the same worker's allocations; only when a worker has none of its own does it
 *   reuse another's, the longest free, which may wait too (counted likewise) if that free has not yet run.
 * - Per operation, the timed loop adds to the single-threaded one a release store of the slot's count (a
 *   plain store on x86-64), one atomic add to the bytes held (a counter the workers share), and, where the
 *   slot's previous operation ran on another worker, an acquire load (and the wait, if that operation has
 *   not run yet). The slots stay bounded: the log's live blocks plus at most 256 slots kept free per worker.
 * - A failed allocation's later free is skipped on whichever worker frees it. The counts (allocations,
 *   frees, unknown frees, lost frees, live at end, `allocate failure` rows) and the peak live bytes are those
 *   of the single-threaded replay of the same log; so are `failures` where the resource has room for the log
 *   (an out-of-memory depends on what else is live at that moment, and so on how the workers interleave).
 *   Peak upstream bytes are the resource's under the concurrent load, and vary from run to run likewise.
 * - The workers keep no order between rows of different threads but a free after its allocation, so one
 *   may allocate ahead of another's frees and hold more at once than the log ever had live (a training
 *   log whose second thread frees what the first allocates, say). `held_peak_bytes` is what the workers
 *   held at once, and `fragmentation` is taken over it, so that the ratio is the resource's and not the
 *   interleaving's.
 * - ns_per_op is the wall time of the concurrent timed loop (from the workers' release to the last one's
 *   finish, summed over the batches) / operations: "wall ns per op", which falls as workers run in
 *   parallel and includes the time a worker waits for another and the barrier at each batch's end.
 * - The resource must be thread-safe (all of gpumem's resources are: device_memory_resource.hpp). One that
 *   is not, declared by replay_options::resource_thread_safe = false, is refused, not wrapped: a
 *   thread_safe_resource_adaptor around it would measure its mutex, a choice for the caller to make.
 * - A timeline (per-operation times and samples in log order) needs threads = 1.
 */
#pragma once

#include <gpumem/export.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/registry/resource_registry.hpp>
#include <gpumem/replay/allocation_log.hpp>
#include <gpumem/replay/log_reader.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

namespace gpumem {

/**
 * @brief What a replay looked like over time, for plots (`gpumem report`): samples of live and upstream
 * bytes, and a histogram of the time each operation took. Filled by replay() when
 * replay_options::timeline points at one.
 */
struct replay_timeline {
  /** @brief The replay's state after some operation. */
  struct sample {
    std::size_t op{};              ///< operations done (1-based: after the op-th operation)
    std::int64_t log_time_ns{};    ///< the log's time of that operation's row (log_event::time_ns)
    std::size_t live_bytes{};      ///< bytes the replay holds from the resource (failed allocations hold none)
    std::size_t upstream_bytes{};  ///< bytes the resource holds from below (replay_options::upstream_bytes; 0 without)
  };
  /// log2 buckets of latency_histogram: bucket b counts operations that took [2^b, 2^(b+1)) ns; bucket 0
  /// also counts those under 1 ns, the last bucket everything from 2^(latency_buckets-1) ns up.
  static constexpr std::size_t latency_buckets = 32;

  /// In operation order: the first operation, evenly spaced ones, and the last; replay_options::timeline_samples
  /// at most in all but the last, and at least half that many when there are enough operations (the
  /// spacing doubles whenever the samples would exceed it, as the log's length is not known beforehand).
  /// Empty for an empty log.
  std::vector<sample> samples;
  /// Per operation, the steady_clock time around its allocate or deallocate call (a clock read included).
  std::array<std::size_t, latency_buckets> latency_histogram{};
};

/** @brief The most worker threads a replay runs (replay_options::threads). */
inline constexpr std::size_t max_replay_threads = 64;

/** @brief How to replay. */
struct replay_options {
  /**
   * @brief Reports the peak bytes the resource has taken from its upstream (or from the device); queried
   * once, after the replay. Empty: the result has no peak_upstream_bytes and no fragmentation.
   * the registry's handles provide one (the overloads below).
   */
  std::function<std::size_t()> peak_upstream_bytes{};
  /**
   * @brief Called with the fraction of the log replayed (0 < f <= 1, rising), at most about `progress_steps`
   * times, and once with 1.0 at the end. The fraction is that of the input read
   * (allocation_log_reader::fraction_read()): a log from a pipe reports only the 1.0 at the end. Its own
   * time is not counted in the timed loop.
   */
  std::function<void(double)> progress{};
  std::size_t progress_steps{100};
  /**
   * @brief When set, replay() fills it (replacing what it held): every operation is timed on its own into
   * latency_histogram, and the state is sampled `timeline_samples / 2` to `timeline_samples` times. The per-operation clock reads
   * make ns_per_op of such a replay larger: measure ns_per_op with a replay without a timeline.
   */
  replay_timeline* timeline{nullptr};
  std::size_t timeline_samples{1000};
  /**
   * @brief Reports the bytes the resource holds from its upstream now (for the timeline's samples; called
   * outside the timed part). The registry's handles provide one.
   */
  std::function<std::size_t()> upstream_bytes{};
  /// The most streams the log's stream ids other than 0x0, 0x1 and 0x2 are mapped onto (0 counts as 1).
  std::size_t max_streams{16};
  /**
   * @brief Called with each batch of rows before it is replayed, outside the timed part: for what else is
   * to be learnt from the log in the same pass (the report's size histogram). The span is valid during the
   * call only.
   */
  std::function<void(std::span<log_event const>)> on_rows{};
  /**
   * @brief Worker threads that replay the log's threads concurrently (the file comment's "Replay on several
   * threads"): 1 (the default) replays every row on the calling thread, in log order; N > 1 maps the log's
   * thread ids onto at most N workers, round robin in the order they first appear; 0 gives each log thread
   * its own worker, up to max_replay_threads. More than max_replay_threads is refused
   * (gpumem::logic_error), as is a `timeline` with threads != 1.
   */
  std::size_t threads{1};
  /**
   * @brief Whether the resource may be called from several threads at once. All of gpumem's resources may;
   * set false for one that may not, and a replay with threads != 1 is refused (gpumem::logic_error naming
   * the resource) instead of racing. Unused with threads = 1.
   */
  bool resource_thread_safe{true};
};

/** @brief What a replay measured and counted (docs/formats.md, "The replay table"). */
struct replay_result {
  std::size_t events{};          ///< rows of the log
  std::size_t allocations{};     ///< allocate calls made in the timed loop (failed ones included)
  std::size_t deallocations{};   ///< deallocate calls made in the timed loop
  std::size_t ops{};             ///< allocations + deallocations
  double elapsed_ns{};           ///< wall time of the timed loop (std::chrono::steady_clock)
  double ns_per_op{};            ///< elapsed_ns / ops (0 when ops == 0)
  std::size_t peak_live_bytes{}; ///< as the log says (peak_live_bytes(log); SIZE_MAX when more)
  /// The most bytes the replay held from the resource at once: peak_live_bytes with one thread; with several,
  /// the peak of the sizes of blocks whose allocation had returned and whose free had not yet been called
  /// (a lower bound of what the resource held at once), which may exceed peak_live_bytes (the file comment's
  /// "Replay on several threads").
  std::size_t held_peak_bytes{};
  /// peak bytes taken from the upstream, from replay_options::peak_upstream_bytes
  std::optional<std::size_t> peak_upstream_bytes{};
  /// peak_upstream_bytes / held_peak_bytes (absent without a probe or when nothing was held)
  std::optional<double> fragmentation{};
  std::size_t failures{};                 ///< allocate calls that this resource failed (any row kind)
  std::size_t log_failures{};             ///< `allocate failure` rows in the log
  std::size_t log_failures_reproduced{};  ///< of those, how many this resource failed too
  std::size_t unknown_frees{};            ///< frees of pointers not live in the log (never allocated, or freed twice)
  std::size_t skipped_frees{};            ///< frees of blocks this resource had failed to allocate
  std::size_t missing_frees{};            ///< allocations at an address still live: the older block was freed first
  std::size_t live_at_end{};              ///< blocks still live after the last row, freed after the timed loop
  std::size_t streams{};                  ///< distinct stream ids in the log (counted up to 65536)
  /// worker threads that replayed: 1 with replay_options::threads = 1; otherwise one per log thread, up to
  /// the number asked for (0 for an empty log)
  std::size_t threads{1};
  /// operations that had to wait for another worker's operation on the same slot (a cross-thread free
  /// waiting for its allocation, rarely an allocation waiting for the free of the slot it reuses); always
  /// 0 with one thread. It depends on timing: two replays of one log may differ.
  std::size_t cross_thread_waits{};
};

/**
 * @brief Replays the rows `log` has left against `resource` (see the file comment for what each row does),
 * reading them as it goes.
 * Thread-safety: runs on the calling thread, or with options.threads != 1 on worker threads it starts and
 * joins (the callbacks in `options` are called on the calling thread only); `resource` must not be used by
 * others meanwhile, or the peak it reports includes their allocations.
 * Stream-ordering: every allocation and free is issued on the stream its row names (or the pool stream
 * its id maps onto); nothing is waited for on a stream.
 * @post every block the replay allocated has been deallocated; `log` is at its end.
 * @throws gpumem::log_format_error when the log turns out malformed part way (every live block is freed
 *         first: the rows before the bad one were replayed).
 * @throws gpumem::cuda_error if a stream cannot be created or the resource reports a backend failure (every
 *         live block is freed first). An out-of-memory of the resource is counted, never thrown.
 * @throws gpumem::logic_error before any row is read when options.threads is more than max_replay_threads,
 *         comes with a timeline, or meets a resource declared not thread-safe (named by its type).
 */
[[nodiscard]] GPUMEM_EXPORT replay_result replay(allocation_log_reader& log, mr::device_memory_resource& resource,
                                                 replay_options const& options = {});

/**
 * @brief Replays a log held in memory, as the overload above does.
 * @throws gpumem::cuda_error as the overload above.
 */
[[nodiscard]] GPUMEM_EXPORT replay_result replay(allocation_log const& log, mr::device_memory_resource& resource,
                                                 replay_options const& options = {});

/**
 * @brief replay(log, resource.get(), options) with the peak upstream bytes (and, unless `options` has its
 * own, the current upstream bytes for a timeline) taken from the registered resource's handle; a refusal
 * for options.threads names the resource by its registered name.
 * @throws as replay().
 */
[[nodiscard]] replay_result replay(allocation_log_reader& log, registry::resource_handle& resource,
                                   replay_options options = {});

/** @brief As the overload above, for a log held in memory. @throws as replay(). */
[[nodiscard]] replay_result replay(allocation_log const& log, registry::resource_handle& resource,
                                   replay_options options = {});

}  // namespace gpumem
