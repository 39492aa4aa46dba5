// gpumem.cuda.PythonFunctionAllocator and CFunctionAllocator (CuPy's cupy.cuda.PythonFunctionAllocator and
// cupy.cuda.CFunctionAllocator): allocators over memory management done elsewhere, by Python functions or by
// C function pointers. Both are CuPy allocators: allocator(size) -> MemoryPointer (and .malloc(size)), so
// they can be given to set_allocator, using_allocator or MemoryPool. The memory they return is freed through
// the matching free function when its last reference goes.
#include "bind_cuda_memory.hpp"

#include <gpumem/error.hpp>

namespace gpumem::python {
namespace {

/** @brief Memory from a PythonFunctionAllocator: free_func(ptr, device_id) is called when it goes. */
class python_function_memory final : public device_memory {
 public:
  python_function_memory(std::uintptr_t ptr, std::size_t size, int device, py::object free_func) noexcept
    : device_memory{ptr, size, device}, free_func_{std::move(free_func)}
  {
  }
  ~python_function_memory() override
  {
    py::gil_scoped_acquire const gil;  // held already when Python drops the object; kept for safety
    if (ptr() != 0) {
      try {
        free_func_(ptr(), device_id());
      } catch (py::error_already_set& e) {
        e.discard_as_unraisable("gpumem.cuda.PythonFunctionAllocator's free_func");
      }
    }
    free_func_ = py::object{};
  }
  python_function_memory(python_function_memory const&) = delete;
  python_function_memory& operator=(python_function_memory const&) = delete;
  python_function_memory(python_function_memory&&) = delete;
  python_function_memory& operator=(python_function_memory&&) = delete;

 private:
  py::object free_func_;
};

/** @brief PythonFunctionAllocator's state: the two functions. */
struct python_function_allocator {
  py::object malloc_func;
  py::object free_func;

  py::object malloc(size_argument size) const
  {
    std::size_t const bytes = size.value;
    int const device = current_device_id();
    std::uintptr_t ptr = 0;
    if (bytes > 0) {
      ptr = static_cast<std::uintptr_t>(
        unsigned_argument(malloc_func(bytes, device), "PythonFunctionAllocator: malloc_func's result", UINTPTR_MAX));
      if (ptr == 0) {
        throw out_of_memory("PythonFunctionAllocator: malloc_func returned 0 for " + with_commas(bytes) + " bytes on device " +
                            std::to_string(device));
      }
    }
    return to_python(memory_pointer{std::make_shared<python_function_memory>(ptr, bytes, device, free_func), 0});
  }
};

using c_malloc = void* (*)(void* param, std::size_t size, int device_id);
using c_free = void (*)(void* param, void* ptr, int device_id);

/** @brief Memory from a CFunctionAllocator: free(param, ptr, device_id) is called (GIL released) when it goes. */
class c_function_memory final : public device_memory {
 public:
  c_function_memory(std::uintptr_t ptr, std::size_t size, int device, void* param, c_free free, py::object owner) noexcept
    : device_memory{ptr, size, device}, param_{param}, free_{free}, owner_{std::move(owner)}
  {
  }
  ~c_function_memory() override
  {
    if (ptr() == 0) { return; }
    without_gil([this] { free_(param_, reinterpret_cast<void*>(ptr()), device_id()); });  // NOLINT(performance-no-int-to-ptr)
  }
  c_function_memory(c_function_memory const&) = delete;
  c_function_memory& operator=(c_function_memory const&) = delete;
  c_function_memory(c_function_memory&&) = delete;
  c_function_memory& operator=(c_function_memory&&) = delete;

 private:
  void* param_;
  c_free free_;
  py::object owner_;  // keeps param and the functions alive
};

/** @brief CFunctionAllocator's state: param, the two function pointers and their owner. */
struct c_function_allocator {
  void* param{};
  c_malloc malloc_func{};
  c_free free_func{};
  py::object owner;

