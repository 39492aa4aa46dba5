// gpumem.DeviceBuffer: rmm.DeviceBuffer's Python API over gpumem::device_buffer (an untyped, stream-ordered
// allocation), with the two zero-copy export protocols: __cuda_array_interface__ (v3) and DLPack
// (__dlpack__ / __dlpack_device__, an unversioned "dltensor" capsule; dlpack.hpp).
//
// Host <-> device copies go through gpumem::copy_to_device / copy_to_host (transfer.hpp: staged through
// pinned chunks) and then wait for the stream, so that a call returns with the host bytes complete (read
// from, or written into) whatever kind of host memory the Python object has. The GIL is released around
// every allocation and copy.
//
// Lifetimes: a DeviceBuffer holds the Python object of the resource that allocated its memory (given, or
// the current one at construction), so the resource outlives the memory, and the Python object of its
// stream (given as a gpumem, CuPy or PyTorch stream; replaced by resize, reserve and shrink_to_fit, which
// move the buffer to their stream), so the memory is freed on a live stream, as RMM's DeviceBuffer does. A
// stream given as an int is the caller's to keep alive. A DLPack capsule holds the DeviceBuffer until the
// consumer calls the tensor's deleter (or the unconsumed capsule is collected).
//
// Host objects given to copies are checked by host_buffer (host_buffer.hpp): no Python-object dtypes, C
// order, writable destinations.
//
// Host backend: the "device" memory is host memory, so __dlpack_device__ reports kDLCPU (1) and NumPy can
// take the buffer with numpy.from_dlpack; on the cuda backend it reports kDLCUDA (2) and the device id.
#include "arguments.hpp"
#include "conversions.hpp"
#include "dlpack_export.hpp"
#include "host_buffer.hpp"
#include "registry.hpp"

#include <gpumem/buffer/device_buffer.hpp>
#include <gpumem/cuda_device_id.hpp>
#include <gpumem/device.hpp>
#include <gpumem/error.hpp>
#include <gpumem/ipc.hpp>
#include <gpumem/prefetch.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/transfer.hpp>

#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpumem::python {
namespace {

/**
 * @brief What a DeviceBuffer Python object holds. Members are destroyed bottom-up: the exports are withdrawn
 * first, then the memory goes.
 */
struct py_device_buffer {
  py::object resource;  ///< the allocating resource's Python object
  py::object stream;    ///< the Python object of buffer.stream() (none for a stream given as None or an int)
  device_buffer buffer;
  std::vector<ipc::exported_memory> exports;  ///< of export(): importable while the memory stays where it is

