// gpumem.cuda.MemoryPool (CuPy's cupy.cuda.MemoryPool) over gpumem's C++ pool_memory_resource, and
// PooledMemory, the memory it hands out.
//
// One pool per device, made on first use (as CuPy's SingleDeviceMemoryPool), each a stack of
//   pool_memory_resource  ->  limit_adaptor (set_limit)  ->  upstream
// where the upstream is gpumem's cuda_memory_resource (allocator=None), a gpumem.mr.DeviceMemoryResource,
// or a CuPy-style Python allocator(size) -> MemoryPointer (callable_upstream, which calls back into Python
// with the GIL). The limit caps the bytes the pool holds from its upstream (CuPy's total_bytes()).
//
// The fast path, malloc(size) and dropping the pointer, stays in C++: the thread's current stream (one call
// to gpumem.cuda.get_current_stream), the pool's thread cache (no shared lock), one shared PooledMemory and
// one MemoryPointer object. The block is freed on the stream that was current at malloc (CuPy's rule); the
// PooledMemory keeps that Stream object alive until then, because the pool records events on the stream.
//
// Lifetimes: every PooledMemory holds its device pool (pool_state), so deleting the MemoryPool while
// pointers live only drops the MemoryPool's reference; the last block freed destroys the pool.
#include "bind_cuda_memory.hpp"
#include "memory_hooks.hpp"

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/device.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>

#include <atomic>
#include <unordered_map>
#include <vector>

namespace gpumem::python {
namespace {

using mr::device_memory_resource;

/**
 * @brief Forwards to `upstream` while the bytes held through it stay within a limit that may change at any
 * time (0: none). A request past the limit throws gpumem::out_of_memory naming the request and the limit.
 * Thread-safety: allocate/deallocate/set_limit may run concurrently (the count is reserved by CAS first).
 */
class limit_adaptor final : public device_memory_resource {
 public:
  explicit limit_adaptor(device_memory_resource* upstream) noexcept : upstream_{upstream} {}

  void set_limit(std::size_t bytes) noexcept { limit_.store(bytes); }
  [[nodiscard]] std::size_t limit() const noexcept { return limit_.load(); }
  [[nodiscard]] std::size_t held() const noexcept { return held_.load(); }

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override
  {
    std::size_t held = held_.load();
    do {
      std::size_t const limit = limit_.load();
      if (limit != 0 && held + bytes > limit) {
        throw out_of_memory("Out of memory allocating " + with_commas(bytes) + " bytes (allocated so far: " +
                            with_commas(held) + " bytes, limit set to: " + with_commas(limit) + " bytes).");
      }
    } while (!held_.compare_exchange_weak(held, held + bytes));
    try {
      void* const p = upstream_->allocate(bytes, stream);
      memory_hooks::record_upstream(bytes, to_int(p));
      return p;
    } catch (...) {
      memory_hooks::record_upstream(bytes, 0);
      held_ -= bytes;
      throw;
    }
  }
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override
  {
    upstream_->deallocate(ptr, bytes, stream);
    held_ -= bytes;
  }

