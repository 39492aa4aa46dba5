// gpumem._gpumem.mr: the memory resources with RMM's Python names (rmm.mr), re-exported by gpumem/mr.py.
//
// One class per C++ resource: DeviceMemoryResource is the base (allocate/deallocate), the upstream
// resources (CudaMemoryResource, ManagedMemoryResource, PinnedHostMemoryResource, CudaAsyncMemoryResource),
// the sub-allocators (Pool, Arena, FixedSize, Binning) and the adaptors (Logging, Statistics, Tracking,
// Limiting, FailureCallback).
//
// Lifetimes, which C++ leaves to the caller and Python must not:
// - A resource built over an upstream keeps the upstream's Python object alive (py::keep_alive), so
//   dropping the user's reference to the upstream cannot leave the C++ pointer dangling. The same holds
//   for a bin resource given to BinningMemoryResource.add_bin.
// - set_current_device_resource / set_per_device_resource hand C++ a shared_ptr that owns a reference to
//   the resource's Python object (shared_from_python), so the resource lives while it is set and while
//   memory the plain API (gpumem.alloc, the C API, the allocator plug-ins) allocated from it is live. A
//   per-device table maps the set resource back to its Python object. At interpreter exit the defaults are
//   restored first (atexit).
// - FailureCallbackResourceAdaptor holds its Python callback; the callback runs with the GIL held, and the
//   reference is dropped with the GIL held whichever thread destroys the adaptor.
// The GIL is released around allocate and deallocate (a pool may grow, a free may wait for the device).
// Arguments are checked<> (arguments.hpp): a wrong type or value is a TypeError or ValueError naming it.
#include "arguments.hpp"
#include "bind_mr.hpp"
#include "conversions.hpp"
#include "interpreter.hpp"
#include "registry.hpp"

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/arena_memory_resource.hpp>
#include <gpumem/mr/binning_memory_resource.hpp>
#include <gpumem/mr/cuda_async_memory_resource.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/failure_callback_resource_adaptor.hpp>
#include <gpumem/mr/fixed_size_memory_resource.hpp>
#include <gpumem/mr/limiting_resource_adaptor.hpp>
#include <gpumem/mr/logging_resource_adaptor.hpp>
#include <gpumem/mr/managed_memory_resource.hpp>
#include <gpumem/mr/per_device_resource.hpp>
#include <gpumem/mr/pinned_host_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/statistics_resource_adaptor.hpp>
#include <gpumem/mr/tracking_resource_adaptor.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>

#include <pybind11/stl.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace gpumem::python {
namespace {

using mr::device_memory_resource;

/**
 * @brief logging_resource_adaptor that remembers the file it writes (RMM's get_file_name()); the C++
 * adaptor is final and does not keep the name, so this one forwards to it.
 */
class named_logging_adaptor final : public device_memory_resource {
 public:
  named_logging_adaptor(device_memory_resource* upstream, std::string file_name, bool auto_flush)
    : file_name_{std::move(file_name)}, inner_{upstream, file_name_, auto_flush}
  {
  }

  [[nodiscard]] std::string const& file_name() const noexcept { return file_name_; }
  [[nodiscard]] mr::logging_resource_adaptor& inner() noexcept { return inner_; }

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override { return inner_.allocate(bytes, stream); }
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override
  {
    inner_.deallocate(ptr, bytes, stream);
  }
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override
  {
    auto const* logging = dynamic_cast<named_logging_adaptor const*>(&other);
    return logging != nullptr && inner_.is_equal(logging->inner_);
  }

