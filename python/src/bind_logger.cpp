// gpumem._gpumem._debug_log: gpumem's debug log (debug_log.hpp) for gpumem/logger.py, which gives it RMM's
// names (set_logging_level, flush_logger, ...). Levels cross as gpumem's ints (trace 0 .. error 4, off 5).
#include "arguments.hpp"
#include "registry.hpp"

#include <gpumem/debug_log.hpp>

namespace gpumem::python {
namespace {

log_level to_level(int value)
{
  if (value < static_cast<int>(log_level::trace) || value > static_cast<int>(log_level::off)) {
    throw py::value_error("level must be between 0 (trace) and 5 (off), got " + std::to_string(value));
  }
  return static_cast<log_level>(value);
}

registration const logger{binding_order::plain, "debug_log", [](py::module_& m) {
  py::module_ sub = m.def_submodule("_debug_log", "gpumem's debug log; use gpumem.logger.");
  sub.def(
    "set_level", [](checked<int, "level"> level) { set_log_level(to_level(level.value)); }, py::arg("level"),
    "Sets the debug log's level (0 trace .. 4 error, 5 off).");
  sub.def("get_level", [] { return static_cast<int>(get_log_level()); }, "The debug log's level.");
  sub.def(
    "set_flush_level", [](checked<int, "level"> level) { set_flush_level(to_level(level.value)); }, py::arg("level"),
    "Lines of this level or more severe are flushed as they are written.");
  sub.def("get_flush_level", [] { return static_cast<int>(get_flush_level()); }, "The flush level.");
  sub.def("flush", &flush_log, py::call_guard<py::gil_scoped_release>(), "Writes the buffered lines now.");
}};

}  // namespace
}  // namespace gpumem::python
