/**
 * @file latency_percentile.hpp
 * Percentiles of a replay's latency histogram (replay_timeline::latency_histogram: log2 buckets of
 * nanoseconds), for the report's latency chart and table. The histogram keeps no single times, so a
 * percentile is an estimate inside the bucket that holds it: never off by more than that bucket's width,
 * a factor of two.
 */
#pragma once

#include <gpumem/export.hpp>
#include <gpumem/replay/replay.hpp>

#include <optional>

namespace gpumem {

/**
 * @brief The time (ns) below which a fraction `q` of the operations of `timeline` took.
 *
 * The operation of rank ceil(q * n) (1-based, at least 1) in time order is found in its bucket
 * [2^b, 2^(b+1)) ns; its time is estimated by spreading the bucket's operations evenly over the bucket on
 * a log scale: the k-th of c is at 2^(b + (k - 0.5) / c). Bucket 0 (everything under 2 ns) reads as 1 ns
 * and the last bucket (open above) as its lower bound 2^(latency_buckets - 1) ns.
 * @pre 0 < q <= 1 (q = 0.5: the median, p50; q = 0.99: p99).
 * @return the estimate, or nothing when the histogram is empty.
 * @throws gpumem::logic_error when q is not in (0, 1].
 */
[[nodiscard]] GPUMEM_EXPORT std::optional<double> latency_percentile(replay_timeline const& timeline, double q);

}  // namespace gpumem
