// gpumem.UnifiedBuffer: a unified_buffer (include/gpumem/buffer/unified_buffer.hpp) with a shape and a
// NumPy dtype. `.host` is a NumPy array on the host copy (taking it is a host write access: the state goes
// from SYNCHRONIZED to HOST_DIRTY, as host() does in C++), `.host_view` a read-only one, `.device` (or
// device_for(stream)) a view of the current device copy with __cuda_array_interface__ and DLPack, `.state`
// a BufferState with the published names. Arrays, views and capsules keep the buffer alive, and are counted
// (py_unified_buffer::exports) so that a pool never takes back memory still in use.
//
// Streams: the buffer keeps the Python object of its stream (the one of its latest device access), and a
// device view the one it was made for, since copies back, spills and the free of the device copy run on it
// after the call. Dtypes that hold Python objects are refused: the buffer's bytes are not references.
#include "arguments.hpp"
#include "conversions.hpp"
#include "dlpack_export.hpp"
#include "host_buffer.hpp"
#include "registry.hpp"
#include "unified_object.hpp"

#include <gpumem/buffer/buffer_state.hpp>
#include <gpumem/buffer/spill_manager.hpp>
#include <gpumem/buffer/unified_buffer.hpp>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstddef>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace gpumem::python {

std::vector<py::ssize_t> to_shape(py::handle shape)
{
  if (PyIndex_Check(shape.ptr()) != 0) { return {convert_argument<py::ssize_t>(shape, "shape")}; }
  if (!py::isinstance<py::sequence>(shape) || py::isinstance<py::str>(shape) || py::isinstance<py::bytes>(shape)) {
    throw_wrong_type("shape", "an int or a sequence of ints", shape);
  }
  std::vector<py::ssize_t> dims;
  for (py::handle const extent : py::reinterpret_borrow<py::sequence>(shape)) {
    dims.push_back(convert_argument<py::ssize_t>(extent, "each extent of shape"));
  }
  return dims;
}

py::dtype element_dtype(py::handle dtype, char const* what)
{
  py::dtype type;
  try {
    type = py::dtype::from_args(py::reinterpret_borrow<py::object>(dtype));
  } catch (py::error_already_set const& e) {
    throw py::type_error(std::string{what} + ": dtype " + std::string{py::repr(dtype)} + " is not a NumPy dtype (" +
                         e.what() + ")");
  }
  refuse_object_dtype(type, what);
  return type;
}

spill_manager* spill_of(py::handle spill)
{
  if (spill.is_none()) { return nullptr; }
  if (!py::isinstance<py_spill_manager>(spill)) { throw_wrong_type("spill", "a SpillManager or None", spill); }
  return spill.cast<py_spill_manager&>().manager.get();
}

std::size_t shape_bytes(std::vector<py::ssize_t> const& shape, py::dtype const& dtype)
{
  std::size_t bytes = static_cast<std::size_t>(dtype.itemsize());
  for (auto const extent : shape) {
    if (extent < 0) { throw py::value_error("UnifiedBuffer: negative extent " + std::to_string(extent) + " in the shape"); }
    auto const e = static_cast<std::size_t>(extent);
    if (e != 0 && bytes > std::numeric_limits<std::size_t>::max() / 2 / e) {
      throw py::value_error("UnifiedBuffer: the shape's size in bytes overflows");
    }
    bytes *= e;
  }
  return bytes;
}

namespace {

/** @brief One live export (array, view, capsule) of a UnifiedBuffer's memory; counted while it lives. */
class export_token {
 public:
  explicit export_token(py::object owner) : owner_{std::move(owner)} { ++owner_.cast<py_unified_buffer&>().exports; }
  export_token(export_token const&) = delete;
  export_token& operator=(export_token const&) = delete;
  ~export_token() { --owner_.cast<py_unified_buffer&>().exports; }  // runs with the GIL (Python deallocation)

  [[nodiscard]] py::object const& owner() const noexcept { return owner_; }

 private:
  py::object owner_;
};

/** @brief What `.device` returns: the device copy, current for work on `stream` (whose object it holds). */
struct device_view {
  std::shared_ptr<export_token> token;
  void* data{};
  cuda_stream_view stream;
  py::object stream_owner;

