// The PyTorch allocator's features on gpumem's side of the allocator hooks table (gpumem_allocator_hooks.h,
// version 2). bind_allocator_hooks.cpp fills the table and composes these pieces, each in a file of its own:
//   torch_resources.cpp  the device's PyTorch resource (gpumem.torch's configuration, the default resource built on
//                        a device's first allocation), making room on out of memory, empty_cache, memory fraction,
//                        and the statistics that gpumem.torch.memory_stats() reports
//   torch_pools.cpp      private pools of CUDA graphs (pool_begin / pool_end / pool_release)
//   torch_streams.cpp    Tensor.record_stream: frees ordered after the recorded streams
//   torch_history.cpp    the recorder of allocation history (an observer)
// Every function here is noexcept: it reports a failure as a gpumem_status with its message kept by fail(),
// which the table's last_error returns. All may be called from any thread, without the GIL.
#pragma once

#include <gpumem.h>

#include <cstddef>
#include <cstdint>

namespace gpumem::python::torch_hooks {

/** @brief A pool of PyTorch's CUDA graphs (MempoolId_t); (0, 0) is the device's PyTorch resource. */
struct pool_id {
  std::uint64_t a{};
  std::uint64_t b{};
  [[nodiscard]] bool is_default() const noexcept { return a == 0 && b == 0; }
  friend bool operator==(pool_id, pool_id) = default;
};

/** @brief What an observer is told. `pool` is (0, 0) for the device's PyTorch resource. */
struct allocation_event {
  enum class action { alloc, free, oom } what;
  void* ptr;           ///< null for oom
  std::size_t size;    ///< bytes requested (alloc, oom) or freed (free)
  int device;
  void* stream;        ///< the allocation stream
  pool_id pool;
};

/** @brief Called after each allocation and free through the table, and for each allocation that failed. */
using observer = void (*)(allocation_event const&) noexcept;

/**
 * @brief Adds `fn` to the observers (kept for the life of the process; at most 8; the same function once).
 * Observers run on the allocating thread, in the order added, possibly without the GIL and concurrently.
 */
void add_observer(observer fn) noexcept;

/** @brief Keeps `message` for the table's last_error on this thread; returns `status`. */
gpumem_status fail(gpumem_status status, char const* message) noexcept;

/** @brief The status and message of the exception being handled (call inside a catch block). */
gpumem_status fail_with_current_exception() noexcept;

// ---- torch_resources.cpp ----------------------------------------------------------------------------------

/**
 * @brief Makes sure `device` has its PyTorch resource before an allocation from pool (0, 0): on the device's first
 * allocation, builds the configured resource and sets it as the device's gpumem resource, unless the program set
 * one itself. Called with `device` current.
 */
gpumem_status prepare_device(int device) noexcept;

/**
 * @brief After an allocation of `size` bytes on `device` failed for want of memory: asks the registered spill
 * managers to give back device memory and releases idle private pools. @return true when memory was given back
 * (the allocation is worth one more try).
 */
bool make_room(int device, std::size_t size) noexcept;

/** @brief The table's empty_cache. */
gpumem_status empty_cache(int device, std::size_t* released) noexcept;

/** @brief The table's set_memory_fraction. */
gpumem_status set_memory_fraction(double fraction, int device) noexcept;

// ---- torch_pools.cpp ----------------------------------------------------------------------------------------

/** @brief Allocates from private pool `pool` of `device` (made by pool_begin). */
gpumem_status pool_allocate(int device, pool_id pool, std::size_t size, void* stream, void** out) noexcept;

/** @brief When `ptr` is a live block of a private pool: frees it there and returns true (status in *status). */
bool pool_deallocate(void* ptr, std::size_t size, void* stream, gpumem_status* status) noexcept;

gpumem_status pool_begin(int device, pool_id pool) noexcept;
gpumem_status pool_end(int device, pool_id pool) noexcept;
gpumem_status pool_release(int device, pool_id pool) noexcept;

/** @brief Gives back the memory of the private pools of `device` (< 0: all) that are released and hold no live
 * block; @return the bytes given back. Does nothing while a capture is underway. */
std::size_t release_idle_pools(int device) noexcept;

// ---- torch_streams.cpp --------------------------------------------------------------------------------------

/** @brief The table's record_stream. */
gpumem_status record_stream(void* ptr, void* stream) noexcept;

/**
 * @brief When streams were recorded for `ptr` (an allocation of pool (0, 0)): frees it on `stream` after their work
 * (or holds the free back while `stream` or a recorded stream is capturing) and returns true, with the status in
 * *status. While a capture is underway (pool_begin to pool_end) every (0, 0) free is held back so (true). Returns
 * false otherwise: the caller frees.
 */
bool free_after_recorded_streams(void* ptr, void* stream, gpumem_status* status) noexcept;

}  // namespace gpumem::python::torch_hooks
