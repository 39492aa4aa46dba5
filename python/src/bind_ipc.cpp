// Device memory shared between processes (gpumem/ipc.hpp), from Python:
//   handle = buffer.export()           # DeviceBuffer.export (bind_device_buffer.cpp): a gpumem.IpcHandle
//   data = pickle.dumps(handle)        # or bytes(handle); send it to another process by any means
//   with gpumem.import_buffer(handle) as imported:    # a gpumem.ImportedBuffer, mapped until closed
//       imported.copy_to_host() / imported.__cuda_array_interface__ / imported.ptr
//
// IpcHandle is a value (its bytes), checked when made from bytes: a truncated, corrupted or forged handle is a
// ValueError, never a crash. ImportedBuffer refuses every access once closed (ValueError), and its memory
// is unmapped when it is closed or collected; a consumer that still holds its pointer (a CuPy array made
// through __cuda_array_interface__ without a copy) must not use it after that, as with any borrowed pointer.
// The GIL is released around imports, copies and close() (which waits for the device).
#include "arguments.hpp"
#include "conversions.hpp"
#include "host_buffer.hpp"
#include "registry.hpp"

#include <gpumem/error.hpp>
#include <gpumem/ipc.hpp>
#include <gpumem/transfer.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace gpumem::python {
namespace {

/** @brief An ImportedBuffer: the mapping, closed explicitly, at the end of a with block, or when collected. */
struct py_imported_buffer {
  ipc::imported_memory memory;
  std::size_t size{};  // kept after close, for repr