  [[nodiscard]] py_unified_buffer& buffer() const { return token->owner().cast<py_unified_buffer&>(); }
};

/** @brief A NumPy base object that holds an export token: the array keeps the buffer alive and counted. */
py::capsule token_capsule(py::object const& self)
{
  auto* token = new std::shared_ptr<export_token>(std::make_shared<export_token>(self));  // NOLINT: owned by the capsule
  return py::capsule{token, [](void* p) { delete static_cast<std::shared_ptr<export_token>*>(p); }};
}

py::array host_array(py::object const& self, bool writable)
{
  auto& b = self.cast<py_unified_buffer&>();
  bytes_buffer& buffer = b.get();
  void const* data = nullptr;
  {
    py::gil_scoped_release const release;  // may wait for a copy from the device
    data = writable ? static_cast<void const*>(buffer.host().data()) : buffer.host_view().data();
  }
  py::array array{b.dtype, b.shape, {}, data, token_capsule(self)};
  if (!writable) { array.attr("flags").attr("writeable") = false; }
  return array;
}

/// The tag of gpumem.BufferNotAllocatedError (PyDotCompute's name): a ValueError raised by the calls that
/// need data from a buffer that holds none (UNINITIALIZED).
struct buffer_not_allocated_tag {};
PyObject* buffer_not_allocated_type = nullptr;  // owned by the module

void require_allocated(py_unified_buffer const& b, char const* what)
{
  if (b.get().state() != buffer_state::UNINITIALIZED) { return; }
  PyErr_SetString(buffer_not_allocated_type,
                  (std::string{"UnifiedBuffer."} + what +
                   ": the buffer is UNINITIALIZED: it holds no data yet (write it, or allocate() it, first)")
                    .c_str());
  throw py::error_already_set();
}

py::module_ numpy() { return py::module_::import("numpy"); }

[[nodiscard]] bool same_dtype(py::dtype const& a, py::dtype const& b)
{
  int const equal = PyObject_RichCompareBool(a.ptr(), b.ptr(), Py_EQ);
  if (equal < 0) { throw py::error_already_set(); }
  return equal == 1;
}

/**
 * @brief Runs `body`, reporting a NumPy error (a conversion that failed) as one naming `argument` of `what`:
 * a TypeError stays one, any other becomes a ValueError.
 */
template <class Body>
decltype(auto) naming_argument(char const* what, char const* argument, Body&& body)
{
  try {
    return std::forward<Body>(body)();
  } catch (py::error_already_set const& e) {
    std::string const message = std::string{"UnifiedBuffer."} + what + ": " + argument + ": " + std::string{py::str(e.value())};
    if (e.matches(PyExc_TypeError)) { throw py::type_error(message); }
    throw py::value_error(message);
  }
}

/// Writes `source` into `destination` as NumPy's copyto() does (broadcasting, casting="same_kind").
void numpy_copy(py::handle destination, py::handle source)
{
  numpy().attr("copyto")(destination, source, py::arg("casting") = "same_kind");
}

/**
 * @brief Runs body(buffer, stream) with the GIL released, then records the stream the buffer is on (also
 * when the body throws: it may have moved the buffer before failing).
 */
template <class Body>
decltype(auto) on_stream(py_unified_buffer& b, held_stream const& stream, Body&& body)
{
  bytes_buffer& buffer = b.get();
  struct tracker {
    py_unified_buffer& b;
    held_stream const& stream;
    ~tracker() { b.track_stream(stream); }  // with the GIL: the release below has ended
  } const track{b, stream};
  py::gil_scoped_release const release;
  return std::forward<Body>(body)(buffer, stream.view);
}

/// The device copy, current for work on `stream` (copies host -> device when needed).
device_view device_of(py::object const& self, py::handle stream)
{
  auto& b = self.cast<py_unified_buffer&>();
  held_stream const s = hold_stream(stream);
  void* const data = on_stream(b, s, [](bytes_buffer& buffer, cuda_stream_view on) { return buffer.device(on); });
  return device_view{std::make_shared<export_token>(self), data, s.view, s.owner};
}

py::dict cuda_array_interface(device_view const& view)
{
  py_unified_buffer const& b = view.buffer();
  py::dict cai;
  cai["shape"] = py::tuple(py::cast(b.shape));
  cai["typestr"] = b.dtype.attr("str");
  cai["data"] = py::make_tuple(to_int(view.data), false);
  cai["strides"] = py::none();
  cai["version"] = 3;
  // The data are ready on the view's stream (protocol v3: a consumer synchronises with it); the default
  // stream is reported as 1 (legacy), as the protocol asks, never 0.
  auto const handle = to_int(view.stream.value());
  cai["stream"] = handle == 0 ? py::int_(1) : py::int_(handle);
  return cai;
}

std::pair<std::int32_t, std::int32_t> dlpack_device(device_view const& view)
{
  return dlpack_device_of(view.buffer().get().storage().device_id().value());
}

unified_options make_options(bool pinned, py::handle spill)
{
  unified_options options;
  options.pinned = pinned;
  options.spill = spill_of(spill);
  return options;
}

registration const unified{binding_order::unified, "unified", [](py::module_& m) {
  static py::exception<buffer_not_allocated_tag> const not_allocated(m, "BufferNotAllocatedError", PyExc_ValueError);
  not_allocated.doc() = "A UnifiedBuffer that holds no data yet (UNINITIALIZED) was read or marked dirty. A ValueError.";
  buffer_not_allocated_type = not_allocated.ptr();

  py::enum_<buffer_state>(m, "BufferState", "Which copy of a UnifiedBuffer holds the current data.")
    .value("UNINITIALIZED", buffer_state::UNINITIALIZED, "Neither copy holds data yet.")
    .value("HOST_ONLY", buffer_state::HOST_ONLY, "Only the host copy holds the data (there is no device copy).")
    .value("DEVICE_ONLY", buffer_state::DEVICE_ONLY, "Only the device copy holds the data (there is no host copy).")
    .value("SYNCHRONIZED", buffer_state::SYNCHRONIZED, "Both copies exist and are equal.")
    .value("HOST_DIRTY", buffer_state::HOST_DIRTY, "The host copy was written; the device copy is stale or absent.")
    .value("DEVICE_DIRTY", buffer_state::DEVICE_DIRTY,
           "The device copy was written; the host copy is stale or absent.");

  py::class_<device_view>(m, "UnifiedDeviceView", R"doc(The device copy of a UnifiedBuffer, for CuPy, Numba and PyTorch.

It exports __cuda_array_interface__ (v3, with the stream the copy was made current on) and DLPack, and
keeps its buffer alive. A kernel that writes through it must be followed by buffer.mark_device_dirty().)doc")
    .def_property_readonly("__cuda_array_interface__", &cuda_array_interface,
                           "The CUDA Array Interface (version 3) of the device copy.")
    .def_property_readonly("ptr", [](device_view const& v) { return to_int(v.data); }, "The device address (an int).")
    .def_property_readonly("stream", [](device_view const& v) { return to_int(v.stream.value()); },
                           "The stream (cudaStream_t as an int; 0: the default stream) the copy is current on.")
    .def(
      "__dlpack_device__",
      [](device_view const& v) {
        auto const [type, id] = dlpack_device(v);
        return py::make_tuple(type, id);
      },
      "(device type, device id) for DLPack: (2, device) on the cuda backend; (1, 0) on the host backend.")
    .def(
      "__dlpack__",
      [](py::object const& self_object, py::object const& stream) {
        auto const& view = self_object.cast<device_view const&>();
        auto const device = dlpack_device(view);
        if (!dlpack_consumer_orders(stream, device.first, "UnifiedDeviceView.__dlpack__")) {
          py::gil_scoped_release const release;
          view.stream.synchronize();
        }
        py_unified_buffer const& b = view.buffer();
        std::vector<std::int64_t> shape(b.shape.begin(), b.shape.end());
        return make_dlpack_capsule(self_object, view.data, std::move(shape), dlpack_dtype_of(b.dtype), device);
      },
      py::arg("stream") = py::none(),
      "A DLPack capsule of the device copy with the buffer's shape and dtype, keeping the buffer alive until "
      "the consumer releases it. `stream`: the consumer's stream (None for a CPU consumer; -1: no "
      "synchronisation); otherwise the view's stream is waited for first.");

  py::class_<py_unified_buffer>(m, "UnifiedBuffer", R"doc(
An array with a host copy and a device copy that knows which is current (gpumem::unified_buffer).

UnifiedBuffer(shape, dtype="float32", pinned=False, spill=None): nothing is allocated until first use
(state UNINITIALIZED). pinned: the host copy is pinned (syncs are single asynchronous copies); spill: a
SpillManager whose budget the device copy counts against, and which may give it up when the budget is full.
.host        a NumPy array on the host copy; taking it is a host write access (the state becomes HOST_DIRTY)
.host_view   a read-only NumPy array on the host copy (never dirties anything)
.device      the device copy (copies host -> device if needed) with __cuda_array_interface__ and DLPack;
             after a kernel wrote it, call mark_device_dirty()
.state       a BufferState
)doc")
    .def(py::init([](py::object const& shape, py::object const& dtype, checked<bool, "pinned"> pinned,
                     py::object const& spill) {
           auto dims = to_shape(shape);
           auto type = element_dtype(dtype, "UnifiedBuffer");
           std::size_t const bytes = shape_bytes(dims, type);
           unified_options const options = make_options(pinned.value, spill);
           auto buffer = std::make_unique<bytes_buffer>(bytes, options);
           return py_unified_buffer{spill, py::object{}, std::move(dims), std::move(type), std::move(buffer), 0};
         }),
         py::arg("shape"), py::arg("dtype") = py::str("float32"), py::arg("pinned") = false,
         py::arg("spill") = py::none(),
         "Makes an UNINITIALIZED buffer of `shape` (an int or a tuple) and `dtype`. Raises ValueError for a "
         "negative extent, TypeError for a dtype that holds Python objects.")
    .def_property_readonly("shape", [](py_unified_buffer const& b) { return py::tuple(py::cast(b.shape)); },
                           "The shape (a tuple).")
    .def_property_readonly("dtype", [](py_unified_buffer const& b) { return b.dtype; }, "The NumPy dtype.")
    .def_property_readonly("size", &py_unified_buffer::count, "The number of elements.")
    .def_property_readonly("nbytes", [](py_unified_buffer const& b) { return b.get().size_bytes(); },
                           "The size in bytes.")
    .def_property_readonly("pinned", [](py_unified_buffer const& b) { return b.get().is_pinned(); },
                           "Whether the host copy is in pinned memory.")
    .def_property_readonly("state", [](py_unified_buffer const& b) { return b.get().state(); },
                           "Which copy is current: a BufferState.")
    .def_property_readonly("released", [](py_unified_buffer const& b) { return !b.buffer; },
                           "True once the buffer was released to a pool (it can no longer be used).")
    .def_property_readonly("exports", [](py_unified_buffer const& b) { return b.exports; },
                           "How many NumPy arrays, device views and DLPack capsules over this buffer are alive.")
    .def_property_readonly("host", [](py::object const& self) { return host_array(self, true); },
                           "A writable NumPy array on the host copy (a host write access: the state becomes HOST_DIRTY).")
    .def_property_readonly("host_view", [](py::object const& self) { return host_array(self, false); },
                           "A read-only NumPy array on the host copy (copies device -> host if needed).")
    .def_property_readonly("device", [](py::object const& self) { return device_of(self, py::none()); },
                           "The device copy on the default stream (see device_for(stream)).")
    .def("device_for", &device_of, py::arg("stream"), "The device copy, current for work on `stream`.")
    .def(
      "to_numpy",
      [](py::object const& self) {
        require_allocated(self.cast<py_unified_buffer const&>(), "to_numpy");
        return host_array(self, false).attr("copy")();
      },
      "A copy of the current data as a new NumPy array (copies device -> host if needed). Raises "
      "BufferNotAllocatedError when UNINITIALIZED.")
    .def(
      "sync_to_device",
      [](py_unified_buffer& b, py::handle stream) {
        on_stream(b, hold_stream(stream), [](bytes_buffer& buffer, cuda_stream_view s) { buffer.sync_to_device(s); });
      },
      py::arg("stream") = py::none(), "Makes the device copy current (copies host -> device if it is older).")
    .def(
      "sync_to_host",
      [](py_unified_buffer& b, py::handle stream) {
        on_stream(b, hold_stream(stream), [](bytes_buffer& buffer, cuda_stream_view s) { buffer.sync_to_host(s); });
      },
      py::arg("stream") = py::none(), "Makes the host copy current (copies device -> host if it is older).")
    .def(
      "synchronize",
      [](py_unified_buffer& b, py::handle stream) {
        on_stream(b, hold_stream(stream), [](bytes_buffer& buffer, cuda_stream_view s) { buffer.synchronize(s); });
      },
      py::arg("stream") = py::none(),
      "Makes both copies current: HOST_DIRTY copies host -> device, DEVICE_DIRTY device -> host "
      "(SYNCHRONIZED); a no-op in the other states.")
    .def(
      "mark_host_dirty",
      [](py_unified_buffer& b) {
        require_allocated(b, "mark_host_dirty");
        b.get().mark_host_dirty();
      },
      "Declares that the host copy was written: HOST_ONLY, SYNCHRONIZED -> HOST_DIRTY. Raises "
      "BufferNotAllocatedError when UNINITIALIZED, ValueError where it would lose a device write "
      "(DEVICE_ONLY, DEVICE_DIRTY).")
    .def(
      "mark_device_dirty",
      [](py_unified_buffer& b) {
        require_allocated(b, "mark_device_dirty");
        b.get().mark_device_dirty();
      },
      "Declares that a kernel wrote the device copy: DEVICE_ONLY, SYNCHRONIZED -> DEVICE_DIRTY. Raises "
      "BufferNotAllocatedError when UNINITIALIZED, ValueError where it would lose a host write (HOST_ONLY, "
      "HOST_DIRTY).")
    .def(
      "allocate",
      [](py::object const& self, checked<bool, "host"> host, checked<bool, "device"> device, py::handle stream) {
        auto& b = self.cast<py_unified_buffer&>();
        on_stream(b, hold_stream(stream), [host = host.value, device = device.value](bytes_buffer& buffer,
                                                                                      cuda_stream_view s) {
          buffer.allocate(host, device, s);
        });
        return self;
      },
      py::kw_only(), py::arg("host") = true, py::arg("device") = true, py::arg("stream") = py::none(),
      "Allocates the copies asked for now; returns the buffer. From UNINITIALIZED the state becomes "
      "SYNCHRONIZED (both: the same indeterminate contents), HOST_ONLY or DEVICE_ONLY; a buffer holding data "
      "keeps it and its state. Raises ValueError when neither copy is asked for.")
    .def_property_readonly("is_allocated", [](py_unified_buffer const& b) { return b.get().is_allocated(); },
                           "Whether the buffer holds data or allocated copies for it (state != UNINITIALIZED).")
    .def(
      "free",
      [](py_unified_buffer& b) {
        bytes_buffer& buffer = b.get();
        if (b.exports != 0) {
          throw py::value_error("UnifiedBuffer.free: " + std::to_string(b.exports) +
                                " NumPy array(s), device view(s) or DLPack capsule(s) still use this buffer's "
                                "memory; drop them first");
        }
        py::gil_scoped_release const release;
        buffer.free();
      },
      "Frees both copies: UNINITIALIZED (the next access allocates again). Raises ValueError while arrays, "
      "views or capsules of the buffer are alive.")
    .def(
      "fill",
      [](py::object const& self, py::handle value, py::handle stream) {
        auto& b = self.cast<py_unified_buffer&>();
        py::array const scalar =
          naming_argument("fill", "value", [&] { return py::array{numpy().attr("asarray")(value, b.dtype)}; });
        if (scalar.ndim() != 0) { throw_wrong_type("value", "a scalar", value); }
        auto const* first = static_cast<unsigned char const*>(scalar.data());
        std::vector<unsigned char> const pattern(first, first + scalar.itemsize());
        on_stream(b, hold_stream(stream), [&pattern](bytes_buffer& buffer, cuda_stream_view s) {
          buffer.storage().fill(pattern.data(), pattern.size(), s);
        });
        return self;
      },
      py::arg("value"), py::arg("stream") = py::none(),
      "Sets every element of the device copy to `value` (converted to the dtype as NumPy converts it): "
      "DEVICE_ONLY or DEVICE_DIRTY. Returns the buffer.")
    .def(
      "copy_to",
      [](py::object const& self, py::handle destination, py::handle stream) {
        auto& b = self.cast<py_unified_buffer&>();
        require_allocated(b, "copy_to");
        if (!py::isinstance<py::array>(destination)) { throw_wrong_type("destination", "a NumPy array", destination); }
        auto out = py::reinterpret_borrow<py::array>(destination);
        bool const direct = same_dtype(out.dtype(), b.dtype) && static_cast<std::size_t>(out.size()) == b.count() &&
                            out.writeable() && (out.flags() & py::array::c_style) != 0;
        py::array target = direct ? out : py::array{b.dtype, b.shape};
        std::span<std::byte> const span{static_cast<std::byte*>(target.mutable_data()), b.get().size_bytes()};
        on_stream(b, hold_stream(stream), [span](bytes_buffer& buffer, cuda_stream_view s) { buffer.copy_to(span, s); });
        if (!direct) {
          naming_argument("copy_to", "destination", [&] { numpy_copy(out, target); });
        }
      },
      py::arg("destination"), py::arg("stream") = py::none(),
      "Copies the current data into a NumPy array (as NumPy's copyto() writes: broadcasting, "
      "casting=\"same_kind\"); the state is unchanged. Raises BufferNotAllocatedError when UNINITIALIZED.")
    .def(
      "__getitem__",
      [](py::object const& self, py::handle key) {
        require_allocated(self.cast<py_unified_buffer const&>(), "__getitem__");
        return py::object{host_array(self, false)[key]};
      },
      py::arg("key"),
      "buf[key]: the host copy indexed as NumPy indexes (a read access: copies device -> host if needed; "
      "slices are read-only views). Raises BufferNotAllocatedError when UNINITIALIZED.")
    .def(
      "__setitem__",
      [](py::object const& self, py::handle key, py::handle value) { host_array(self, true)[key] = value; },
      py::arg("key"), py::arg("value"),
      "buf[key] = value: writes the host copy (a host write access: the state becomes HOST_DIRTY).")
    .def(
      "copy_from",
      [](py_unified_buffer& b, py::object const& source, py::handle stream) {
        std::size_t const size = b.get().size_bytes();
        py::array array = py::array::ensure(source, py::array::c_style);
        if (!array) {
          PyErr_Clear();
          throw_wrong_type("source", "array-like (a NumPy array or what numpy.asarray takes)", source);
        }
        refuse_object_dtype(array.dtype(), "UnifiedBuffer.copy_from: source");
        if (!same_dtype(array.dtype(), b.dtype)) {
          py::array result{b.dtype, b.shape};
          naming_argument("copy_from", "source", [&] { numpy_copy(result, array); });
          array = result;
        }
        auto const bytes = static_cast<std::size_t>(array.nbytes());
        if (bytes != size) {
          throw py::value_error("UnifiedBuffer.copy_from: the source has " + std::to_string(bytes) +
                                " bytes, the buffer " + std::to_string(size));
        }
        std::span<std::byte const> const span{static_cast<std::byte const*>(array.data()), bytes};
        on_stream(b, hold_stream(stream), [span](bytes_buffer& buffer, cuda_stream_view s) { buffer.copy_from(span, s); });
      },
      py::arg("source"), py::arg("stream") = py::none(),
      "Copies a host array into the device copy: DEVICE_ONLY or DEVICE_DIRTY. The same dtype: the same "
      "number of elements, in C order; another dtype: converted as NumPy's copyto() converts (broadcasting, "
      "casting=\"same_kind\"). Arrays that hold Python objects are refused.")
    .def(
      "zeros",
      [](py::object const& self, py::handle stream) {
        on_stream(self.cast<py_unified_buffer&>(), hold_stream(stream),
                  [](bytes_buffer& buffer, cuda_stream_view s) { buffer.zeros(s); });
        return self;
      },
      py::arg("stream") = py::none(), "Sets every byte of the device copy to zero. Returns the buffer.")
    .def(
      "__len__", [](py_unified_buffer const& b) { return b.shape.empty() ? py::ssize_t{1} : b.shape[0]; },
      "The first extent (1 for a 0-d buffer).")
    .def("__repr__", [](py_unified_buffer const& b) {
      std::string const state = b.buffer ? std::string{to_string(b.buffer->state())} : std::string{"released"};
      return "UnifiedBuffer(shape=" + std::string{py::str(py::tuple(py::cast(b.shape)))} + ", dtype=" +
             std::string{py::str(b.dtype.attr("name"))} + ", state=" + state + ")";
    });
}};

}  // namespace
}  // namespace gpumem::python
