// The recorder of allocation history (torch_hooks.hpp): an observer of the allocator hooks table that, while
// recording, keeps the live blocks and a ring of the latest alloc/free/oom entries, each with the Python stack
// of the allocating thread when that thread holds the GIL. gpumem.torch._history turns what it keeps into
// PyTorch's snapshot schema.
//
// Cost while recording is off: one relaxed atomic load per allocation and free. While on: a lock of one mutex,
// a hash-map update and a ring write; with stacks, also a walk of at most max_depth frames and one hash-map
// lookup per frame and per stack.
//
// Frames: PyTorch's operators release the GIL before they allocate, so while stacks are recorded the observer
// takes the GIL back on a thread that has a Python thread state and released it (as PyTorch's own recorder does;
// the lock order is then GIL, recorder mutex, as everywhere else here). A thread without a Python thread state
// (PyTorch's autograd threads) gets no frames, and with recording off or without stacks the GIL is never taken.
// A frame is kept as (code object, line): the table holds a reference to each code object (so its address is
// never reused for another one) and turns it into (filename, line, name) only on export, under the GIL.
#include "interpreter.hpp"
#include "registry.hpp"
#include "torch_hooks.hpp"

#include <pybind11/pybind11.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gpumem::python::torch_hooks {
namespace {

namespace py = pybind11;

constexpr std::size_t max_depth = 64;  ///< frames kept per stack (the innermost ones)
constexpr std::int32_t no_stack = -1;

enum class entry_action : std::uint8_t { alloc, free, oom };

/** @brief One recorded event. `size`: bytes requested (alloc, oom) or freed (free). */
struct entry {
  std::int64_t time_us;
  entry_action action;
  std::uintptr_t addr;
  std::size_t size;
  std::uintptr_t stream;
  int device;
  std::int32_t stack;  ///< index into recorder::stacks, or no_stack
};

/** @brief A block allocated while recording and not freed since. */
struct live_block {
  std::size_t size;
  std::uintptr_t stream;
  int device;
  std::int32_t stack;
  std::int64_t time_us;
};

struct frame_key {
  PyObject* code;  ///< a strong reference, held by recorder::frames
  int line;
  friend bool operator==(frame_key const&, frame_key const&) = default;
};

struct frame_key_hash {
  std::size_t operator()(frame_key const& k) const noexcept
  {
    return std::hash<void const*>{}(k.code) ^ (static_cast<std::size_t>(k.line) * 0x9E3779B97F4A7C15ULL);
  }
};

struct stack_hash {
  std::size_t operator()(std::vector<std::int32_t> const& s) const noexcept
  {
    std::size_t h = s.size();
    for (std::int32_t f : s) { h = h * 1000003U ^ static_cast<std::size_t>(f); }
    return h;
  }
};

/**
 * @brief Everything the recorder keeps, guarded by `mutex`.
 * Invariants: entries.size() <= max_entries; when entries.size() == max_entries, `next` is the oldest entry's
 * index; every stack id in entries and live is < stacks.size(); every frame id in stacks is < frames.size().
 */
struct recorder {
  std::atomic<bool> on{false};  ///< read relaxed by the observer: the only cost while off
  std::mutex mutex;
  std::atomic<bool> with_stacks{false};  ///< written under `mutex`, read relaxed before a walk of the frames
  bool with_trace{true};                 ///< "all" (ring of entries) or "state" (live blocks only)
  std::size_t max_entries{0};
  std::vector<entry> entries;            ///< the ring
  std::size_t next{0};                   ///< where the next entry goes once the ring is full
  std::size_t dropped{0};                ///< entries overwritten since the last clear
  std::unordered_map<std::uintptr_t, live_block> live;
  std::vector<frame_key> frames;         ///< frame id -> (code, line)
  std::unordered_map<frame_key, std::int32_t, frame_key_hash> frame_ids;
  std::vector<std::vector<std::int32_t>> stacks;  ///< stack id -> frame ids, innermost first
  std::unordered_map<std::vector<std::int32_t>, std::int32_t, stack_hash> stack_ids;
};

recorder& the_recorder()
{
  static recorder* const r = new recorder;  // never destroyed: observers may run while the process exits
  return *r;
}

std::int64_t now_us() noexcept
{
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
    .count();
}

/** @brief Holds the GIL for its lifetime when constructed with true (the thread must have a Python thread state). */
class gil_taken {
 public:
  explicit gil_taken(bool take) noexcept : taken_{take}
  {
    if (taken_) { state_ = PyGILState_Ensure(); }
  }
  gil_taken(gil_taken const&) = delete;
  gil_taken& operator=(gil_taken const&) = delete;
  ~gil_taken()
  {
    if (taken_) { PyGILState_Release(state_); }
  }