  device_memory_resource* upstream_;
  std::atomic<std::size_t> limit_{0};
  std::atomic<std::size_t> held_{0};  // invariant: <= limit_ when the limit was set before the allocations
};

/**
 * @brief An upstream resource made of a CuPy-style Python allocator: allocator(size) -> MemoryPointer. The
 * MemoryPointer is kept (its memory alive) until the pool gives the chunk back. Calls into Python with the
 * GIL acquired; a MemoryError from the allocator becomes gpumem::out_of_memory (so the pool can shrink its
 * request and retry), any other exception propagates.
 */
class callable_upstream final : public device_memory_resource {
 public:
  explicit callable_upstream(py::object allocator) : allocator_{std::move(allocator)} {}
  ~callable_upstream() override
  {
    py::gil_scoped_acquire const gil;  // the Python references go with the GIL held
    live_.clear();
    allocator_ = py::object{};
  }
  callable_upstream(callable_upstream const&) = delete;
  callable_upstream& operator=(callable_upstream const&) = delete;
  callable_upstream(callable_upstream&&) = delete;
  callable_upstream& operator=(callable_upstream&&) = delete;

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view /*stream*/) override
  {
    py::gil_scoped_acquire const gil;
    py::object result;
    try {
      result = allocator_(bytes);
    } catch (py::error_already_set const& e) {
      if (e.matches(PyExc_MemoryError)) {
        throw out_of_memory(std::string{"MemoryPool's allocator could not allocate "} + with_commas(bytes) + " bytes: " + e.what());
      }
      throw;
    }
    if (!py::isinstance<memory_pointer>(result)) {
      throw logic_error("MemoryPool: the allocator must return a gpumem.cuda.MemoryPointer, not " +
                        std::string{py::str(py::type::of(result).attr("__name__"))});
    }
    auto const& p = result.cast<memory_pointer const&>();
    if (p.remaining() < bytes) {
      throw logic_error("MemoryPool: the allocator returned " + std::to_string(p.remaining()) + " bytes for a request of " +
                        std::to_string(bytes));
    }
    if (p.ptr % gpumem::detail::allocation_alignment != 0) {
      throw logic_error("MemoryPool: the allocator returned an address that is not 256-byte aligned");
    }
    live_.emplace(p.ptr, std::move(result));
    return reinterpret_cast<void*>(p.ptr);  // NOLINT(performance-no-int-to-ptr)
  }
  void do_deallocate(void* ptr, std::size_t /*bytes*/, cuda_stream_view /*stream*/) noexcept override
  {
    py::gil_scoped_acquire const gil;
    live_.erase(to_int(ptr));
  }

  py::object allocator_;
  std::unordered_map<std::uintptr_t, py::object> live_;  // guarded by the GIL
};

/** @brief The upstream of allocator=None: cudaMalloc on the current device (stateless, shared by every pool). */
device_memory_resource& default_upstream()
{
  static mr::cuda_memory_resource resource;
  return resource;
}

/**
 * @brief One device's pool: the C++ pool over the limit over the upstream. Destroyed (returning its chunks)
 * with its device current and the GIL released, when the MemoryPool and every block are gone.
 */
class pool_state {
 public:
  /** @pre `device` is current; `upstream` outlives the state (or is owned through `upstream_object`/`callable`). */
  pool_state(int device, device_memory_resource* upstream, py::object upstream_object,
             std::unique_ptr<callable_upstream> callable)
    : device_{device},
      upstream_object_{std::move(upstream_object)},
      callable_{std::move(callable)},
      limiter_{callable_ ? callable_.get() : upstream},
      pool_{std::make_unique<mr::pool_memory_resource>(&limiter_)}
  {
  }
  ~pool_state()
  {
    release_on(device_, [this] { pool_.reset(); });
  }
  pool_state(pool_state const&) = delete;
  pool_state& operator=(pool_state const&) = delete;
  pool_state(pool_state&&) = delete;
  pool_state& operator=(pool_state&&) = delete;

  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] mr::pool_memory_resource& pool() noexcept { return *pool_; }
  [[nodiscard]] limit_adaptor& limiter() noexcept { return limiter_; }

 private:
  int device_;
  py::object upstream_object_;  // a DeviceMemoryResource kept alive; destroyed last (declared first)
  std::unique_ptr<callable_upstream> callable_;
  limit_adaptor limiter_;
  std::unique_ptr<mr::pool_memory_resource> pool_;
};

/**
 * @brief PooledMemory: a block of a MemoryPool, returned to the pool (on the stream current at malloc) by
 * free() or when the last reference goes.
 */
