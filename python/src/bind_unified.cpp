// gpumem.UnifiedBuffer: a unified_buffer (include/gpumem/buffer/unified_buffer.hpp) with a shape and a
// NumPy dtype. `.host` is a NumPy array on the host copy (taking it is a host write access: the state goes
// from SYNCHRONIZED to HOST_DIRTY, as host() does in C++), `.host_view` a read-only one, `.device` (or
// device(stream)) an object with __cuda_array_interface__ on the current device copy, `.state` a
// BufferState with the published names. Arrays and device views keep the buffer alive.
#include "conversions.hpp"
#include "registry.hpp"

#include <gpumem/buffer/buffer_state.hpp>
#include <gpumem/buffer/unified_buffer.hpp>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstddef>
#include <functional>
#include <numeric>
#include <span>
#include <string>
#include <vector>

namespace gpumem::python {
namespace {

using bytes_buffer = unified_buffer<std::byte>;

/** @brief The Python object behind gpumem.UnifiedBuffer. */
struct py_unified_buffer {
  std::vector<py::ssize_t> shape;
  py::dtype dtype;
  bytes_buffer buffer;

  py_unified_buffer(std::vector<py::ssize_t> shape_, py::dtype dtype_, bool pinned)
    : shape{std::move(shape_)}, dtype{std::move(dtype_)}, buffer{checked_bytes(shape, dtype), make_options(pinned)}
  {
  }

  static unified_options make_options(bool pinned)
  {
    unified_options options;
    options.pinned = pinned;
    return options;
  }

  static std::size_t checked_bytes(std::vector<py::ssize_t> const& shape, py::dtype const& dtype)
  {
    std::size_t count = 1;
    for (auto const extent : shape) {
      if (extent < 0) { throw py::value_error("UnifiedBuffer: negative extent " + std::to_string(extent) + " in the shape"); }
      count *= static_cast<std::size_t>(extent);
    }
    return count * static_cast<std::size_t>(dtype.itemsize());
  }

  [[nodiscard]] std::size_t count() const
  {
    return std::accumulate(shape.begin(), shape.end(), std::size_t{1},
                           [](std::size_t a, py::ssize_t b) { return a * static_cast<std::size_t>(b); });
  }

