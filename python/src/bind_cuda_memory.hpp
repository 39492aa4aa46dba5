// What the bind_cuda_memory*.cpp files share: gpumem.cuda's CuPy-shaped memory objects (cupy.cuda.memory
// and cupy.cuda.pinned_memory) as C++ types, and the helpers every one of those files needs.
//
//   device_memory        BaseMemory: an address, a size and a device; subclasses own the memory (Memory,
//                        ManagedMemory, MemoryAsync, PooledMemory, ...) or merely name it (UnownedMemory)
//   memory_pointer       MemoryPointer: a device_memory and an offset into it
//   pinned_memory        PinnedMemory: page-locked host memory, with the events of the copies still using it
//   pinned_memory_pointer PinnedMemoryPointer: a pinned_memory and an offset (a Python buffer)
//
// Lifetime rule, which every file keeps: the C++ objects are shared (std::shared_ptr) between their Python
// wrappers and the pointers into them, and the last reference is only ever dropped with the GIL held (by a
// Python object's deallocation, or by code that holds the GIL). So a destructor may drop Python references;
// one that waits (a device free, a pending copy) releases the GIL around the wait (without_gil).
//
// The current stream is gpumem.cuda.get_current_stream() (bind_cuda.cpp keeps one per device and thread);
// current_stream() asks it, and keeps the Stream object so that memory freed on it can hold the stream alive.
#pragma once

