// gpumem.SpillManager (a device budget for unified buffers, spill_manager.hpp) and gpumem.UnifiedBufferPool
// (reuse of unified buffers, unified_buffer_pool.hpp). The package's get_memory_pool() returns a default
// UnifiedBufferPool (python/gpumem/unified.py).
//
// Streams: a cached buffer still frees its device copy, and an acquire on another stream still orders
// itself after the buffer's work, on the buffer's stream. So the pool holds the Python objects of the
// streams of the buffers released to it, by handle, and hands the right one to a buffer it gives out again;
// it lets them all go once its cache is empty (clear(), or every buffer given out again).
#include "arguments.hpp"
#include "conversions.hpp"
#include "registry.hpp"
#include "unified_object.hpp"

#include <gpumem/buffer/spill_manager.hpp>
#include <gpumem/buffer/unified_buffer_pool.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/per_device_resource.hpp>

#include <pybind11/stl.h>

#include <limits>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

namespace gpumem::python {
namespace {

/** @brief A UnifiedBufferPool: the C++ pool, its options, and the SpillManager its buffers use (or None). */
struct py_unified_pool {
  py::object spill;  // declared first: destroyed after the pool (whose cached buffers it may hold)
  bool pinned{};
  std::unordered_map<cudaStream_t, py::object> streams;  // of the cached buffers (file comment); before `pool`
  std::unique_ptr<unified_buffer_pool<std::byte>> pool;