  std::string file_name_;  // before inner_: the adaptor's constructor reads it
  mr::logging_resource_adaptor inner_;
};

/**
 * @brief The C++ resource of `resource` (a DeviceMemoryResource) as a shared_ptr that holds a reference to
 * the Python object, for C++ code that keeps the resource past the call (the per-device registry, the plain
 * API's live pointers). The reference is dropped with the GIL, on whichever thread lets go last; it is
 * leaked when that happens during interpreter finalisation.
 */
std::shared_ptr<device_memory_resource> shared_from_python(py::handle resource)
{
  auto* const cpp = convert_argument<device_memory_resource*>(resource, "mr");
  PyObject* const held = resource.inc_ref().ptr();
  return std::shared_ptr<device_memory_resource>{cpp, [held](device_memory_resource* /*resource*/) noexcept {
                                                   if (!python_alive()) { return; }
                                                   py::gil_scoped_acquire const gil;
                                                   Py_DECREF(held);
                                                 }};
}

/** @brief The pool statistics every stream-ordered sub-allocator (pool, fixed size) reports. */
template <typename Class>
void add_pool_statistics(Class& cls)
{
  using resource = typename Class::type;
  cls.def(
    "pool_size", [](resource const& self) { return self.pool_size(); },
    "Bytes the pool holds from its upstream (the sum of its chunks).");
  cls.def(
    "used_bytes", [](resource const& self) { return self.bytes_in_use(); },
    "Bytes handed out and not yet deallocated (each allocation counted as its block's size).");
  cls.def(
    "cached_bytes", [](resource const& self) { return self.bytes_cached(); },
    "Bytes held but free: pool_size() - used_bytes().");
  cls.def(
    "largest_free_block", [](resource const& self) { return self.largest_free_block(); },
    "The size of the largest free block (0 when none).");
  cls.def(
    "free_block_count", [](resource const& self) { return self.free_block_count(); }, "The number of free blocks.");
  cls.def(
    "chunk_count", [](resource const& self) { return self.chunk_count(); },
    "The number of chunks held from the upstream.");
}

/** @brief RMM's Statistics record (a namedtuple) from one scope's counters. */
py::object to_statistics(py::handle statistics_type, mr::statistics_resource_adaptor::counters const& c)
{
  return statistics_type(py::arg("current_bytes") = c.bytes.current, py::arg("current_count") = c.allocations.current,
                         py::arg("peak_bytes") = c.bytes.peak, py::arg("peak_count") = c.allocations.peak,
                         py::arg("total_bytes") = c.bytes.total, py::arg("total_count") = c.allocations.total);
}

registration const resources{binding_order::resources, "mr", [](py::module_& m) {
  py::module_ sub = m.def_submodule("mr", "Memory resources with RMM's Python names (see gpumem.mr).");

  // ---- the base class ---------------------------------------------------------------------------------
  py::class_<device_memory_resource>(sub, "DeviceMemoryResource",
                                     "Base class of every device memory resource: stream-ordered allocate and "
                                     "deallocate of 256-byte aligned device memory. Not constructible itself.")
    .def(
      "allocate",
      [](device_memory_resource& self, checked<std::size_t, "nbytes"> nbytes, py::handle stream) {
        cuda_stream_view const s = to_stream(stream);
        py::gil_scoped_release const release;
        return to_int(self.allocate(nbytes.value, s));
      },
      py::arg("nbytes"), py::arg("stream") = py::none(),
      "Allocates `nbytes` bytes (256-byte aligned), usable at once by work on `stream` (None: the default "
      "stream); returns the address as an int (0 for 0 bytes). Raises OutOfMemoryError (a MemoryError naming "
      "the size) when the memory is not there.")
    .def(
      "deallocate",
      [](device_memory_resource& self, py::handle ptr, checked<std::size_t, "nbytes"> nbytes, py::handle stream) {
        void* const p = to_pointer(ptr);
        cuda_stream_view const s = to_stream(stream);
        py::gil_scoped_release const release;
        self.checked_deallocate(p, nbytes.value, s);
      },
      py::arg("ptr"), py::arg("nbytes"), py::arg("stream") = py::none(),
      "Returns `ptr` (from allocate(nbytes) of this resource) so that work on `stream` may reuse it at once: "
      "all work using it must have been submitted to `stream` first. `nbytes` must be the allocated size. "
      "Raises ValueError, changing nothing, for a misuse the resource detects: a double free, a pointer it "
      "never handed out (each resource's C++ header says which it detects).")
    .def(
      "is_equal",
      [](device_memory_resource const& self, checked<device_memory_resource*, "other"> other) {
        return self.is_equal(*other.value);
      },
      py::arg("other"), "Whether memory from either resource may be deallocated by the other.");

  // ---- upstream resources -----------------------------------------------------------------------------
  py::class_<mr::cuda_memory_resource, device_memory_resource>(
    sub, "CudaMemoryResource",
    "cudaMalloc/cudaFree for every request (slow; use it as the upstream of a pool). On the host backend, "
    "the emulated device's memory.")
    .def(py::init<>(), "A resource on the current device; it has no state.");
  py::class_<mr::managed_memory_resource, device_memory_resource>(
    sub, "ManagedMemoryResource", "cudaMallocManaged: unified memory, accessible from the host and the device.")
    .def(py::init<>(), "A managed-memory resource; it has no state.");
  py::class_<mr::pinned_host_memory_resource, device_memory_resource>(
    sub, "PinnedHostMemoryResource",
    "cudaMallocHost: page-locked host memory that the device can access (fast transfers). Pinning is "
    "expensive: allocate few, large blocks, or put a pool on top.")
    .def(py::init<>(), "A pinned host memory resource; it has no state.");
  py::class_<mr::cuda_async_memory_resource, device_memory_resource>(
    sub, "CudaAsyncMemoryResource",
    "cudaMallocAsync from a memory pool this resource owns (the driver's stream-ordered sub-allocator; "
    "emulated on the host backend).")
    .def(py::init([](checked<std::optional<byte_size>, "initial_pool_size"> initial_pool_size,
                     checked<std::optional<std::size_t>, "release_threshold"> release_threshold,
                     checked<bool, "enable_ipc"> enable_ipc, checked<bool, "enable_fabric"> enable_fabric,
                     checked<std::optional<byte_size>, "maximum_pool_size"> maximum_pool_size) {
           using handle = mr::cuda_async_memory_resource::allocation_handle_type;
           if (enable_ipc.value && enable_fabric.value) {
             throw py::value_error("CudaAsyncMemoryResource: enable_ipc and enable_fabric together are not supported "
                                   "(choose one handle type)");
           }
           std::optional<handle> const export_type =
             enable_ipc.value      ? std::optional<handle>{handle::posix_file_descriptor}
             : enable_fabric.value ? std::optional<handle>{handle::fabric}
                                   : std::nullopt;
           auto const bytes = [](std::optional<byte_size> const& size) {
             return size ? std::optional<std::size_t>{size->value} : std::nullopt;
           };
           return std::make_unique<mr::cuda_async_memory_resource>(bytes(initial_pool_size.value), release_threshold.value,
                                                                   export_type, bytes(maximum_pool_size.value));
         }),
         py::arg("initial_pool_size") = py::none(), py::arg("release_threshold") = py::none(),
         py::arg("enable_ipc") = false, py::arg("enable_fabric") = false, py::arg("maximum_pool_size") = py::none(),
         "A pool on the current device. initial_pool_size: bytes reserved at once (an int, or a string such as "
         "\"4MiB\"); release_threshold: bytes kept cached at synchronisation points (default: all); enable_ipc: "
         "exportable as POSIX file descriptors; enable_fabric: exportable as fabric handles (not with enable_ipc); "
         "maximum_pool_size: a cap. Raises CUDARuntimeError (cudaErrorNotSupported) naming the device where it has "
         "no memory pools, or no fabric handles when enable_fabric is set (never on the host backend).")
    .def(
      "pool_handle", [](mr::cuda_async_memory_resource const& self) { return to_int(self.pool_handle()); },
      "The cudaMemPool_t this resource owns, as an int (for CudaAsyncViewMemoryResource).")
    .def(
      "trim",
      [](mr::cuda_async_memory_resource& self, checked<std::size_t, "keep_bytes"> keep_bytes) {
        py::gil_scoped_release const release;
        self.trim(keep_bytes.value);
      },
      py::arg("keep_bytes") = 0,
         "Returns cached memory to the device until at most `keep_bytes` stay reserved.");

  // ---- sub-allocators ---------------------------------------------------------------------------------
  py::class_<mr::pool_memory_resource, device_memory_resource> pool(
    sub, "PoolMemoryResource",
    "A coalescing best-fit pool over an upstream resource: grows by doubling (up to maximum_pool_size), "
    "splits blocks on allocation and coalesces them on deallocation. Keeps `upstream` alive.");
  pool.def(py::init([](checked<device_memory_resource*, "upstream"> upstream,
                       checked<std::optional<byte_size>, "initial_pool_size"> initial_pool_size,
                       checked<std::optional<byte_size>, "maximum_pool_size"> maximum_pool_size) {
             std::size_t const initial = initial_pool_size.value ? initial_pool_size.value->value : 0;
             std::optional<std::size_t> const maximum =
               maximum_pool_size.value ? std::optional<std::size_t>{maximum_pool_size.value->value} : std::nullopt;
             py::gil_scoped_release const release;  // the initial pool is allocated from the upstream
             return std::make_unique<mr::pool_memory_resource>(upstream.value, initial, maximum);
           }),
           py::arg("upstream"), py::arg("initial_pool_size") = py::none(), py::arg("maximum_pool_size") = py::none(),
           py::keep_alive<1, 2>(),
           "A pool over `upstream`. Sizes are ints or strings such as \"4MiB\". initial_pool_size: bytes obtained at "
           "once (None or 0: on first use); "
           "maximum_pool_size: the most the pool may hold (None: no limit). Raises ValueError if the initial "
           "size exceeds the maximum, OutOfMemoryError if the initial pool cannot be had.");
  pool.def_property_readonly(
    "maximum_pool_size", [](mr::pool_memory_resource const& self) { return self.maximum_pool_size(); },
    "The maximum pool size given at construction, or None.");
  add_upstream(pool);
  add_pool_statistics(pool);

  py::class_<mr::vmm_pool_memory_resource, device_memory_resource> vmm(
    sub, "VmmPoolMemoryResource",
    "A pool over one reserved range of virtual addresses, backed by physical memory in slabs (CUDA's virtual "
    "memory management; a memfd emulation on the host backend). Free ranges coalesce across growth, wholly "
    "free slabs are moved where the pool grows, and release_unused() gives them back to the device.");
  vmm.def(py::init([](checked<std::size_t, "slab_size"> slab_size,
                      checked<std::optional<std::size_t>, "reservation_size"> reservation_size,
                      checked<std::optional<std::size_t>, "maximum_physical_size"> maximum_physical_size,
                      checked<std::vector<int>, "peer_devices"> peer_devices,
                      checked<std::optional<std::size_t>, "release_threshold"> release_threshold,
                      checked<std::optional<std::size_t>, "max_mapping_size"> max_mapping_size,
                      checked<std::size_t, "mapping_divisor"> mapping_divisor,
                      checked<std::size_t, "small_block_limit"> small_block_limit,
                      checked<std::size_t, "thread_cache_limit"> thread_cache_limit) {
            py::gil_scoped_release const release;
            mr::vmm_pool_options options;
            options.small_block_limit = small_block_limit.value;
            options.thread_cache_limit = thread_cache_limit.value;
            options.slab_size = slab_size.value;
            options.reservation_size = reservation_size.value;
            options.maximum_physical_size = maximum_physical_size.value;
            options.peer_devices = std::move(peer_devices.value);
            options.release_threshold = release_threshold.value;
            options.max_mapping_size = max_mapping_size.value;
            options.mapping_divisor = mapping_divisor.value;
            return std::make_unique<mr::vmm_pool_memory_resource>(options);
          }),
          py::arg("slab_size") = std::size_t{32} << 20, py::arg("reservation_size") = py::none(),
          py::arg("maximum_physical_size") = py::none(), py::arg("peer_devices") = std::vector<int>{},
          py::arg("release_threshold") = py::none(), py::arg("max_mapping_size") = py::none(),
          py::arg("mapping_divisor") = mr::vmm_pool_options{}.mapping_divisor,
          py::arg("small_block_limit") = mr::vmm_pool_options{}.small_block_limit,
          py::arg("thread_cache_limit") = mr::vmm_pool_options{}.thread_cache_limit,
          "A pool on the current device. slab_size: bytes of physical memory per slab (rounded up to the "
          "device's granularity); reservation_size: virtual address space to reserve (None: 4 x the device's "
          "memory); maximum_physical_size: a cap (None: the device's); peer_devices: devices that may access "
          "the memory; release_threshold: bytes of wholly free slabs a deallocation keeps before it releases "
          "the rest to the device (None: keep them until release_unused); max_mapping_size: the largest piece of "
          "physical memory one growth creates (None: no cap but mapping_divisor's; larger pieces grow faster, but "
          "move and go back only whole); mapping_divisor: N > 0 (default 64) lets a piece cover up to 1/N of the "
          "memory the pool holds when it grows (at most max_mapping_size when given; 0: pieces of "
          "max_mapping_size, one slab when that is None); small_block_limit: requests of at most this many bytes "
          "(default 128 KiB, a multiple of 256) come from pages of their size class, which go back to the pool "
          "when empty (0: none); thread_cache_limit: small blocks of at most this many bytes "
          "freed on a default stream go through the freeing thread's cache (default 0: none; none either "
          "with a release_threshold). Raises ValueError when the device has no virtual memory management or an "
          "option is bad.");
  vmm.def("release_unused", &mr::vmm_pool_memory_resource::release_unused, py::call_guard<py::gil_scoped_release>(),
          "Unmaps and releases every wholly free slab once the streams that freed memory in it are done; "
          "returns the bytes given back to the device.");
  vmm.def(
    "set_maximum_physical_size",
    [](mr::vmm_pool_memory_resource& self, checked<std::optional<std::size_t>, "bytes"> bytes) {
      py::gil_scoped_release const release;
      self.set_maximum_physical_size(bytes.value);
    },
    py::arg("bytes"),
    "Caps the physical memory the pool may hold (None: no cap but the device's); growth beyond it raises "
    "OutOfMemoryError. A cap below what the pool holds gives nothing back (release_unused() does). Raises "
    "ValueError for a cap below one slab.");
  vmm.def("flush_thread_caches", &mr::vmm_pool_memory_resource::flush_thread_caches,
          py::call_guard<py::gil_scoped_release>(),
          "Moves the blocks every thread holds in its cache back into the pool's pages.");
  vmm.def_property_readonly("bytes_in_thread_caches", &mr::vmm_pool_memory_resource::bytes_in_thread_caches,
                            "Bytes of freed small blocks held in thread caches (counted in free_bytes).");
  vmm.def_property_readonly("small_block_limit", &mr::vmm_pool_memory_resource::small_block_limit,
                            "The largest request served from pages of small blocks (0: none).");
  vmm.def_property_readonly("thread_cache_limit", &mr::vmm_pool_memory_resource::thread_cache_limit,
                            "The largest block the thread caches hold (0: none).");
  vmm.def_property_readonly("small_page_count", &mr::vmm_pool_memory_resource::small_page_count,
                            "Pages of small blocks held now.");
  vmm.def_property_readonly("maximum_physical_size", &mr::vmm_pool_memory_resource::maximum_physical_size,
                            "The cap on the pool's physical memory, or None.");
  vmm.def("reset_peak_physical_bytes", &mr::vmm_pool_memory_resource::reset_peak_physical_bytes,
          py::call_guard<py::gil_scoped_release>(), "Sets peak_physical_bytes to the physical memory held now.");
  vmm.def_property_readonly("slab_size", &mr::vmm_pool_memory_resource::slab_size, "Bytes per slab.");
  vmm.def_property_readonly("max_mapping_size", &mr::vmm_pool_memory_resource::max_mapping_size,
                            "The largest piece of physical memory a growth creates (whole slabs).");
  vmm.def_property_readonly("mapping_divisor", &mr::vmm_pool_memory_resource::mapping_divisor,
                            "N when a piece may cover up to 1/N of the pool's memory; 0 when pieces are max_mapping_size.");
  vmm.def_property_readonly("mapping_count", &mr::vmm_pool_memory_resource::mapping_count,
                            "Pieces of physical memory mapped now.");
  vmm.def_property_readonly("reservation_size", &mr::vmm_pool_memory_resource::reservation_size,
                            "Bytes of virtual address space reserved for the pool's blocks.");
  vmm.def_property_readonly("bytes_in_use", &mr::vmm_pool_memory_resource::bytes_in_use,
                            "Bytes handed out and not yet freed (each block rounded up to 256, a small one to its size class).");
  vmm.def_property_readonly("physical_bytes", &mr::vmm_pool_memory_resource::physical_bytes,
                            "Bytes of physical memory the pool holds now.");
  vmm.def_property_readonly("peak_physical_bytes", &mr::vmm_pool_memory_resource::peak_physical_bytes,
                            "The most physical memory the pool has held at once.");
  vmm.def_property_readonly("free_bytes", &mr::vmm_pool_memory_resource::free_bytes,
                            "Bytes free in the pool's slabs.");
  vmm.def_property_readonly("slab_count", &mr::vmm_pool_memory_resource::slab_count, "Slabs mapped now.");
  vmm.def_property_readonly("slabs_created", &mr::vmm_pool_memory_resource::slabs_created,
                            "Slabs of physical memory created since construction.");
  vmm.def_property_readonly("slabs_moved", &mr::vmm_pool_memory_resource::slabs_moved,
                            "Wholly free slabs unmapped and mapped where the pool grew, instead of new ones.");
  vmm.def_property_readonly("slabs_released", &mr::vmm_pool_memory_resource::slabs_released,
                            "Slabs given back to the device since construction.");
  vmm.def_property_readonly("cross_stream_takes", &mr::vmm_pool_memory_resource::cross_stream_takes,
                            "Allocations that took a block freed on another stream, and so made their stream "
                            "wait for that stream's work (on the device).");
  vmm.def_property_readonly("cross_stream_waits", &mr::vmm_pool_memory_resource::cross_stream_waits,
                            "The stream waits those allocations made: one per other stream that freed a piece "
                            "of the block.");

  py::class_<mr::arena_memory_resource, device_memory_resource> arena(
    sub, "ArenaMemoryResource",
    "A global arena taken from the upstream at construction, served through per-thread arenas of "
    "superblocks (low fragmentation under many threads). Keeps `upstream` alive.");
  arena.def(py::init([](checked<device_memory_resource*, "upstream"> upstream,
                        checked<std::optional<byte_size>, "arena_size"> arena_size,
                        checked<bool, "dump_log_on_failure"> dump_log_on_failure) {
              std::optional<std::size_t> const size =
                arena_size.value ? std::optional<std::size_t>{arena_size.value->value} : std::nullopt;
              py::gil_scoped_release const release;
              return std::make_unique<mr::arena_memory_resource>(upstream.value, size,
                                                                 dump_log_on_failure.value);
            }),
            py::arg("upstream"), py::arg("arena_size") = py::none(), py::arg("dump_log_on_failure") = false,
            py::keep_alive<1, 2>(),
            "An arena of `arena_size` bytes (an int, or a string such as \"1GiB\"; None: half the device's free memory; at least 1 MiB) from "
            "`upstream`. dump_log_on_failure: write the arena's state to stderr when an allocation fails.");
  arena.def_property_readonly("arena_size", &mr::arena_memory_resource::arena_size,
                              "Bytes of the global arena taken from the upstream.");
  arena.def("global_free_bytes", &mr::arena_memory_resource::global_free_bytes,
            "Bytes free in the global arena (not held by a thread's arena).");
  arena.def("dump_state", &mr::arena_memory_resource::dump_state, "A description of every arena and superblock.");
  add_upstream(arena);

  py::class_<mr::fixed_size_memory_resource, device_memory_resource> fixed(
    sub, "FixedSizeMemoryResource",
    "Blocks of one size (requests up to block_size bytes), obtained from the upstream in batches. Keeps "
    "`upstream` alive.");
  fixed.def(py::init([](checked<device_memory_resource*, "upstream"> upstream, checked<std::size_t, "block_size"> block_size,
                        checked<std::size_t, "blocks_to_preallocate"> blocks_to_preallocate) {
              py::gil_scoped_release const release;
              return std::make_unique<mr::fixed_size_memory_resource>(upstream.value, block_size.value,
                                                                      blocks_to_preallocate.value);
            }),
            py::arg("upstream"), py::arg("block_size") = mr::fixed_size_memory_resource::default_block_size,
            py::arg("blocks_to_preallocate") = mr::fixed_size_memory_resource::default_blocks_per_batch,
            py::keep_alive<1, 2>(),
            "Blocks of `block_size` bytes (rounded up to 256), `blocks_to_preallocate` of them per upstream "
            "request (one batch is obtained at once), as RMM's FixedSizeMemoryResource.");
  fixed.def_property_readonly("block_size", &mr::fixed_size_memory_resource::block_size,
                              "The size of every block (rounded up to 256).");
  add_upstream(fixed);
  add_pool_statistics(fixed);

  py::class_<mr::binning_memory_resource, device_memory_resource> binning(
    sub, "BinningMemoryResource", py::dynamic_attr(),
    "Sends each request to the smallest bin that fits it, or to the upstream when none does. Keeps "
    "`upstream` and every bin resource alive.");
  binning.def(py::init([](checked<device_memory_resource*, "upstream"> upstream,
                          checked<std::optional<int>, "min_size_exponent"> min_size_exponent,
                          checked<std::optional<int>, "max_size_exponent"> max_size_exponent) {
                // RMM spells "no bins" -1 as well as leaving them out.
                auto const none_if_minus_one = [](std::optional<int> e) { return e == -1 ? std::nullopt : e; };
                auto const min = none_if_minus_one(min_size_exponent.value);
                auto const max = none_if_minus_one(max_size_exponent.value);
                if (min.has_value() != max.has_value()) {
                  throw py::value_error("BinningMemoryResource: give both min_size_exponent and max_size_exponent, or neither");
                }
                if (min) { return std::make_unique<mr::binning_memory_resource>(upstream.value, *min, *max); }
                return std::make_unique<mr::binning_memory_resource>(upstream.value);
              }),
              py::arg("upstream"), py::arg("min_size_exponent") = py::none(), py::arg("max_size_exponent") = py::none(),
              py::keep_alive<1, 2>(),
              "Bins of 2**min_size_exponent .. 2**max_size_exponent bytes (fixed-size resources over "
              "`upstream`) when both are given; otherwise no bins until add_bin().");
  binning.def(
    "add_bin",
    [](py::object const& self_object, checked<std::size_t, "allocation_size"> allocation_size,
       py::handle bin_resource) {
      auto& self = self_object.cast<mr::binning_memory_resource&>();
      self.add_bin(allocation_size.value, unwrap(bin_resource, "bin_resource"));
      if (!bin_resource.is_none()) {  // RMM's bin_mrs: the resources given, in order
        if (!py::hasattr(self_object, "_bin_mrs")) { self_object.attr("_bin_mrs") = py::list(); }
        self_object.attr("_bin_mrs").attr("append")(bin_resource);
      }
    },
    py::arg("allocation_size"), py::arg("bin_resource") = py::none(), py::keep_alive<1, 3>(),
    "Adds a bin for requests up to `allocation_size` bytes (rounded up to 256), served by `bin_resource` (kept "
    "alive), or by a new FixedSizeMemoryResource over the upstream when None. When a bin of that size exists, "
    "nothing changes (as RMM). Raises ValueError once requests were served.");
  binning.def_property_readonly(
    "bin_mrs",
    [](py::object const& self_object) {
      return py::hasattr(self_object, "_bin_mrs") ? py::list(self_object.attr("_bin_mrs")) : py::list();
    },
    "The bin resources given to add_bin, in order (RMM's bin_mrs).");
  binning.def_property_readonly("bin_sizes", &mr::binning_memory_resource::bin_sizes, "The bins' sizes, ascending.");
  add_upstream(binning);

  // ---- adaptors ---------------------------------------------------------------------------------------
  py::class_<named_logging_adaptor, device_memory_resource> logging(
    sub, "LoggingResourceAdaptor",
    "Forwards to `upstream` and writes every allocate and free as a CSV row "
    "(Thread,Time,Action,Pointer,Size,Stream) to a file. Keeps `upstream` alive.");
  logging.def(py::init([](checked<device_memory_resource*, "upstream"> upstream,
                          checked<std::optional<std::string>, "log_file_name"> log_file_name_argument,
                          checked<bool, "auto_flush"> auto_flush) {
                std::optional<std::string> log_file_name = std::move(log_file_name_argument.value);
                if (!log_file_name) {
                  char const* const from_environment = std::getenv(mr::logging_resource_adaptor::log_file_environment_variable);
                  if (from_environment == nullptr || *from_environment == '\0') {
                    throw py::value_error("LoggingResourceAdaptor: no log_file_name, and GPUMEM_LOG_FILE is not set");
                  }
                  log_file_name = from_environment;
                }
                return std::make_unique<named_logging_adaptor>(upstream.value, *log_file_name, auto_flush.value);
              }),
              py::arg("upstream"), py::arg("log_file_name") = py::none(), py::arg("auto_flush") = false,
              py::keep_alive<1, 2>(),
              "Logs to `log_file_name` (created or truncated; None: the file GPUMEM_LOG_FILE names). auto_flush: "
              "write every row at once. Raises ValueError if the file cannot be opened.");
  logging.def(
    "flush", [](named_logging_adaptor& self) { self.inner().flush(); }, py::call_guard<py::gil_scoped_release>(),
    "Writes the buffered rows to the file.");
  logging.def(
    "get_file_name", [](named_logging_adaptor const& self) { return self.file_name(); }, "The log file's name.");
  logging.def_property_readonly(
    "upstream_mr", [](named_logging_adaptor& self) { return wrap(self.inner().upstream_resource()); },
    "The resource this adaptor forwards to.");
  logging.def(
    "get_upstream", [](named_logging_adaptor& self) { return wrap(self.inner().upstream_resource()); },
    "The resource this adaptor forwards to (RMM's get_upstream()).");

  // RMM's Statistics record: a dataclass (rmm.statistics.Statistics), compared and printed by its fields.
  py::object const int_type = py::module_::import("builtins").attr("int");
  py::list fields;
  for (char const* field : {"current_bytes", "current_count", "peak_bytes", "peak_count", "total_bytes", "total_count"}) {
    fields.append(py::make_tuple(field, int_type));
  }
  py::object const statistics_type = py::module_::import("dataclasses").attr("make_dataclass")("Statistics", fields);
  statistics_type.attr("__module__") = "gpumem.statistics";
  statistics_type.attr("__doc__") =
    "Counters of a StatisticsResourceAdaptor scope (RMM's rmm.statistics.Statistics, a dataclass): bytes and "
    "allocation counts, current, peak and total (sizes as requested). A popped scope's current values can be "
    "negative (memory it freed that an outer scope allocated).";
  sub.attr("Statistics") = statistics_type;
  py::handle const statistics = statistics_type;  // the submodule keeps it alive

  py::class_<mr::statistics_resource_adaptor, device_memory_resource> stats(
    sub, "StatisticsResourceAdaptor",
    "Forwards to `upstream` and counts bytes and allocations (current, peak, total), in nested scopes "
    "(push_counters / pop_counters). Keeps `upstream` alive.");
  stats.def(py::init([](checked<device_memory_resource*, "upstream"> upstream) {
              return std::make_unique<mr::statistics_resource_adaptor>(upstream.value);
            }),
            py::arg("upstream"), py::keep_alive<1, 2>(),
            "Counts what goes through this adaptor to `upstream`.");
  stats.def_property_readonly(
    "allocation_counts",
    [statistics](mr::statistics_resource_adaptor const& self) { return to_statistics(statistics, self.get_counters()); },
    "The innermost scope's counters, a Statistics(current_bytes, current_count, peak_bytes, peak_count, "
    "total_bytes, total_count).");
  stats.def(
    "push_counters",
    [statistics](mr::statistics_resource_adaptor& self) { return to_statistics(statistics, self.push_counters()); },
    "Opens a scope whose counters start at zero; returns the counters of the scope that was innermost.");
  stats.def(
    "pop_counters",
    [statistics](mr::statistics_resource_adaptor& self) {
      try {
        return to_statistics(statistics, self.pop_counters());
      } catch (logic_error const&) {  // RMM raises IndexError here (its C++ out_of_range)
        throw py::index_error("cannot pop the last counter pair: pop_counters without a matching push_counters");
      }
    },
    "Closes the innermost scope, folds it into its parent and returns its counters. Raises IndexError "
    "(\"cannot pop the last counter pair\", as RMM) if no scope was pushed.");
  add_upstream(stats);

  py::class_<mr::tracking_resource_adaptor, device_memory_resource> tracking(
    sub, "TrackingResourceAdaptor",
    "Forwards to `upstream` and records every outstanding allocation (optionally with its call stack) to "
    "find leaks. Keeps `upstream` alive.");
  tracking.def(py::init([](checked<device_memory_resource*, "upstream"> upstream,
                           checked<bool, "capture_stacks"> capture_stacks) {
                 return std::make_unique<mr::tracking_resource_adaptor>(upstream.value, capture_stacks.value);
               }),
               py::arg("upstream"), py::arg("capture_stacks") = false,
               py::keep_alive<1, 2>(),
               "Tracks what goes through this adaptor; capture_stacks records each allocation's call stack (slow).");
  tracking.def("get_allocated_bytes", &mr::tracking_resource_adaptor::allocated_bytes,
               "Bytes of all outstanding allocations, as requested.");
  tracking.def_property_readonly("outstanding_count", &mr::tracking_resource_adaptor::outstanding_count,
                                 "The number of outstanding allocations.");
  tracking.def_property_readonly("invalid_deallocations", &mr::tracking_resource_adaptor::invalid_deallocations,
                                 "Deallocations of unknown pointers or wrong sizes (not forwarded).");
  tracking.def("get_outstanding_allocations_str", &mr::tracking_resource_adaptor::report,
               "A report of the outstanding allocations: pointer, size, stream (and stack, if captured).");
  tracking.def(
    "log_outstanding_allocations",
    [](mr::tracking_resource_adaptor const& self) { std::cerr << self.report() << '\n'; },
    "Writes get_outstanding_allocations_str() to stderr.");
  add_upstream(tracking);

  py::class_<mr::limiting_resource_adaptor, device_memory_resource> limiting(
    sub, "LimitingResourceAdaptor",
    "Forwards to `upstream` while the bytes allocated through it stay within `allocation_limit`; a request "
    "past the limit raises OutOfMemoryError naming its size. Keeps `upstream` alive.");
  limiting.def(py::init([](checked<device_memory_resource*, "upstream"> upstream,
                           checked<std::size_t, "allocation_limit"> allocation_limit) {
                 return std::make_unique<mr::limiting_resource_adaptor>(upstream.value, allocation_limit.value);
               }),
               py::arg("upstream"), py::arg("allocation_limit"),
               py::keep_alive<1, 2>(),
               "Caps the bytes allocated through this adaptor (each request rounded up to 256) at `allocation_limit`.");
  limiting.def("get_allocated_bytes", &mr::limiting_resource_adaptor::get_allocated_bytes,
               "Bytes allocated through the adaptor now (each request rounded up to 256).");
  limiting.def("get_allocation_limit", &mr::limiting_resource_adaptor::get_allocation_limit, "The cap.");
  add_upstream(limiting);

  py::class_<mr::failure_callback_resource_adaptor, device_memory_resource> failure(
    sub, "FailureCallbackResourceAdaptor",
    "Forwards to `upstream`; when it runs out of memory, calls `callback(nbytes)` and retries the request "
    "while the callback returns True (free memory in the callback, and return False to give up). Keeps "
    "`upstream` and `callback` alive.");
  failure.def(py::init([](checked<device_memory_resource*, "upstream"> upstream, py::object callback) {
                if (PyCallable_Check(callback.ptr()) == 0) { throw_wrong_type("callback", "callable", callback); }
                // The reference is dropped with the GIL held, on whichever thread frees the adaptor.
                std::shared_ptr<py::object> const held{new py::object(std::move(callback)), [](py::object* f) {
                                                         py::gil_scoped_acquire const acquire;
                                                         delete f;  // NOLINT(cppcoreguidelines-owning-memory)
                                                       }};
                mr::failure_callback_t call = [held](std::size_t bytes, void* /*arg*/) {
                  py::gil_scoped_acquire const acquire;
                  py::object const retry = (*held)(bytes);
                  if (!py::isinstance<py::bool_>(retry)) {
                    throw py::type_error("FailureCallbackResourceAdaptor: the callback must return a bool (True: "
                                         "retry the allocation, False: give up), not " + type_name(retry));
                  }
                  return retry.cast<bool>();
                };
                return std::make_unique<mr::failure_callback_resource_adaptor>(upstream.value, std::move(call), nullptr);
              }),
              py::arg("upstream"), py::arg("callback"), py::keep_alive<1, 2>(),
              "Retries failed requests while `callback(nbytes) -> bool` returns True. An exception raised by "
              "the callback propagates out of the allocation; a result that is not a bool raises TypeError there.");
  add_upstream(failure);

  // ---- per-device current resource --------------------------------------------------------------------
  // device id -> the Python resource set for it. Leaked on purpose (the submodule also holds it): C++ keeps
  // raw pointers to these resources, which must outlive any C++ use; the atexit hook below restores the
  // defaults and empties the table before the interpreter tears modules down.
  py::handle const table = py::dict().release();
  sub.attr("_per_device_resources") = table;

  auto get_per_device = [table](int device) -> py::object {
    // (A raw C++ pointer is compared with the one of the Python object in the table: the table entry is the
    // resource set from Python; anything else was set from C++ and gets a non-owning wrapper.)
    device_memory_resource* const current = mr::get_per_device_resource(cuda_device_id{device});
    py::dict const held = py::reinterpret_borrow<py::dict>(table);
    py::int_ const key{device};
    if (held.contains(key)) {
      py::object set = held[key];
      if (set.cast<device_memory_resource*>() == current) { return set; }
    }
    return wrap(current);
  };
  auto set_per_device = [table](int device, py::object const& resource) -> py::object {
    device_memory_resource* const previous_pointer = mr::get_per_device_resource(cuda_device_id{device});
    py::dict held = py::reinterpret_borrow<py::dict>(table);
    py::int_ const key{device};
    py::object previous = held.contains(key) && held[key].cast<device_memory_resource*>() == previous_pointer
                            ? py::object{held[key]}
                            : wrap(previous_pointer);
    if (resource.is_none()) {
      (void)mr::set_per_device_resource(cuda_device_id{device}, nullptr);
    } else {
      (void)mr::set_per_device_resource(cuda_device_id{device}, shared_from_python(resource));
    }
    if (resource.is_none()) {
      if (held.contains(key)) { PyDict_DelItem(held.ptr(), key.ptr()); }
    } else {
      held[key] = resource;
    }
    return previous;
  };
  sub.def(
    "get_per_device_resource", [get_per_device](checked<int, "device"> device) { return get_per_device(device.value); },
    py::arg("device"),
          "The resource set for device `device` (its default CudaMemoryResource if none was set). Raises "
          "ValueError for an invalid device.");
  sub.def(
    "set_per_device_resource",
    [set_per_device](checked<int, "device"> device, py::object const& resource) {
      return set_per_device(device.value, resource);
    },
    py::arg("device"), py::arg("mr"),
    "Makes `mr` the resource of device `device` (None restores the default) and keeps it alive while it is "
    "set, and while memory gpumem.alloc/zeros took from it is live; returns the previous one. Raises "
    "ValueError for an invalid device, TypeError when `mr` is not a DeviceMemoryResource or None.");
  sub.def(
    "get_current_device_resource", [get_per_device] { return get_per_device(get_current_cuda_device().value()); },
    "The current device's resource (what gpumem.alloc and DeviceBuffer use by default).");
  sub.def(
    "set_current_device_resource",
    [set_per_device](py::object const& resource) { return set_per_device(get_current_cuda_device().value(), resource); },
    py::arg("mr"),
    "Makes `mr` the current device's resource (None restores the default) and keeps it alive while it is "
    "set, and while memory gpumem.alloc/zeros took from it is live; returns the previous one. Memory taken "
    "with its allocate() must be returned before it is replaced and dropped. Raises TypeError when `mr` is "
    "not a DeviceMemoryResource or None.");
  sub.def(
    "_reset_all_device_resources",
    [table] {
      mr::reset_all_device_resources();
      PyDict_Clear(table.ptr());
    },
    "Restores every device's default resource and drops the references held (run at interpreter exit).");
  py::module_::import("atexit").attr("register")(sub.attr("_reset_all_device_resources"));
}};

}  // namespace
}  // namespace gpumem::python