  [[nodiscard]] py::dict cuda_array_interface(void const* data, bool read_only, cuda_stream_view stream) const
  {
    py::dict cai;
    cai["shape"] = py::tuple(py::cast(shape));
    cai["typestr"] = dtype.attr("str");
    cai["data"] = py::make_tuple(to_int(data), read_only);
    cai["strides"] = py::none();
    cai["version"] = 3;
    // The data are ready on `stream` (protocol v3: a consumer synchronises with it); the default stream is
    // reported as 1 (legacy), as the protocol asks, never 0.
    auto const handle = to_int(stream.value());
    cai["stream"] = handle == 0 ? py::int_(1) : py::int_(handle);
    return cai;
  }
};

/** @brief What `.device` returns: the device copy as __cuda_array_interface__ (keeps the buffer alive). */
struct device_view {
  py::object owner;  // the UnifiedBuffer
  py::dict interface;
};

py::array host_array(py::object self, bool writable)
{
  auto& b = self.cast<py_unified_buffer&>();
  void const* data = nullptr;
  {
    py::gil_scoped_release const release;  // may wait for a copy from the device
    data = writable ? static_cast<void const*>(b.buffer.host().data()) : b.buffer.host_view().data();
  }
  py::array array{b.dtype, b.shape, {}, data, self};
  if (!writable) { array.attr("flags").attr("writeable") = false; }
  return array;
}

/// The device copy, current for work on `stream` (copies host -> device when needed).
device_view device_of(py::object self, py::handle stream)
{
  auto& b = self.cast<py_unified_buffer&>();
  cuda_stream_view const s = to_stream(stream);
  void* data = nullptr;
  {
    py::gil_scoped_release const release;
    data = b.buffer.device(s);
  }
  return device_view{self, b.cuda_array_interface(data, false, s)};
}

registration const unified{binding_order::unified, "unified", [](py::module_& m) {
  py::enum_<buffer_state>(m, "BufferState", "Which copy of a UnifiedBuffer holds the current data.")
    .value("UNINITIALIZED", buffer_state::UNINITIALIZED)
    .value("HOST_ONLY", buffer_state::HOST_ONLY)
    .value("DEVICE_ONLY", buffer_state::DEVICE_ONLY)
    .value("SYNCHRONIZED", buffer_state::SYNCHRONIZED)
    .value("HOST_DIRTY", buffer_state::HOST_DIRTY)
    .value("DEVICE_DIRTY", buffer_state::DEVICE_DIRTY);

  py::class_<device_view>(m, "UnifiedDeviceView", "The device copy of a UnifiedBuffer, for CuPy, Numba, PyTorch.")
    .def_property_readonly("__cuda_array_interface__", [](device_view const& v) { return v.interface; })
    .def_property_readonly("ptr", [](device_view const& v) { return v.interface["data"].cast<py::tuple>()[0]; });

  py::class_<py_unified_buffer>(m, "UnifiedBuffer", R"doc(
An array with a host copy and a device copy that knows which is current (gpumem::unified_buffer).

UnifiedBuffer(shape, dtype, pinned=False): nothing is allocated until first use (state UNINITIALIZED).
.host        a NumPy array on the host copy; taking it is a host write access (SYNCHRONIZED -> HOST_DIRTY)
.host_view   a read-only NumPy array on the host copy (never dirties anything)
.device      the device copy (copies host -> device if needed) with __cuda_array_interface__; after a
             kernel wrote it, call mark_device_dirty()
.state       a BufferState
)doc")
    .def(py::init([](py::object shape, py::object dtype, bool pinned) {
           std::vector<py::ssize_t> dims;
           if (py::isinstance<py::int_>(shape)) {
             dims.push_back(shape.cast<py::ssize_t>());
           } else {
             dims = shape.cast<std::vector<py::ssize_t>>();
           }
           return py_unified_buffer{std::move(dims), py::dtype::from_args(dtype), pinned};
         }),
         py::arg("shape"), py::arg("dtype") = py::str("float32"), py::arg("pinned") = false)
    .def_property_readonly("shape", [](py_unified_buffer const& b) { return py::tuple(py::cast(b.shape)); })
    .def_property_readonly("dtype", [](py_unified_buffer const& b) { return b.dtype; })
    .def_property_readonly("size", &py_unified_buffer::count)
    .def_property_readonly("nbytes", [](py_unified_buffer const& b) { return b.buffer.size_bytes(); })
    .def_property_readonly("pinned", [](py_unified_buffer const& b) { return b.buffer.is_pinned(); })
    .def_property_readonly("state", [](py_unified_buffer const& b) { return b.buffer.state(); })
    .def_property_readonly("host", [](py::object self) { return host_array(std::move(self), true); })
    .def_property_readonly("host_view", [](py::object self) { return host_array(std::move(self), false); })
    .def_property_readonly("device", [](py::object self) { return device_of(std::move(self), py::none()); },
                           "The device copy on the default stream (see device_for(stream)).")
    .def("device_for", &device_of, py::arg("stream"), "The device copy, current for work on `stream`.")
    .def("to_numpy", [](py::object self) {
      return host_array(std::move(self), false).attr("copy")();
    }, "A copy of the current data as a new NumPy array (copies device -> host if needed).")
    .def("sync_to_device", [](py_unified_buffer& b, py::handle stream) {
      cuda_stream_view const s = to_stream(stream);
      py::gil_scoped_release const release;
      b.buffer.sync_to_device(s);
    }, py::arg("stream") = py::none())
    .def("sync_to_host", [](py_unified_buffer& b, py::handle stream) {
      cuda_stream_view const s = to_stream(stream);
      py::gil_scoped_release const release;
      b.buffer.sync_to_host(s);
    }, py::arg("stream") = py::none())
    .def("mark_host_dirty", [](py_unified_buffer& b) { b.buffer.mark_host_dirty(); })
    .def("mark_device_dirty", [](py_unified_buffer& b) { b.buffer.mark_device_dirty(); })
    .def("copy_from", [](py_unified_buffer& b, py::object source, py::handle stream) {
      py::array const array = py::array::ensure(source, py::array::c_style);
      if (!array) { throw py::type_error("UnifiedBuffer.copy_from: the source must be array-like"); }
      auto const bytes = static_cast<std::size_t>(array.nbytes());
      if (bytes != b.buffer.size_bytes()) {
        throw py::value_error("UnifiedBuffer.copy_from: the source has " + std::to_string(bytes) +
                              " bytes, the buffer " + std::to_string(b.buffer.size_bytes()));
      }
      cuda_stream_view const s = to_stream(stream);
      std::span<std::byte const> const span{static_cast<std::byte const*>(array.data()), bytes};
      py::gil_scoped_release const release;
      b.buffer.copy_from(span, s);
    }, py::arg("source"), py::arg("stream") = py::none(),
       "Copies a host array (C-contiguous, same number of bytes) into the device copy: DEVICE_ONLY or DEVICE_DIRTY.")
    .def("zeros", [](py_unified_buffer& b, py::handle stream) {
      cuda_stream_view const s = to_stream(stream);
      py::gil_scoped_release const release;
      b.buffer.zeros(s);
    }, py::arg("stream") = py::none(), "Sets every byte of the device copy to zero.")
    .def("__len__", [](py_unified_buffer const& b) { return b.shape.empty() ? 1 : b.shape[0]; })
    .def("__repr__", [](py_unified_buffer const& b) {
      return "UnifiedBuffer(shape=" + std::string{py::str(py::tuple(py::cast(b.shape)))} + ", dtype=" +
             std::string{py::str(b.dtype.attr("name"))} + ", state=" + std::string{to_string(b.buffer.state())} + ")";
    });
}};

}  // namespace
}  // namespace gpumem::python
