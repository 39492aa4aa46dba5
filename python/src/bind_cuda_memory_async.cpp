// gpumem.cuda.MemoryAsync and MemoryAsyncPool (CuPy's cupy.cuda.MemoryAsync / MemoryAsyncPool): stream-ordered
// memory from a cudaMallocAsync pool, through gpumem's cuda_async_view_memory_resource (emulated, with the same
// reuse rules, on the host backend).
//
// "current" pools: gpumem keeps one cuda_async_memory_resource per device for the process (made on first
// use, never destroyed), shared by MemoryAsync, malloc_async and MemoryAsyncPool("current"). It keeps all
// freed memory cached (release threshold: all) so that memory freed on a stream is reused without going back
// to the device. MemoryAsyncPool("default") uses the driver's default pool of each device, and an int the
// cudaMemPool_t it names (its owner keeps it alive).
//
// A MemoryAsync is freed on the stream it was allocated on (CuPy's rule), so it keeps that Stream object
// alive until then; a stream given as an int must outlive the memory.
#include "bind_cuda_memory.hpp"

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/device.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/cuda_async_memory_resource.hpp>
#include <gpumem/mr/cuda_async_view_memory_resource.hpp>
#include <gpumem/mr/detail/align.hpp>

#include <mutex>
#include <vector>

namespace gpumem::python {
namespace {

using mr::cuda_async_view_memory_resource;

/** @brief The process's "current" stream-ordered resource of `device`, made on first use, never destroyed. */
std::shared_ptr<cuda_async_view_memory_resource> current_async_resource(int device)
{
  static std::mutex mutex;
  static auto* const resources = new std::vector<std::shared_ptr<cuda_async_view_memory_resource>>();  // leaked: may be used at exit
  check_device_id(cuda_device_id{device});
  std::lock_guard const lock{mutex};
  if (static_cast<std::size_t>(device) >= resources->size()) { resources->resize(static_cast<std::size_t>(device) + 1); }
  auto& slot = (*resources)[static_cast<std::size_t>(device)];
  if (!slot) {
    cuda_set_device_raii const guard{cuda_device_id{device}};
    slot = std::make_shared<mr::cuda_async_memory_resource>();
  }
  return slot;
}

/**
 * @brief MemoryAsync: stream-ordered memory, freed on the stream it was allocated on when the object goes.
 * Holds its resource (and the Stream object, when one was given) until then.
 */
class async_memory final : public device_memory {
 public:
  async_memory(void* ptr, std::size_t size, int device, std::shared_ptr<cuda_async_view_memory_resource> resource,
               stream_ref stream) noexcept
    : device_memory{to_int(ptr), size, device}, resource_{std::move(resource)}, stream_{std::move(stream)}
  {
  }
  ~async_memory() override
  {
    if (ptr() == 0) { return; }
    release_on(device_id(), [this] {
      resource_->deallocate(reinterpret_cast<void*>(ptr()), size(), cuda_stream_view{stream_.release_stream()});  // NOLINT(performance-no-int-to-ptr)
    });
  }
  async_memory(async_memory const&) = delete;
  async_memory& operator=(async_memory const&) = delete;
  async_memory(async_memory&&) = delete;
  async_memory& operator=(async_memory&&) = delete;

  [[nodiscard]] std::uintptr_t stream() const noexcept { return to_int(stream_.handle); }
  /** @brief The Stream object the memory was allocated on; empty for the null stream and for int handles. */
  [[nodiscard]] py::object const& stream_object() const noexcept { return stream_.object; }

