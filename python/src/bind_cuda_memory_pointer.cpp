// gpumem.cuda.MemoryPointer (CuPy's cupy.cuda.MemoryPointer): a place in a device memory object, with
// pointer arithmetic checked against the memory's size, fills, and copies between host and device.
//
// Copies, as CuPy's: the synchronous ones (copy_from_host, copy_to_host, copy_from_device, copy_from,
// memset) run on the legacy default stream and return when done; the *_async ones run on `stream` (None:
// the thread's current stream). Host memory may be an int address, a ctypes pointer, a PinnedMemoryPointer
// or PinnedMemory, or any contiguous buffer-protocol object (a NumPy array); sizes are checked against the
// buffer where its extent is known, and always against the device memory. Pageable host memory goes through
// gpumem's staged copies (transfer.hpp), which return once a pageable source has been read or a pageable
// destination written; pinned memory is copied asynchronously, and a gpumem PinnedMemory remembers the copy
// (pinned_memory::record_use) so that it is not freed or reused before the copy has run.
#include "bind_cuda_memory.hpp"
#include "host_buffer.hpp"

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/transfer.hpp>

#include <optional>
#include <sstream>

namespace gpumem::python {
namespace {

/** @brief Memory given to MemoryPointer that is not gpumem's: any object with ptr and size (and device_id). */
class foreign_memory final : public device_memory {
 public:
  foreign_memory(std::uintptr_t ptr, std::size_t size, int device, py::object object) noexcept
    : device_memory{ptr, size, device}, object_{std::move(object)}
  {
  }
  [[nodiscard]] py::object python_object() const override { return object_; }