 private:
  bool taken_;
  PyGILState_STATE state_{};
};

/** @brief The calling thread's Python frames, innermost first, as owned (code, line) pairs. Requires the GIL. */
std::vector<frame_key> python_frames()
{
  std::vector<frame_key> out;
  PyThreadState* const state = PyThreadState_Get();
  PyFrameObject* frame = PyThreadState_GetFrame(state);  // new reference or null
  while (frame != nullptr && out.size() < max_depth) {
    out.push_back({reinterpret_cast<PyObject*>(PyFrame_GetCode(frame)), PyFrame_GetLineNumber(frame)});
    PyFrameObject* const back = PyFrame_GetBack(frame);  // new reference or null
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  return out;
}

/**
 * @brief The id of the stack made of `frames` (owned references), interned; references the table already held
 * are moved to `release` (the caller drops them after unlocking).
 */
std::int32_t intern_stack(recorder& r, std::vector<frame_key>& frames, std::vector<PyObject*>& release)
{
  std::vector<std::int32_t> ids;
  ids.reserve(frames.size());
  for (frame_key const& f : frames) {
    auto const [it, added] = r.frame_ids.try_emplace(f, static_cast<std::int32_t>(r.frames.size()));
    if (added) {
      r.frames.push_back(f);
    } else {
      release.push_back(f.code);
    }
    ids.push_back(it->second);
  }
  auto const [it, added] = r.stack_ids.try_emplace(ids, static_cast<std::int32_t>(r.stacks.size()));
  if (added) { r.stacks.push_back(std::move(ids)); }
  return it->second;
}

void append(recorder& r, entry const& e)
{
  if (!r.with_trace || r.max_entries == 0) { return; }
  if (r.entries.size() < r.max_entries) {
    r.entries.push_back(e);
    return;
  }
  r.entries[r.next] = e;
  r.next = (r.next + 1) % r.max_entries;
  ++r.dropped;
}

/** @brief Makes the ring hold at most `max_entries` (the newest kept), oldest first from index 0. */
void resize_ring(recorder& r, std::size_t max_entries)
{
  std::vector<entry> ordered;
  std::size_t const n = r.entries.size();
  std::size_t const keep = std::min(n, max_entries);
  ordered.reserve(std::min<std::size_t>(std::max(keep, std::min<std::size_t>(max_entries, 1024)), max_entries));
  for (std::size_t i = n - keep; i < n; ++i) { ordered.push_back(r.entries[(r.next + i) % n]); }
  r.dropped += n - keep;
  r.entries = std::move(ordered);
  r.next = 0;
  r.max_entries = max_entries;
}

void observe(allocation_event const& event) noexcept
{
  recorder& r = the_recorder();
  if (!r.on.load(std::memory_order_relaxed)) { return; }
  try {
    std::vector<frame_key> frames;
    bool const want_python = event.what != allocation_event::action::free &&
                             r.with_stacks.load(std::memory_order_relaxed) && python_alive();
    // PyTorch's operators release the GIL before they allocate: a Python thread that released it takes it back
    // for the frames (as PyTorch's own recorder does); a thread without a Python thread state has no frames.
    bool const take_gil = want_python && PyGILState_Check() == 0 && PyGILState_GetThisThreadState() != nullptr;
    gil_taken const gil{take_gil};
    bool const with_python = want_python && PyGILState_Check() != 0;
    if (with_python) { frames = python_frames(); }
    std::vector<PyObject*> release;
    {
      std::lock_guard const lock{r.mutex};
      if (!r.on.load(std::memory_order_relaxed) || !r.with_stacks.load(std::memory_order_relaxed)) {
        for (frame_key const& f : frames) { release.push_back(f.code); }
        frames.clear();
      }
      std::int32_t const stack = frames.empty() ? no_stack : intern_stack(r, frames, release);
      if (r.on.load(std::memory_order_relaxed)) {
        auto const addr = reinterpret_cast<std::uintptr_t>(event.ptr);
        auto const stream = reinterpret_cast<std::uintptr_t>(event.stream);
        entry e{now_us(), entry_action::alloc, addr, event.size, stream, event.device, stack};
        switch (event.what) {
          case allocation_event::action::alloc:
            r.live[addr] = {event.size, stream, event.device, stack, e.time_us};
            break;
          case allocation_event::action::free:
            e.action = entry_action::free;
            if (auto const it = r.live.find(addr); it != r.live.end()) {
              e.stack = it->second.stack;  // PyTorch's free entries carry the allocation's frames
              if (e.device < 0) { e.device = it->second.device; }
              r.live.erase(it);
            }
            if (e.device < 0) { e.device = 0; }
            break;
          case allocation_event::action::oom:
            e.action = entry_action::oom;
            break;
        }
        append(r, e);
      }
    }
    for (PyObject* code : release) { Py_DECREF(code); }  // the GIL is held: only with_python took references
  } catch (...) {  // out of host memory: the entry is lost, the allocation is not
  }
}

[[maybe_unused]] bool const registered = [] {
  add_observer(&observe);
  return true;
}();

/** @brief Drops what the recorder keeps. Requires the GIL (the code objects' references). */
void clear_locked_and_release(recorder& r)
{
  std::vector<frame_key> frames;
  {
    std::lock_guard const lock{r.mutex};
    r.entries.clear();
    r.next = 0;
    r.dropped = 0;
    r.live.clear();
    frames.swap(r.frames);
    r.frame_ids.clear();
    r.stacks.clear();
    r.stack_ids.clear();
  }
  for (frame_key const& f : frames) { Py_DECREF(f.code); }
}

char const* action_name(entry_action a)
{
  switch (a) {
    case entry_action::alloc: return "alloc";
    case entry_action::free: return "free";
    case entry_action::oom: return "oom";
  }
  return "?";
}

py::dict frame_dict(frame_key const& f)
{
  py::handle const code{f.code};
  py::dict d;
  d["filename"] = code.attr("co_filename");
  d["line"] = f.line;
  d["name"] = code.attr("co_name");
  return d;
}

/**
 * @brief What the recorder holds, as plain Python data: {"entries": [{time_us, action, addr, size, stream,
 * device, stack}] oldest first, "live": [{addr, size, stream, device, stack, time_us}] by address, "stacks":
 * [[{filename, line, name}, ...] innermost first], "dropped": N, "recording": bool, "max_entries": N,
 * "stacks_enabled": bool, "trace_enabled": bool}. stack is an index into "stacks" or -1.
 */
py::dict export_history()
{
  recorder& r = the_recorder();
  std::vector<entry> entries;
  std::vector<std::pair<std::uintptr_t, live_block>> live;
  std::vector<std::vector<std::int32_t>> stacks;
  std::vector<frame_key> frames;
  py::dict out;
  {
    std::lock_guard const lock{r.mutex};
    entries.reserve(r.entries.size());
    for (std::size_t i = 0; i < r.entries.size(); ++i) {
      entries.push_back(r.entries[(r.next + i) % r.entries.size()]);
    }
    live.assign(r.live.begin(), r.live.end());
    stacks = r.stacks;
    frames = r.frames;
    for (frame_key const& f : frames) { Py_INCREF(f.code); }  // kept alive while the lock is released
    out["dropped"] = r.dropped;
    out["recording"] = r.on.load(std::memory_order_relaxed);
    out["max_entries"] = r.max_entries;
    out["stacks_enabled"] = r.with_stacks.load(std::memory_order_relaxed);
    out["trace_enabled"] = r.with_trace;
  }
  std::vector<py::object> owned;  // drops the references taken above, however this function ends
  owned.reserve(frames.size());
  for (frame_key const& f : frames) { owned.push_back(py::reinterpret_steal<py::object>(f.code)); }

  std::vector<py::dict> frame_dicts;
  frame_dicts.reserve(frames.size());
  for (frame_key const& f : frames) { frame_dicts.push_back(frame_dict(f)); }
  py::list stack_list;
  for (auto const& s : stacks) {
    py::list l;
    for (std::int32_t f : s) { l.append(frame_dicts[static_cast<std::size_t>(f)]); }
    stack_list.append(l);
  }
  py::list entry_list;
  for (entry const& e : entries) {
    py::dict d;
    d["time_us"] = e.time_us;
    d["action"] = action_name(e.action);
    d["addr"] = e.addr;
    d["size"] = e.size;
    d["stream"] = e.stream;
    d["device"] = e.device;
    d["stack"] = e.stack;
    entry_list.append(d);
  }
  std::sort(live.begin(), live.end(), [](auto const& a, auto const& b) { return a.first < b.first; });
  py::list live_list;
  for (auto const& [addr, b] : live) {
    py::dict d;
    d["addr"] = addr;
    d["size"] = b.size;
    d["stream"] = b.stream;
    d["device"] = b.device;
    d["stack"] = b.stack;
    d["time_us"] = b.time_us;
    live_list.append(d);
  }
  out["entries"] = entry_list;
  out["live"] = live_list;
  out["stacks"] = stack_list;
  return out;
}

registration const torch_history{binding_order::allocators, "torch_history", [](py::module_& m) {
  m.def(
    "_torch_history_enable",
    [](std::size_t max_entries, bool with_stacks, bool with_trace) {
      recorder& r = the_recorder();
      std::lock_guard const lock{r.mutex};
      resize_ring(r, max_entries);
      r.with_stacks.store(with_stacks, std::memory_order_relaxed);
      r.with_trace = with_trace;
      r.on.store(true, std::memory_order_relaxed);
    },
    py::arg("max_entries"), py::arg("with_stacks"), py::arg("with_trace") = true,
    "Starts recording (or changes the settings of the recording): at most max_entries entries (the oldest "
    "overwritten; a smaller limit drops the oldest now), Python stacks of threads that hold the GIL when "
    "with_stacks, the ring of entries only when with_trace (else the live blocks only). What was recorded "
    "before stays (_torch_history_clear drops it).");
  m.def(
    "_torch_history_disable",
    [] {
      recorder& r = the_recorder();
      std::lock_guard const lock{r.mutex};
      r.on.store(false, std::memory_order_relaxed);
    },
    "Stops recording; what was recorded stays for _torch_history_export until cleared or recording restarts.");
  m.def("_torch_history_clear", [] { clear_locked_and_release(the_recorder()); },
        "Drops what was recorded (recording goes on if it was on).");
  m.def("_torch_history_export", &export_history,
        "What the recorder holds, as plain data: entries (oldest first), live blocks, stacks and settings.");
}};

}  // namespace
}  // namespace gpumem::python::torch_hooks