 private:
  std::shared_ptr<cuda_async_view_memory_resource> resource_;  // declared before stream_: the stream goes first
  stream_ref stream_;
};

/** @brief The MemoryAsync owning `ptr`; frees it (on `stream`) if the object cannot be made. */
std::shared_ptr<async_memory> make_async_memory(void* ptr, std::size_t size, int device,
                                                std::shared_ptr<cuda_async_view_memory_resource> resource, stream_ref stream)
{
  try {
    return std::make_shared<async_memory>(ptr, size, device, resource, std::move(stream));
  } catch (...) {  // std::bad_alloc
    resource->deallocate(ptr, size, cuda_stream_view{stream.handle});
    throw;
  }
}

/** @brief `bytes` from `resource` on `stream` with the GIL released. */
void* allocate_async(cuda_async_view_memory_resource& resource, std::size_t bytes, cudaStream_t stream)
{
  py::gil_scoped_release const release;
  return resource.allocate(bytes, cuda_stream_view{stream});
}

/** @brief One device's pool of a MemoryAsyncPool and its limit. */
struct async_pool_entry {
  std::shared_ptr<cuda_async_view_memory_resource> resource;
  std::size_t limit{0};                                       // 0: none; guarded by *mutex
  std::unique_ptr<std::mutex> mutex{std::make_unique<std::mutex>()};  // serialises limit checks with allocation
};

/** @brief The resource a pool_handles entry names for `device`. @throws py::value_error for other values. */
std::shared_ptr<cuda_async_view_memory_resource> resource_for(py::handle handle, int device)
{
  if (py::isinstance<py::str>(handle)) {
    auto const name = handle.cast<std::string>();
    if (name == "current") { return current_async_resource(device); }
    if (name == "default") {
      return std::make_shared<cuda_async_view_memory_resource>(mr::default_memory_pool(cuda_device_id{device}),
                                                               cuda_device_id{device});
    }
  } else if (py::isinstance<py::int_>(handle)) {
    auto* const pool = reinterpret_cast<cudaMemPool_t>(  // NOLINT(performance-no-int-to-ptr)
      static_cast<std::uintptr_t>(unsigned_argument(handle, "pool_handles", UINTPTR_MAX)));
    return std::make_shared<cuda_async_view_memory_resource>(pool, cuda_device_id{device});
  }
  throw py::value_error("MemoryAsyncPool: a pool handle must be 'current' (gpumem's pool of the device), 'default' "
                        "(the device's default pool) or an int (a cudaMemPool_t), not " + std::string{py::repr(handle)});
}

/** @brief MemoryAsyncPool: one async_pool_entry per device, chosen at construction. */
class memory_async_pool {
 public:
  explicit memory_async_pool(py::object const& pool_handles)
  {
    int const devices = get_num_cuda_devices();
    bool const per_device = !py::isinstance<py::str>(pool_handles) && py::isinstance<py::sequence>(pool_handles);
    if (per_device && py::len(pool_handles) != static_cast<std::size_t>(devices)) {
      throw py::value_error("MemoryAsyncPool: pool_handles has " + std::to_string(py::len(pool_handles)) +
                            " entries, but there are " + std::to_string(devices) + " devices");
    }
    for (int device = 0; device < devices; ++device) {
      py::object const handle = per_device ? py::object(pool_handles[py::int_(device)]) : pool_handles;
      entries_.push_back(async_pool_entry{resource_for(handle, device)});
    }
  }

  async_pool_entry& entry()
  {
    int const device = current_device_id();
    return entries_.at(static_cast<std::size_t>(device));
  }

  py::object malloc(size_argument size)
  {
    std::size_t const bytes = size.value;
    int const device = current_device_id();
    async_pool_entry& e = entry();
    if (bytes == 0) {
      return to_python(memory_pointer{std::make_shared<async_memory>(nullptr, 0, device, e.resource, stream_ref{}), 0});
    }
    std::size_t const rounded = rounded_request(bytes, gpumem::detail::allocation_alignment, "MemoryAsyncPool.malloc");
    stream_ref stream = current_stream();
    void* p = nullptr;
    {
      py::gil_scoped_release const release;
      std::lock_guard const lock{*e.mutex};
      if (e.limit != 0) {
        std::size_t const used = e.resource->usage().used_current;
        if (used + rounded > e.limit) {
          throw out_of_memory("Out of memory allocating " + with_commas(rounded) + " bytes (allocated so far: " +
                              with_commas(used) + " bytes, limit set to: " + with_commas(e.limit) + " bytes).");
        }
      }
      p = allocate_retrying(*e.resource, rounded, stream.handle);
    }
    return to_python(memory_pointer{make_async_memory(p, rounded, device, e.resource, std::move(stream)), 0});
  }

 private:
  /** @brief As CuPy: on exhaustion, let the memory freed on the stream come back (synchronise it) and retry. */
  static void* allocate_retrying(cuda_async_view_memory_resource& resource, std::size_t bytes, cudaStream_t stream)
  {
    try {
      return resource.allocate(bytes, cuda_stream_view{stream});
    } catch (out_of_memory const&) {
      cuda_stream_view{stream}.synchronize();
    }
    try {
      return resource.allocate(bytes, cuda_stream_view{stream});
    } catch (out_of_memory const&) {
      synchronize_device();  // memory freed on other streams
    }
    return resource.allocate(bytes, cuda_stream_view{stream});
  }

