// gpumem.cuda's pinned host memory with CuPy's names (cupy.cuda.pinned_memory):
//   PinnedMemory         page-locked host memory owned by the object (cudaHostAlloc)
//   PinnedMemoryPointer  a place in it; a Python buffer (numpy.frombuffer(p, dtype, count) works)
//   PinnedMemoryPool     CuPy's pinned pool: freed blocks are kept in free lists by size and reused; new
//                        blocks come from gpumem's pinned_memory_pool (allocator=None: its own; the default
//                        pool: the process's, which gpumem's staged copies also use) or from a CuPy-style
//                        allocator(size) -> PinnedMemoryPointer
//   PooledPinnedMemory   a block of a PinnedMemoryPool
//
// Copies in flight: an asynchronous copy from or to gpumem pinned memory records an event on its stream
// (pinned_memory::record_use, called by MemoryPointer's copies). Freed pinned memory waits for those events
// before it goes back to the system (PinnedMemory) or before its block is handed out again (the pool), so no
// copy can read or write memory that someone else got in the meantime. (CuPy keeps the memory alive on a
// watch list instead; the effect is the same.)
#include "bind_cuda_memory.hpp"

#include <gpumem/error.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/pinned_host_memory_resource.hpp>
#include <gpumem/mr/pinned_memory_pool.hpp>

#include <map>
#include <sstream>

namespace gpumem::python {

// ---- bind_cuda_memory.hpp's pinned_memory ---------------------------------------------------------------

void pinned_memory::record_use(cuda_stream_view stream)
{
  event used{event_flags::disable_timing};
  used.record(stream);
  std::lock_guard const lock{mutex_};
  std::erase_if(pending_, [](event const& e) { return e.query(); });
  pending_.push_back(std::move(used));
}

std::vector<event> pinned_memory::take_pending()
{
  std::lock_guard const lock{mutex_};
  return std::exchange(pending_, {});
}

void wait_all(std::vector<event> const& events)
{
  for (event const& e : events) { e.synchronize(); }
}

pinned_memory_pointer::pinned_memory_pointer(std::shared_ptr<pinned_memory> memory, std::int64_t offset_bytes)
  : mem{std::move(memory)}
{
  if (mem == nullptr) { throw py::type_error("PinnedMemoryPointer: `mem` must not be None"); }
  if (offset_bytes < 0 || static_cast<std::uint64_t>(offset_bytes) > mem->size()) {
    throw py::value_error("PinnedMemoryPointer: offset " + std::to_string(offset_bytes) + " is outside the memory of " +
                          std::to_string(mem->size()) + " bytes (0 <= offset <= size)");
  }
  offset = static_cast<std::size_t>(offset_bytes);
}

namespace {

/** @brief Waits for `memory`'s pending copies (GIL released); never throws. */
void wait_pending(std::vector<event> const& pending) noexcept
{
  if (pending.empty()) { return; }
  try {
    without_gil([&] { wait_all(pending); });
  } catch (...) {  // NOLINT(bugprone-empty-catch): a failed wait means the stream is broken; nothing to wait for
  }
}

/** @brief Where PinnedMemory comes from (cudaMallocHost / cudaFreeHost); leaked: memory may be freed at exit. */
mr::pinned_host_memory_resource& pinned_host_resource()
{
  static auto* const resource = new mr::pinned_host_memory_resource{};  // NOLINT(cppcoreguidelines-owning-memory)
  return *resource;
}

/** @brief PinnedMemory(size, flags): pinned host memory, freed (after its pending copies) when the object goes. */
class host_alloc_memory final : public pinned_memory {
 public:
  host_alloc_memory(void* ptr, std::size_t size, unsigned flags) noexcept : pinned_memory{to_int(ptr), size}, flags_{flags} {}
  ~host_alloc_memory() override
  {
    if (ptr() == 0) { return; }
    std::vector<event> const pending = take_pending();
    wait_pending(pending);
    pinned_host_resource().deallocate(reinterpret_cast<void*>(ptr()), size());  // NOLINT(performance-no-int-to-ptr)
  }
  host_alloc_memory(host_alloc_memory const&) = delete;
  host_alloc_memory& operator=(host_alloc_memory const&) = delete;
  host_alloc_memory(host_alloc_memory&&) = delete;
  host_alloc_memory& operator=(host_alloc_memory&&) = delete;

