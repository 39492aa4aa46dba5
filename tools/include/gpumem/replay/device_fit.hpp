/**
 * @file device_fit.hpp
 * Whether a log's peak fits the device it is replayed on. A log recorded on an 80 GiB GPU and replayed on
 * a smaller one (or on the host backend's emulated device) fails every allocation above the device's
 * memory: its figures then say nothing of the resources, and the library warns once per failure. The
 * commands say so once, with what to do (`--simulate`), instead.
 */
#pragma once

#include <gpumem/export.hpp>

#include <cstddef>
#include <optional>
#include <string>

namespace gpumem {

/**
 * @brief The note to print when a replay needed more than the device has: `peak_live_bytes` (what the log
 * holds live at its peak, replay_result::peak_live_bytes) above `device_bytes` (the device's total
 * memory, available_device_memory().total). It names both sizes, the allocations that failed and the
 * remedy: "the log's peak live bytes (8.74 GiB) are more than the device's memory (8 GiB): 497
 * allocations failed, so the figures are not those of the log; with --simulate, ...".
 * @param failures allocations the replay's resource failed (replay_result::failures)
 * @return the note (one line, no newline), or nothing when the peak fits (peak_live_bytes <= device_bytes).
 */
[[nodiscard]] GPUMEM_EXPORT std::optional<std::string>
peak_above_device_note(std::size_t peak_live_bytes, std::size_t device_bytes, std::size_t failures);

/**
 * @brief The total memory of the calling thread's current device (available_device_memory().total):
 * what peak_above_device_note compares a log's peak with.
 * @throws gpumem::cuda_error when the backend cannot tell.
 */
[[nodiscard]] GPUMEM_EXPORT std::size_t current_device_memory_bytes();

}  // namespace gpumem