 private:
  py::object object_;
};

/** @brief The device memory a MemoryPointer(mem, ...) argument names. @throws py::type_error for other objects. */
std::shared_ptr<device_memory> to_memory(py::handle mem)
{
  if (py::isinstance<device_memory>(mem)) { return mem.cast<std::shared_ptr<device_memory>>(); }
  if (py::hasattr(mem, "ptr") && py::hasattr(mem, "size")) {
    auto const ptr = static_cast<std::uintptr_t>(unsigned_argument(mem.attr("ptr"), "MemoryPointer: mem.ptr", UINTPTR_MAX));
    auto const size = static_cast<std::size_t>(unsigned_argument(mem.attr("size"), "MemoryPointer: mem.size", SIZE_MAX));
    int const device = py::hasattr(mem, "device_id") ? convert_argument<int>(mem.attr("device_id"), "MemoryPointer: mem.device_id")
                                                     : current_device_id();
    return std::make_shared<foreign_memory>(ptr, size, device, py::reinterpret_borrow<py::object>(mem));
  }
  throw py::type_error("MemoryPointer: `mem` must be a gpumem.cuda.BaseMemory or an object with .ptr and .size, not " +
                       std::string{py::str(py::type::of(mem).attr("__name__"))});
}

/**
 * @brief The Python object for a pointer's memory: the foreign object itself, or gpumem's wrapper, made on
 * first use and kept by the pointer (MemoryPool.malloc makes none: most pointers are never asked).
 */
py::object memory_object(memory_pointer& p)
{
  if (!p.mem_object) {
    py::object foreign = p.mem->python_object();
    p.mem_object = foreign ? std::move(foreign) : py::cast(p.mem);
  }
  return p.mem_object;
}

/**
 * @brief The gpumem pinned memory behind a buffer-protocol object, if any: a NumPy array made by
 * numpy.frombuffer(PinnedMemoryPointer) (through its .base chain and memoryview.obj), so that copies into
 * or out of it are recorded like copies given the PinnedMemoryPointer itself. Null for anything else.
 */
std::shared_ptr<pinned_memory> pinned_owner(py::handle object, std::uintptr_t address)
{
  py::object current = py::reinterpret_borrow<py::object>(object);
  for (int depth = 0; depth < 8 && current && !current.is_none(); ++depth) {  // views of views: a short chain
    if (py::isinstance<pinned_memory_pointer>(current)) {
      std::shared_ptr<pinned_memory> const& memory = current.cast<pinned_memory_pointer const&>().mem;
      bool const inside = address >= memory->ptr() && address < memory->ptr() + memory->size();
      return inside ? memory : nullptr;
    }
    if (PyMemoryView_Check(current.ptr()) != 0) {
      PyObject* const exporter = PyMemoryView_GET_BUFFER(current.ptr())->obj;
      current = exporter == nullptr ? py::object{} : py::reinterpret_borrow<py::object>(exporter);
    } else if (py::hasattr(current, "base")) {
      current = current.attr("base");
    } else {
      break;
    }
  }
  return nullptr;
}

/**
 * @brief Host memory named by a Python argument, held for the duration of a copy (a buffer-protocol
 * object's buffer is released on destruction, with the GIL held).
 */
class host_region {
 public:
  /** @throws py::type_error for objects that name no host memory; py::value_error for unusable buffers. */
  host_region(py::handle object, bool writable, char const* what)
  {
    if (py::isinstance<py::int_>(object)) {
      std::string const name = std::string{what} + ": mem (a host address)";
      address_ = static_cast<std::uintptr_t>(unsigned_argument(object, name.c_str(), UINTPTR_MAX));
      return;
    }
    if (py::isinstance<pinned_memory_pointer>(object)) {
      auto const& p = object.cast<pinned_memory_pointer const&>();
      address_ = p.ptr();
      size_ = p.remaining();
      pinned_ = p.mem;
      return;
    }
    if (py::isinstance<pinned_memory>(object)) {
      pinned_ = object.cast<std::shared_ptr<pinned_memory>>();
      address_ = pinned_->ptr();
      size_ = pinned_->size();
      return;
    }
    py::module_ const ctypes = py::module_::import("ctypes");
    if (py::isinstance(object, ctypes.attr("c_void_p"))) {
      py::object const value = object.attr("value");
      address_ = value.is_none() ? 0 : value.cast<std::uintptr_t>();
      return;
    }
    if (py::isinstance(object, ctypes.attr("_Pointer"))) {
      py::object const value = ctypes.attr("cast")(object, ctypes.attr("c_void_p")).attr("value");
      address_ = value.is_none() ? 0 : value.cast<std::uintptr_t>();
      return;
    }
    if (PyObject_CheckBuffer(object.ptr()) != 0) {
      std::string const name = std::string{what} + ": the host buffer";
      buffer_.emplace(object, writable ? host_buffer::access::write : host_buffer::access::read, 'A', name.c_str());
      address_ = to_int(buffer_->data());
      size_ = buffer_->size();
      pinned_ = pinned_owner(object, address_);
      return;
    }
    throw py::type_error(std::string{what} +
                         ": host memory must be an int address, a ctypes pointer, a PinnedMemoryPointer or a "
                         "buffer-protocol object (a NumPy array), not " +
                         std::string{py::str(py::type::of(object).attr("__name__"))});
  }
  ~host_region() = default;
  host_region(host_region const&) = delete;
  host_region& operator=(host_region const&) = delete;
  host_region(host_region&&) = delete;
  host_region& operator=(host_region&&) = delete;

  /** @throws py::value_error when `bytes` exceed the region's known extent, or the address is null. */
  void check(std::size_t bytes, char const* what) const
  {
    if (bytes == 0) { return; }
    if (address_ == 0) { throw py::value_error(std::string{what} + ": the host address is null"); }
    if (size_ && bytes > *size_) {
      throw py::value_error(std::string{what} + ": size " + std::to_string(bytes) + " exceeds the host buffer's " +
                            std::to_string(*size_) + " bytes");
    }
  }

  [[nodiscard]] void* data() const noexcept { return reinterpret_cast<void*>(address_); }  // NOLINT(performance-no-int-to-ptr)
  /** @brief The gpumem pinned memory the region lies in, if it is one (its uses are recorded). */
  [[nodiscard]] pinned_memory* pinned() const noexcept { return pinned_.get(); }