  [[nodiscard]] unsigned flags() const noexcept { return flags_; }

  /** @throws py::value_error for flags gpumem cannot honour; gpumem::out_of_memory when pinning fails. */
  static std::shared_ptr<pinned_memory> allocate(std::size_t size, unsigned flags)
  {
    constexpr unsigned portable = 0x1U;  // cudaHostAllocPortable
    constexpr unsigned mapped = 0x2U;    // cudaHostAllocMapped
    if ((flags & ~(portable | mapped)) != 0) {
      throw py::value_error("PinnedMemory: flags " + std::to_string(flags) +
                            " are not supported; gpumem's pinned memory is portable and mapped (cudaHostAllocPortable = 1, "
                            "cudaHostAllocMapped = 2 are accepted, cudaHostAllocWriteCombined = 4 is not)");
    }
    void* p = nullptr;
    if (size > 0) {
      py::gil_scoped_release const release;
      p = pinned_host_resource().allocate(size);  // gpumem::out_of_memory when the memory cannot be pinned
    }
    return std::make_shared<host_alloc_memory>(p, size, flags);
  }

 private:
  unsigned flags_;
};

/** @brief Memory given to PinnedMemoryPointer that is not gpumem's: an object with ptr and size. */
class foreign_pinned_memory final : public pinned_memory {
 public:
  foreign_pinned_memory(std::uintptr_t ptr, std::size_t size, py::object object) noexcept
    : pinned_memory{ptr, size}, object_{std::move(object)}
  {
  }
  [[nodiscard]] py::object python_object() const override { return object_; }

 private:
  py::object object_;
};

std::shared_ptr<pinned_memory> to_pinned_memory(py::handle mem)
{
  if (py::isinstance<pinned_memory>(mem)) { return mem.cast<std::shared_ptr<pinned_memory>>(); }
  if (py::hasattr(mem, "ptr") && py::hasattr(mem, "size")) {
    auto const ptr = static_cast<std::uintptr_t>(unsigned_argument(mem.attr("ptr"), "PinnedMemoryPointer: mem.ptr", UINTPTR_MAX));
    auto const size = static_cast<std::size_t>(unsigned_argument(mem.attr("size"), "PinnedMemoryPointer: mem.size", SIZE_MAX));
    return std::make_shared<foreign_pinned_memory>(ptr, size, py::reinterpret_borrow<py::object>(mem));
  }
  throw py::type_error("PinnedMemoryPointer: `mem` must be a gpumem.cuda.PinnedMemory or an object with .ptr and "
                       ".size, not " + std::string{py::str(py::type::of(mem).attr("__name__"))});
}

/** @brief As memory_object (bind_cuda_memory_pointer.cpp): the memory's Python object, kept by the pointer. */
py::object pinned_memory_object(pinned_memory_pointer& p)
{
  if (!p.mem_object) {
    py::object foreign = p.mem->python_object();
    p.mem_object = foreign ? std::move(foreign) : py::cast(p.mem);
  }
  return p.mem_object;
}

// ---- the pool -------------------------------------------------------------------------------------------

/** @brief CuPy rounds pinned requests up to 512 bytes (cudaHostAlloc's granularity). */
constexpr std::size_t pinned_unit = 512;

/** @brief A block of a PinnedMemoryPool: its memory, and what still uses it once it was freed. */
struct pinned_block {
  std::uintptr_t ptr{};
  std::size_t size{};
  std::shared_ptr<pinned_memory> upstream;  ///< the allocator's memory (callable allocators only)
  std::vector<event> pending;               ///< copies that used the block before it was freed
};

/**
 * @brief The pool behind a PinnedMemoryPool: exact-size free lists (CuPy's) in front of gpumem's
 * pinned_memory_pool or a Python allocator.
 * Thread-safety: one mutex for the free lists and counters; never held while allocating or waiting.
 * Invariant: cached_ == sum of the free blocks' sizes; free_count_ == the number of free blocks.
 */
class pinned_pool_state {
 public:
  /** @brief Over gpumem's `pool` (owned when `owned` is given). */
  pinned_pool_state(mr::pinned_memory_pool* pool, std::unique_ptr<mr::pinned_memory_pool> owned) noexcept
    : owned_{std::move(owned)}, pool_{pool}
  {
  }
  /** @brief Over a CuPy-style allocator(size) -> PinnedMemoryPointer. */
  explicit pinned_pool_state(py::object allocator) noexcept : allocator_{std::move(allocator)} {}
  /** @pre the GIL is held (a callable allocator's blocks hold Python objects). */
  ~pinned_pool_state() { free_all(); }
  pinned_pool_state(pinned_pool_state const&) = delete;
  pinned_pool_state& operator=(pinned_pool_state const&) = delete;
  pinned_pool_state(pinned_pool_state&&) = delete;
  pinned_pool_state& operator=(pinned_pool_state&&) = delete;

