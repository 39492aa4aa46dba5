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
    payload.callback(payload.stream, 0, payload.arg);  // 0: cudaSuccess (launch_host_func reports no status)
  } catch (py::error_already_set& e) {
    e.discard_as_unraisable("gpumem.cuda.Stream.add_callback's callback");
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

/** @brief A Graph: the captured graph and the Python objects of the callbacks captured into it. */
struct py_graph {
  graph captured;
  std::shared_ptr<payload_list> payloads{std::make_shared<payload_list>()};
};

/** @brief Streams that a Stream object is capturing, by handle (so ExternalStream.add_callback finds them). */
std::unordered_map<cudaStream_t, py_graph*>& capturing_graphs()
{
  static auto* const graphs = new std::unordered_map<cudaStream_t, py_graph*>{};  // guarded by the GIL
  return *graphs;
}

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

void set_device(int id)
{
  set_current_cuda_device(cuda_device_id{id});
}

void bind_devices(py::module_& m)
{
  py::class_<py_device>(m, "Device", R"doc(A CUDA device, CuPy's cupy.cuda.Device.

Device(device=None): None is the calling thread's current device; an int or a Device names one. Raises
ValueError when the device does not exist (CuPy raises only on first use). Under the host backend the
devices are the emulated ones (GPUMEM_HOST_DEVICES, default 1).

``with Device(1):`` makes device 1 current for the block, then restores the device that was current
before (per thread; blocks nest).)doc")
    .def(py::init([](py::object const& device) {
           if (device.is_none()) { return py_device{get_current_cuda_device().value()}; }
           int const id =
             py::isinstance<py_device>(device) ? device.cast<py_device>().id : convert_argument<int>(device, "device");
           check_device_id(cuda_device_id{id});
           return py_device{id};
         }),
         py::arg("device") = py::none())
    .def_property_readonly("id", [](py_device const& d) { return d.id; }, "The device ordinal (an int).")
    .def(
      "use", [](py_device const& d) { set_device(d.id); },
      "Makes this device current for the calling thread (no restoring; see `with`).")
    .def(
      "synchronize",
      [](py_device const& d) {
        py::gil_scoped_release const release;
        cuda_set_device_raii const guard{cuda_device_id{d.id}};
        synchronize_device();
      },
      "Blocks until all work on this device has completed (the GIL is released while waiting).")
    .def_property_readonly(
      "compute_capability",
      [](py_device const& d) {
        auto const p = get_device_properties(cuda_device_id{d.id});
        return std::to_string(p.compute_capability_major) + std::to_string(p.compute_capability_minor);
      },
      "The compute capability as CuPy writes it: \"90\" for 9.0; \"00\" under the host backend.")
    .def_property_readonly(
      "mem_info",
      [](py_device const& d) {
        auto const info = available_device_memory(cuda_device_id{d.id});
        return py::make_tuple(info.free, info.total);
      },
      "(free, total) bytes of the device, as cudaMemGetInfo reports them.")
    .def_property_readonly(
      "name", [](py_device const& d) { return get_device_properties(cuda_device_id{d.id}).name; },
      "The device's name, e.g. \"NVIDIA H100 80GB HBM3\" (\"gpumem host device 0\" under the host backend).")
    .def_property_readonly(
      "pci_bus_id", [](py_device const& d) { return get_device_properties(cuda_device_id{d.id}).pci_bus_id; },
      "The PCI bus id, e.g. \"0000:3b:00.0\"; empty under the host backend.")
    .def_property_readonly(
      "total_memory", [](py_device const& d) { return get_device_properties(cuda_device_id{d.id}).total_memory; },
      "Total bytes of device memory (the configured capacity under the host backend).")
    .def_property_readonly(
      "multi_processor_count",
      [](py_device const& d) { return get_device_properties(cuda_device_id{d.id}).multiprocessor_count; },
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
    .def("__int__", [](py_device const& d) { return d.id; })
    .def("__index__", [](py_device const& d) { return d.id; })
    .def("__hash__", [](py_device const& d) { return py::hash(py::int_(d.id)); })
    .def("__eq__",
         [](py_device const& d, py::object const& other) -> py::object {
           if (!py::isinstance<py_device>(other)) { return py::reinterpret_borrow<py::object>(Py_NotImplemented); }
           return py::bool_(other.cast<py_device>().id == d.id);
         })
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

void bind_graphs(py::module_& m)
{
  py::class_<py_graph>(m, "Graph", R"doc(A CUDA graph made by stream capture, CuPy's cupy.cuda.graph.Graph.

Made by Stream.end_capture(), not constructed directly::

    stream.begin_capture()
    ...  # work on `stream`: copies, fills, event records, add_callback
    graph = stream.end_capture()
    graph.launch()   # runs the captured work again, as often as wanted

The Graph keeps the captured callbacks' Python objects alive while it exists and while a launch runs.)doc")
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
      "Runs the graph's work in order on `stream` (None: the current device's current stream). Does not wait.")
    .def("__repr__", [](py_graph const& g) {
      return "<gpumem.cuda.Graph " + hex(g.captured.exec()) + ">";
    });
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
      "device_id", [](py_stream const& s) { return device_of(s); }, "The device the stream belongs to.")
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
      "done", [](py_stream const& s) { return s.view().is_idle(); },
      "True when all work submitted so far has completed (cudaStreamQuery). Raises CUDARuntimeError while capturing.")
    .def(
      "query", [](py_stream const& s) { return s.view().is_idle(); }, "As `done`.")
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
        if (PyCallable_Check(callback.ptr()) == 0) { throw py::type_error("add_callback: `callback` must be callable"); }
        drain_graveyard();
        auto const& s = self.cast<py_stream const&>();
        auto payload = std::make_unique<callback_payload>(callback_payload{callback, self, arg});
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
        expects(s.capture != nullptr, "end_capture() without begin_capture() on this stream");
        std::unique_ptr<py_graph> captured = std::move(s.capture);
        capturing_graphs().erase(s.handle);
        captured->captured.capture_end();
        return captured;
      },
      "Ends the capture and returns the instantiated Graph.")
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

  py::class_<py_external_stream, py_stream>(m, "ExternalStream", R"doc(A stream created elsewhere (CuPy's
cupy.cuda.ExternalStream): ExternalStream(ptr, device_id=-1) wraps the cudaStream_t `ptr` without owning it;
destroying the object leaves the stream alone, and whoever created it must keep it alive while this is used.
device_id -1 means the current device.)doc")
    .def(py::init([](py::handle ptr, checked<int, "device_id"> device_id_argument) {
           int const device_id = device_id_argument.value;
           if (device_id >= 0) { static_cast<void>(device_argument(py::int_(device_id), "device_id")); }
           auto stream = std::make_unique<py_external_stream>();
           stream->handle = to_stream(ptr, "ptr").value();
           stream->device = device_id < 0 ? get_current_cuda_device().value() : device_id;
           return stream;
         }),
         py::arg("ptr"), py::arg("device_id") = -1);

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
