// gpumem.cuda's memory API with CuPy's names (cupy.cuda.memory, cupy.cuda.pinned_memory): this file holds
// the registration, the helpers of bind_cuda_memory.hpp, and the plain memory classes:
//   BaseMemory     the base of every device memory object (ptr, size, device_id)
//   Memory         device memory from the current device's current gpumem resource, owned by the object
//   ManagedMemory  managed (unified) memory, owned by the object
//   UnownedMemory  memory someone else owns; the object keeps `owner` alive
// The other classes are in bind_cuda_memory_{pointer,pool,async,allocators,pinned}.cpp; the pure-Python
// parts (the current allocator, asnumpy) in python/gpumem/cuda/memory.py.
#include "bind_cuda_memory.hpp"
#include "registry.hpp"

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/device.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/managed_memory_resource.hpp>
#include <gpumem/prefetch.hpp>

#include <pybind11/detail/internals.h>
#if __has_include(<pybind11/detail/exception_translation.h>)
#include <pybind11/detail/exception_translation.h>
#endif

#include <gpumem/mr/detail/align.hpp>

#include <optional>
#include <sstream>
#include <stdexcept>

namespace gpumem::python {
namespace {

/** @brief Objects of gpumem._gpumem looked up once at import, never released (they live as long as the module). */
struct module_objects {
  PyObject* get_current_stream{};           // gpumem.cuda.get_current_stream
  PyObject* null_stream{};                  // gpumem.cuda.Stream.null (immortal: bind_cuda.cpp keeps it)
  PyObject* device_type{};                  // gpumem.cuda.Device
  PyObject* get_current_device_resource{};  // gpumem.mr.get_current_device_resource
};

module_objects& objects()
{
  static module_objects found;
  return found;
}

std::string hex(std::uintptr_t address)
{
  std::ostringstream out;
  out << "0x" << std::hex << address;
  return out.str();
}

// ---- Memory ----------------------------------------------------------------------------------------------

/**
 * @brief Memory: device memory from a gpumem resource, freed to it (on the legacy default stream) when the
 * object goes. Holds the resource's Python object, so that the resource outlives the memory.
 */
class resource_memory final : public device_memory {
 public:
  resource_memory(std::uintptr_t ptr, std::size_t size, int device, mr::device_memory_resource* resource,
                  py::object resource_object) noexcept
    : device_memory{ptr, size, device}, resource_{resource}, resource_object_{std::move(resource_object)}
  {
  }
  ~resource_memory() override
  {
    if (ptr() == 0) { return; }
    release_on(device_id(), [this] {
      resource_->deallocate(reinterpret_cast<void*>(ptr()), size(), cuda_stream_view{});  // NOLINT(performance-no-int-to-ptr)
    });
  }
  resource_memory(resource_memory const&) = delete;
  resource_memory& operator=(resource_memory const&) = delete;
  resource_memory(resource_memory&&) = delete;
  resource_memory& operator=(resource_memory&&) = delete;

  /** @brief `size` bytes from the current device's current resource (gpumem.mr.get_current_device_resource()). */
  static std::shared_ptr<resource_memory> allocate(std::size_t size)
  {
    int const device = current_device_id();
    py::object resource_object =
      py::reinterpret_borrow<py::object>(objects().get_current_device_resource)();
    auto* const resource = resource_object.cast<mr::device_memory_resource*>();
    void* p = nullptr;
    {
      py::gil_scoped_release const release;
      p = resource->allocate(size, cuda_stream_view{});
    }
    try {
      return std::make_shared<resource_memory>(to_int(p), size, device, resource, std::move(resource_object));
    } catch (...) {  // std::bad_alloc: give the memory back
      resource->deallocate(p, size, cuda_stream_view{});
      throw;
    }
  }

 private:
  mr::device_memory_resource* resource_;
  py::object resource_object_;
};

// ---- ManagedMemory ---------------------------------------------------------------------------------------

mr::managed_memory_resource& managed_resource()
{
  static mr::managed_memory_resource resource;  // stateless
  return resource;
}

/** @brief ManagedMemory: cudaMallocManaged memory, freed when the object goes. */
class managed_memory final : public device_memory {
 public:
  using device_memory::device_memory;
  ~managed_memory() override
  {
    if (ptr() == 0) { return; }
    release_on(device_id(), [this] {
      managed_resource().deallocate(reinterpret_cast<void*>(ptr()), size(), cuda_stream_view{});  // NOLINT(performance-no-int-to-ptr)
    });
  }
  managed_memory(managed_memory const&) = delete;
  managed_memory& operator=(managed_memory const&) = delete;
  managed_memory(managed_memory&&) = delete;
  managed_memory& operator=(managed_memory&&) = delete;