  [[nodiscard]] void* open_data(char const* what) const
  {
    if (!memory.is_open()) { throw py::value_error(std::string{"ImportedBuffer."} + what + ": the buffer is closed"); }
    return memory.data();
  }
};

/** @brief The bytes of a bytes-like object (bytes, bytearray, memoryview). @throws py::type_error naming `what`. */
std::string bytes_argument(py::handle data, char const* what)
{
  if (!PyObject_CheckBuffer(data.ptr()) || py::isinstance<py::str>(data)) {
    throw py::type_error(std::string{what} + " must be bytes (or a bytes-like object), not " + type_name(data));
  }
  py::memoryview const view{py::reinterpret_borrow<py::object>(data)};
  return py::bytes(view.attr("tobytes")());
}

ipc::memory_handle handle_argument(py::handle handle)
{
  if (py::isinstance<ipc::memory_handle>(handle)) { return handle.cast<ipc::memory_handle>(); }
  if (PyObject_CheckBuffer(handle.ptr()) != 0) { return ipc::memory_handle::from_bytes(bytes_argument(handle, "handle")); }
  throw py::type_error("import_buffer: handle must be a gpumem.IpcHandle or its bytes, not " + type_name(handle));
}

registration const ipc_bindings{binding_order::ipc, "ipc", [](py::module_& m) {
  py::class_<ipc::memory_handle> handle_class(
    m, "IpcHandle",
    "A handle to device memory exported by DeviceBuffer.export(), to map in another process with "
    "gpumem.import_buffer(). A value: picklable, and bytes(handle) / IpcHandle.from_bytes(data) convert it. "
    "It stays importable while the exporting buffer lives (and is not resized); imports made before stay "
    "mapped until closed.");
  handle_class.def_static(
    "from_bytes",
    [](py::handle data) { return ipc::memory_handle::from_bytes(bytes_argument(data, "data")); }, py::arg("data"),
    "The handle whose bytes these are; ValueError naming what is wrong for bytes that are not a whole, intact "
    "gpumem handle.");
  handle_class.def(
    "to_bytes", [](ipc::memory_handle const& self) { return py::bytes(self.to_bytes()); }, "The handle's bytes.");
  handle_class.def("__bytes__", [](ipc::memory_handle const& self) { return py::bytes(self.to_bytes()); });
  handle_class.def_property_readonly(
    "kind", [](ipc::memory_handle const& self) { return std::string{ipc::to_string(self.kind())}; },
    "'vmm' (pieces of a VMM pool, passed as file descriptors) or 'cuda_ipc' (a cudaMalloc allocation's CUDA IPC "
    "handle).");
  handle_class.def_property_readonly("size", &ipc::memory_handle::size, "The bytes shared.");
  handle_class.def_property_readonly("nbytes", &ipc::memory_handle::size, "The bytes shared (as size).");
  handle_class.def_property_readonly("device", &ipc::memory_handle::device, "The device's ordinal in the exporting process.");
  handle_class.def_property_readonly("exporter_pid", &ipc::memory_handle::exporter_pid, "The exporting process's id.");
  handle_class.def("__eq__", [](ipc::memory_handle const& self, py::handle other) {
    return py::isinstance<ipc::memory_handle>(other) && other.cast<ipc::memory_handle const&>().to_bytes() == self.to_bytes();
  });
  handle_class.def("__hash__", [](ipc::memory_handle const& self) { return py::hash(py::bytes(self.to_bytes())); });
  handle_class.def("__repr__", [](ipc::memory_handle const& self) { return "<gpumem.IpcHandle: " + self.describe() + ">"; });
  handle_class.def(py::pickle([](ipc::memory_handle const& self) { return py::make_tuple(py::bytes(self.to_bytes())); },
                        [](py::tuple const& state) {
                          if (state.size() != 1 || !py::isinstance<py::bytes>(state[0])) {
                            throw py::value_error("IpcHandle: a pickled state must be a 1-tuple of bytes");
                          }
                          return ipc::memory_handle::from_bytes(std::string_view{state[0].cast<py::bytes>()});
                        }));

  py::class_<py_imported_buffer> imported(
    m, "ImportedBuffer",
    "Device memory of another process (gpumem.import_buffer), mapped until close() (or the end of a with block, "
    "or collection). Exports __cuda_array_interface__ (a 1-d uint8 array; the pointer is borrowed: do not use "
    "it after close()).");
  imported.def_property_readonly(
    "ptr", [](py_imported_buffer const& self) { return to_int(self.open_data("ptr")); }, "The first byte's address.");
  imported.def_property_readonly("size", [](py_imported_buffer const& self) { return self.size; }, "The size in bytes.");
  imported.def_property_readonly(
    "nbytes", [](py_imported_buffer const& self) { return self.size; }, "The size in bytes (as size).");
  imported.def_property_readonly(
    "device", [](py_imported_buffer const& self) { return self.memory.device(); },
    "This process's ordinal of the device the memory lives on.");
  imported.def_property_readonly(
    "kind", [](py_imported_buffer const& self) { return std::string{ipc::to_string(self.memory.kind())}; },
    "'vmm' or 'cuda_ipc', as the handle's kind.");
  imported.def_property_readonly(
    "closed", [](py_imported_buffer const& self) { return !self.memory.is_open(); },
    "Whether close() was called (the memory is unmapped then).");
  imported.def(
    "close",
    [](py_imported_buffer& self) {
      py::gil_scoped_release const release;
      self.memory.close();
    },
    "Waits for the device's work, then unmaps the memory. Closing twice does nothing.");
  imported.def("__enter__", [](py::object const& self) { return self; });
  imported.def("__exit__", [](py_imported_buffer& self, py::args const&) {
    py::gil_scoped_release const release;
    self.memory.close();
  });
  imported.def(
    "tobytes",
    [](py_imported_buffer const& self) {
      void const* const source = self.open_data("tobytes");
      py::bytes result{nullptr, self.size};
      char* const out = PyBytes_AS_STRING(result.ptr());
      py::gil_scoped_release const release;
      copy_to_host(out, source, self.size, cuda_stream_view{});
      cuda_stream_view{}.synchronize();
      return result;
    },
    "The contents as bytes (copied on the default stream, which is waited for).");
  imported.def(
    "copy_to_host",
    [](py_imported_buffer const& self) {
      void const* const source = self.open_data("copy_to_host");
      py::object out = py::module_::import("numpy").attr("empty")(self.size, "uint8");
      host_buffer const view{out, host_buffer::access::write, 'C', "ImportedBuffer.copy_to_host"};
      {
        py::gil_scoped_release const release;
        copy_to_host(view.data(), source, self.size, cuda_stream_view{});
        cuda_stream_view{}.synchronize();
      }
      return out;
    },
    "A NumPy uint8 array holding a copy of the contents.");
  imported.def(
    "copy_from_host",
    [](py_imported_buffer& self, py::handle data) {
      void* const target = self.open_data("copy_from_host");
      host_buffer const view{data, host_buffer::access::read, 'C', "ImportedBuffer.copy_from_host: data"};
      if (view.size() > self.size) {
        throw py::value_error("ImportedBuffer.copy_from_host: " + std::to_string(view.size()) +
                              " bytes do not fit in the buffer's " + std::to_string(self.size));
      }
      py::gil_scoped_release const release;
      copy_to_device(target, view.data(), view.size(), cuda_stream_view{});
      cuda_stream_view{}.synchronize();
    },
    py::arg("data"), "Copies the bytes of `data` (any C-contiguous buffer) to the start of the buffer; returns when done.");
  imported.def_property_readonly(
    "__cuda_array_interface__",
    [](py_imported_buffer const& self) {
      py::dict interface;
      interface["shape"] = py::make_tuple(self.size);
      interface["strides"] = py::none();
      interface["typestr"] = "|u1";
      interface["data"] = py::make_tuple(to_int(self.open_data("__cuda_array_interface__")), false);
      interface["version"] = 3;
      interface["stream"] = py::int_(1);
      return interface;
    },
    "The CUDA Array Interface (version 3) of a 1-d uint8 array over the memory (legacy default stream).");
  imported.def("__repr__", [](py_imported_buffer const& self) {
    return "<gpumem.ImportedBuffer " + std::string{ipc::to_string(self.memory.kind())} + " of " +
           std::to_string(self.size) + " bytes on device " + std::to_string(self.memory.device()) +
           (self.memory.is_open() ? "" : ", closed") + ">";
  });

  m.def(
    "import_buffer",
    [](py::handle handle, py::object const& peers) {
      ipc::memory_handle const h = handle_argument(handle);
      std::vector<int> peer_devices;
      if (!peers.is_none()) {
        if (!py::isinstance<py::iterable>(peers) || py::isinstance<py::str>(peers) || PyObject_CheckBuffer(peers.ptr())) {
          throw py::type_error("import_buffer: peers must be a list of device ordinals, not " + type_name(peers));
        }
        for (py::handle const peer : peers) { peer_devices.push_back(device_argument(peer, "peers")); }
      }
      auto result = std::make_unique<py_imported_buffer>();
      result->size = h.size();
      py::gil_scoped_release const release;
      result->memory = ipc::import_memory(h, peer_devices);
      return result;
    },
    py::arg("handle"), py::arg("peers") = py::none(),
    "Maps the device memory that `handle` (a gpumem.IpcHandle, or its bytes) names, exported by another process "
    "(or this one, for memory of a VMM pool), with access for its device and `peers`. Returns an ImportedBuffer. "
    "ValueError for a handle that is corrupted or forged, withdrawn (its buffer was freed), of a process that is "
    "gone, of a device this process cannot see, or of CUDA IPC opened in its own process; CudaError when the "
    "driver refuses.");
}};

}  // namespace
}  // namespace gpumem::python
