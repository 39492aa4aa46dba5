// gpumem._gpumem.cuda, re-exported as gpumem.cuda: CuPy's cupy.cuda shape over gpumem's handles.
//   Device      device.hpp, cuda_device_id.hpp      (a `with` block makes it current, then restores)
//   Stream      cuda_stream.hpp, cuda_stream_view.hpp (a `with` block makes it its device's current stream
//               on the calling thread: one current stream per device and thread, as CuPy keeps them)
//   ExternalStream  a foreign cudaStream_t, not owned
//   Event       event.hpp; get_elapsed_time
//   Graph       graph.hpp, made by Stream.begin_capture() / Stream.end_capture()
//
// Two hazards shape this file; both come from Python callbacks run by the backend (Stream.add_callback):
// - The host function runs on another thread (CUDA's callback thread, or the host backend's stream
//   worker) and takes the GIL. So every call that waits for a stream (synchronize, and destroying an
//   owned stream: the host backend waits for its work there) releases the GIL first, or it would wait for
//   a callback that waits for the GIL.
// - The Python objects a callback holds (the callback, its arg, the Stream) must stay alive until it ran,
//   but must not be released on the worker: the last reference to the Stream would destroy the stream
//   from its own worker thread. They are handed to a "graveyard" that the main thread empties
//   (Py_AddPendingCall) or the next add_callback/synchronize does, always with the GIL held.
// Captured callbacks (during Stream.begin_capture) run once per Graph.launch(), so the Graph owns theirs;
// each launch enqueues, behind the graph's work, a host function that keeps the Graph's objects alive
// until that launch has run.
#include "arguments.hpp"
#include "conversions.hpp"
#include "interpreter.hpp"
#include "registry.hpp"

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/cuda_stream.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/device.hpp>
#include <gpumem/error.hpp>
#include <gpumem/event.hpp>
#include <gpumem/graph.hpp>

#include <pybind11/stl.h>

#include <memory>
#include <new>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gpumem::python {
namespace {

// ---- keeping callbacks' Python objects alive ---------------------------------------------------------

/** @brief What one Stream.add_callback() holds: destroyed only with the GIL held. */
struct callback_payload {
  py::object callback;
  py::object stream;
  py::object arg;
  bool host_func{false};  ///< launch_host_func: callback(arg); add_callback: callback(stream, 0, arg)
};

/** @brief Objects whose last reference may only be dropped with the GIL held. Leaked on purpose at exit. */
struct graveyard {
  std::mutex mutex;
  std::vector<std::shared_ptr<void>> dead;  // guarded by mutex
};

graveyard& the_graveyard()
{
  static auto* const yard = new graveyard{};  // never destroyed: it may hold Python objects after finalisation
  return *yard;
}

/** @brief Releases everything buried so far. @pre the GIL is held. */
void drain_graveyard()
{
  std::vector<std::shared_ptr<void>> dead;
  {
    std::lock_guard const lock{the_graveyard().mutex};
    dead.swap(the_graveyard().dead);
  }
  dead.clear();  // outside the lock: a destructor may release the GIL (an owned Stream does)
}

int drain_pending_call(void* /*unused*/)
{
  drain_graveyard();
  return 0;
}

/** @brief Hands `objects` to the main thread for release. Needs no GIL; never throws. */
void bury(std::shared_ptr<void> objects) noexcept
{
  try {
    std::lock_guard const lock{the_graveyard().mutex};
    the_graveyard().dead.push_back(std::move(objects));
  } catch (...) {  // out of memory: leak the objects rather than release them without the GIL
    static_cast<void>(new (std::nothrow) std::shared_ptr<void>(std::move(objects)));
    return;
  }
  // Py_AddPendingCall needs neither the GIL nor a thread state; if its queue is full, the next
  // add_callback() or synchronize() drains the graveyard instead.
  static_cast<void>(Py_AddPendingCall(&drain_pending_call, nullptr));
}

/** @brief Calls callback(stream, 0, arg) with the GIL; an exception is reported as unraisable. */
void run_callback(callback_payload const& payload) noexcept
{
  if (!python_alive()) { return; }
  py::gil_scoped_acquire const gil;
  try {
    if (payload.host_func) {
      payload.callback(payload.arg);
    } else {
      payload.callback(payload.stream, 0, payload.arg);  // 0: cudaSuccess (launch_host_func reports no status)
    }
  } catch (py::error_already_set& e) {
    e.discard_as_unraisable(payload.host_func ? "gpumem.cuda.Stream.launch_host_func's callback"
                                              : "gpumem.cuda.Stream.add_callback's callback");
  } catch (std::exception const& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    PyErr_WriteUnraisable(payload.callback.ptr());
  }
}

/** @brief The host function of an uncaptured callback: runs once, then gives its objects back. */
void run_once(void* data) noexcept
{
  auto* const payload = static_cast<callback_payload*>(data);
  run_callback(*payload);
  if (python_alive()) { bury(std::shared_ptr<callback_payload>(payload)); }  // else leak: Python is gone
}

/** @brief The host function of a captured callback: its Graph owns the payload. */
void run_captured(void* data) noexcept { run_callback(*static_cast<callback_payload const*>(data)); }

/** @brief Enqueued after a Graph launch: the Graph's objects may go once the launch has run. */
void release_after_launch(void* data) noexcept
{
  auto* const holder = static_cast<std::shared_ptr<void>*>(data);
  if (python_alive()) { bury(std::move(*holder)); }
  delete holder;  // NOLINT(cppcoreguidelines-owning-memory): moved from, or leaked with Python gone
}

// ---- graphs and streams ------------------------------------------------------------------------------

using payload_list = std::vector<std::unique_ptr<callback_payload>>;

struct py_graph;

/** @brief Streams that a Stream or Graph object is capturing, by handle (so ExternalStream.add_callback finds them). */
std::unordered_map<cudaStream_t, py_graph*>& capturing_graphs()
{
  static auto* const graphs = new std::unordered_map<cudaStream_t, py_graph*>{};  // guarded by the GIL
  return *graphs;
}

/**
 * @brief A Graph: the captured graph and the Python objects of the callbacks captured into it. Made by
 * Stream.end_capture(), or by Graph() and its own capture_begin()/capture_end() (then `capture_stream` holds the
 * stream object while capturing).
 */
struct py_graph {
  graph captured;
  std::shared_ptr<payload_list> payloads{std::make_shared<payload_list>()};
  py::object capture_stream;  ///< the Stream being captured by Graph.capture_begin(); empty otherwise

