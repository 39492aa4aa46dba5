/**
 * @file adaptor_checks.hpp
 * The checks that prove each adaptor did its job during a benchmark (adaptor_registry.hpp's
 * adapted_resource): each function takes the chain with the adaptor on top, and the adaptor, and returns
 * the chain with that adaptor's checks.
 *
 *   logging           after a flush its file holds the header, then one `allocate` and one `free` row per
 *                     allocation made, and nothing else (read on from where the last check stopped); the
 *                     file is deleted with the adaptor
 *   statistics        with k blocks of n bytes live: k allocations and k*n bytes current; at rest: the
 *                     totals equal the allocations and bytes made, current 0, the byte peak within the
 *                     workload's bounds
 *   tracking          with k blocks live: k outstanding allocations of k*n bytes (each with a call stack when
 *                     captured); at rest: none outstanding, no invalid deallocation
 *   limiting          with k blocks live: k * n rounded up to its alignment; at rest: 0
 *   failure_callback  the callback (counting its calls) never fired
 *   aligned           every block at or above the threshold has the alignment (checked per block)
 */
#pragma once

#include "adaptor_registry.hpp"

#include <gpumem/mr/aligned_resource_adaptor.hpp>
#include <gpumem/mr/limiting_resource_adaptor.hpp>
#include <gpumem/mr/logging_resource_adaptor.hpp>
#include <gpumem/mr/statistics_resource_adaptor.hpp>
#include <gpumem/mr/tracking_resource_adaptor.hpp>

#include <filesystem>
#include <memory>

namespace gpumem::bench {

/** @pre `log` is the top of `chain` and writes to `file`. */
[[nodiscard]] std::unique_ptr<adapted_resource> check_logging(resource_handle chain, mr::logging_resource_adaptor* log,
                                                              std::filesystem::path file);
/** @pre `stats` is in `chain`. */
[[nodiscard]] std::unique_ptr<adapted_resource> check_statistics(resource_handle chain,
                                                                 mr::statistics_resource_adaptor* stats);
/** @pre `tracker` is in `chain`. */
[[nodiscard]] std::unique_ptr<adapted_resource> check_tracking(resource_handle chain,
                                                               mr::tracking_resource_adaptor* tracker);
/** @pre `limiter` is in `chain`. */
[[nodiscard]] std::unique_ptr<adapted_resource> check_limiting(resource_handle chain,
                                                               mr::limiting_resource_adaptor* limiter);
/** @pre `aligner` is the top of `chain`. */
[[nodiscard]] std::unique_ptr<adapted_resource> check_aligned(resource_handle chain,
                                                              mr::aligned_resource_adaptor const* aligner);
/** @brief Puts a failure_callback_resource_adaptor on `base`, whose callback counts its calls and returns false. */
[[nodiscard]] std::unique_ptr<adapted_resource> with_counting_failure_callback(resource_handle base);

}  // namespace gpumem::bench