class pooled_memory final : public device_memory {
 public:
  /** @brief A block at `ptr` of `size` bytes (the block size) from `state`, allocated on `stream`. */
  pooled_memory(std::shared_ptr<pool_state> state, void* ptr, std::size_t size, stream_ref stream) noexcept
    : device_memory{to_int(ptr), size, state->device()}, state_{std::move(state)}, stream_{std::move(stream)}
  {
  }
  ~pooled_memory() override { free(); }

  /** @brief CuPy's pmem_id of the hooks: this block's identity, the same at malloc and at free. */
  [[nodiscard]] std::uintptr_t id() const noexcept { return reinterpret_cast<std::uintptr_t>(this); }
  pooled_memory(pooled_memory const&) = delete;
  pooled_memory& operator=(pooled_memory const&) = delete;
  pooled_memory(pooled_memory&&) = delete;
  pooled_memory& operator=(pooled_memory&&) = delete;

  /** @brief Returns the block to the pool now (CuPy's PooledMemory.free()); ptr reads 0 afterwards. @pre the GIL is held. */
  void free() noexcept
  {
    if (ptr() == 0) { return; }
    bool const hooked = memory_hooks::active();
    if (hooked) { call_free_hook("free_preprocess"); }
    std::uintptr_t const address = ptr();
    void* const block = reinterpret_cast<void*>(address);  // NOLINT(performance-no-int-to-ptr)
    forget();
    // The GIL stays held: a pool deallocation never waits (no upstream call, no synchronisation: a thread
    // cache push, or one short lock and an event record), and releasing the GIL would cost more than it does.
    // No deadlock: the pool's locks are never held while waiting for the GIL.
    try {
      cuda_set_device_raii const guard{cuda_device_id{device_id()}};
      state_->pool().deallocate(block, size(), cuda_stream_view{stream_.release_stream()});
    } catch (...) {  // NOLINT(bugprone-empty-catch): only the device guard can throw (an invalid device: never)
    }
    stream_.object = py::object{};  // the stream may go now (after its blocks left this pool's thread cache)
    if (hooked) { call_free_hook("free_postprocess", address); }
  }

 private:
  /** @brief free_preprocess/free_postprocess of the thread's hooks; what a hook raises is reported as unraisable. */
  void call_free_hook(char const* hook, std::uintptr_t address = 0) const noexcept
  {
    try {
      memory_hooks::call(hook, py::dict(py::arg("device_id") = device_id(), py::arg("mem_size") = size(),
                                        py::arg("mem_ptr") = address != 0 ? address : ptr(), py::arg("pmem_id") = id()));
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable(hook);
    } catch (...) {  // NOLINT(bugprone-empty-catch): a hook cannot stop a free
    }
  }

  std::shared_ptr<pool_state> state_;  // declared before stream_: the stream goes first
  stream_ref stream_;
};

/** @brief The size of the pool's block for a request of `bytes`: a multiple of 256 (CuPy's pool rounds to 512). */
std::size_t block_size(std::size_t bytes) { return gpumem::detail::align_up(bytes, gpumem::detail::allocation_alignment); }

/** @brief MemoryPool: one pool_state per device, made on first use; `allocator` chooses their upstream. */
class memory_pool {
 public:
  explicit memory_pool(py::object allocator) : allocator_{std::move(allocator)}
  {
    if (!allocator_.is_none() && !py::isinstance<device_memory_resource>(allocator_) &&
        PyCallable_Check(allocator_.ptr()) == 0) {
      throw py::type_error("MemoryPool: `allocator` must be None, a gpumem.mr.DeviceMemoryResource or a callable "
                           "allocator(size) -> MemoryPointer, not " +
                           std::string{py::str(py::type::of(allocator_).attr("__name__"))});
    }
  }

  /** @brief The current device's pool, made on first use. @pre the GIL is held. */
  std::shared_ptr<pool_state> const& state()
  {
    int const device = current_device_id();
    if (static_cast<std::size_t>(device) >= states_.size()) { states_.resize(static_cast<std::size_t>(device) + 1); }
    auto& slot = states_[static_cast<std::size_t>(device)];
    if (!slot) { slot = make_state(device); }
    return slot;
  }