  static std::shared_ptr<managed_memory> allocate(std::size_t size)
  {
    int const device = current_device_id();
    void* p = nullptr;
    {
      py::gil_scoped_release const release;
      p = managed_resource().allocate(size, cuda_stream_view{});
    }
    try {
      return std::make_shared<managed_memory>(to_int(p), size, device);
    } catch (...) {  // std::bad_alloc: give the memory back
      managed_resource().deallocate(p, size, cuda_stream_view{});
      throw;
    }
  }
};

// ---- UnownedMemory ---------------------------------------------------------------------------------------

/** @brief UnownedMemory: memory owned elsewhere; `owner` is kept alive while the object lives. */
class unowned_memory final : public device_memory {
 public:
  unowned_memory(std::uintptr_t ptr, std::size_t size, int device, py::object owner) noexcept
    : device_memory{ptr, size, device}, owner_{std::move(owner)}
  {
  }
  [[nodiscard]] py::object const& owner() const noexcept { return owner_; }

 private:
  py::object owner_;
};

/** @brief The device whose memory `address` is (UnownedMemory without device_id); the current one for host memory. */
int pointer_device(std::uintptr_t address)
{
  if (address == 0) { throw std::runtime_error("UnownedMemory requires explicit device ID for a null pointer."); }
  int const device = get_pointer_attributes(reinterpret_cast<void const*>(address)).device;  // NOLINT
  return device >= 0 ? device : current_device_id();
}

/**
 * @brief A prefetch target as CuPy takes it: None or -2 (cudaInvalidDeviceId) -> `own`; -1 (cudaCpuDeviceId) the
 * host; else a device ordinal, which must exist (cuda_error cudaErrorInvalidDevice otherwise).
 */
int managed_target(py::object const& device_id, int own, char const* name)
{
  if (device_id.is_none()) { return own; }
  int const device = convert_argument<int>(device_id, name);
  if (device == -2) { return own; }
  if (device == cudaCpuDeviceId) { return device; }
  if (device < 0 || device >= get_num_cuda_devices()) {
    throw cuda_error(cudaErrorInvalidDevice, std::string{name} + ": device " + std::to_string(device) + " does not exist");
  }
  return device;
}

std::string describe(device_memory const& memory, py::handle self)
{
  std::string const type = py::str(py::type::of(self).attr("__name__"));
  return "<gpumem.cuda." + type + " " + hex(memory.ptr()) + " size=" + std::to_string(memory.size()) +
         " device=" + std::to_string(memory.device_id()) + ">";
}

}  // namespace

// ---- bind_cuda_memory.hpp's helpers ----------------------------------------------------------------------

std::shared_ptr<device_memory> make_empty_memory(int device)
{
  return std::make_shared<resource_memory>(0, 0, device, nullptr, py::object{});
}

std::size_t limit_bytes(py::handle size, py::handle fraction, int device)
{
  if (!size.is_none() && !fraction.is_none()) { throw py::value_error("size and fraction cannot be specified at one time"); }
  if (!size.is_none()) {
    if (PyIndex_Check(size.ptr()) != 0 && PyObject_RichCompareBool(size.ptr(), py::int_(0).ptr(), Py_LT) == 1) {
      throw py::value_error("memory limit size out of range: " + std::string{py::repr(size)});
    }
    return static_cast<std::size_t>(unsigned_argument(size, "size", SIZE_MAX));
  }
  if (fraction.is_none()) { return 0; }
  auto const f = convert_argument<double>(fraction, "fraction");
  if (!(f >= 0.0 && f <= 1.0)) { throw py::value_error("memory limit fraction out of range: " + std::string{py::repr(fraction)}); }
  auto const total = static_cast<double>(available_device_memory(cuda_device_id{device}).total);
  return static_cast<std::size_t>(f * total);
}

std::size_t rounded_request(std::size_t bytes, std::size_t unit, char const* what)
{
  std::optional<std::size_t> const rounded = gpumem::detail::checked_align_up(bytes, unit);
  if (!rounded) {
    throw bad_alloc(std::string{what} + ": a request of " + std::to_string(bytes) + " bytes cannot be served: rounding "
                    "it up to a multiple of " + std::to_string(unit) + " overflows");
  }
  return *rounded;
}

std::string with_commas(std::size_t bytes)
{
  std::string const digits = std::to_string(bytes);
  std::string grouped;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (digits.size() - i) % 3 == 0) { grouped.push_back(','); }
    grouped.push_back(digits[i]);
  }
  return grouped;
}

int current_device_id() { return get_current_cuda_device().value(); }

