// gpumem.cuda's memory hooks (CuPy's cupy.cuda.MemoryHook) as MemoryPool sees them: the hooks themselves live in
// Python (gpumem/cuda/memory_hook.py, one registry per thread, as CuPy keeps them); this is the C++ side that
// MemoryPool.malloc and PooledMemory's free call.
//
// Cost when no hook is registered on the calling thread: one thread-local bool read per malloc and per free.
// alloc_preprocess/alloc_postprocess report the pool's growth from its upstream. The pool grows with the GIL
// released and under its own lock, where calling Python could deadlock, so the growth is recorded there (bytes
// and address, thread-locally) and both hooks are called once the pool's allocate has returned, between
// malloc_preprocess and malloc_postprocess.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>

namespace gpumem::python::memory_hooks {

namespace py = pybind11;

/** @brief Whether the calling thread has memory hooks registered (set by gpumem.cuda.memory_hook). */
[[nodiscard]] bool active() noexcept;

/** @brief Records a growth of a pool from its upstream on the calling thread: `ptr` 0 when it failed. No GIL needed. */
void record_upstream(std::size_t bytes, std::uintptr_t ptr) noexcept;

/** @brief Forgets the growths recorded so far on the calling thread (before a pool allocation). */
void clear_upstream() noexcept;

/**
 * @brief Calls alloc_preprocess(device_id, mem_size) and alloc_postprocess(device_id, mem_size, mem_ptr) of every
 * hook of the calling thread for each growth recorded since clear_upstream(), then forgets them.
 * @pre the GIL is held. @throws py::error_already_set when a hook raises.
 */
void report_upstream(int device);

/**
 * @brief Calls `hook`(**kwargs) of every hook registered on the calling thread, in registration order.
 * @pre the GIL is held. @throws py::error_already_set when a hook raises.
 */
void call(char const* hook, py::dict const& kwargs);

/** @brief Binds gpumem._gpumem.cuda._set_memory_hooks_active(bool), which gpumem.cuda.memory_hook calls. */
void bind(py::module_& cuda);

}  // namespace gpumem::python::memory_hooks