  /** @brief Lets the streams go once no buffer is cached. @pre the GIL is held. */
  void forget_streams_when_empty()
  {
    if (pool->statistics().cached_buffers == 0) { streams.clear(); }
  }
};

void clear_pool(py_unified_pool& p)
{
  {
    py::gil_scoped_release const release;
    p.pool->clear();
  }
  p.forget_streams_when_empty();
}

/// Sets the pool's max_cached_bytes (0: no limit), freeing the oldest cached buffers that no longer fit.
void limit_cache(py_unified_pool& p, std::size_t bytes)
{
  {
    py::gil_scoped_release const release;
    p.pool->set_max_cached_bytes(bytes);
  }
  p.forget_streams_when_empty();
}

py::dict spill_statistics_dict(spill_statistics const& s)
{
  py::dict d;
  d["spills"] = s.spills;
  d["bytes_spilled"] = s.bytes_spilled;
  d["copies_back"] = s.copies_back;
  d["bytes_copied_back"] = s.bytes_copied_back;
  d["failed_allocations"] = s.failed_allocations;
  return d;
}

/// PyDotCompute's set_limit(size_mb): None lifts the limit; a positive number of MiB caps the cache.
std::size_t limit_bytes(py::handle size_mb)
{
  if (size_mb.is_none()) { return 0; }
  auto const mib = convert_argument<std::size_t>(size_mb, "size_mb");
  if (mib == 0 || mib > (std::numeric_limits<std::size_t>::max() >> 20)) {
    throw py::value_error("UnifiedBufferPool.set_limit: size_mb must be a positive number of MiB (or None for "
                          "no limit), not " + std::to_string(mib));
  }
  return mib << 20;
}

registration const unified_pool{binding_order::unified, "unified_pool", [](py::module_& m) {
  py::class_<unified_pool_statistics>(m, "PoolStatistics", R"doc(What UnifiedBufferPool.get_stats() returns.

hits and misses count acquires served from the cache and not; cached_buffers and cached_bytes are what the
cache holds now (PyDotCompute's n_free_blocks and free_bytes name the same); releases counts release() calls.)doc")
    .def_readonly("hits", &unified_pool_statistics::hits, "Acquires served from the cache.")
    .def_readonly("misses", &unified_pool_statistics::misses, "Acquires that made a new buffer.")
    .def_readonly("cached_buffers", &unified_pool_statistics::cached_buffers, "Buffers waiting in the cache now.")
    .def_readonly("cached_bytes", &unified_pool_statistics::cached_bytes, "Their capacity in bytes.")
    .def_readonly("releases", &unified_pool_statistics::releases, "Buffers taken back by release().")
    .def_readonly("n_free_blocks", &unified_pool_statistics::cached_buffers, "As cached_buffers.")
    .def_readonly("free_bytes", &unified_pool_statistics::cached_bytes, "As cached_bytes.")
    .def("__repr__", [](unified_pool_statistics const& s) {
      return "PoolStatistics(hits=" + std::to_string(s.hits) + ", misses=" + std::to_string(s.misses) +
             ", cached_buffers=" + std::to_string(s.cached_buffers) + ", cached_bytes=" +
             std::to_string(s.cached_bytes) + ", releases=" + std::to_string(s.releases) + ")";
    });

  py::handle const current_resource = m.attr("mr").attr("get_current_device_resource");  // kept by the submodule
  py::class_<py_spill_manager>(m, "SpillManager", R"doc(A device memory budget for UnifiedBuffers that spills.

SpillManager(budget_bytes, upstream=None): device copies of buffers made with spill=this manager are
allocated from `upstream` (a gpumem.mr resource; None: the current device's resource, taken now) within
`budget_bytes`. When an allocation does not fit, the least recently used device copies are given up:
copies the host already holds are dropped, newer device data are copied back to the host first. The next
device access brings the data back. No data are ever lost; guarded or busy buffers are skipped. The manager
must outlive its buffers: each buffer keeps it alive.)doc")
    .def(py::init([current_resource](checked<std::size_t, "budget_bytes"> budget_bytes, py::object upstream) {
           if (budget_bytes.value == 0) { throw py::value_error("SpillManager: budget_bytes must be > 0"); }
           if (upstream.is_none()) { upstream = current_resource(); }
           auto* const resource = convert_argument<mr::device_memory_resource*>(upstream, "upstream");
           auto manager = std::make_unique<spill_manager>(resource, budget_bytes.value);
           return py_spill_manager{std::move(upstream), std::move(manager)};
         }),
         py::arg("budget_bytes"), py::arg("upstream") = py::none(),
         "Makes a budget of `budget_bytes` device bytes over `upstream`. Raises ValueError for a zero budget.")
    .def_property_readonly("budget", [](py_spill_manager const& s) { return s.manager->budget(); },
                           "The budget in bytes.")
    .def_property_readonly("used_bytes", [](py_spill_manager const& s) { return s.manager->used_bytes(); },
                           "Device bytes allocated within the budget now.")
    .def_property_readonly("resident_buffers", [](py_spill_manager const& s) { return s.manager->resident_buffers(); },
                           "How many buffers hold a device copy now.")
    .def_property_readonly("upstream", [](py_spill_manager const& s) { return s.upstream; },
                           "The resource device copies come from.")
    .def(
      "statistics", [](py_spill_manager const& s) { return spill_statistics_dict(s.manager->statistics()); },
      "A dict: spills, bytes_spilled, copies_back, bytes_copied_back, failed_allocations (requests that "
      "failed even after spilling everything spillable).")
    .def(
      "spill",
      [](py_spill_manager& s, checked<std::size_t, "bytes"> bytes) {
        py::gil_scoped_release const release;
        return s.manager->spill(bytes.value);
      },
      py::arg("bytes"),
      "Spills least recently used device copies until at least `bytes` were freed or nothing spillable is "
      "left; returns the bytes freed.")
    .def("__repr__", [](py_spill_manager const& s) {
      return "SpillManager(budget=" + std::to_string(s.manager->budget()) +
             ", used_bytes=" + std::to_string(s.manager->used_bytes()) + ")";
    });

  py::class_<py_unified_pool>(m, "UnifiedBufferPool", R"doc(Reuses UnifiedBuffers' memory.

UnifiedBufferPool(pinned=False, spill=None, max_cached_bytes=0): acquire(shape, dtype) returns a buffer
(UNINITIALIZED), reusing the memory of a released one of the same byte size, or of one up to twice as large;
release(buf) takes a buffer back (it can no longer be used; its contents are dropped). max_cached_bytes: the
most bytes kept for reuse (0: no limit); the oldest released buffers are freed first.)doc")
    .def(py::init([](checked<bool, "pinned"> pinned, py::object spill, checked<std::size_t, "max_cached_bytes"> max_cached_bytes) {
           unified_options options;
           options.pinned = pinned.value;
           options.spill = spill_of(spill);
           auto pool = std::make_unique<unified_buffer_pool<std::byte>>(options, max_cached_bytes.value);
           return py_unified_pool{std::move(spill), pinned.value, {}, std::move(pool)};
         }),
         py::arg("pinned") = false, py::arg("spill") = py::none(), py::arg("max_cached_bytes") = 0,
         "A pool of buffers with pinned host copies or not, and within `spill`'s budget or not.")
    .def(
      "acquire",
      [](py_unified_pool& p, py::object const& shape, py::object const& dtype, py::handle pinned) {
        if (!pinned.is_none() && convert_argument<bool>(pinned, "pinned") != p.pinned) {
          throw py::value_error(std::string{"UnifiedBufferPool.acquire: pinned="} + (p.pinned ? "False" : "True") +
                                ", but this pool's buffers all have " + (p.pinned ? "pinned" : "pageable") +
                                " host copies (make a UnifiedBufferPool(pinned=...) for the other kind)");
        }
        auto dims = to_shape(shape);
        auto type = element_dtype(dtype, "UnifiedBufferPool.acquire");
        std::size_t const bytes = shape_bytes(dims, type);
        std::unique_ptr<bytes_buffer> buffer;
        {
          py::gil_scoped_release const release;
          buffer = p.pool->acquire(bytes);
        }
        auto const found = p.streams.find(buffer->stream().value());
        py::object stream = found == p.streams.end() ? py::object{} : found->second;
        p.forget_streams_when_empty();
        return py_unified_buffer{p.spill, std::move(stream), std::move(dims), std::move(type), std::move(buffer), 0};
      },
      py::arg("shape"), py::arg("dtype") = py::str("float32"), py::kw_only(), py::arg("pinned") = py::none(),
      "A buffer of `shape` and `dtype`, UNINITIALIZED, reusing released memory when some fits. Raises "
      "TypeError for a dtype that holds Python objects; ValueError when `pinned` (None: the pool's kind) is "
      "not the pool's kind of host copy.")
    .def(
      "release",
      [](py_unified_pool& p, py::handle buffer_object) {
        if (!py::isinstance<py_unified_buffer>(buffer_object)) {
          throw_wrong_type("buffer", "a UnifiedBuffer", buffer_object);
        }
        auto& b = buffer_object.cast<py_unified_buffer&>();
        bytes_buffer& buffer = b.get();
        if (b.exports != 0) {
          throw py::value_error("UnifiedBufferPool.release: " + std::to_string(b.exports) +
                                " NumPy array(s), device view(s) or DLPack capsule(s) still use this buffer's "
                                "memory; drop them first");
        }
        if (buffer.storage().options().pinned != p.pinned || buffer.storage().options().spill != p.pool->options().spill ||
            buffer.storage().options().device_resource != nullptr) {
          throw py::value_error("UnifiedBufferPool.release: the buffer was made with other options (pinned, "
                                "spill) than this pool's");
        }
        if (b.stream) { p.streams[buffer.stream().value()] = b.stream; }
        std::unique_ptr<bytes_buffer> taken = std::move(b.buffer);
        b.stream = py::object{};
        {
          py::gil_scoped_release const release;
          p.pool->release(std::move(taken));
        }
        p.forget_streams_when_empty();  // (a pool that caches nothing frees at once)
      },
      py::arg("buffer"),
      "Takes `buffer` back for reuse; it can no longer be used. Raises ValueError when arrays or views of it "
      "are still alive, when it was made with other options, or when it was already released.")
    .def("clear", &clear_pool, "Frees every cached buffer.")
    .def(
      "statistics",
      [](py_unified_pool const& p) {
        auto const s = p.pool->statistics();
        py::dict d;
        d["hits"] = s.hits;
        d["misses"] = s.misses;
        d["cached_buffers"] = s.cached_buffers;
        d["cached_bytes"] = s.cached_bytes;
        return d;
      },
      "A dict: hits (acquires served from the cache), misses, cached_buffers, cached_bytes.")
    .def(
      "get_stats", [](py_unified_pool const& p) { return p.pool->statistics(); },
      "A PoolStatistics: hits, misses, cached_buffers, cached_bytes, releases.")
    .def(
      "stats",
      [](py_unified_pool const& p) {
        auto const s = p.pool->statistics();
        py::dict d;
        d["pool_size"] = s.cached_buffers;
        d["total_acquired"] = s.hits + s.misses;
        d["total_released"] = s.releases;
        d["cache_hits"] = s.hits;
        d["cache_misses"] = s.misses;
        return d;
      },
      "PyDotCompute's dict: pool_size (buffers cached now), total_acquired, total_released, cache_hits, "
      "cache_misses.")
    .def_property_readonly("pool_size", [](py_unified_pool const& p) { return p.pool->statistics().cached_buffers; },
                           "Buffers cached now.")
    .def_property_readonly("total_bytes", [](py_unified_pool const& p) { return p.pool->statistics().cached_bytes; },
                           "Bytes (capacity) of the buffers cached now.")
    .def_property(
      "max_cached_bytes", [](py_unified_pool const& p) { return p.pool->max_cached_bytes(); },
      [](py_unified_pool& p, checked<std::size_t, "max_cached_bytes"> bytes) { limit_cache(p, bytes.value); },
      "The most bytes kept for reuse (0: no limit); setting it frees the oldest cached buffers that no longer fit.")
    .def(
      "set_limit",
      [](py_unified_pool& p, py::handle size_mb) { limit_cache(p, limit_bytes(size_mb)); },
      py::arg("size_mb"),
      "Caps the bytes the pool keeps for reuse at `size_mb` MiB (None: no limit), freeing the oldest cached "
      "buffers that no longer fit. Raises ValueError for 0 or a negative size.")
    .def("free_all_blocks", &clear_pool, "Frees every cached buffer (as clear()).")
    .def_property_readonly("pinned", [](py_unified_pool const& p) { return p.pinned; },
                           "Whether the pool's buffers have pinned host copies.")
    .def_property_readonly("spill", [](py_unified_pool const& p) { return p.spill; },
                           "The SpillManager of the pool's buffers, or None.");
}};

}  // namespace
}  // namespace gpumem::python