  /** @brief A block of exactly `size` bytes (a multiple of 512): a free one, or a new one. @pre the GIL is held. */
  pinned_block take(std::size_t size)
  {
    if (std::optional<pinned_block> reused = pop_free(size)) {
      wait_pending(reused->pending);
      reused->pending.clear();
      return std::move(*reused);
    }
    pinned_block block;
    try {
      block = allocate(size);
    } catch (out_of_memory const&) {  // as CuPy: give the free blocks back and try once more
      free_all();
      block = allocate(size);
    }
    std::lock_guard const lock{mutex_};
    used_ += size;
    return block;
  }

  /** @brief Puts a freed block in its free list (no wait: its pending copies are waited for at reuse). */
  void give_back(pinned_block block) noexcept
  {
    std::size_t const size = block.size;
    {
      std::lock_guard const lock{mutex_};
      used_ -= size;
      try {
        free_[size].push_back(std::move(block));
        cached_ += size;
        ++free_count_;
        return;
      } catch (...) {  // NOLINT(bugprone-empty-catch): no memory for the list; dropped below, outside the lock
      }
    }
    drop(block);  // waits for its copies (GIL released), so never under mutex_
  }

  /** @brief Returns every free block to where it came from. @pre the GIL is held. */
  void free_all()
  {
    std::map<std::size_t, std::vector<pinned_block>> blocks;
    {
      std::lock_guard const lock{mutex_};
      blocks.swap(free_);
      cached_ = 0;
      free_count_ = 0;
    }
    for (auto& [size, list] : blocks) {
      for (pinned_block& block : list) { drop(block); }
    }
    if (pool_ != nullptr) {
      without_gil([this] { pool_->release_free_chunks(); });
    }
  }

  [[nodiscard]] std::size_t used_bytes() const { return locked([this] { return used_; }); }
  [[nodiscard]] std::size_t free_bytes() const { return locked([this] { return cached_; }); }
  [[nodiscard]] std::size_t free_blocks() const { return locked([this] { return free_count_; }); }

 private:
  template <class Read>
  std::size_t locked(Read&& read) const
  {
    std::lock_guard const lock{mutex_};
    return std::forward<Read>(read)();
  }

  std::optional<pinned_block> pop_free(std::size_t size)
  {
    std::lock_guard const lock{mutex_};
    auto const found = free_.find(size);
    if (found == free_.end() || found->second.empty()) { return std::nullopt; }
    pinned_block block = std::move(found->second.back());
    found->second.pop_back();
    cached_ -= size;
    --free_count_;
    used_ += size;
    return block;
  }

  pinned_block allocate(std::size_t size)
  {
    if (pool_ != nullptr) {
      void* const p = without_gil([&] { return pool_->allocate(size, gpumem::detail::allocation_alignment); });
      return pinned_block{to_int(p), size, nullptr, {}};
    }
    py::object result;
    try {
      result = allocator_(size);
    } catch (py::error_already_set const& e) {
      if (e.matches(PyExc_MemoryError)) {
        throw out_of_memory(std::string{"PinnedMemoryPool's allocator could not allocate "} + with_commas(size) + " bytes: " + e.what());
      }
      throw;
    }
    if (!py::isinstance<pinned_memory_pointer>(result)) {
      throw py::type_error("PinnedMemoryPool: the allocator must return a gpumem.cuda.PinnedMemoryPointer, not " +
                           std::string{py::str(py::type::of(result).attr("__name__"))});
    }
    std::shared_ptr<pinned_memory> memory = result.cast<pinned_memory_pointer const&>().mem;
    if (memory->size() < size) {
      throw py::value_error("PinnedMemoryPool: the allocator returned " + std::to_string(memory->size()) +
                            " bytes for a request of " + std::to_string(size));
    }
    std::uintptr_t const ptr = memory->ptr();
    return pinned_block{ptr, size, std::move(memory), {}};
  }