  /** @brief Records that `held` is the buffer's stream now. */
  void set_stream(held_stream const& held) { stream = held.owner; }
  /** @brief After a call that may reallocate: withdraws the exports when the memory moved. */
  void memory_may_have_moved(void const* before) noexcept
  {
    if (buffer.data() != before) { exports.clear(); }
  }
};

using access = host_buffer::access;

/** @brief `bytes` from host `src` into device `dst` on `stream`; returns when `src` may be reused. GIL released by the caller. */
void upload(void* dst, void const* src, std::size_t bytes, cuda_stream_view stream)
{
  if (bytes == 0) { return; }
  copy_to_device(dst, src, bytes, stream);
  stream.synchronize();  // a pinned source is copied asynchronously: the Python object may go right after
}

/** @brief `bytes` from device `src` into host `dst` on `stream`; returns with the bytes in `dst`. GIL released by the caller. */
void download(void* dst, void const* src, std::size_t bytes, cuda_stream_view stream)
{
  if (bytes == 0) { return; }
  copy_to_host(dst, src, bytes, stream);
  stream.synchronize();  // a pinned destination is written asynchronously
}

/**
 * @brief A new DeviceBuffer of `size` bytes from `mr` (None: the current device resource) on `stream`,
 * uninitialised, or a copy of the `size` bytes at device address `source` when it is not null.
 */
std::unique_ptr<py_device_buffer> make_buffer(py::handle current_resource_getter, std::size_t size,
                                              held_stream const& stream, py::object mr, void const* source = nullptr)
{
  if (mr.is_none()) { mr = current_resource_getter(); }
  auto* const resource = convert_argument<mr::device_memory_resource*>(mr, "mr");
  auto result = std::make_unique<py_device_buffer>();
  result->resource = std::move(mr);
  result->set_stream(stream);
  {
    py::gil_scoped_release const release;
    result->buffer = source == nullptr ? device_buffer(size, stream.view, resource)
                                       : device_buffer(source, size, stream.view, resource);
  }
  return result;
}

/**
 * @brief RMM's to_device takes `const unsigned char[::1]`: a 1-D buffer of format 'B'.
 * @throws py::value_error naming the format or the dimensions otherwise (RMM's checks); py::type_error (from
 *         Python) for an object without the buffer protocol.
 */
void check_unsigned_bytes(py::handle data)
{
  py::memoryview const view{py::reinterpret_borrow<py::object>(data)};
  std::string format = py::str(view.attr("format"));
  if (!format.empty() && std::string_view{"@=<>!"}.find(format.front()) != std::string_view::npos) { format.erase(0, 1); }
  if (format != "B") {
    throw py::value_error("DeviceBuffer.to_device: data must be unsigned bytes (buffer format 'B'), got format '" +
                          std::string{py::str(view.attr("format"))} + "' (view it as bytes: memoryview(data).cast('B'))");
  }
  auto const dimensions = view.attr("ndim").cast<int>();
  if (dimensions != 1) {
    throw py::value_error("DeviceBuffer.to_device: data must have 1 dimension, got " + std::to_string(dimensions));
  }
}

/** @brief The __cuda_array_interface__ stream value of `stream` (1: legacy default, 2: per-thread default). */
py::object interface_stream(cuda_stream_view stream)
{
  if (stream.is_default()) { return py::int_(1); }
  if (stream.is_per_thread_default()) { return py::int_(2); }
  return py::int_(to_int(stream.value()));
}

/** @brief (device type, device id) as __dlpack_device__ reports them (see the file comment). */
std::pair<std::int32_t, std::int32_t> dlpack_device(py_device_buffer const& self)
{
  return dlpack_device_of(self.buffer.device().value());
}

registration const buffers{binding_order::buffers, "device_buffer", [](py::module_& m) {
  // mr.get_current_device_resource: the Python object of the current resource (kept by the submodule).
  py::handle const current_resource = m.attr("mr").attr("get_current_device_resource");
  py::handle const cuda_module = m.attr("cuda");  // kept by the module

  py::class_<py_device_buffer> cls(
    m, "DeviceBuffer",
    "An untyped, uninitialised, stream-ordered allocation of device memory (rmm.DeviceBuffer's API).\n\n"
    "Work on the buffer's stream may use it at once; other streams must synchronise first. The memory is "
    "returned to its resource (kept alive by the buffer) when the buffer is collected. Exports "
    "__cuda_array_interface__ (v3) and DLPack; on the host backend the memory is host memory and "
    "__dlpack_device__ reports the CPU, so numpy.from_dlpack accepts it.");
  cls.def(py::init([current_resource](checked<std::size_t, "size"> size, py::handle stream, py::object mr, py::handle ptr) {
            held_stream const s = hold_stream(stream);
            void const* const source = ptr.is_none() || size.value == 0 ? nullptr : to_pointer(ptr);
            return make_buffer(current_resource, size.value, s, std::move(mr), source);
          }),
          py::arg("size") = 0, py::arg("stream") = py::none(), py::arg("mr") = py::none(), py::kw_only(),
          py::arg("ptr") = py::none(),
          "Allocates `size` bytes (uninitialised) from `mr` (None: the current device resource) on `stream` "
          "(None: the default stream; a stream object is kept alive until the memory is freed on it). With "
          "ptr=<device address>, copies `size` bytes from there on `stream` (not waited for). Raises "
          "OutOfMemoryError when the memory is not there, ValueError for a negative size.");
  cls.def_static(
    "to_device",
    [current_resource](py::handle data, py::handle stream, py::object mr) {
      held_stream const s = hold_stream(stream);
      host_buffer const view{data, access::read, 'C', "DeviceBuffer.to_device: data"};
      check_unsigned_bytes(data);
      auto result = make_buffer(current_resource, view.size(), s, std::move(mr));
      {
        py::gil_scoped_release const release;
        upload(result->buffer.data(), view.data(), view.size(), s.view);
      }
      return result;
    },
    py::arg("data"), py::arg("stream") = py::none(), py::arg("mr") = py::none(),
    "A new DeviceBuffer holding a copy of `data`: a 1-D C-contiguous buffer of unsigned bytes (bytes, bytearray, "
    "a memoryview or NumPy array of format 'B'), as RMM requires; ValueError for another format or number of "
    "dimensions (view other arrays as bytes first: memoryview(a).cast('B')). Returns once the copy is complete.");
  cls.def_property_readonly(
    "size", [](py_device_buffer const& self) { return self.buffer.size(); }, "The size in bytes.");
  cls.def_property_readonly(
    "nbytes", [](py_device_buffer const& self) { return self.buffer.size(); }, "The size in bytes (as size).");
  cls.def(
    "capacity", [](py_device_buffer const& self) { return self.buffer.capacity(); },
    "The bytes allocated (>= size; resize() to a smaller size keeps the capacity). A method, as RMM's.");
  cls.def_property_readonly(
    "stream",
    [cuda_module](py_device_buffer const& self) -> py::object {
      if (self.stream) { return self.stream; }
      cuda_stream_view const stream = self.buffer.stream();
      if (stream.is_default()) { return cuda_module.attr("Stream").attr("null"); }
      return cuda_module.attr("ExternalStream")(to_int(stream.value()));
    },
    "The buffer's stream, on which its memory is freed: the stream object given (held by the buffer), or a "
    "gpumem.cuda stream for one given as None (Stream.null) or an int (an ExternalStream).");
  cls.def("__sizeof__", [](py_device_buffer const& self) { return self.buffer.size(); },
          "The size in bytes (as RMM's sys.getsizeof reports it).");
  cls.def(
    "__bytes__",
    [](py::object const& self) { return self.attr("tobytes")(); }, "The contents as bytes (bytes(buffer)).");
  cls.def(
    "__copy__", [](py::object const& self) { return self.attr("copy")(); },
    "A deep copy, as copy() (RMM's copy.copy of a DeviceBuffer copies the memory).");
  cls.def(py::pickle(
    [](py::object const& self) { return py::make_tuple(self.attr("tobytes")()); },
    [current_resource](py::tuple const& state) {
      if (state.size() != 1 || !py::isinstance<py::bytes>(state[0])) {
        throw py::value_error("DeviceBuffer: a pickled state must be a 1-tuple of bytes");
      }
      py::bytes const data = state[0];
      std::string_view const view = data;
      held_stream const s = hold_stream(py::none());
      auto result = make_buffer(current_resource, view.size(), s, py::none());
      py::gil_scoped_release const release;
      upload(result->buffer.data(), view.data(), view.size(), s.view);
      return result;
    }));
  cls.def(
    "prefetch",
    [](py_device_buffer const& self, py::handle device, py::handle stream) {
      int const target = device.is_none() ? get_current_cuda_device().value() : device_argument(device, "device");
      cuda_stream_view const s = stream.is_none() ? self.buffer.stream() : to_stream(stream);
      py::gil_scoped_release const release;
      try {
        gpumem::prefetch(self.buffer.data(), self.buffer.size(), cuda_device_id{target}, s);
      } catch (cuda_error const& e) {
        if (e.code() != cudaErrorInvalidValue) { throw; }  // memory that is not managed: nothing to do, as RMM
      }
    },
    py::arg("device") = py::none(), py::arg("stream") = py::none(),
    "Migrates the buffer's memory to `device` (None: the current device) on `stream` (None: the buffer's "
    "stream), for managed memory; a no-op for other memory, as RMM's.");
  cls.def(
    "copy_from_device",
    [](py_device_buffer& self, py::handle cuda_ary, py::handle stream) {
      cuda_stream_view const s = to_stream(stream);
      if (!py::hasattr(cuda_ary, "__cuda_array_interface__")) {
        throw py::value_error(
          "DeviceBuffer.copy_from_device: cuda_ary must be an object with __cuda_array_interface__, not " +
          type_name(cuda_ary));
      }
      py::dict const interface = cuda_ary.attr("__cuda_array_interface__");
      py::tuple const shape = interface["shape"];
      py::object const itemsize = py::module_::import("numpy").attr("dtype")(interface["typestr"]).attr("itemsize");
      std::size_t const item = itemsize.cast<std::size_t>();
      if (shape.size() > 1) {
        throw py::value_error("DeviceBuffer.copy_from_device: only 1-D contiguous arrays are supported, got a " +
                              std::to_string(shape.size()) + "-D array");
      }
      if (interface.contains("strides") && !interface["strides"].is_none()) {
        py::tuple const strides = interface["strides"];
        if (!strides.empty() && strides[0].cast<std::size_t>() != item) {
          throw py::value_error("DeviceBuffer.copy_from_device: only 1-D contiguous arrays are supported, got a "
                                "non-contiguous array");
        }
      }
      std::size_t const bytes = (shape.empty() ? 1 : shape[0].cast<std::size_t>()) * item;
      if (bytes > self.buffer.size()) {
        throw py::value_error("DeviceBuffer.copy_from_device: the array has " + std::to_string(bytes) +
                              " bytes, more than the buffer's " + std::to_string(self.buffer.size()));
      }
      void const* const source = to_pointer(py::tuple(interface["data"])[0]);
      py::gil_scoped_release const release;
      if (bytes == 0) { return; }
      gpumem::memcpy_async(self.buffer.data(), source, bytes, s);
      s.synchronize();
    },
    py::arg("cuda_ary"), py::arg("stream") = py::none(),
    "Copies the bytes of `cuda_ary` (a 1-D contiguous object with __cuda_array_interface__, at most size bytes) "
    "to the start of the buffer on `stream`, and waits for it. ValueError for other objects, as RMM.");
  cls.def_property_readonly(
    "ptr", [](py_device_buffer const& self) { return to_int(self.buffer.data()); },
    "The device address as an int (0 when nothing is allocated).");
  cls.def_property_readonly(
    "mr", [](py_device_buffer const& self) { return self.resource; }, "The resource that allocated the memory.");
  cls.def("__len__", [](py_device_buffer const& self) { return self.buffer.size(); }, "The size in bytes.");
  cls.def(
    "__repr__",
    [](py_device_buffer const& self) {
      std::ostringstream out;
      out << "<gpumem.DeviceBuffer size=" << self.buffer.size() << " ptr=0x" << std::hex << to_int(self.buffer.data())
          << '>';
      return out.str();
    },
    "A short description: size and address.");
  cls.def(
    "tobytes",
    [](py_device_buffer const& self, py::handle stream) {
      cuda_stream_view const s = to_stream(stream);
      std::size_t const size = self.buffer.size();
      py::bytes result{nullptr, size};
      char* const out = PyBytes_AS_STRING(result.ptr());
      {
        py::gil_scoped_release const release;
        download(out, self.buffer.data(), size, s);
      }
      return result;
    },
    py::arg("stream") = py::none(), "The contents as bytes (copied on `stream`, which is waited for).");
  cls.def(
    "copy_to_host",
    [](py_device_buffer const& self, py::object out, py::handle stream) {
      cuda_stream_view const s = to_stream(stream);
      std::size_t const size = self.buffer.size();
      if (out.is_none()) { out = py::module_::import("numpy").attr("empty")(size, "uint8"); }
      host_buffer const view{out, access::write, 'C', "DeviceBuffer.copy_to_host: out"};
      if (view.size() < size) {
        throw py::value_error("DeviceBuffer.copy_to_host: `out` has " + std::to_string(view.size()) +
                              " bytes, too small for the buffer's " + std::to_string(size));
      }
      {
        py::gil_scoped_release const release;
        download(view.data(), self.buffer.data(), size, s);
      }
      return out;
    },
    py::arg("out") = py::none(), py::arg("stream") = py::none(),
    "Copies the contents to the host and returns once they are there: into `out` (a writable C-contiguous "
    "buffer of at least size bytes, not one holding Python objects; its first size bytes are written; "
    "ValueError if it is smaller) and returns `out`, or into a new numpy.uint8 array when out is None.");
  cls.def(
    "copy_from_host",
    [](py_device_buffer& self, py::handle data, py::handle stream) {
      cuda_stream_view const s = to_stream(stream);
      host_buffer const view{data, access::read, 'C', "DeviceBuffer.copy_from_host: data"};
      if (view.size() > self.buffer.size()) {
        throw py::value_error("DeviceBuffer.copy_from_host: the data has " + std::to_string(view.size()) +
                              " bytes, more than the buffer's " + std::to_string(self.buffer.size()));
      }
      py::gil_scoped_release const release;
      upload(self.buffer.data(), view.data(), view.size(), s);
    },
    py::arg("data"), py::arg("stream") = py::none(),
    "Copies `data` (a C-contiguous buffer-protocol object of at most size bytes, not one holding Python "
    "objects) to the start of the buffer; returns once the copy is complete. ValueError if `data` is larger "
    "than the buffer.");
  cls.def(
    "copy",
    [](py_device_buffer const& self, py::handle stream) {
      held_stream const s = hold_stream(stream);
      auto result = std::make_unique<py_device_buffer>();
      result->resource = self.resource;
      result->set_stream(s);
      py::gil_scoped_release const release;
      result->buffer = device_buffer(self.buffer, s.view, self.buffer.memory_resource());
      return result;
    },
    py::arg("stream") = py::none(),
    "A deep copy (same resource), copied on `stream` (work writing this buffer must be ordered before it).");
  cls.def(
    "resize",
    [](py_device_buffer& self, checked<std::size_t, "new_size"> new_size, py::handle stream) {
      held_stream const s = hold_stream(stream);
      void const* const before = self.buffer.data();
      {
        py::gil_scoped_release const release;
        self.buffer.resize(new_size.value, s.view);
      }
      self.memory_may_have_moved(before);
      self.set_stream(s);
    },
    py::arg("new_size"), py::arg("stream") = py::none(),
    "Sets the size, keeping the first min(size, new_size) bytes (new bytes are uninitialised); reallocates "
    "only when new_size exceeds the capacity. `stream` becomes the buffer's stream.");
  cls.def(
    "reserve",
    [](py_device_buffer& self, checked<std::size_t, "new_capacity"> new_capacity, py::handle stream) {
      held_stream const s = hold_stream(stream);
      void const* const before = self.buffer.data();
      {
        py::gil_scoped_release const release;
        self.buffer.reserve(new_capacity.value, s.view);
      }
      self.memory_may_have_moved(before);
      self.set_stream(s);
    },
    py::arg("new_capacity"), py::arg("stream") = py::none(),
    "Makes the capacity at least `new_capacity` bytes, keeping the contents and the size.");
  cls.def(
    "shrink_to_fit",
    [](py_device_buffer& self, py::handle stream) {
      held_stream const s = hold_stream(stream);
      void const* const before = self.buffer.data();
      {
        py::gil_scoped_release const release;
        self.buffer.shrink_to_fit(s.view);
      }
      self.memory_may_have_moved(before);
      self.set_stream(s);
    },
    py::arg("stream") = py::none(), "Reallocates so that capacity == size, keeping the contents.");
  cls.def(
    "export",
    [](py_device_buffer& self) {
      if (self.buffer.size() == 0) { throw py::value_error("DeviceBuffer.export: the buffer is empty"); }
      ipc::exported_memory exported = [&] {
        py::gil_scoped_release const release;
        self.buffer.stream().synchronize();  // what was written is complete before another process reads it
        return ipc::export_memory(*self.buffer.memory_resource(), self.buffer.data(), self.buffer.size());
      }();
      ipc::memory_handle handle = exported.handle();
      self.exports.push_back(std::move(exported));
      return handle;
    },
    "A gpumem.IpcHandle of the buffer's memory, for gpumem.import_buffer() in another process (after waiting for "
    "the buffer's stream, so that what was written is there). The handle stays importable while this buffer "
    "lives and its memory does not move (resize, reserve and shrink_to_fit withdraw it when they reallocate); "
    "imports made stay mapped until they are closed. Keep the buffer until every importer has closed it: "
    "once freed, its memory may be handed out again. Memory of a VMM pool is shared on both backends, memory "
    "from cudaMalloc (cuda_memory_resource, or a pool over it) through CUDA IPC, and of a "
    "CudaAsyncMemoryResource(enable_ipc=True) through its pool's export, on the cuda backend; other resources "
    "raise ValueError (or CUDARuntimeError) naming them.");
  cls.def_property_readonly(
    "__cuda_array_interface__",
    [](py_device_buffer const& self) {
      py::dict interface;
      interface["shape"] = py::make_tuple(self.buffer.size());
      interface["strides"] = py::none();
      interface["typestr"] = "|u1";
      interface["data"] = py::make_tuple(to_int(self.buffer.data()), false);
      interface["version"] = 3;
      interface["stream"] = interface_stream(self.buffer.stream());
      return interface;
    },
    "The CUDA Array Interface (version 3): a 1-d uint8 array of size bytes; `stream` is the buffer's stream "
    "(1: the legacy default stream), on which consumers order their work after the buffer's.");
  cls.def(
    "__dlpack_device__",
    [](py_device_buffer const& self) {
      auto const [type, id] = dlpack_device(self);
      return py::make_tuple(type, id);
    },
    "(device type, device id) of the memory for DLPack: (2, device) = kDLCUDA on the cuda backend; (1, 0) = "
    "kDLCPU on the host backend, whose device memory is host memory.");
  cls.def(
    "__dlpack__",
    [](py::object const& self_object, py::object const& stream) {
      auto& self = self_object.cast<py_device_buffer&>();
      auto const device = dlpack_device(self);
      // The consumer's stream must see the buffer's work: a host wait is the simple, safe order (stream -1:
      // the consumer orders it itself).
      if (!dlpack_consumer_orders(stream, device.first, "DeviceBuffer.__dlpack__")) {
        py::gil_scoped_release const release;
        self.buffer.stream().synchronize();
      }
      return make_dlpack_capsule(self_object, self.buffer.data(), {static_cast<std::int64_t>(self.buffer.size())},
                                 {dlpack::kDLUInt, 8, 1}, device);
    },
    py::arg("stream") = py::none(),
    "A DLPack capsule (\"dltensor\") of a 1-d uint8 tensor of size bytes, which keeps this buffer alive until "
    "the consumer releases it. `stream`: the consumer's stream (must be None for a CPU consumer; -1: no "
    "synchronisation); otherwise the buffer's stream is waited for first.");
}};

}  // namespace
}  // namespace gpumem::python
