/**
 * @file measure.hpp
 * Times bench/workload.hpp's workloads on one resource, as `gpumem bench` reports them: a verification pass
 * first (untimed; it also warms pools and caches, so the figures are steady state), then `repeats` timed
 * passes; the figure is the median.
 */
#pragma once

#include <gpumem/bench/worker_team.hpp>
#include <gpumem/bench/workload.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace gpumem::bench {

/** @brief The timed passes of one workload on one resource. */
/** @return the median of `values` (the mean of the middle two for an even count); 0 when empty. */
[[nodiscard]] GPUMEM_EXPORT double median(std::vector<double> values);

struct measurement {
  std::string workload;            ///< "fixed/256B", "random", "random_mt/16"
  std::size_t ops_per_pass{};      ///< allocations + deallocations per timed pass
  std::vector<double> ns_per_op;   ///< one figure per timed pass (wall time / ops)
  std::size_t peak_live_bytes{};   ///< measured by the verification pass (all threads together)

  /** @return the median of ns_per_op (the mean of the middle two for an even count); 0 when empty. */
  [[nodiscard]] GPUMEM_EXPORT double median_ns_per_op() const;
};

/**
 * @brief One timed pass of a multi-threaded workload: worker t of `team` runs sequences[t] on streams[t] with
 * slots[t] (run_sequence); with streams_per_thread S > 1, on streams[t*S, t*S + S) (the multi-stream
 * run_sequence). An exception of thread t goes to `error` as "thread t: what" (its blocks are freed).
 * @pre streams_per_thread >= 1; team.size() == sequences.size(), slots.size();
 *      sequences.size() * streams_per_thread <= streams.size(); slots[t].size() >= sequences[t].slots.
 * @return the wall seconds from the release of the workers to the last finish.
 */
GPUMEM_EXPORT double run_sequences(worker_team& team, mr::device_memory_resource& resource,
                                   std::span<cuda_stream_view const> streams, std::vector<sequence> const& sequences,
                                   std::vector<std::vector<void*>>& slots, first_error& error,
                                   std::size_t streams_per_thread = 1);

/**
 * @brief `fixed/<size>`: allocate then free one block of `size.bytes` on `stream`, in a loop. Each timed pass
 * runs at least `min_seconds` (the pair count doubles until it does).
 * @throws gpumem::logic_error if the verification (two blocks at once: valid and disjoint) fails, naming it;
 *         what the resource throws (gpumem::out_of_memory when it has not the memory).
 */
[[nodiscard]] GPUMEM_EXPORT measurement measure_fixed(mr::device_memory_resource& resource, cuda_stream_view stream,
                                                      fixed_size size, std::size_t repeats, double min_seconds);

/**
 * @brief `random` (one sequence) or `random_mt/<T>` (T sequences, thread t on streams[t]), from split_random.
 * @pre streams.size() >= sequences.size() > 0.
 * @throws gpumem::bad_alloc naming the thread when the resource runs out of memory in any pass.
 * @throws gpumem::logic_error if the verification pass fails (a null, misaligned or overlapping block, or
 *         another exception of the resource), naming the thread and the problem, or if a timed pass fails.
 */
[[nodiscard]] GPUMEM_EXPORT measurement measure_random(mr::device_memory_resource& resource,
                                                       std::span<cuda_stream_view const> streams,
                                                       std::vector<sequence> const& sequences, std::size_t repeats,
                                                       std::string workload_name);

}  // namespace gpumem::bench