  py_graph() = default;
  py_graph(py_graph const&) = delete;
  py_graph& operator=(py_graph const&) = delete;
  py_graph(py_graph&&) = delete;
  py_graph& operator=(py_graph&&) = delete;
  ~py_graph()
  {
    if (!capture_stream) { return; }
    auto const found = capturing_graphs().find(captured_handle());
    if (found != capturing_graphs().end() && found->second == this) { capturing_graphs().erase(found); }
    captured = graph{};  // abandons the capture (graph::reset), so that the stream is usable again
  }

  [[nodiscard]] cudaStream_t captured_handle() const;
};

/**
 * @brief A Stream: owns a cuda_stream, or names one it does not own (the null and per-thread default
 * streams, ExternalStream). Its destructor releases the GIL while the owned stream is destroyed (the host
 * backend waits there for the stream's work, which may be a callback that needs the GIL).
 */
struct py_stream {
  std::optional<cuda_stream> owned;
  cudaStream_t handle{};
  int device{-1};  // -1: the current device when asked (Stream.null and Stream.ptds, made at import)
  std::unique_ptr<py_graph> capture;  // the Graph being captured between begin_capture and end_capture
  py::object foreign;  // Stream.from_external: the foreign stream object, kept alive while this one lives

  py_stream() = default;
  py_stream(py_stream const&) = delete;
  py_stream& operator=(py_stream const&) = delete;
  py_stream(py_stream&&) = delete;
  py_stream& operator=(py_stream&&) = delete;
  ~py_stream()
  {
    if (capture != nullptr) {
      capturing_graphs().erase(handle);
      capture.reset();  // abandons the capture (graph::reset)
    }
    if (owned && PyGILState_Check() != 0) {
      py::gil_scoped_release const release;
      owned.reset();
    }
  }

  [[nodiscard]] cuda_stream_view view() const noexcept { return cuda_stream_view{handle}; }
};

cudaStream_t py_graph::captured_handle() const { return capture_stream.cast<py_stream const&>().handle; }

/** @brief ExternalStream: a py_stream that never owns (a distinct Python type, as in CuPy). */
struct py_external_stream : py_stream {};

/**
 * @brief The calling thread's current streams, one per device, kept as CuPy keeps them. `with stream:`
 * pushes the stream on its device's stack and makes it that device's current stream; leaving the block pops
 * it and makes the stream below it (or the null stream) current again, also when Stream.use() changed the
 * current stream inside the block. Stream.use() changes only the current stream.
 */
struct current_streams {
  std::vector<py::object> current;             // per device; empty: the null stream
  std::vector<std::vector<py::object>> stacks;  // per device: the streams of the open `with` blocks
  std::vector<int> entered;                     // the device of each open `with` block, innermost last

  current_streams() = default;
  current_streams(current_streams const&) = delete;
  current_streams& operator=(current_streams const&) = delete;
  ~current_streams()
  {
    // Thread exit: no GIL here, so leak what a thread left current or inside a `with` block rather than
    // release it.
    for (auto& stream : current) { static_cast<void>(stream.release()); }
    for (auto& stack : stacks) {
      for (auto& stream : stack) { static_cast<void>(stream.release()); }
    }
  }