  /** @brief The current device's pool if it was made, else null. */
  [[nodiscard]] pool_state* existing_state() const
  {
    auto const device = static_cast<std::size_t>(current_device_id());
    return device < states_.size() ? states_[device].get() : nullptr;
  }

  /** @brief malloc, and the hooks of the calling thread around it when it has some (memory_hooks.hpp). */
  py::object malloc(std::size_t bytes)
  {
    if (bytes == 0) { return to_python(memory_pointer{make_empty_memory(current_device_id()), 0}); }  // as CuPy
    if (!memory_hooks::active()) { return malloc_block(bytes); }
    int const device = current_device_id();
    memory_hooks::call("malloc_preprocess", py::dict(py::arg("device_id") = device, py::arg("size") = bytes,
                                                     py::arg("mem_size") = block_size(bytes)));
    memory_hooks::clear_upstream();
    py::object pointer;
    try {
      pointer = malloc_block(bytes);
    } catch (...) {
      memory_hooks::report_upstream(device);
      memory_hooks::call("malloc_postprocess", py::dict(py::arg("device_id") = device, py::arg("size") = bytes,
                                                        py::arg("mem_size") = block_size(bytes), py::arg("mem_ptr") = 0,
                                                        py::arg("pmem_id") = 0));
      throw;
    }
    memory_hooks::report_upstream(device);
    auto const& p = pointer.cast<memory_pointer const&>();
    memory_hooks::call("malloc_postprocess",
                       py::dict(py::arg("device_id") = device, py::arg("size") = bytes, py::arg("mem_size") = p.mem->size(),
                                py::arg("mem_ptr") = p.ptr,
                                py::arg("pmem_id") = static_cast<pooled_memory const&>(*p.mem).id()));
    return pointer;
  }

 private:
  py::object malloc_block(std::size_t bytes)
  {
    std::shared_ptr<pool_state> const st = state();  // a copy: gc.collect() below may run Python code
    stream_ref stream = current_stream();
    void* block = nullptr;
    try {
      block = allocate(*st, bytes, stream.handle);
    } catch (out_of_memory const&) {
      limit_adaptor const& limiter = st->limiter();
      std::size_t const limit = limiter.limit();
      if (limit != 0 && limiter.held() + block_size(bytes) > limit) {
        throw out_of_memory("Out of memory allocating " + with_commas(block_size(bytes)) + " bytes (allocated so far: " +
                            with_commas(limiter.held()) + " bytes, limit set to: " + with_commas(limit) + " bytes).");
      }
      // As CuPy: collect garbage (pointers in reference cycles hold blocks) and try once more.
      py::module_::import("gc").attr("collect")();
      block = allocate(*st, bytes, stream.handle);
    }
    std::shared_ptr<pooled_memory> memory;
    try {
      memory = std::make_shared<pooled_memory>(st, block, block_size(bytes), std::move(stream));
    } catch (...) {  // std::bad_alloc: give the block back
      st->pool().deallocate(block, bytes, cuda_stream_view{stream.handle});
      throw;
    }
    return to_python(memory_pointer{std::move(memory), 0});
  }

  static void* allocate(pool_state& st, std::size_t bytes, cudaStream_t stream)
  {
    py::gil_scoped_release const release;
    return st.pool().allocate(bytes, cuda_stream_view{stream});
  }

  std::shared_ptr<pool_state> make_state(int device) const
  {
    if (allocator_.is_none()) { return std::make_shared<pool_state>(device, &default_upstream(), py::object{}, nullptr); }
    if (py::isinstance<device_memory_resource>(allocator_)) {
      return std::make_shared<pool_state>(device, allocator_.cast<device_memory_resource*>(), allocator_, nullptr);
    }
    return std::make_shared<pool_state>(device, nullptr, py::object{}, std::make_unique<callable_upstream>(allocator_));
  }