 private:
  std::uintptr_t address_{};
  std::optional<std::size_t> size_;
  std::shared_ptr<pinned_memory> pinned_;
  std::optional<host_buffer> buffer_;  // a buffer-protocol object's bytes, released with the region
};

void* address(memory_pointer const& p) { return reinterpret_cast<void*>(p.ptr); }  // NOLINT(performance-no-int-to-ptr)

/** @brief A size argument checked against what is left of `p`'s memory. */
std::size_t device_extent(memory_pointer const& p, std::size_t size, char const* what)
{
  if (size > p.remaining()) {
    throw py::value_error(std::string{what} + ": size " + std::to_string(size) + " exceeds the " +
                          std::to_string(p.remaining()) + " bytes from the pointer (offset " + std::to_string(p.offset) +
                          ") to the end of its memory");
  }
  return size;
}

/**
 * @brief Runs `copy(stream)` on `p`'s device with the GIL released: on `stream` (async), or on the legacy
 * default stream followed by its synchronisation (sync). Returns the stream used.
 */
template <class Copy>
cudaStream_t run_copy(memory_pointer const& p, py::handle stream, bool async, Copy&& copy)
{
  stream_ref const s = async ? stream_argument(stream) : stream_ref{};
  py::gil_scoped_release const release;
  cuda_set_device_raii const guard{cuda_device_id{p.mem->device_id()}};
  copy(s.handle);
  if (!async) { cuda_stream_view{s.handle}.synchronize(); }
  return s.handle;
}

void copy_from_host(memory_pointer const& self, py::handle src, std::size_t size, py::handle stream, bool async)
{
  char const* const what = async ? "copy_from_host_async" : "copy_from_host";
  std::size_t const bytes = device_extent(self, size, what);
  host_region const host{src, false, what};
  host.check(bytes, what);
  if (bytes == 0) { return; }
  cudaStream_t const used = run_copy(self, stream, async, [&](cudaStream_t s) {
    copy_to_device(address(self), host.data(), bytes, cuda_stream_view{s});
  });
  if (async && host.pinned() != nullptr) { host.pinned()->record_use(cuda_stream_view{used}); }
}

void copy_to_host(memory_pointer const& self, py::handle dst, std::size_t size, py::handle stream, bool async)
{
  char const* const what = async ? "copy_to_host_async" : "copy_to_host";
  std::size_t const bytes = device_extent(self, size, what);
  host_region const host{dst, true, what};
  host.check(bytes, what);
  if (bytes == 0) { return; }
  cudaStream_t const used = run_copy(self, stream, async, [&](cudaStream_t s) {
    gpumem::copy_to_host(host.data(), address(self), bytes, cuda_stream_view{s});
  });
  if (async && host.pinned() != nullptr) { host.pinned()->record_use(cuda_stream_view{used}); }
}

void copy_from_device(memory_pointer const& self, memory_pointer const& src, std::size_t size, py::handle stream,
                      bool async)
{
  char const* const what = async ? "copy_from_device_async" : "copy_from_device";
  std::size_t const bytes = device_extent(self, size, what);
  static_cast<void>(device_extent(src, size, what));
  if (bytes == 0) { return; }
  run_copy(self, stream, async, [&](cudaStream_t s) {
    gpumem::memcpy_async(address(self), address(src), bytes, cuda_stream_view{s});
  });
}

void copy_from(memory_pointer const& self, py::handle mem, std::size_t size, py::handle stream, bool async)
{
  if (py::isinstance<memory_pointer>(mem)) {
    copy_from_device(self, mem.cast<memory_pointer const&>(), size, stream, async);
  } else {
    copy_from_host(self, mem, size, stream, async);
  }
}

void memset(memory_pointer const& self, int value, std::size_t size, py::handle stream, bool async)
{
  std::size_t const bytes = device_extent(self, size, async ? "memset_async" : "memset");
  if (bytes == 0) { return; }
  run_copy(self, stream, async, [&](cudaStream_t s) { gpumem::memset_async(address(self), value, bytes, cuda_stream_view{s}); });
}

std::string describe(memory_pointer const& p)
{
  std::ostringstream out;
  out << "<gpumem.cuda.MemoryPointer 0x" << std::hex << p.ptr << std::dec << " device=" << p.mem->device_id()
      << " offset=" << p.offset << " size=" << p.mem->size() << ">";
  return out.str();
}

}  // namespace

memory_pointer::memory_pointer(std::shared_ptr<device_memory> memory, std::int64_t offset_bytes) : mem{std::move(memory)}
{
  if (mem == nullptr) { throw py::type_error("MemoryPointer: `mem` must not be None"); }
  if (offset_bytes < 0 || static_cast<std::uint64_t>(offset_bytes) > mem->size()) {
    throw py::value_error("MemoryPointer: offset " + std::to_string(offset_bytes) + " is outside the memory of " +
                          std::to_string(mem->size()) + " bytes (0 <= offset <= size)");
  }
  offset = static_cast<std::size_t>(offset_bytes);
  ptr = mem->ptr() + offset;
}

py::object to_python(memory_pointer pointer)
{
  // The type's record, looked up once: py::cast would look it up by typeid (a hash of the type's name) each time.
  static py::detail::type_info const* const record = py::detail::get_type_info(typeid(memory_pointer), true);
  auto owned = std::make_unique<memory_pointer>(std::move(pointer));
  py::handle const made = py::detail::type_caster_generic::cast(owned.get(), py::return_value_policy::take_ownership,
                                                                py::handle{}, record, nullptr, nullptr);
  if (!made) { throw py::error_already_set(); }
  static_cast<void>(owned.release());  // owned by the Python object now
  return py::reinterpret_steal<py::object>(made);
}

void bind_memory_pointer(py::module_& cuda)
{
  py::class_<memory_pointer>(cuda, "MemoryPointer", R"doc(A pointer into device memory (CuPy's cupy.cuda.MemoryPointer).

MemoryPointer(mem, offset): the place `offset` bytes into `mem` (a BaseMemory, or any object with .ptr and
.size), which the pointer keeps alive. offset must lie in [0, mem.size]: ValueError otherwise, and for
arithmetic that leaves that range (p + n, p - n, p += n, p -= n).

Copies and fills: the synchronous forms use the legacy default stream and return when done (as CuPy's, they
ignore the current stream); the *_async forms run on `stream` (None: the current stream). Host memory is an
int address, a ctypes pointer, a PinnedMemoryPointer/PinnedMemory, or a contiguous buffer-protocol object
(NumPy arrays); `size` is checked against the device memory left after the pointer and against the host
buffer where its size is known (ValueError). Pageable host memory is staged through pinned buffers:
copy_from_host_async returns once the source has been read, copy_to_host_async once the destination is
written. A pinned destination or source is copied asynchronously: synchronise the stream before reading it.)doc")
    .def(py::init([](py::handle mem, checked<std::int64_t, "offset"> offset) {
           return memory_pointer{to_memory(mem), offset.value};
         }),
         py::arg("mem"), py::arg("offset"))
    .def_readonly("ptr", &memory_pointer::ptr, "The address the pointer refers to (an int).")
    .def_property_readonly("mem", &memory_object, "The memory the pointer points into (kept alive by the pointer).")
    .def_readonly("offset", &memory_pointer::offset, "Bytes from the start of `mem` to the pointer.")
    .def_property_readonly(
      "device_id", [](memory_pointer const& p) { return p.mem->device_id(); }, "The ordinal of the memory's device.")
    .def_property_readonly(
      "device", [](memory_pointer const& p) { return device_object(p.mem->device_id()); }, "The memory's Device.")
    .def("__int__", [](memory_pointer const& p) { return p.ptr; }, "The address, as ptr.")
    .def(
      "__add__",
      [](memory_pointer const& p, std::int64_t n) {
        return memory_pointer{p.mem, static_cast<std::int64_t>(p.offset) + n};
      },
      py::is_operator(), "A pointer `n` bytes further into the same memory (ValueError outside it).")
    .def(
      "__radd__",
      [](memory_pointer const& p, std::int64_t n) {
        return memory_pointer{p.mem, static_cast<std::int64_t>(p.offset) + n};
      },
      py::is_operator(), "n + p, as p + n.")
    .def(
      "__sub__",
      [](memory_pointer const& p, std::int64_t n) {
        return memory_pointer{p.mem, static_cast<std::int64_t>(p.offset) - n};
      },
      py::is_operator(), "A pointer `n` bytes back in the same memory (ValueError outside it).")
    .def(
      "__iadd__",
      [](py::object const& self, std::int64_t n) {
        auto& p = self.cast<memory_pointer&>();
        memory_pointer const moved{p.mem, static_cast<std::int64_t>(p.offset) + n};
        p.ptr += moved.offset - p.offset;
        p.offset = moved.offset;
        return self;
      },
      py::is_operator(), "Moves the pointer `n` bytes on, in place (ValueError outside the memory).")
    .def(
      "__isub__",
      [](py::object const& self, std::int64_t n) {
        auto& p = self.cast<memory_pointer&>();
        memory_pointer const moved{p.mem, static_cast<std::int64_t>(p.offset) - n};
        p.ptr -= p.offset - moved.offset;
        p.offset = moved.offset;
        return self;
      },
      py::is_operator(), "Moves the pointer `n` bytes back, in place (ValueError outside the memory).")
    .def("__repr__", &describe)
    .def(
      "memset",
      [](memory_pointer const& p, checked<int, "value"> value, size_argument size) {
        memset(p, value.value, size.value, py::none(), false);
      },
      py::arg("value"), py::arg("size"),
      "Sets `size` bytes to `value` (its low byte, as cudaMemset) on the legacy default stream; returns when done.")
    .def(
      "memset_async",
      [](memory_pointer const& p, checked<int, "value"> value, size_argument size, py::handle stream) {
        memset(p, value.value, size.value, stream, true);
      },
      py::arg("value"), py::arg("size"), py::arg("stream") = py::none(),
      "Sets `size` bytes to `value` on `stream` (None: the current stream); does not wait.")
    .def(
      "copy_from_host",
      [](memory_pointer const& p, py::handle mem, size_argument size) {
        copy_from_host(p, mem, size.value, py::none(), false);
      },
      py::arg("mem"), py::arg("size"),
      "Copies `size` bytes from host memory `mem` to the pointer, on the legacy default stream; returns when done.")
    .def(
      "copy_from_host_async",
      [](memory_pointer const& p, py::handle mem, size_argument size, py::handle stream) {
        copy_from_host(p, mem, size.value, stream, true);
      },
      py::arg("mem"), py::arg("size"), py::arg("stream") = py::none(),
      "Copies `size` bytes from host memory `mem` on `stream` (None: the current stream). Returns once a "
      "pageable source has been read; a pinned source must stay unchanged until the stream has run the copy.")
    .def(
      "copy_to_host",
      [](memory_pointer const& p, py::handle mem, size_argument size) {
        copy_to_host(p, mem, size.value, py::none(), false);
      },
      py::arg("mem"), py::arg("size"),
      "Copies `size` bytes from the pointer to host memory `mem` on the legacy default stream; returns when done.")
    .def(
      "copy_to_host_async",
      [](memory_pointer const& p, py::handle mem, size_argument size, py::handle stream) {
        copy_to_host(p, mem, size.value, stream, true);
      },
      py::arg("mem"), py::arg("size"), py::arg("stream") = py::none(),
      "Copies `size` bytes to host memory `mem` on `stream` (None: the current stream), after the work "
      "submitted to it so far. A pageable destination holds the bytes when the call returns; a pinned one once "
      "the stream has run the copy.")
    .def(
      "copy_from_device",
      [](memory_pointer const& p, checked<memory_pointer*, "src"> src, size_argument size) {
        copy_from_device(p, *src.value, size.value, py::none(), false);
      },
      py::arg("src"), py::arg("size"),
      "Copies `size` bytes from device pointer `src` (a MemoryPointer, possibly of another device) on the legacy "
      "default stream; returns when done.")
    .def(
      "copy_from_device_async",
      [](memory_pointer const& p, checked<memory_pointer*, "src"> src, size_argument size, py::handle stream) {
        copy_from_device(p, *src.value, size.value, stream, true);
      },
      py::arg("src"), py::arg("size"), py::arg("stream") = py::none(),
      "Copies `size` bytes from device pointer `src` on `stream` (None: the current stream); does not wait.")
    .def(
      "copy_from",
      [](memory_pointer const& p, py::handle mem, size_argument size) { copy_from(p, mem, size.value, py::none(), false); },
      py::arg("mem"), py::arg("size"),
      "copy_from_device when `mem` is a MemoryPointer, else copy_from_host.")
    .def(
      "copy_from_async",
      [](memory_pointer const& p, py::handle mem, size_argument size, py::handle stream) {
        copy_from(p, mem, size.value, stream, true);
      },
      py::arg("mem"), py::arg("size"), py::arg("stream") = py::none(),
      "copy_from_device_async when `mem` is a MemoryPointer, else copy_from_host_async.");
}

}  // namespace gpumem::python