  /** @brief Makes room for `device` (a valid ordinal). */
  void reserve(int device)
  {
    auto const needed = static_cast<std::size_t>(device) + 1;
    if (current.size() < needed) {
      current.resize(needed);
      stacks.resize(needed);
    }
  }
};

thread_local current_streams the_current_streams;  // NOLINT: thread-local state is the point

/** @brief Stream.null, created at import and never released (it outlives the interpreter's objects). */
PyObject* null_stream_object = nullptr;  // NOLINT

/** @brief The calling thread's current stream of `device` (a valid ordinal). */
py::object current_stream_of(int device)
{
  current_streams& streams = the_current_streams;
  auto const index = static_cast<std::size_t>(device);
  if (index < streams.current.size() && streams.current[index]) { return streams.current[index]; }
  return py::reinterpret_borrow<py::object>(null_stream_object);
}

py::object current_stream() { return current_stream_of(get_current_cuda_device().value()); }

/** @brief A stream argument where None means the thread's current stream of the current device (CuPy's rule). */
cuda_stream_view stream_or_current(py::handle stream)
{
  return stream.is_none() ? current_stream().cast<py_stream const&>().view() : to_stream(stream);
}

int device_of(py_stream const& s) { return s.device >= 0 ? s.device : get_current_cuda_device().value(); }

/**
 * @brief The device of `s`, which must be the current device (CuPy's rule for making a stream current).
 * @throws gpumem::logic_error naming both devices otherwise.
 */
int check_current_device(py_stream const& s, char const* caller)
{
  int const current = get_current_cuda_device().value();
  int const device = device_of(s);
  expects(device == current, std::string{caller} + ": the stream belongs to device " + std::to_string(device) +
                               ", but device " + std::to_string(current) +
                               " is current; make its device current first (with Device(" + std::to_string(device) +
                               "): ...)");
  return device;
}

/** @brief `lazy_device`: leave the device to be asked later (import must not choose the backend). */
std::unique_ptr<py_stream> make_stream(bool null, bool non_blocking, bool ptds, py::object const& priority,
                                       bool lazy_device = false)
{
  expects(static_cast<int>(null) + static_cast<int>(ptds) <= 1, "Stream(null=True, ptds=True): choose one");
  expects(!(non_blocking && (null || ptds)), "non_blocking applies to created streams, not the null or per-thread stream");
  auto stream = std::make_unique<py_stream>();
  if (!lazy_device) { stream->device = get_current_cuda_device().value(); }
  if (null) {
    stream->handle = nullptr;
  } else if (ptds) {
    stream->handle = cudaStreamPerThread;
  } else {
    int const p = priority.is_none() ? 0 : convert_argument<int>(priority, "priority");
    stream->owned.emplace(non_blocking ? cuda_stream::flags::non_blocking : cuda_stream::flags::sync_default, p);
    stream->handle = stream->owned->value();
  }
  return stream;
}

/** @brief An ExternalStream over `ptr`; device_id -1: unknown (used with the current device). */
std::unique_ptr<py_external_stream> make_external_stream(py::handle ptr, int device_id)
{
  if (device_id >= 0) { static_cast<void>(device_argument(py::int_(device_id), "device_id")); }
  auto stream = std::make_unique<py_external_stream>();
  stream->handle = to_stream(ptr, "ptr").value();
  stream->device = device_id < 0 ? -1 : device_id;
  return stream;
}

capture_mode to_capture_mode(py::handle mode)
{
  if (mode.is_none()) { return capture_mode::relaxed; }  // CuPy's default
  if (py::isinstance<py::int_>(mode)) {
    switch (convert_argument<int>(mode, "mode")) {  // cudaStreamCaptureMode values
      case 0: return capture_mode::global;
      case 1: return capture_mode::thread_local_;
      case 2: return capture_mode::relaxed;
      default: break;
    }
  } else if (py::isinstance<py::str>(mode)) {
    auto const name = mode.cast<std::string>();
    if (name == "global") { return capture_mode::global; }
    if (name == "thread_local") { return capture_mode::thread_local_; }
    if (name == "relaxed") { return capture_mode::relaxed; }
  }
  throw py::value_error("capture mode must be None, \"global\", \"thread_local\", \"relaxed\" or 0, 1, 2");
}

std::string hex(void const* pointer)
{
  std::ostringstream out;
  out << "0x" << std::hex << to_int(pointer);
  return out.str();
}

// ---- devices -----------------------------------------------------------------------------------------

/** @brief A Device: an ordinal, checked on construction. */
struct py_device {
  int id{};
};

thread_local std::vector<int> previous_devices;  // NOLINT: the devices `with Device(n):` blocks replaced

/**
 * @brief Throws what CuPy's runtime raises for a device that does not exist: cuda_error (cudaErrorInvalidDevice),
 * gpumem.CUDARuntimeError in Python.
 */
void existing(py_device const& d)
{
  int const count = get_num_cuda_devices();
  if (d.id < 0 || d.id >= count) {
    throw cuda_error(cudaErrorInvalidDevice, "device " + std::to_string(d.id) + " does not exist: the " +
                                               std::string{to_string(current_backend_kind())} + " backend has " +
                                               std::to_string(count) + (count == 1 ? " device" : " devices") +
                                               " (cudaErrorInvalidDevice)");
  }
}

device_properties properties_of(py_device const& d)
{
  existing(d);
  return get_device_properties(cuda_device_id{d.id});
}

/** @brief A rich comparison of two Devices by id; NotImplemented (a TypeError for <, <=, >, >=) for anything else. */
template <class Compare>
py::object compare(py_device const& d, py::object const& other, Compare&& op)
{
  if (!py::isinstance<py_device>(other)) { return py::reinterpret_borrow<py::object>(Py_NotImplemented); }
  return py::bool_(std::forward<Compare>(op)(d.id, other.cast<py_device const&>().id));
}

void set_device(int id)
{
  existing(py_device{id});
  set_current_cuda_device(cuda_device_id{id});
}

void bind_devices(py::module_& m)
{
  py::class_<py_device>(m, "Device", R"doc(A CUDA device, CuPy's cupy.cuda.Device.

Device(device=None): None is the calling thread's current device; an int or a Device names one. As in CuPy,
a device that does not exist is not an error until it is used: use(), `with`, synchronize() and the queries
raise CUDARuntimeError (cudaErrorInvalidDevice) then. Under the host backend the devices are the emulated ones
(GPUMEM_HOST_DEVICES, default 1). Devices compare (==, <, <=, >, >=) by id, with Devices only.

``with Device(1):`` makes device 1 current for the block, then restores the device that was current
before (per thread; blocks nest).)doc")
    .def(py::init([](py::object const& device) {
           if (device.is_none()) { return py_device{get_current_cuda_device().value()}; }
           return py_device{py::isinstance<py_device>(device) ? device.cast<py_device>().id
                                                              : convert_argument<int>(device, "device")};
         }),
         py::arg("device") = py::none())
    .def_property_readonly("id", [](py_device const& d) { return d.id; }, "The device ordinal (an int).")
    .def(
      "use",
      [](py::object const& self) {
        set_device(self.cast<py_device const&>().id);
        return self;
      },
      "Makes this device current for the calling thread (no restoring; see `with`) and returns it. Raises "
      "CUDARuntimeError (cudaErrorInvalidDevice) for a device that does not exist.")
    .def(
      "synchronize",
      [](py_device const& d) {
        existing(d);
        py::gil_scoped_release const release;
        cuda_set_device_raii const guard{cuda_device_id{d.id}};
        synchronize_device();
      },
      "Blocks until all work on this device has completed (the GIL is released while waiting).")
    .def_property_readonly(
      "compute_capability",
      [](py_device const& d) {
        existing(d);
        auto const p = get_device_properties(cuda_device_id{d.id});
        return std::to_string(p.compute_capability_major) + std::to_string(p.compute_capability_minor);
      },
      "The compute capability as CuPy writes it: \"90\" for 9.0; \"00\" under the host backend.")
    .def_property_readonly(
      "mem_info",
      [](py_device const& d) {
        existing(d);
        auto const info = available_device_memory(cuda_device_id{d.id});
        return py::make_tuple(info.free, info.total);
      },
      "(free, total) bytes of the device, as cudaMemGetInfo reports them.")
    .def_property_readonly(
      "name", [](py_device const& d) { return properties_of(d).name; },
      "The device's name, e.g. \"NVIDIA H100 80GB HBM3\" (\"gpumem host device 0\" under the host backend).")
    .def_property_readonly(
      "pci_bus_id", [](py_device const& d) { return properties_of(d).pci_bus_id; },
      "The PCI bus id, e.g. \"0000:3b:00.0\"; empty under the host backend.")
    .def_property_readonly(
      "total_memory", [](py_device const& d) { return properties_of(d).total_memory; },
      "Total bytes of device memory (the configured capacity under the host backend).")
    .def_property_readonly(
      "multi_processor_count",
      [](py_device const& d) { return properties_of(d).multiprocessor_count; },
      "Streaming multiprocessors (hardware threads under the host backend).")
    .def(
      "__enter__",
      [](py_device const& d) {
        int const previous = get_current_cuda_device().value();
        set_device(d.id);
        previous_devices.push_back(previous);
        return d;
      },
      "Makes this device current; __exit__ restores the previous one.")
    .def(
      "__exit__",
      [](py_device const& /*d*/, py::args const& /*exception*/) {
        expects(!previous_devices.empty(), "Device.__exit__ without __enter__ on this thread");
        int const previous = previous_devices.back();
        previous_devices.pop_back();
        set_current_cuda_device(cuda_device_id{previous});
        return false;
      },
      "Restores the device that was current before __enter__.")
    .def_property_readonly(
      "attributes",
      [](py_device const& d) {
        existing(d);
        py::dict attributes;
        for (auto const& [name, value] : get_device_attributes(cuda_device_id{d.id})) {
          attributes[py::str(name)] = value;
        }
        return attributes;
      },
      "Every cudaDeviceGetAttribute value of the device, a dict keyed by the cudaDeviceAttr name without its "
      "\"cudaDevAttr\" prefix (\"MaxThreadsPerBlock\": 1024, ...), as CuPy's. Under the host backend the same "
      "names with the emulated device's values (0 for what it lacks: it runs no kernels). Raises CUDARuntimeError "
      "for a device that does not exist.")
    .def_static(
      "from_pci_bus_id",
      [](py::object const& pci_bus_id) {
        if (!py::isinstance<py::str>(pci_bus_id)) {
          throw py::type_error("pci_bus_id must be a str, not " + std::string{py::str(py::type::of(pci_bus_id).attr("__name__"))});
        }
        return py_device{get_device_by_pci_bus_id(pci_bus_id.cast<std::string>()).value()};
      },
      py::arg("pci_bus_id"),
      "The Device at PCI bus id `pci_bus_id` (\"0000:3b:00.0\", as Device.pci_bus_id gives it). Raises "
      "CUDARuntimeError: cudaErrorInvalidValue for a malformed id, cudaErrorInvalidDevice when no device is there "
      "(always, under the host backend: its devices have no PCI bus).")
    .def("__int__", [](py_device const& d) { return d.id; })
    .def("__index__", [](py_device const& d) { return d.id; })
    .def("__hash__", [](py_device const& d) { return py::hash(py::int_(d.id)); })
    .def("__eq__",
         [](py_device const& d, py::object const& other) -> py::object {
           if (!py::isinstance<py_device>(other)) { return py::reinterpret_borrow<py::object>(Py_NotImplemented); }
           return py::bool_(other.cast<py_device>().id == d.id);
         })
    .def("__lt__", [](py_device const& d, py::object const& o) { return compare(d, o, [](int a, int b) { return a < b; }); })
    .def("__le__", [](py_device const& d, py::object const& o) { return compare(d, o, [](int a, int b) { return a <= b; }); })
    .def("__gt__", [](py_device const& d, py::object const& o) { return compare(d, o, [](int a, int b) { return a > b; }); })
    .def("__ge__", [](py_device const& d, py::object const& o) { return compare(d, o, [](int a, int b) { return a >= b; }); })
    .def("__repr__", [](py_device const& d) { return "<CUDA Device " + std::to_string(d.id) + ">"; });

  m.def(
    "get_device_id", [] { return get_current_cuda_device().value(); },
    "The calling thread's current device ordinal (cupy.cuda.get_device_id).");
  m.def("get_device_count", &get_num_cuda_devices,
        "How many devices the backend has (cupy.cuda.runtime.getDeviceCount). Never 0 under the host backend.");
  m.def(
    "is_available",
    [] {
      try {
        return get_num_cuda_devices() > 0;
      } catch (cuda_error const&) {  // GPUMEM_BACKEND=cuda with no usable device
        return false;
      }
    },
    R"doc(Whether the backend has a device to run on (cupy.cuda.is_available).

On the cuda backend: True when a CUDA device is usable. On the host backend: what the backend says, which
is True (its emulated devices are usable), so this does NOT mean a GPU exists; ask get_backend() == "cuda"
for that. False when GPUMEM_BACKEND=cuda but no device is usable.)doc");
  m.def("get_local_runtime_version", &runtime_version,
        "The CUDA runtime version gpumem runs with, CUDART_VERSION's encoding (13000 for 13.0); the host backend "
        "reports the runtime it was built against.");
  m.def("get_driver_version", &driver_version,
        "The installed driver's CUDA version (e.g. 13000), or 0 under the host backend.");
  m.def(
    "get_backend", [] { return std::string{to_string(current_backend_kind())}; },
    "\"cuda\" or \"host\": the backend this process runs on (chosen on first use; GPUMEM_BACKEND overrides).");
}

// ---- events ------------------------------------------------------------------------------------------

void bind_events(py::module_& m)
{
  py::class_<event>(m, "Event", R"doc(A CUDA event, CuPy's cupy.cuda.Event.

Event(block=False, disable_timing=False, interprocess=False): `block` makes synchronize() sleep rather
than spin; `disable_timing` makes it cheaper but get_elapsed_time() raises ValueError for it;
`interprocess` requires disable_timing (ValueError otherwise).)doc")
    .def(py::init([](checked<bool, "block"> block, checked<bool, "disable_timing"> disable_timing,
                     checked<bool, "interprocess"> interprocess) {
           auto flags = event_flags::none;
           if (block.value) { flags = flags | event_flags::blocking_sync; }
           if (disable_timing.value) { flags = flags | event_flags::disable_timing; }
           if (interprocess.value) { flags = flags | event_flags::interprocess; }
           return event{flags};
         }),
         py::arg("block") = false, py::arg("disable_timing") = false, py::arg("interprocess") = false)
    .def(
      "record", [](event& e, py::handle stream) { e.record(stream_or_current(stream)); },
      py::arg("stream") = py::none(),
      "Records the event at the current end of `stream`'s work (None: the current device's current stream), replacing "
      "an earlier record.")
    .def(
      "synchronize",
      [](event const& e) {
        py::gil_scoped_release const release;
        e.synchronize();
      },
      "Blocks until the latest record has completed (the GIL is released while waiting).")
    .def("query", &event::query, "True when the latest record has completed, or the event was never recorded.")
    .def_property_readonly("done", &event::query, "As query(): True when the latest record has completed.")
    .def_property_readonly(
      "ptr", [](event const& e) { return to_int(e.value()); }, "The cudaEvent_t handle as an int.")
    .def_property_readonly(
      "block", [](event const& e) { return has_flag(e.flags(), event_flags::blocking_sync); },
      "Whether synchronize() sleeps instead of spinning.")
    .def_property_readonly(
      "disable_timing", [](event const& e) { return has_flag(e.flags(), event_flags::disable_timing); },
      "Whether timing is disabled.")
    .def_property_readonly(
      "interprocess", [](event const& e) { return has_flag(e.flags(), event_flags::interprocess); },
      "Whether the event is shareable between processes.")
    .def("__repr__", [](event const& e) { return "<gpumem.cuda.Event " + hex(e.value()) + ">"; });

  m.def(
    "get_elapsed_time",
    [](checked<event*, "start_event"> start_event, checked<event*, "end_event"> end_event) {
      return get_elapsed_time(*start_event.value, *end_event.value);
    },
    py::arg("start_event"), py::arg("end_event"),
        R"doc(Milliseconds (a float) from `start_event`'s latest record to `end_event`'s.

Both must be recorded and completed (synchronize `end_event` first). Raises ValueError when either has
timing disabled, CUDARuntimeError when either was never recorded or has not completed (cudaErrorNotReady).)doc");
}

// ---- streams and graphs ------------------------------------------------------------------------------

/** @brief The Stream object a `stream=` argument names: None -> the current stream; a Stream or ExternalStream. */
py::object stream_object(py::object const& stream, char const* caller)
{
  if (stream.is_none()) { return current_stream(); }
  if (!py::isinstance<py_stream>(stream)) {
    throw py::type_error(std::string{caller} + ": stream must be None or a gpumem.cuda.Stream, not " +
                         std::string{py::str(py::type::of(stream).attr("__name__"))});
  }
  return stream;
}

void bind_graphs(py::module_& m)
{
  py::class_<py_graph>(m, "Graph", R"doc(A CUDA graph made by stream capture, CuPy's cupy.cuda.graph.Graph.

Made by Stream.end_capture(), as in CuPy, or (a gpumem addition; CuPy's Graph() raises) constructed empty
and filled by its own capture::

    stream.begin_capture()                 # CuPy's way
    ...  # work on `stream`: copies, fills, event records, add_callback, launch_host_func
    graph = stream.end_capture()

    graph = Graph()                        # or: the graph captures
    graph.capture_begin(stream)            # None: the current stream
    ...
    graph.capture_end(stream)
    graph.launch(stream)                   # runs the captured work again, as often as wanted

The Graph keeps the captured callbacks' Python objects alive while it exists and while a launch runs.)doc")
    .def(py::init([] { return std::make_unique<py_graph>(); }),
         "An empty graph, to be filled by capture_begin()/capture_end() (launching it before raises ValueError).")
    .def(
      "capture_begin",
      [](py_graph& g, py::object const& stream, py::handle mode) {
        expects(!g.capture_stream, "Graph.capture_begin(): this graph is already capturing; call capture_end() first");
        py::object s_object = stream_object(stream, "Graph.capture_begin");
        auto const& s = s_object.cast<py_stream const&>();
        g.captured.capture_begin(s.view(), to_capture_mode(mode));
        g.payloads = std::make_shared<payload_list>();  // a launch of the previous graph may still hold the old ones
        g.capture_stream = std::move(s_object);
        capturing_graphs()[s.handle] = &g;
      },
      py::arg("stream") = py::none(), py::arg("mode") = py::none(),
      "Starts capturing `stream`'s work (None: the current stream) into this graph, replacing what it held. "
      "mode as Stream.begin_capture (None: \"relaxed\"). Raises CUDARuntimeError for the null stream or a stream "
      "that is already capturing, ValueError when this graph is capturing.")
    .def(
      "capture_end",
      [](py_graph& g, py::object const& stream) {
        if (!g.capture_stream) {
          throw cuda_error(cudaErrorIllegalState, "Graph.capture_end(): the graph is not capturing (cudaErrorIllegalState)");
        }
        cudaStream_t const handle = g.captured_handle();
        if (!stream.is_none()) {
          py::object const named = stream_object(stream, "Graph.capture_end");
          expects(named.cast<py_stream const&>().handle == handle,
                  "Graph.capture_end(): the graph captures another stream than `stream`");
        }
        capturing_graphs().erase(handle);
        py::object const captured_stream = std::move(g.capture_stream);
        g.capture_stream = py::object{};
        g.captured.capture_end();
      },
      py::arg("stream") = py::none(),
      "Ends the capture begun by capture_begin() and instantiates the graph. `stream`, when given, must be the "
      "captured stream (ValueError otherwise). Raises CUDARuntimeError (cudaErrorIllegalState) when the graph is "
      "not capturing, and as Stream.end_capture when the capture failed.")
    .def(
      "launch",
      [](py_graph const& g, py::handle stream) {
        cuda_stream_view const s = stream_or_current(stream);
        g.captured.launch(s);
        if (!g.payloads->empty()) {
          auto holder = std::make_unique<std::shared_ptr<void>>(g.payloads);
          s.launch_host_func(&release_after_launch, holder.get());
          static_cast<void>(holder.release());  // owned by the host function from here
        }
      },
      py::arg("stream") = py::none(),
      "Runs the graph's work in order on `stream` (None: the current device's current stream). Does not wait. "
      "Raises ValueError for a graph that was never captured.")
    .def("__repr__", [](py_graph const& g) {
      return "<gpumem.cuda.Graph " + hex(g.captured.exec()) + ">";
    });
}

/** @brief add_callback and launch_host_func: `callback` runs on the host once `self`'s earlier work has completed. */
void enqueue_callback(py::object const& self, py::object const& callback, py::object const& arg, bool host_func,
                      char const* caller)
{
  if (PyCallable_Check(callback.ptr()) == 0) { throw py::type_error(std::string{caller} + ": `callback` must be callable"); }
  drain_graveyard();
  auto const& s = self.cast<py_stream const&>();
  auto payload = std::make_unique<callback_payload>(callback_payload{callback, self, arg, host_func});
  if (s.view().is_capturing()) {
    auto const found = capturing_graphs().find(s.handle);
    s.view().launch_host_func(&run_captured, payload.get());
    if (found != capturing_graphs().end()) {
      found->second->payloads->push_back(std::move(payload));
    } else {
      static_cast<void>(payload.release());  // captured by someone else's capture: kept for good
    }
    return;
  }
  s.view().launch_host_func(&run_once, payload.get());
  static_cast<void>(payload.release());  // run_once buries it
}

/** @brief Whether `error` is CUDA's answer to querying a stream that takes part in a capture. */
bool is_capture_refusal(cuda_error const& error) noexcept
{
  return error.code() == cudaErrorStreamCaptureUnsupported || error.code() == cudaErrorStreamCaptureInvalidated ||
         error.code() == cudaErrorStreamCaptureImplicit;
}

/** @brief Stream.done: cudaStreamQuery == cudaSuccess, as CuPy asks it (False while the stream captures). */
bool stream_done(py_stream const& s)
{
  try {
    return s.view().is_idle();
  } catch (cuda_error const& e) {
    if (is_capture_refusal(e)) { return false; }
    throw;
  }
}

void bind_streams(py::module_& m)
{
  auto stream_class = py::class_<py_stream>(m, "Stream", R"doc(A CUDA stream, CuPy's cupy.cuda.Stream.

Stream(null=False, non_blocking=False, ptds=False, priority=0): a new stream on the current device, owned
(destroyed with the object; its submitted work still completes), unless `null` (the legacy default stream,
ptr 0: Stream.null) or `ptds` (the per-thread default stream: Stream.ptds). `non_blocking` streams do not
synchronise implicitly with the legacy default stream. `priority`: lower is higher, clamped into the
device's range.

Each thread has one current stream per device (get_current_stream(device_id)), as in CuPy. ``with stream:``
makes it its device's current stream for the block (its device must be current), and leaving the block makes
the stream of the enclosing block of that device (or the null stream) current again; blocks nest.
Functions of gpumem.cuda taking stream=None use the current device's current stream (Event.record,
Graph.launch, MemoryPointer's *_async copies). Streams compare and hash by their handle (ptr).)doc");
  stream_class
    .def(py::init([](checked<bool, "null"> null, checked<bool, "non_blocking"> non_blocking, checked<bool, "ptds"> ptds,
                     py::object const& priority) {
           return make_stream(null.value, non_blocking.value, ptds.value, priority);
         }),
         py::arg("null") = false, py::arg("non_blocking") = false, py::arg("ptds") = false,
         py::arg("priority") = 0)
    .def_property_readonly(
      "ptr", [](py_stream const& s) { return to_int(s.handle); }, "The cudaStream_t handle as an int (0: the null stream).")
    .def_property_readonly(
      "device_id", [](py_stream const& s) { return s.device; },
      "The device the stream was created on; -1 (as in CuPy) for Stream.null, Stream.ptds and an ExternalStream "
      "made without device_id: they belong to whichever device is current when they are used.")
    .def_property_readonly(
      "priority", [](py_stream const& s) { return s.view().priority(); },
      "The stream's priority (lower is higher).")
    .def(
      "synchronize",
      [](py_stream const& s) {
        {
          py::gil_scoped_release const release;
          s.view().synchronize();
        }
        drain_graveyard();
      },
      "Blocks until all work on the stream has completed (the GIL is released while waiting).")
    .def_property_readonly(
      "done", &stream_done,
      "True when all work submitted so far has completed (cudaStreamQuery == cudaSuccess). False while the "
      "stream takes part in a capture, as in CuPy (CUDA refuses the query there, and the refusal invalidates a "
      "capture that is not in relaxed mode).")
    .def("query", &stream_done, "As `done`.")
    .def_property_readonly(
      "is_non_blocking",
      [](py_stream const& s) { return (cuda_stream_view{s.handle}.flags() & cudaStreamNonBlocking) != 0; },
      "True for a stream made with non_blocking=True (cudaStreamNonBlocking); False for the default flag, the null "
      "and the per-thread default streams.")
    .def(
      "__cuda_stream__", [](py_stream const& s) { return py::make_tuple(0, to_int(s.handle)); },
      "The CUDA stream protocol: (0, ptr), version 0 and the cudaStream_t as an int.")
    .def(
      "record",
      [](py_stream const& s, py::object event_object) {
        if (event_object.is_none()) { event_object = py::cast(event{}); }
        convert_argument<event*>(event_object, "event")->record(s.view());
        return event_object;
      },
      py::arg("event") = py::none(),
      "Records `event` (None: a new Event()) at the current end of this stream's work and returns it.")
    .def(
      "wait_event", [](py_stream const& s, checked<event*, "event"> e) { e.value->wait(s.view()); }, py::arg("event"),
      "Makes later work on this stream wait until `event`'s latest record has completed. Does not block the host.")
    .def(
      "add_callback",
      [](py::object const& self, py::object const& callback, py::object const& arg) {
        enqueue_callback(self, callback, arg, false, "add_callback");
      },
      py::arg("callback"), py::arg("arg"),
      R"doc(Calls callback(stream, status, arg) on the host once all earlier work on this stream has completed.

CuPy's signature; `status` is always 0 (cudaSuccess): it runs through cudaLaunchHostFunc, which reports none.
The callback runs on another thread (CUDA's callback thread, or the host backend's stream worker) with the
GIL acquired; it must NOT call CUDA or gpumem (no synchronize, no allocation, no event or stream calls):
CUDA forbids it and it may deadlock. Exceptions it raises are reported as unraisable (sys.unraisablehook).
The callback, `arg` and the stream are kept alive until it has run. During capture (begin_capture) the
callback becomes part of the Graph and runs at each launch.)doc")
    .def(
      "launch_host_func",
      [](py::object const& self, py::object const& callback, py::object const& arg) {
        enqueue_callback(self, callback, arg, true, "launch_host_func");
      },
      py::arg("callback"), py::arg("arg"),
      R"doc(Calls callback(arg) on the host once all earlier work on this stream has completed (cudaLaunchHostFunc),
CuPy's Stream.launch_host_func. Same rules as add_callback: another thread, the GIL held, no CUDA or gpumem
calls inside; during a capture it becomes part of the Graph and runs at each launch.)doc")
    .def(
      "begin_capture",
      [](py_stream& s, py::handle mode) {
        expects(s.capture == nullptr, "begin_capture(): this stream is already capturing; call end_capture() first");
        auto captured = std::make_unique<py_graph>();
        captured->captured.capture_begin(s.view(), to_capture_mode(mode));
        capturing_graphs()[s.handle] = captured.get();
        s.capture = std::move(captured);
      },
      py::arg("mode") = py::none(),
      "Starts capturing this stream's work into a graph (mode: None = \"relaxed\" as in CuPy, \"global\", "
      "\"thread_local\", or cudaStreamCaptureMode's int). The null stream cannot be captured (CUDARuntimeError).")
    .def(
      "end_capture",
      [](py_stream& s) {
        if (s.capture == nullptr) {
          if (capturing_graphs().contains(s.handle)) {
            throw cuda_error(cudaErrorIllegalState, "end_capture(): the stream is captured by Graph.capture_begin(); "
                                                    "end it with Graph.capture_end() (cudaErrorIllegalState)");
          }
          try {  // CUDA's own error for a stream that is not capturing (cudaErrorIllegalState), as CuPy reports it
            discard_capture(cuda_stream_view{s.handle});
          } catch (cuda_error const& e) {
            throw cuda_error(e.code(), std::string{"end_capture() without begin_capture() on this stream: "} + e.what());
          }
          throw logic_error("end_capture(): the stream's capture was begun elsewhere, not by this Stream object; it "
                            "is ended and its graph discarded");
        }
        std::unique_ptr<py_graph> captured = std::move(s.capture);
        capturing_graphs().erase(s.handle);
        captured->captured.capture_end();
        return captured;
      },
      "Ends the capture and returns the instantiated Graph. Raises CUDARuntimeError (cudaErrorIllegalState, as "
      "CUDA and CuPy) when the stream is not capturing.")
    .def(
      "is_capturing", [](py_stream const& s) { return s.view().is_capturing(); },
      "True while the stream is being captured.")
    .def(
      "use",
      [](py::object const& self) {
        int const device = check_current_device(self.cast<py_stream const&>(), "Stream.use");
        current_streams& streams = the_current_streams;
        streams.reserve(device);
        streams.current[static_cast<std::size_t>(device)] = self;
        return self;
      },
      "Makes this stream its device's current stream on the calling thread (no restoring; see `with`). "
      "Returns self. Raises ValueError when the stream's device is not the current device.")
    .def(
      "__enter__",
      [](py::object const& self) {
        int const device = check_current_device(self.cast<py_stream const&>(), "Stream.__enter__");
        current_streams& streams = the_current_streams;
        streams.reserve(device);
        streams.stacks[static_cast<std::size_t>(device)].push_back(self);
        streams.entered.push_back(device);
        streams.current[static_cast<std::size_t>(device)] = self;
        return self;
      },
      "Makes this stream its device's current stream on the calling thread; __exit__ makes the stream of the "
      "enclosing `with` block of that device (or the null stream) current again. Raises ValueError when the "
      "stream's device is not the current device.")
    .def(
      "__exit__",
      [](py::object const& /*self*/, py::args const& /*exception*/) {
        current_streams& streams = the_current_streams;
        expects(!streams.entered.empty(), "Stream.__exit__ without __enter__ on this thread");
        auto const device = static_cast<std::size_t>(streams.entered.back());
        streams.entered.pop_back();
        std::vector<py::object>& stack = streams.stacks[device];
        stack.pop_back();
        streams.current[device] = stack.empty() ? py::object{} : stack.back();
        return false;
      },
      "Makes the stream of the enclosing `with` block of the stream's device (or the null stream) current again.")
    .def("__hash__", [](py_stream const& s) { return py::hash(py::int_(to_int(s.handle))); })
    .def("__eq__",
         [](py_stream const& s, py::object const& other) -> py::object {
           if (!py::isinstance<py_stream>(other)) { return py::reinterpret_borrow<py::object>(Py_NotImplemented); }
           auto const& o = other.cast<py_stream const&>();
           return py::bool_(o.handle == s.handle);
         })
    .def("__repr__", [](py::object const& self) {
      auto const& s = self.cast<py_stream const&>();
      std::string const type = py::str(py::type::of(self).attr("__name__"));
      std::string const device = s.device >= 0 ? "device " + std::to_string(s.device) : "current device";
      return "<gpumem.cuda." + type + " " + hex(s.handle) + " (" + device + ")>";
    });

  stream_class.def_static(
    "from_external",
    [](py::object const& obj) {
      if (!py::hasattr(obj, "__cuda_stream__")) {
        throw py::attribute_error("Object of type " + std::string{py::str(py::type::of(obj).attr("__name__"))} +
                                  " does not implement the CUDA stream protocol (__cuda_stream__ method)");
      }
      py::object const result = obj.attr("__cuda_stream__")();
      if (!py::isinstance<py::tuple>(result) || py::len(result) != 2) {
        throw py::type_error("__cuda_stream__() must return a 2-tuple of (version, stream_ptr), got " +
                             std::string{py::str(py::type::of(result).attr("__name__"))});
      }
      auto const pair = result.cast<py::tuple>();
      if (!py::isinstance<py::int_>(pair[0]) || !py::isinstance<py::int_>(pair[1])) {
        throw py::type_error("__cuda_stream__() must return (int, int)");
      }
      if (pair[0].cast<py::int_>().cast<long long>() != 0) {
        throw py::value_error("__cuda_stream__() returned unsupported version " + std::string{py::str(pair[0])} +
                              ", only version 0 is supported");
      }
      auto stream = std::make_unique<py_stream>();
      stream->handle = to_stream(pair[1], "stream_ptr").value();
      stream->device = get_current_cuda_device().value();  // the protocol does not say; CuPy takes the current one
      stream->foreign = obj;
      return stream;
    },
    py::arg("obj"),
    R"doc(A Stream over a foreign stream object that implements the CUDA stream protocol (obj.__cuda_stream__()
returns (0, ptr)): not owned; `obj` is kept alive while the Stream lives; its device is the current device
(CuPy's Stream.from_external). Raises AttributeError without __cuda_stream__, TypeError when it does not return
two ints, ValueError for a version other than 0.)doc");

  py::class_<py_external_stream, py_stream>(m, "ExternalStream", R"doc(A stream created elsewhere (CuPy's
cupy.cuda.ExternalStream, deprecated in CuPy 14 in favour of Stream.from_external, and so here: constructing one
warns with DeprecationWarning). ExternalStream(ptr, device_id=-1) wraps the cudaStream_t `ptr` without owning
it; destroying the object leaves the stream alone, and whoever created it must keep it alive while this is used.
device_id -1 means unknown: device_id reads -1 and the stream is used with the device current at the time.)doc")
    .def(py::init([](py::handle ptr, checked<int, "device_id"> device_id_argument) {
           if (PyErr_WarnEx(PyExc_DeprecationWarning,
                            "ExternalStream is deprecated. Use Stream.from_external() instead to interoperate with "
                            "external streams that implement the CUDA stream protocol.",
                            1) != 0) {
             throw py::error_already_set();
           }
           return make_external_stream(ptr, device_id_argument.value);
         }),
         py::arg("ptr"), py::arg("device_id") = -1);
  m.def(
    "_external_stream", [](py::handle ptr, int device_id) { return make_external_stream(ptr, device_id); },
    py::arg("ptr"), py::arg("device_id") = -1,
    "ExternalStream(ptr, device_id) without the deprecation warning, for gpumem's own use.");

  py::object const null_stream = py::cast(make_stream(true, false, false, py::none(), true));
  null_stream_object = null_stream.inc_ref().ptr();  // kept for the life of the process
  stream_class.attr("null") = null_stream;
  stream_class.attr("ptds") = py::cast(make_stream(false, false, true, py::none(), true));

  m.def(
    "get_current_stream",
    [](py::object const& device_id) {
      if (device_id.is_none()) { return current_stream(); }
      return current_stream_of(device_argument(device_id, "device_id"));
    },
    py::arg("device_id") = py::none(),
    "The calling thread's current stream of device `device_id` (None: the current device), set by `with "
    "stream:` or Stream.use(); Stream.null when none (CuPy's cupy.cuda.get_current_stream). Raises "
    "ValueError for a device that does not exist.");
}

registration const cuda_registration{binding_order::cuda, "cuda", [](py::module_& m) {
  py::module_ cuda_module = m.def_submodule(
    "cuda", "CuPy-shaped devices, streams, events and graphs over gpumem's handles; use gpumem.cuda.");
  bind_devices(cuda_module);
  bind_events(cuda_module);
  bind_graphs(cuda_module);
  bind_streams(cuda_module);
}};

}  // namespace
}  // namespace gpumem::python