  py::object allocator_;
  std::vector<std::shared_ptr<pool_state>> states_;  // by device ordinal; guarded by the GIL
};

/** @brief A statistic of the current device's pool, 0 when it was never used. */
template <class Query>
std::size_t statistic(memory_pool const& pool, Query&& query)
{
  pool_state* const st = pool.existing_state();
  return st == nullptr ? 0 : std::forward<Query>(query)(st->pool());
}

/**
 * @brief MemoryPool.malloc as a plain CPython method: pybind11's dispatch (argument casters that look the
 * types up by name on every call) would cost more than the allocation. Same behaviour as memory_pool::malloc.
 */
PyObject* malloc_method(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) noexcept
{
  PyObject* const size_object = single_argument(args, nargs, kwnames, "MemoryPool.malloc", "size");
  if (size_object == nullptr) { return nullptr; }
  try {
    std::size_t size = PyLong_CheckExact(size_object) ? PyLong_AsSize_t(size_object) : SIZE_MAX;  // the common case
    if (size == SIZE_MAX && (PyErr_Occurred() != nullptr || !PyLong_CheckExact(size_object))) {
      PyErr_Clear();
      size = convert_argument<std::size_t>(py::handle{size_object}, "size");  // raises naming it, or converts
    }
    // The descriptor checked that self is a MemoryPool; its C++ object is the instance's first (only) value.
    auto* const instance = reinterpret_cast<py::detail::instance*>(self);
    auto* const pool = static_cast<memory_pool*>(instance->get_value_and_holder().value_ptr());
    if (pool == nullptr) {
      PyErr_SetString(PyExc_TypeError, "MemoryPool.malloc: the MemoryPool was not initialised (__init__ not called)");
      return nullptr;
    }
    return pool->malloc(size).release().ptr();
  } catch (...) {
    set_error_from_current_exception();
    return nullptr;
  }
}

PyMethodDef malloc_definition{  // NOLINT: CPython keeps a pointer to it
  "malloc", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&malloc_method)), METH_FASTCALL | METH_KEYWORDS,
  "malloc(size)\n--\n\nAllocates `size` bytes (rounded up to 256) from the current device's pool, on the current "
  "stream, and returns a MemoryPointer to a PooledMemory. size 0 gives a pointer to empty memory (ptr 0). Raises "
  "ValueError for a negative size; OutOfMemoryError when the memory is not there, or when the pool would exceed "
  "the limit (set_limit; the message names the size, the bytes held and the limit)."};

py::handle default_pool_object;  // NOLINT: get_default_memory_pool()'s pool, made at import, never released

}  // namespace