  /** @brief Gives a block back to its source for good, after its pending copies. */
  void drop(pinned_block& block) noexcept
  {
    wait_pending(block.pending);
    block.pending.clear();
    if (pool_ != nullptr) {
      pool_->deallocate(reinterpret_cast<void*>(block.ptr), block.size, gpumem::detail::allocation_alignment);  // NOLINT
    }
    block.upstream.reset();  // a callable allocator's memory: freed by its own object
  }

  py::object allocator_;                        // a callable allocator, or empty
  std::unique_ptr<mr::pinned_memory_pool> owned_;
  mr::pinned_memory_pool* pool_{};              // gpumem's pool, or null with a callable allocator
  mutable std::mutex mutex_;
  std::map<std::size_t, std::vector<pinned_block>> free_;  // guarded by mutex_
  std::size_t used_{};        // guarded by mutex_: bytes of the blocks handed out
  std::size_t cached_{};      // guarded by mutex_
  std::size_t free_count_{};  // guarded by mutex_
};

/** @brief PooledPinnedMemory: a block of a PinnedMemoryPool, back in its free list when the object goes. */
class pooled_pinned_memory final : public pinned_memory {
 public:
  pooled_pinned_memory(std::shared_ptr<pinned_pool_state> state, pinned_block block) noexcept
    : pinned_memory{block.ptr, block.size}, state_{std::move(state)}, block_{std::move(block)}
  {
  }
  ~pooled_pinned_memory() override { free(); }
  pooled_pinned_memory(pooled_pinned_memory const&) = delete;
  pooled_pinned_memory& operator=(pooled_pinned_memory const&) = delete;
  pooled_pinned_memory(pooled_pinned_memory&&) = delete;
  pooled_pinned_memory& operator=(pooled_pinned_memory&&) = delete;

  /** @brief Returns the block to the pool now; ptr reads 0 afterwards. Later calls do nothing. */
  void free() noexcept
  {
    if (ptr() == 0) { return; }
    forget();
    block_.pending = take_pending();
    state_->give_back(std::move(block_));
  }

 private:
  std::shared_ptr<pinned_pool_state> state_;
  pinned_block block_;
};

/** @brief PinnedMemoryPool: a pinned_pool_state, shared with the blocks it handed out. */
class pinned_pool {
 public:
  explicit pinned_pool(std::shared_ptr<pinned_pool_state> state) noexcept : state_{std::move(state)} {}

  py::object malloc(size_argument size)
  {
    std::size_t const bytes = size.value;
    if (bytes == 0) { return py::cast(pinned_memory_pointer{host_alloc_memory::allocate(0, 0), 0}); }
    std::size_t const rounded = rounded_request(bytes, pinned_unit, "PinnedMemoryPool.malloc");
    pinned_block block = state_->take(rounded);
    std::shared_ptr<pooled_pinned_memory> memory;
    try {
      memory = std::make_shared<pooled_pinned_memory>(state_, std::move(block));
    } catch (...) {  // std::bad_alloc: the block goes back to the free list
      state_->give_back(std::move(block));
      throw;
    }
    return py::cast(pinned_memory_pointer{std::move(memory), 0});
  }
  [[nodiscard]] pinned_pool_state& state() const noexcept { return *state_; }