stream_ref current_stream()
{
  PyObject* const stream = PyObject_CallObject(objects().get_current_stream, nullptr);
  if (stream == nullptr) { throw py::error_already_set(); }
  auto object = py::reinterpret_steal<py::object>(stream);
  if (stream == objects().null_stream) { return {}; }  // the common case: no attribute lookup
  auto const handle = object.attr("ptr").cast<std::uintptr_t>();
  return stream_ref{reinterpret_cast<cudaStream_t>(handle), std::move(object)};  // NOLINT(performance-no-int-to-ptr)
}

stream_ref stream_argument(py::handle stream)
{
  if (stream.is_none()) { return current_stream(); }
  cudaStream_t const handle = to_stream(stream).value();
  if (py::isinstance<py::int_>(stream)) { return stream_ref{handle, py::object{}}; }
  return stream_ref{handle, py::reinterpret_borrow<py::object>(stream)};
}

void set_error_from_current_exception() noexcept
{
#if __has_include(<pybind11/detail/exception_translation.h>)
  py::detail::try_translate_exceptions();  // pybind11 >= 2.13
#else
  if (!py::detail::apply_exception_translators(py::detail::get_local_internals().registered_exception_translators) &&
      !py::detail::apply_exception_translators(py::detail::get_internals().registered_exception_translators)) {
    PyErr_SetString(PyExc_SystemError, "gpumem: an exception escaped every exception translator");
  }
#endif
}

void add_raw_method(py::handle cls, PyMethodDef& definition)
{
  auto const descriptor = py::reinterpret_steal<py::object>(PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(cls.ptr()), &definition));
  if (!descriptor) { throw py::error_already_set(); }
  if (PyObject_SetAttrString(cls.ptr(), definition.ml_name, descriptor.ptr()) != 0) { throw py::error_already_set(); }
}

PyObject* single_argument(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, char const* function,
                          char const* name) noexcept
{
  Py_ssize_t const keywords = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  if (nargs == 1 && keywords == 0) { return args[0]; }
  if (nargs == 0 && keywords == 1 && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), name) == 0) {
    return args[0];
  }
  PyErr_Format(PyExc_TypeError, "%s() takes exactly one argument, %s", function, name);
  return nullptr;
}

py::object device_object(int device_id)
{
  return py::reinterpret_borrow<py::object>(objects().device_type)(device_id);
}