#include "arguments.hpp"
#include "conversions.hpp"

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/event.hpp>

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace gpumem::python {

// ---- small shared helpers ------------------------------------------------------------------------------

/**
 * @brief Runs `body` with the GIL released when the calling thread holds it, else as is (destructors use
 * it: they may run with or without the GIL).
 */
template <class Body>
decltype(auto) without_gil(Body&& body)
{
  if (PyGILState_Check() != 0) {
    py::gil_scoped_release const release;
    return std::forward<Body>(body)();
  }
  return std::forward<Body>(body)();
}

/**
 * @brief Runs `release` (a free, a pool's destruction) with `device` current and the GIL released; never
 * throws (a failure leaks what was to be released: a destructor cannot report it).
 */
template <class Release>
void release_on(int device, Release&& release) noexcept
{
  try {
    without_gil([&] {
      cuda_set_device_raii const guard{cuda_device_id{device}};
      std::forward<Release>(release)();
    });
  } catch (...) {  // NOLINT(bugprone-empty-catch): see above
  }
}

/** @brief A `size` argument: an int in [0, SIZE_MAX] (TypeError or ValueError naming it otherwise). */
using size_argument = checked<std::size_t, "size">;

/**
 * @brief CuPy's set_limit(size=None, fraction=None) of a pool as bytes: `size` bytes, or `fraction` (in
 * [0, 1]) of device `device`'s total memory; 0 (no limit) for neither.
 * @throws py::value_error as CuPy for both, a negative size or a fraction out of range; py::type_error (and
 *         py::value_error past SIZE_MAX) naming the argument otherwise.
 */
[[nodiscard]] std::size_t limit_bytes(py::handle size, py::handle fraction, int device);

/**
 * @brief `bytes` rounded up to a multiple of `unit` (a power of two), the block size a pool hands out.
 * @throws gpumem::bad_alloc (MemoryError) naming `what` and the size when the rounding overflows.
 */
[[nodiscard]] std::size_t rounded_request(std::size_t bytes, std::size_t unit, char const* what);

/** @brief `bytes` as CuPy writes sizes in messages: "1,048,576". */
[[nodiscard]] std::string with_commas(std::size_t bytes);

/** @brief The calling thread's current device (an ordinal). */
[[nodiscard]] int current_device_id();

/** @brief A stream and, where it came from a Python Stream object, that object (to keep the stream alive). */
struct stream_ref {
  cudaStream_t handle{};
  py::object object;        ///< empty for the null stream and for streams given as ints
  std::thread::id thread{};  ///< for the per-thread default stream: the thread whose stream it is

  stream_ref() = default;
  stream_ref(cudaStream_t stream, py::object stream_object)
    : handle{stream}, object{std::move(stream_object)}, thread{std::this_thread::get_id()}
  {
  }

  /**
   * @brief The stream to free memory on that was allocated on this one: the same stream, except that the
   * per-thread default stream named on another thread is another stream; the legacy default stream is used
   * then, which is ordered after the work of every blocking stream (the per-thread ones included).
   */
  [[nodiscard]] cudaStream_t release_stream() const noexcept
  {
    return handle == cudaStreamPerThread && thread != std::this_thread::get_id() ? cudaStream_t{} : handle;
  }
};

/** @brief The thread's current stream of the current device (gpumem.cuda.get_current_stream()). @pre the GIL is held. */
[[nodiscard]] stream_ref current_stream();

/**
 * @brief A `stream=` argument: None -> the thread's current stream; otherwise what conversions.hpp's
 * to_stream accepts (an int handle, or an object with .ptr). @throws py::type_error for anything else.
 */
[[nodiscard]] stream_ref stream_argument(py::handle stream);

/**
 * @brief Sets the Python error for the C++ exception being handled, through pybind11's registered translators
 * (module-local first: bind_errors.cpp's gpumem errors), as pybind11's own dispatcher does.
 * @pre called inside a catch block, with the GIL held.
 */
void set_error_from_current_exception() noexcept;

/**
 * @brief Adds `function` to the pybind11 class `cls` as a plain CPython method `name` (METH_FASTCALL |
 * METH_KEYWORDS): for the few calls whose cost matters (MemoryPool.malloc), bypassing pybind11's dispatch.
 * `definition` must live as long as the class (a static).
 */
void add_raw_method(py::handle cls, PyMethodDef& definition);

/**
 * @brief The one argument of a raw METH_FASTCALL | METH_KEYWORDS method, given by position or as `name=`.
 * @return the argument (borrowed), or null with a TypeError set.
 */
[[nodiscard]] PyObject* single_argument(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, char const* function,
                                        char const* name) noexcept;

/** @brief gpumem.cuda.Device(device_id), for the `.device` properties. */
[[nodiscard]] py::object device_object(int device_id);

// ---- device memory -------------------------------------------------------------------------------------

/**
 * @brief BaseMemory: `size` bytes of device memory at `ptr` on device `device_id`. What owns the memory, and
 * how it is freed, is the subclass's business; the object never changes except that an owner that frees
 * early (PooledMemory.free()) sets ptr to 0.
 * Thread-safety: the Python wrappers serialise access through the GIL.
 */
class device_memory {
 public:
  device_memory(std::uintptr_t ptr, std::size_t size, int device_id) noexcept
    : ptr_{ptr}, size_{size}, device_id_{device_id}
  {
  }
  virtual ~device_memory() = default;
  device_memory(device_memory const&) = delete;
  device_memory& operator=(device_memory const&) = delete;
  device_memory(device_memory&&) = delete;
  device_memory& operator=(device_memory&&) = delete;

  [[nodiscard]] std::uintptr_t ptr() const noexcept { return ptr_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] int device_id() const noexcept { return device_id_; }

  /**
   * @brief The Python object that stands for this memory when it is not one of gpumem's own (a foreign
   * object given to MemoryPointer); empty otherwise.
   */
  [[nodiscard]] virtual py::object python_object() const { return {}; }

 protected:
  /** @brief For owners that free before destruction: the memory is gone, ptr reads 0 from now on. */
  void forget() noexcept { ptr_ = 0; }

 private:
  std::uintptr_t ptr_;
  std::size_t size_;
  int device_id_;
};

/** @brief MemoryPointer: a place `offset` bytes into `mem`. Invariant: 0 <= offset <= mem->size(). */
struct memory_pointer {
  std::shared_ptr<device_memory> mem;
  std::size_t offset{};
  std::uintptr_t ptr{};  ///< mem->ptr() + offset when made (CuPy keeps the address even after PooledMemory.free())
  py::object mem_object;  ///< `mem`'s Python object once asked for (so that p.mem is p.mem); empty until then

  /**
   * @brief A pointer `offset` bytes into `memory`.
   * @throws py::value_error when `offset` is negative or past the end of the memory (naming both).
   */
  memory_pointer(std::shared_ptr<device_memory> memory, std::int64_t offset);
  /** @brief The bytes from this pointer to the end of its memory. */
  [[nodiscard]] std::size_t remaining() const noexcept { return mem->size() - offset; }
};

/** @brief A Memory (CuPy's cupy.cuda.Memory) of size 0 on `device`: ptr 0, nothing allocated (MemoryPool.malloc(0)). */
[[nodiscard]] std::shared_ptr<device_memory> make_empty_memory(int device);

/** @brief The MemoryPointer Python object for `pointer` (the fast way to hand one to Python). */
[[nodiscard]] py::object to_python(memory_pointer pointer);

// ---- pinned host memory --------------------------------------------------------------------------------

/**
 * @brief PinnedMemory: `size` bytes of page-locked host memory at `ptr`, plus the events recorded after the
 * asynchronous copies that still read or write it (record_use), which the owner waits for before the memory
 * is freed or reused (a pinned copy returns before the bytes have moved).
 * Thread-safety: record_use / take_pending may be called from any thread.
 */
class pinned_memory {
 public:
  pinned_memory(std::uintptr_t ptr, std::size_t size) noexcept : ptr_{ptr}, size_{size} {}
  virtual ~pinned_memory() = default;
  pinned_memory(pinned_memory const&) = delete;
  pinned_memory& operator=(pinned_memory const&) = delete;
  pinned_memory(pinned_memory&&) = delete;
  pinned_memory& operator=(pinned_memory&&) = delete;

  [[nodiscard]] std::uintptr_t ptr() const noexcept { return ptr_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /** @brief The Python object standing for foreign memory given to PinnedMemoryPointer; empty for gpumem's. */
  [[nodiscard]] virtual py::object python_object() const { return {}; }

  /** @brief Records that work enqueued on `stream` so far (an asynchronous copy) uses this memory. */
  void record_use(cuda_stream_view stream);
  /** @brief The events of the uses recorded so far (and forgets them): wait for them before reuse. */
  [[nodiscard]] std::vector<event> take_pending();

 protected:
  void forget() noexcept { ptr_ = 0; }

 private:
  std::uintptr_t ptr_;
  std::size_t size_;
  std::mutex mutex_;
  std::vector<event> pending_;  // guarded by mutex_; completed ones are dropped at each record_use
};

/** @brief Blocks until every event in `events` has completed (call it with the GIL released). */
void wait_all(std::vector<event> const& events);

/** @brief PinnedMemoryPointer: a place `offset` bytes into `mem`. Invariant: 0 <= offset <= mem->size(). */
struct pinned_memory_pointer {
  std::shared_ptr<pinned_memory> mem;
  std::size_t offset{};
  py::object mem_object;  ///< `mem`'s Python object once asked for (so that p.mem is p.mem); empty until then

  /** @throws py::value_error when `offset` is negative or past the end of the memory. */
  pinned_memory_pointer(std::shared_ptr<pinned_memory> memory, std::int64_t offset);
  [[nodiscard]] std::uintptr_t ptr() const noexcept { return mem->ptr() + offset; }
  [[nodiscard]] std::size_t remaining() const noexcept { return mem->size() - offset; }
};

// ---- the binding functions, called in this order by bind_cuda_memory.cpp ------------------------------

void bind_device_memory(py::module_& cuda);        ///< BaseMemory, Memory, ManagedMemory, UnownedMemory (bind_cuda_memory.cpp)
void bind_memory_pointer(py::module_& cuda);       ///< MemoryPointer and its copies (bind_cuda_memory_pointer.cpp)
void bind_memory_pool(py::module_& cuda);          ///< PooledMemory, MemoryPool (bind_cuda_memory_pool.cpp)
void bind_memory_async(py::module_& cuda);         ///< MemoryAsync, MemoryAsyncPool (bind_cuda_memory_async.cpp)
void bind_function_allocators(py::module_& cuda);  ///< PythonFunctionAllocator, CFunctionAllocator (bind_cuda_memory_allocators.cpp)
void bind_pinned_memory(py::module_& cuda);        ///< PinnedMemory, PinnedMemoryPointer, PinnedMemoryPool (bind_cuda_memory_pinned.cpp)

}  // namespace gpumem::python