  py::object malloc(size_argument size) const
  {
    std::size_t const bytes = size.value;
    int const device = current_device_id();
    void* p = nullptr;
    if (bytes > 0) {
      {
        py::gil_scoped_release const release;
        p = malloc_func(param, bytes, device);
      }
      if (p == nullptr) {
        throw out_of_memory("CFunctionAllocator: malloc returned NULL for " + with_commas(bytes) + " bytes on device " +
                            std::to_string(device));
      }
    }
    return to_python(memory_pointer{std::make_shared<c_function_memory>(to_int(p), bytes, device, param, free_func, owner), 0});
  }
};

/** @brief A function pointer from an int address. @throws py::value_error for 0. */
template <class Function>
Function to_function(std::uintptr_t address, char const* what)
{
  if (address == 0) { throw py::value_error(std::string{"CFunctionAllocator: "} + what + " must not be 0 (NULL)"); }
  return reinterpret_cast<Function>(address);  // NOLINT(performance-no-int-to-ptr)
}

}  // namespace

void bind_function_allocators(py::module_& cuda)
{
  py::class_<python_function_allocator>(cuda, "PythonFunctionAllocator", R"doc(An allocator made of two Python functions
(CuPy's cupy.cuda.PythonFunctionAllocator).

PythonFunctionAllocator(malloc_func, free_func): malloc_func(size, device_id) -> int returns the address of
`size` new bytes on device `device_id` (0 means out of memory: OutOfMemoryError); free_func(ptr, device_id)
frees them, called when the last reference to the memory goes (an exception it raises is reported as
unraisable). The allocator is called as allocator(size) or allocator.malloc(size) and returns a
MemoryPointer; size 0 calls neither function.)doc")
    .def(py::init([](py::object malloc_func, py::object free_func) {
           if (PyCallable_Check(malloc_func.ptr()) == 0 || PyCallable_Check(free_func.ptr()) == 0) {
             throw py::type_error("PythonFunctionAllocator: malloc_func and free_func must be callable");
           }
           return python_function_allocator{std::move(malloc_func), std::move(free_func)};
         }),
         py::arg("malloc_func"), py::arg("free_func"))
    .def("malloc", &python_function_allocator::malloc, py::arg("size"),
         "Allocates `size` bytes through malloc_func on the current device; returns a MemoryPointer.")
    .def("__call__", &python_function_allocator::malloc, py::arg("size"), "As malloc(size).");

  py::class_<c_function_allocator>(cuda, "CFunctionAllocator", R"doc(An allocator made of C function pointers (CuPy's
cupy.cuda.CFunctionAllocator).

CFunctionAllocator(param, malloc_func, free_func, owner): ints: `param` an address passed through,
`malloc_func` the address of ``void* malloc(void* param, size_t size, int device_id)``, `free_func` of
``void free(void* param, void* ptr, int device_id)``; `owner` is kept alive while the allocator or any memory
from it lives (it should keep param and the functions valid). The functions are called with the GIL
released; a NULL from malloc raises OutOfMemoryError. Called as allocator(size) or allocator.malloc(size),
returning a MemoryPointer; size 0 calls neither function.)doc")
    .def(py::init([](checked<std::uintptr_t, "param"> param, checked<std::uintptr_t, "malloc_func"> malloc_func,
                     checked<std::uintptr_t, "free_func"> free_func, py::object owner) {
           return c_function_allocator{reinterpret_cast<void*>(param.value),  // NOLINT(performance-no-int-to-ptr)
                                       to_function<c_malloc>(malloc_func.value, "malloc_func"),
                                       to_function<c_free>(free_func.value, "free_func"), std::move(owner)};
         }),
         py::arg("param"), py::arg("malloc_func"), py::arg("free_func"), py::arg("owner"))
    .def("malloc", &c_function_allocator::malloc, py::arg("size"),
         "Allocates `size` bytes through the C malloc function on the current device; returns a MemoryPointer.")
    .def("__call__", &c_function_allocator::malloc, py::arg("size"), "As malloc(size).");
}

}  // namespace gpumem::python
