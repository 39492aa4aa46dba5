// The plain API (plain.hpp): gpumem.alloc(size) -> int, gpumem.zeros(size) -> int, gpumem.free(ptr),
// gpumem.allocation_size(ptr). Pointers are ints, as in CuPy and RMM. The GIL is released around every
// call that may block (allocation may grow a pool or wait for a stream; free may synchronise).
#include "conversions.hpp"
#include "registry.hpp"

#include <gpumem/plain.hpp>

namespace gpumem::python {
namespace {

registration const plain{binding_order::plain, "plain", [](py::module_& m) {
  m.def(
    "alloc",
    [](std::size_t size, py::handle stream) {
      cuda_stream_view const s = to_stream(stream);
      py::gil_scoped_release const release;
      return to_int(gpumem::alloc(size, s));
    },
    py::arg("size"), py::arg("stream") = py::none(),
    "Allocates `size` bytes (256-byte aligned) of device memory from the current device's current resource, "
    "ordered on `stream`; returns the address as an int (0 for size 0). Raises OutOfMemoryError (a "
    "MemoryError naming the size, the device, free and total memory).");
  m.def(
    "zeros",
    [](std::size_t size, py::handle stream) {
      cuda_stream_view const s = to_stream(stream);
      py::gil_scoped_release const release;
      return to_int(gpumem::zeros(size, s));
    },
    py::arg("size"), py::arg("stream") = py::none(),
    "As alloc(), then sets every byte to zero on `stream` (synchronise the stream before reading on the host).");
  m.def(
    "free",
    [](py::handle ptr, py::handle stream) {
      void* const p = to_pointer(ptr);
      cuda_stream_view const s = to_stream(stream);
      py::gil_scoped_release const release;
      gpumem::free(p, s);
    },
    py::arg("ptr"), py::arg("stream") = py::none(),
    "Returns memory from alloc()/zeros() to the resource that allocated it. Freeing an unknown or "
    "already-freed pointer raises ValueError naming the pointer; free(0) does nothing.");
  m.def(
    "allocation_size", [](py::handle ptr) { return gpumem::allocation_size(to_pointer(ptr)); }, py::arg("ptr"),
    "The size asked for when `ptr` was allocated by alloc()/zeros(). Raises ValueError for an unknown pointer.");
}};

}  // namespace
}  // namespace gpumem::python