  std::vector<async_pool_entry> entries_;  // by device ordinal
};

}  // namespace

void bind_memory_async(py::module_& cuda)
{
  py::class_<async_memory, device_memory, std::shared_ptr<async_memory>>(cuda, "MemoryAsync", R"doc(Stream-ordered device
memory owned by the object (CuPy's cupy.cuda.MemoryAsync): cudaMallocAsync from gpumem's pool of the current
device.

MemoryAsync(size, stream): `size` bytes usable at once by work on `stream` (a Stream, or an int
cudaStream_t), freed on that stream when the object goes (a Stream object is kept alive until then; a stream
given as an int must outlive the memory). Raises ValueError for a negative size, OutOfMemoryError when the
memory is not there.)doc")
    .def(py::init([](size_argument size, py::handle stream) {
           std::size_t const bytes = size.value;
           if (stream.is_none()) { throw py::type_error("MemoryAsync: `stream` is required (a Stream or an int handle)"); }
           stream_ref s = stream_argument(stream);
           int const device = current_device_id();
           auto resource = current_async_resource(device);
           void* const p = bytes == 0 ? nullptr : allocate_async(*resource, bytes, s.handle);
           return make_async_memory(p, bytes, device, std::move(resource), std::move(s));
         }),
         py::arg("size"), py::arg("stream"))
    .def_property_readonly("stream", &async_memory::stream, "The stream the memory is allocated and freed on (an int handle).")
    .def_property_readonly(
      "stream_ref",
      [](async_memory const& m) -> py::object {
        py::object target = m.stream_object();
        if (!target && m.stream() == 0) { target = py::module_::import("gpumem.cuda").attr("Stream").attr("null"); }
        if (!target) { return py::none(); }
        return py::module_::import("weakref").attr("ref")(target);
      },
      "A weak reference to the Stream the memory is allocated and freed on (CuPy's MemoryAsync.stream_ref): "
      "stream_ref() is that Stream (Stream.null for the null stream). gpumem also keeps the Stream alive until "
      "the memory is freed, so the reference never dies first. None when the stream was given as an int.");

  py::class_<memory_async_pool>(cuda, "MemoryAsyncPool", R"doc(Stream-ordered memory pools for every device (CuPy's
cupy.cuda.MemoryAsyncPool), over gpumem's cuda_async_memory_resource: CUDA's own pool (cudaMallocAsync),
emulated on the host backend.

MemoryAsyncPool(pool_handles="current"): "current" is gpumem's pool of each device (shared with MemoryAsync
and malloc_async), "default" the device's default pool, an int a cudaMemPool_t made elsewhere (kept alive by
its owner); or a list with one of these per device (ValueError when its length is not the device count).
malloc allocates on the current stream; the memory is freed on that stream. Usage:
set_allocator(MemoryAsyncPool().malloc).)doc")
    .def(py::init<py::object const&>(), py::arg("pool_handles") = "current")
    .def("malloc", &memory_async_pool::malloc, py::arg("size"),
         "Allocates `size` bytes (rounded up to 256) from the current device's pool on the current stream and "
         "returns a MemoryPointer to a MemoryAsync. On exhaustion it synchronises the stream, then the device, "
         "and retries, as CuPy. Raises OutOfMemoryError when the memory is not there, or when it would take the "
         "pool's used bytes past the limit (set_limit), naming the size and the limit; ValueError for a negative size.")
    .def(
      "free_all_blocks",
      [](memory_async_pool& pool, py::handle stream) {
        stream_ref const s = stream_argument(stream);
        async_pool_entry const& e = pool.entry();
        py::gil_scoped_release const release;
        cuda_stream_view{s.handle}.synchronize();
        e.resource->trim(0);
      },
      py::arg("stream") = py::none(),
      "Synchronises `stream` (None: the current stream), so that memory freed on it is back in the pool, then "
      "returns the current device's pool's free memory to the device (cudaMemPoolTrimTo(pool, 0)).")
    .def(
      "used_bytes", [](memory_async_pool& pool) { return pool.entry().resource->usage().used_current; },
      "Bytes of the current device's pool in use (cudaMemPoolAttrUsedMemCurrent).")
    .def(
      "total_bytes", [](memory_async_pool& pool) { return pool.entry().resource->usage().reserved_current; },
      "Bytes the current device's pool holds from the device (cudaMemPoolAttrReservedMemCurrent).")
    .def(
      "free_bytes",
      [](memory_async_pool& pool) {
        auto const usage = pool.entry().resource->usage();
        return usage.reserved_current - usage.used_current;
      },
      "Bytes the current device's pool holds but has not handed out: total_bytes() - used_bytes().")
    .def(
      "set_limit",
      [](memory_async_pool& pool, py::object const& size, py::object const& fraction) {
        std::size_t const bytes = limit_bytes(size, fraction, current_device_id());
        async_pool_entry& e = pool.entry();
        py::gil_scoped_release const release;
        std::lock_guard const lock{*e.mutex};
        e.limit = bytes == SIZE_MAX ? 0 : bytes;  // 2**64 - 1: what get_limit() reports for none
      },
      py::arg("size") = py::none(), py::arg("fraction") = py::none(),
      R"doc(Caps the bytes in use from the current device's pool through this object's malloc (used_bytes() + the
request must stay within it), as size in bytes or fraction (in [0, 1]) of the device's memory, not both
(ValueError); neither, 0 or 2**64 - 1 removes the cap. (CuPy sets the pool's release threshold instead; gpumem
enforces the limit, and leaves the release threshold alone.))doc")
    .def(
      "get_limit",
      [](memory_async_pool& pool) {
        async_pool_entry& e = pool.entry();
        py::gil_scoped_release const release;
        std::lock_guard const lock{*e.mutex};
        return e.limit == 0 ? std::uint64_t{UINT64_MAX} : std::uint64_t{e.limit};
      },
      "The current device's limit in bytes; 2**64 - 1 when there is none, as CuPy reports an unlimited pool "
      "(its limit is the pool's release threshold, which CuPy sets to UINT64_MAX for no limit).");
}

}  // namespace gpumem::python
