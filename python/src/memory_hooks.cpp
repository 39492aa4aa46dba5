// The C++ side of gpumem.cuda's memory hooks (memory_hooks.hpp).
#include "memory_hooks.hpp"

#include <utility>
#include <vector>

namespace gpumem::python::memory_hooks {
namespace {

struct upstream_growth {
  std::size_t bytes;
  std::uintptr_t ptr;
};

thread_local bool hooks_active = false;                 // NOLINT: per thread, as CuPy's hooks
thread_local std::vector<upstream_growth> growths;      // NOLINT: recorded by the pool's upstream on this thread

/** @brief gpumem.cuda.memory_hook._call_hooks, looked up once (never released: it lives as long as the module). */
py::handle call_hooks_function()
{
  static PyObject* const function =
    py::object(py::module_::import("gpumem.cuda.memory_hook").attr("_call_hooks")).release().ptr();
  return function;
}

}  // namespace

bool active() noexcept { return hooks_active; }

void record_upstream(std::size_t bytes, std::uintptr_t ptr) noexcept
{
  if (!hooks_active) { return; }
  try {
    growths.push_back({bytes, ptr});
  } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory: the hook misses this growth rather than fail it
  }
}

void clear_upstream() noexcept { growths.clear(); }

void report_upstream(int device)
{
  std::vector<upstream_growth> recorded;
  recorded.swap(growths);
  for (upstream_growth const& growth : recorded) {
    call("alloc_preprocess", py::dict(py::arg("device_id") = device, py::arg("mem_size") = growth.bytes));
    call("alloc_postprocess", py::dict(py::arg("device_id") = device, py::arg("mem_size") = growth.bytes,
                                       py::arg("mem_ptr") = growth.ptr));
  }
}

void call(char const* hook, py::dict const& kwargs)
{
  call_hooks_function()(hook, **kwargs);
}

void bind(py::module_& cuda)
{
  cuda.def(
    "_set_memory_hooks_active", [](bool active) { hooks_active = active; }, py::arg("active"),
    "Tells MemoryPool whether the calling thread has memory hooks (gpumem.cuda.memory_hook keeps it up to date).");
}

}  // namespace gpumem::python::memory_hooks