void bind_device_memory(py::module_& cuda)
{
  py::class_<device_memory, std::shared_ptr<device_memory>>(cuda, "BaseMemory", R"doc(Memory on a CUDA device (CuPy's
cupy.cuda.BaseMemory): the base of Memory, ManagedMemory, MemoryAsync, UnownedMemory and PooledMemory. Not
constructed directly.

Attributes: ptr (int, the address; 0 for size 0), size (int, bytes), device_id (int), device (a Device).
int(mem) is mem.ptr.)doc")
    .def_property_readonly("ptr", &device_memory::ptr, "The address of the memory (an int; 0 when empty or freed).")
    .def_property_readonly("size", &device_memory::size, "The size of the memory in bytes.")
    .def_property_readonly("device_id", &device_memory::device_id, "The ordinal of the device the memory is on.")
    .def_property_readonly(
      "device", [](device_memory const& m) { return device_object(m.device_id()); },
      "The Device the memory is on.")
    .def("__int__", &device_memory::ptr, "The address, as ptr.")
    .def("__repr__", [](py::object const& self) { return describe(self.cast<device_memory const&>(), self); });

  py::class_<resource_memory, device_memory, std::shared_ptr<resource_memory>>(cuda, "Memory", R"doc(Device memory owned
by the object (CuPy's cupy.cuda.Memory).

Memory(size): `size` bytes from the current device's current gpumem resource
(gpumem.mr.get_current_device_resource(); a CudaMemoryResource unless one was set), allocated and freed on
the legacy default stream. The memory is freed when the object goes (the resource is kept alive until then).
size 0 allocates nothing (ptr 0). Raises ValueError for a negative size, OutOfMemoryError when the memory is
not there.)doc")
    .def(py::init([](size_argument size) { return resource_memory::allocate(size.value); }),
         py::arg("size"));

  py::class_<managed_memory, device_memory, std::shared_ptr<managed_memory>>(cuda, "ManagedMemory", R"doc(Managed
(unified) memory owned by the object (CuPy's cupy.cuda.ManagedMemory): cudaMallocManaged, accessible from
the host and every device, freed when the object goes.

ManagedMemory(size): raises ValueError for a negative size, OutOfMemoryError when the memory is not there.)doc")
    .def(py::init([](size_argument size) {
           return managed_memory::allocate(size.value);
         }),
         py::arg("size"))
    .def(
      "prefetch",
      [](managed_memory const& m, py::handle stream, py::object const& device_id) {
        stream_ref const s = stream_argument(stream);
        int const target = managed_target(device_id, m.device_id(), "device_id");
        if (m.size() == 0) { return; }
        py::gil_scoped_release const release;
        prefetch(reinterpret_cast<void const*>(m.ptr()), m.size(), cuda_device_id{target}, cuda_stream_view{s.handle});  // NOLINT
      },
      py::arg("stream") = py::none(), py::kw_only(), py::arg("device_id") = py::none(),
      "Migrates the memory to device `device_id` (None or -2, cudaInvalidDeviceId: the memory's device; -1: the "
      "host), ordered on `stream` (None: the current stream), as CuPy's ManagedMemory.prefetch(stream, *, "
      "device_id); a hint, the data stay valid wherever they are (cudaMemPrefetchAsync). Raises "
      "CUDARuntimeError (cudaErrorInvalidDevice) for a device that does not exist.")
    .def(
      "advise",
      [](managed_memory const& m, checked<int, "advise"> advise, py::object const& dev) {
        if (!py::isinstance(dev, py::reinterpret_borrow<py::object>(objects().device_type))) {
          throw py::type_error("advise: dev must be a gpumem.cuda.Device, not " +
                               std::string{py::str(py::type::of(dev).attr("__name__"))});
        }
        int const device = dev.attr("id").cast<int>();
        if (device != cudaCpuDeviceId && (device < 0 || device >= get_num_cuda_devices())) {
          throw cuda_error(cudaErrorInvalidDevice, "advise: device " + std::to_string(device) + " does not exist");
        }
        mem_advise(reinterpret_cast<void const*>(m.ptr()), m.size(), advise.value, device);  // NOLINT
      },
      py::arg("advise"), py::arg("dev"),
      "Advises CUDA how the memory will be used (cudaMemAdvise over the whole memory): `advise` a cudaMemoryAdvise "
      "value (gpumem.cuda.runtime.cudaMemAdviseSetReadMostly, ... 1 to 6), `dev` the Device it applies to, as "
      "CuPy's ManagedMemory.advise(advise, dev). A hint. Raises TypeError when dev is not a Device, "
      "CUDARuntimeError for a bad advice (cudaErrorInvalidValue) or device.");

  py::class_<unowned_memory, device_memory, std::shared_ptr<unowned_memory>>(cuda, "UnownedMemory", R"doc(Device memory
that gpumem does not own (CuPy's cupy.cuda.UnownedMemory).

UnownedMemory(ptr, size, owner, device_id=None): `size` bytes at address `ptr` (an int), kept valid by
`owner`, which the object keeps alive. device_id None (or negative, CuPy's -1) means the device the pointer
belongs to, asked of CUDA (cudaPointerGetAttributes), as CuPy does; memory CUDA does not know (plain host
memory) gets the current device. A null pointer needs an explicit device_id (RuntimeError, as CuPy). Raises
ValueError for a negative size or pointer.)doc")
    .def(py::init([](checked<std::uintptr_t, "ptr"> ptr, size_argument size, py::object owner, py::object const& device_id) {
           std::uintptr_t const address = ptr.value;
           std::size_t const bytes = size.value;
           bool const ask = device_id.is_none() || (py::isinstance<py::int_>(device_id) &&
                                                     PyObject_RichCompareBool(device_id.ptr(), py::int_(0).ptr(), Py_LT) == 1);
           int const device = ask ? pointer_device(address) : device_argument(device_id, "device_id");
           return std::make_shared<unowned_memory>(address, bytes, device, std::move(owner));
         }),
         py::arg("ptr"), py::arg("size"), py::arg("owner"), py::arg("device_id") = py::none())
    .def_property_readonly(
      "owner", [](unowned_memory const& m) { return m.owner(); }, "The object that keeps the memory valid.");
}

namespace {

registration const cuda_memory_registration{binding_order::buffers, "cuda_memory", [](py::module_& m) {
  py::module_ cuda = m.attr("cuda");
  module_objects& found = objects();
  found.get_current_stream = py::object(cuda.attr("get_current_stream")).release().ptr();
  found.null_stream = py::object(cuda.attr("Stream").attr("null")).release().ptr();
  found.device_type = py::object(cuda.attr("Device")).release().ptr();
  found.get_current_device_resource = py::object(m.attr("mr").attr("get_current_device_resource")).release().ptr();
  bind_device_memory(cuda);
  bind_memory_pointer(cuda);
  bind_memory_pool(cuda);
  bind_memory_async(cuda);
  bind_function_allocators(cuda);
  bind_pinned_memory(cuda);
}};

}  // namespace
}  // namespace gpumem::python
