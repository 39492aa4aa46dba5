// What the upstream resources (cuda, managed, pinned) do before handing memory back to the runtime.
//
// deallocate(p, bytes, stream) promises only that the work using p was *submitted* to `stream`
// (device_memory_resource.hpp). cudaFree and cudaFreeHost synchronise the device before they free, which
// keeps that promise on the cuda backend; the host backend frees at once. Waiting for `stream` first keeps
// it on both, at the cost of one stream synchronisation on a path that is already slow.
#pragma once

#include <gpumem/backend/backend.hpp>
#include <gpumem/cuda_stream_view.hpp>

namespace gpumem::detail {

/**
 * @brief Waits for the work submitted to `stream` so far. Never throws: deallocation cannot report an
 * error, and a stream that cannot be synchronised (destroyed, or capturing a graph) leaves nothing better
 * to do than to free, which is what cudaFree does in that case too.
 */
inline void wait_for_stream_before_free(backend& runtime, cuda_stream_view stream) noexcept
{
  try {
    runtime.stream_synchronize(stream.value());
  } catch (...) {  // NOLINT(bugprone-empty-catch): see the function comment
  }
}

}  // namespace gpumem::detail