void bind_memory_pool(py::module_& cuda)
{
  py::class_<pooled_memory, device_memory, std::shared_ptr<pooled_memory>>(cuda, "PooledMemory", R"doc(A block of a
MemoryPool (CuPy's cupy.cuda.PooledMemory), made by MemoryPool.malloc, not constructed directly. The block
goes back to its pool, on the stream that was current at malloc, when the last reference goes or free() is
called. size is the block's size (the request rounded up to 256 bytes).)doc")
    .def("free", &pooled_memory::free,
         "Returns the block to its pool now (ptr reads 0 afterwards); the pointers into it must not be used "
         "any more. Later calls do nothing.");

  py::class_<memory_pool> pool_class(cuda, "MemoryPool", R"doc(A memory pool for every device (CuPy's cupy.cuda.MemoryPool), built
on gpumem's pool_memory_resource: freed blocks are kept and reused, split and coalesced (best fit), so that
malloc rarely reaches the device's allocator.

MemoryPool(allocator=None): the upstream the pools grow from: None is cudaMalloc (gpumem's
CudaMemoryResource); a gpumem.mr.DeviceMemoryResource (kept alive; used with the device that is current at
malloc); or a CuPy-style allocator(size) -> MemoryPointer, called with the GIL held, whose MemoryPointer is
kept until the pool returns the memory (a MemoryError it raises counts as out of memory).

Each device has its own pool, made on first use; the methods act on the current device's. A block is freed
on the stream that was current at malloc and reused there at once, on other streams after an event wait.
Usage: set_allocator(MemoryPool().malloc), or get_default_memory_pool().)doc");
  pool_class.def(py::init<py::object>(), py::arg("allocator") = py::none())
    .def(
      "free_all_blocks",
      [](memory_pool& pool, py::handle stream) {
        if (!stream.is_none()) { static_cast<void>(to_stream(stream)); }
        pool_state* const st = pool.existing_state();
        if (st == nullptr) { return; }
        release_on(st->device(), [st] { st->pool().release(); });
      },
      py::arg("stream") = py::none(),
      "Returns the current device's wholly free chunks to the upstream. A chunk of which any part is in use "
      "stays. `stream` is accepted as in CuPy, but the blocks of every stream are released (the pool merges "
      "them first, in stream order).")
    .def(
      "free_all_free",
      [](memory_pool& pool) {
        if (PyErr_WarnEx(PyExc_DeprecationWarning, "free_all_free is deprecated. Use free_all_blocks instead.", 1) != 0) {
          throw py::error_already_set();
        }
        pool_state* const st = pool.existing_state();
        if (st != nullptr) { release_on(st->device(), [st] { st->pool().release(); }); }
      },
      "(Deprecated, as in CuPy) free_all_blocks().")
    .def(
      "n_free_blocks", [](memory_pool const& pool) { return statistic(pool, [](auto& p) { return p.free_block_count(); }); },
      "The number of free blocks in the current device's pool.")
    .def(
      "used_bytes", [](memory_pool const& pool) { return statistic(pool, [](auto& p) { return p.bytes_in_use(); }); },
      "Bytes of the current device's pool handed out and not yet freed (block sizes).")
    .def(
      "free_bytes", [](memory_pool const& pool) { return statistic(pool, [](auto& p) { return p.bytes_cached(); }); },
      "Bytes the current device's pool holds but has not handed out: total_bytes() - used_bytes().")
    .def(
      "total_bytes", [](memory_pool const& pool) { return statistic(pool, [](auto& p) { return p.pool_size(); }); },
      "Bytes the current device's pool holds from its upstream.")
    .def(
      "set_limit",
      [](memory_pool& pool, py::object const& size, py::object const& fraction) {
        std::size_t const bytes = limit_bytes(size, fraction, current_device_id());  // (bind_cuda_memory.hpp)
        pool.state()->limiter().set_limit(bytes);
      },
      py::arg("size") = py::none(), py::arg("fraction") = py::none(),
      R"doc(Caps the bytes the current device's pool may hold from its upstream (total_bytes()).

size in bytes, or fraction (in [0, 1]) of the device's total memory; not both (ValueError). Neither, or 0,
removes the limit. A malloc that would need more raises OutOfMemoryError naming the size and the limit.
Bytes already held stay held.)doc")
    .def(
      "get_limit",
      [](memory_pool const& pool) {
        pool_state* const st = pool.existing_state();
        return st == nullptr ? std::size_t{0} : st->limiter().limit();
      },
      "The current device's limit in bytes (0: none).");
  add_raw_method(pool_class, malloc_definition);

  default_pool_object = py::cast(std::make_unique<memory_pool>(py::none())).release();
  cuda.def(
    "get_default_memory_pool", [] { return py::reinterpret_borrow<py::object>(default_pool_object); },
    "The process's default MemoryPool (CuPy's cupy.get_default_memory_pool()): what gpumem.cuda.alloc uses unless "
    "set_allocator chose another allocator.");
}

}  // namespace gpumem::python
