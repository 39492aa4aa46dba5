// What the private pools (torch_pools.cpp) and the record-stream table (torch_streams.cpp) tell each other about
// CUDA graph captures. A capture is "underway" from pool_begin to the matching pool_end (PyTorch calls them around
// every torch.cuda.graph capture); while one is, the (0, 0) frees that could invalidate a global-mode capture (the
// device resource's event records and queries, waits on events recorded outside the capture, cudaFree) are held
// back, as PyTorch's caching allocator holds back its event processing, and carried out once none is.
#pragma once

#include <gpumem.h>

namespace gpumem::python::torch_hooks {

/**
 * @brief true while a capture allocating to a private pool is underway on any device. CUDA's global capture mode
 * forbids potentially unsafe calls from every thread, whatever the device, so one process-wide answer serves.
 * Cost: one atomic load. (torch_pools.cpp)
 */
[[nodiscard]] bool capture_underway() noexcept;

/**
 * @brief Carries out the (0, 0) frees held back during captures, each ordered after its recorded streams. Called by
 * pool_end once no capture is underway, and by the next free made while none is. (torch_streams.cpp)
 * @return the first failure (its message kept by fail()), else GPUMEM_SUCCESS.
 */
gpumem_status run_held_frees() noexcept;

/**
 * @brief true when `ptr` is a live block of a private pool. record_stream accepts such a block and records nothing:
 * a private pool's block is reused only by captures into the same pool, never by eager work, and the pool's memory
 * goes back to the device only after a device synchronisation. (torch_pools.cpp)
 */
[[nodiscard]] bool pool_block_is_live(void const* ptr) noexcept;

}  // namespace gpumem::python::torch_hooks