 private:
  std::shared_ptr<pinned_pool_state> state_;
};

std::string describe(pinned_memory_pointer const& p)
{
  std::ostringstream out;
  out << "<gpumem.cuda.PinnedMemoryPointer 0x" << std::hex << p.ptr() << std::dec << " offset=" << p.offset
      << " size=" << p.mem->size() << ">";
  return out.str();
}

py::handle default_pinned_pool_object;  // NOLINT: get_default_pinned_memory_pool()'s pool, never released

}  // namespace

void bind_pinned_memory(py::module_& cuda)
{
  py::class_<pinned_memory, std::shared_ptr<pinned_memory>>(cuda, "PinnedMemory", R"doc(Pinned (page-locked) host memory
owned by the object (CuPy's cupy.cuda.PinnedMemory): the host memory the device copies to and from at full
speed and asynchronously.

PinnedMemory(size, flags=0): `size` bytes (cudaHostAlloc). flags: 0, or cudaHostAllocPortable (1) and
cudaHostAllocMapped (2), which gpumem's pinned memory always is; cudaHostAllocWriteCombined (4) raises
ValueError. Freed when the object goes, after the asynchronous copies that use it have run. Raises ValueError
for a negative size, OutOfMemoryError when the memory cannot be pinned. Attributes: ptr, size; int(mem) is ptr.)doc")
    .def(py::init([](size_argument size, checked<unsigned, "flags"> flags) {
           return host_alloc_memory::allocate(size.value, flags.value);
         }),
         py::arg("size"), py::arg("flags") = 0)
    .def_property_readonly("ptr", &pinned_memory::ptr, "The address of the memory (an int; 0 when empty or freed).")
    .def_property_readonly("size", &pinned_memory::size, "The size of the memory in bytes.")
    .def("__int__", &pinned_memory::ptr, "The address, as ptr.")
    .def("__repr__", [](py::object const& self) {
      auto const& m = self.cast<pinned_memory const&>();
      std::ostringstream out;
      out << "<gpumem.cuda." << std::string{py::str(py::type::of(self).attr("__name__"))} << " 0x" << std::hex << m.ptr()
          << std::dec << " size=" << m.size() << ">";
      return out.str();
    });

  py::class_<pooled_pinned_memory, pinned_memory, std::shared_ptr<pooled_pinned_memory>>(cuda, "PooledPinnedMemory",
                                                                                         R"doc(A block of a
PinnedMemoryPool (CuPy's cupy.cuda.PooledPinnedMemory), made by PinnedMemoryPool.malloc. It goes back to the
pool's free list when the last reference goes or free() is called, and is handed out again only after the
asynchronous copies that used it have run. size is the block's size (the request rounded up to 512).)doc")
    .def("free", &pooled_pinned_memory::free,
         "Returns the block to its pool now (ptr reads 0 afterwards); pointers into it must not be used any more.");

  py::class_<pinned_memory_pointer>(cuda, "PinnedMemoryPointer", py::buffer_protocol(), R"doc(A pointer into pinned host
memory (CuPy's cupy.cuda.PinnedMemoryPointer).

PinnedMemoryPointer(mem, offset): the place `offset` bytes into `mem` (a PinnedMemory, or any object with
.ptr and .size), kept alive by the pointer; offset must lie in [0, mem.size] (ValueError otherwise, also for
p + n, p - n, p += n, p -= n leaving that range). The pointer is a writable Python buffer of the bytes from
it to the end of the memory (format 'b', as CuPy's), so numpy.frombuffer(p, numpy.float32, n) views them.)doc")
    .def(py::init([](py::handle mem, checked<std::int64_t, "offset"> offset) {
           return pinned_memory_pointer{to_pinned_memory(mem), offset.value};
         }),
         py::arg("mem"), py::arg("offset"))
    .def_buffer([](pinned_memory_pointer& p) {
      return py::buffer_info(reinterpret_cast<void*>(p.ptr()), 1, "b", static_cast<py::ssize_t>(p.remaining()));  // NOLINT
    })
    .def_property_readonly("ptr", &pinned_memory_pointer::ptr, "The address the pointer refers to (an int).")
    .def_property_readonly("mem", &pinned_memory_object, "The memory the pointer points into (kept alive by the pointer).")
    .def_readonly("offset", &pinned_memory_pointer::offset, "Bytes from the start of `mem` to the pointer.")
    .def("size", &pinned_memory_pointer::remaining, "The bytes from the pointer to the end of its memory (CuPy: a method).")
    .def("__int__", &pinned_memory_pointer::ptr, "The address, as ptr.")
    .def(
      "__add__",
      [](pinned_memory_pointer const& p, std::int64_t n) {
        return pinned_memory_pointer{p.mem, static_cast<std::int64_t>(p.offset) + n};
      },
      py::is_operator(), "A pointer `n` bytes further into the same memory (ValueError outside it).")
    .def(
      "__radd__",
      [](pinned_memory_pointer const& p, std::int64_t n) {
        return pinned_memory_pointer{p.mem, static_cast<std::int64_t>(p.offset) + n};
      },
      py::is_operator(), "n + p, as p + n.")
    .def(
      "__sub__",
      [](pinned_memory_pointer const& p, std::int64_t n) {
        return pinned_memory_pointer{p.mem, static_cast<std::int64_t>(p.offset) - n};
      },
      py::is_operator(), "A pointer `n` bytes back in the same memory (ValueError outside it).")
    .def(
      "__iadd__",
      [](py::object const& self, std::int64_t n) {
        auto& p = self.cast<pinned_memory_pointer&>();
        p.offset = pinned_memory_pointer{p.mem, static_cast<std::int64_t>(p.offset) + n}.offset;
        return self;
      },
      py::is_operator(), "Moves the pointer `n` bytes on, in place.")
    .def(
      "__isub__",
      [](py::object const& self, std::int64_t n) {
        auto& p = self.cast<pinned_memory_pointer&>();
        p.offset = pinned_memory_pointer{p.mem, static_cast<std::int64_t>(p.offset) - n}.offset;
        return self;
      },
      py::is_operator(), "Moves the pointer `n` bytes back, in place.")
    .def("__repr__", &describe);

  py::class_<pinned_pool>(cuda, "PinnedMemoryPool", R"doc(A pool of pinned host memory (CuPy's cupy.cuda.PinnedMemoryPool).

PinnedMemoryPool(allocator=None): requests are rounded up to 512 bytes; a freed block goes to the free list
of its size and is reused for the next request of that size (after the asynchronous copies that used it have
run). New blocks come from a gpumem pinned_memory_pool that this pool owns (allocator=None: large pinned
chunks, carved and coalesced), or from a CuPy-style allocator(size) -> PinnedMemoryPointer (for example
gpumem.cuda.alloc_pinned_memory's raw allocator), called with the GIL held. When no new block can be had,
the free blocks are released and the request is tried once more. get_default_pinned_memory_pool() is the
process's pool (over the pinned pool gpumem's staged copies use).)doc")
    .def(py::init([](py::object allocator) {
           if (allocator.is_none()) {
             auto owned = std::make_unique<mr::pinned_memory_pool>();
             mr::pinned_memory_pool* const pool = owned.get();
             return pinned_pool{std::make_shared<pinned_pool_state>(pool, std::move(owned))};
           }
           if (PyCallable_Check(allocator.ptr()) == 0) {
             throw py::type_error("PinnedMemoryPool: `allocator` must be None or a callable allocator(size) -> "
                                  "PinnedMemoryPointer, not " + std::string{py::str(py::type::of(allocator).attr("__name__"))});
           }
           return pinned_pool{std::make_shared<pinned_pool_state>(std::move(allocator))};
         }),
         py::arg("allocator") = py::none())
    .def("malloc", &pinned_pool::malloc, py::arg("size"),
         "A PinnedMemoryPointer to `size` bytes (rounded up to 512) of pinned memory from the pool; size 0 gives "
         "empty memory (ptr 0). Raises ValueError for a negative size, OutOfMemoryError when no memory can be pinned.")
    .def(
      "free_all_blocks", [](pinned_pool const& pool) { pool.state().free_all(); },
      "Releases every free block (after the copies that used it), and the wholly free pinned chunks of gpumem's pool.")
    .def(
      "n_free_blocks", [](pinned_pool const& pool) { return pool.state().free_blocks(); },
      "The number of free blocks in the pool's free lists.")
    .def(
      "used_bytes", [](pinned_pool const& pool) { return pool.state().used_bytes(); },
      "Bytes of the blocks handed out and not yet freed (block sizes).")
    .def(
      "free_bytes", [](pinned_pool const& pool) { return pool.state().free_bytes(); },
      "Bytes of the free blocks the pool keeps for reuse.")
    .def(
      "total_bytes",
      [](pinned_pool const& pool) { return pool.state().used_bytes() + pool.state().free_bytes(); },
      "Bytes the pool holds for its users: used_bytes() + free_bytes().");

  default_pinned_pool_object =
    py::cast(pinned_pool{std::make_shared<pinned_pool_state>(&mr::get_default_pinned_pool(), nullptr)}).release();
  cuda.def(
    "get_default_pinned_memory_pool", [] { return py::reinterpret_borrow<py::object>(default_pinned_pool_object); },
    "The process's default PinnedMemoryPool (CuPy's cupy.get_default_pinned_memory_pool()), over gpumem's default "
    "pinned pool; what alloc_pinned_memory uses unless set_pinned_memory_allocator chose another allocator.");
}

}  // namespace gpumem::python
