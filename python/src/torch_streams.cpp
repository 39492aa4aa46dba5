// Tensor.record_stream (torch_hooks.hpp): a table from a live (0, 0) block to the streams recorded for it, and the
// frees that honour it. free2 (bind_allocator_hooks.cpp) asks here after the private pools: a block with recorded
// streams is freed on its allocation stream after that stream waits for an event recorded on each of them (stream-
// ordered, no host wait), so the device resource hands the memory out again only after their work.
//
// Captures (torch_capture.hpp): waiting on an event recorded outside a capture invalidates it, and so do the device
// resource's event queries and synchronisations in global mode. So while a capture is underway (pool_begin to
// pool_end), or while the allocation stream or a recorded stream is capturing, a (0, 0) free is held back in a list
// and carried out at the next pool_end, or at the next free made while nothing captures.
//
// Configuration: `_gpumem._torch_record_stream_mode("order" | "error")` (GPUMEM_TORCH_ALLOC_CONF=record_stream:...)
// makes record_stream order frees (the default) or refuse, for programs that want every cross-stream use explicit.
//
// A recorded stream must outlive the free of the block (PyTorch's streams live as long as the process); a block of a
// private pool is accepted and nothing is recorded for it (torch_capture.hpp says why).
//
// Cost: record_stream takes one mutex, a size query of gpumem's pointer registry and a hash-map insert (and one
// atomic load for the private pools' blocks, a lookup under their mutex when any is live). A free with
// nothing recorded and nothing held back pays two atomic loads (recorded_count, held_count) and one for
// capture_underway(); with recorded streams, the mutex, a hash-map erase, and per recorded stream other than the
// allocation stream one event create + record + wait + destroy. One mutex serves: record_stream is rare next to
// allocation (PyTorch calls it for tensors handed between streams), and the free path skips it when the table is empty.
#include "registry.hpp"
#include "torch_capture.hpp"
#include "torch_hooks.hpp"

#include <gpumem.h>
#include <gpumem/cuda_device_id.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/debug_log.hpp>
#include <gpumem/event.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gpumem::python::torch_hooks {
namespace {

/** @brief What record_stream remembers of one block. */
struct recorded {
  int device{};                      ///< current when the first stream was recorded: the events are made there
  std::vector<cudaStream_t> streams;  ///< distinct; usually one or two
};

/** @brief A (0, 0) free held back while something captures. */
struct held_free {
  void* ptr;
  cudaStream_t stream;  ///< the allocation stream, which free2 names
  recorded uses;        ///< streams empty: none were recorded
};

std::mutex mutex;
std::unordered_map<void*, recorded> table;  // guarded by mutex
std::vector<held_free> held;                // guarded by mutex
std::atomic<std::size_t> recorded_count{0};  // table.size(), for the free path's test without the mutex
std::atomic<std::size_t> held_count{0};      // held.size(), likewise
std::atomic<bool> refuse{false};             // record_stream:error

std::string pointer_text(void const* ptr)
{
  char text[32];
  std::snprintf(text, sizeof text, "%p", ptr);
  return text;
}

/** @brief true when `stream` is capturing, or cannot say (the legacy stream beside a capture: treat it as one). */
bool capturing(cudaStream_t stream) noexcept
{
  try {
    return cuda_stream_view{stream}.is_capturing();
  } catch (...) {
    return true;
  }
}

bool any_capturing(cudaStream_t stream, recorded const& uses) noexcept
{
  return capturing(stream) || std::any_of(uses.streams.begin(), uses.streams.end(), capturing);
}

/** @brief Makes `stream` wait for the work queued so far on each recorded stream, then frees `ptr` on it. */
gpumem_status free_ordered(void* ptr, cudaStream_t stream, recorded const& uses) noexcept
{
  try {
    if (!uses.streams.empty()) {
      cuda_set_device_raii const on_device{cuda_device_id{uses.device}};
      for (cudaStream_t const used : uses.streams) {
        event done{event_flags::disable_timing};  // destroying it after the wait is safe (CUDA keeps the record)
        done.record(cuda_stream_view{used});
        done.wait(cuda_stream_view{stream});
      }
    }
  } catch (...) {
    return fail_with_current_exception();  // the block stays allocated rather than be reused too early
  }
  gpumem_status const status = gpumem_free_async(ptr, stream);
  return status == GPUMEM_SUCCESS ? status : fail(status, gpumem_last_error());
}

void hold(void* ptr, cudaStream_t stream, recorded uses)
{
  std::scoped_lock const lock{mutex};
  held.push_back({ptr, stream, std::move(uses)});
  held_count.store(held.size(), std::memory_order_release);
}

}  // namespace

gpumem_status record_stream(void* ptr, void* stream) noexcept
{
  if (refuse.load(std::memory_order_acquire)) {
    return fail(GPUMEM_ERROR_INVALID_VALUE,
                "Tensor.record_stream is disabled by GPUMEM_TORCH_ALLOC_CONF=record_stream:error; synchronise the "
                "streams before the tensor is freed");
  }
  if (pool_block_is_live(ptr)) { return GPUMEM_SUCCESS; }  // a private pool's block: see torch_capture.hpp
  std::size_t size = 0;
  if (ptr == nullptr || gpumem_allocation_size(ptr, &size) != GPUMEM_SUCCESS) {
    return fail(GPUMEM_ERROR_INVALID_VALUE, ("record_stream: " + pointer_text(ptr) +
                                             " is not a live allocation of gpumem's PyTorch allocator")
                                              .c_str());
  }
  try {
    int const device = get_current_cuda_device().value();
    auto const handle = static_cast<cudaStream_t>(stream);
    std::scoped_lock const lock{mutex};
    auto [entry, added] = table.try_emplace(ptr);
    if (added) { entry->second.device = device; }
    auto& streams = entry->second.streams;
    if (std::find(streams.begin(), streams.end(), handle) == streams.end()) { streams.push_back(handle); }
    recorded_count.store(table.size(), std::memory_order_release);
  } catch (...) {
    return fail_with_current_exception();
  }
  return GPUMEM_SUCCESS;
}

bool free_after_recorded_streams(void* ptr, void* stream, gpumem_status* status) noexcept
{
  bool const capture = capture_underway();
  if (!capture && held_count.load(std::memory_order_acquire) != 0) { (void)run_held_frees(); }
  if (!capture && recorded_count.load(std::memory_order_acquire) == 0) { return false; }
  auto const handle = static_cast<cudaStream_t>(stream);
  recorded uses;
  try {
    {
      std::scoped_lock const lock{mutex};
      if (auto const found = table.find(ptr); found != table.end()) {
        uses = std::move(found->second);
        table.erase(found);
        recorded_count.store(table.size(), std::memory_order_release);
      }
    }
    std::erase(uses.streams, handle);  // recording the allocation stream itself orders nothing
    if (!capture && uses.streams.empty()) { return false; }
    if (capture || any_capturing(handle, uses)) {
      hold(ptr, handle, std::move(uses));
      *status = GPUMEM_SUCCESS;
      return true;
    }
  } catch (...) {
    *status = fail_with_current_exception();
    return true;
  }
  *status = free_ordered(ptr, handle, uses);
  return true;
}

gpumem_status run_held_frees() noexcept
{
  std::vector<held_free> due;
  try {
    std::scoped_lock const lock{mutex};
    due.swap(held);
    held_count.store(0, std::memory_order_release);
    for (held_free& h : due) {  // streams recorded for the block after its free was held back count too
      auto const found = table.find(h.ptr);
      if (found == table.end()) { continue; }
      if (h.uses.streams.empty()) { h.uses.device = found->second.device; }
      for (cudaStream_t const s : found->second.streams) {
        if (s != h.stream && std::find(h.uses.streams.begin(), h.uses.streams.end(), s) == h.uses.streams.end()) {
          h.uses.streams.push_back(s);
        }
      }
      table.erase(found);
    }
    recorded_count.store(table.size(), std::memory_order_release);
  } catch (...) {  // no memory for the merge: the frees stay held (those not yet swapped out) or run as recorded
    gpumem::detail::log(log_level::error, "gpumem.torch: merging streams recorded for held-back frees failed");
  }
  gpumem_status first = GPUMEM_SUCCESS;
  std::vector<held_free> still;  // a stream still capturing (a capture without pools): keep waiting
  for (held_free& h : due) {
    if (any_capturing(h.stream, h.uses)) {
      still.push_back(std::move(h));
      continue;
    }
    gpumem_status const status = free_ordered(h.ptr, h.stream, h.uses);
    if (status != GPUMEM_SUCCESS) {
      gpumem::detail::log(log_level::error, [&] {
        return "gpumem.torch: a free held back during a CUDA graph capture failed: " +
               std::string{gpumem_last_error()};
      });
      if (first == GPUMEM_SUCCESS) { first = status; }
    }
  }
  if (!still.empty()) {
    try {
      std::scoped_lock const lock{mutex};
      for (held_free& h : still) { held.push_back(std::move(h)); }
      held_count.store(held.size(), std::memory_order_release);
    } catch (...) {
      return fail_with_current_exception();
    }
  }
  return first;
}

namespace {

registration const record_stream_binding{binding_order::allocators, "torch_streams", [](py::module_& m) {
  m.def(
    "_torch_record_stream_mode",
    [](std::string const& mode) {
      if (mode != "order" && mode != "error") {
        throw py::value_error("record_stream: expected 'order' or 'error', got '" + mode + "'");
      }
      refuse.store(mode == "error", std::memory_order_release);
    },
    py::arg("mode"),
    "What Tensor.record_stream does with gpumem as PyTorch's allocator: 'order' (frees wait for the recorded "
    "streams' work) or 'error' (it raises). Raises ValueError for any other mode.");
  m.def(
    "_torch_log_info", [](std::string const& message) { gpumem::detail::log(log_level::info, message); },
    py::arg("message"), "Writes `message` to gpumem's debug log at info level (for gpumem.torch).");
  m.def(
    "_torch_held_frees", [] { return held_count.load(std::memory_order_acquire); },
    "How many frees of PyTorch's memory are held back until no CUDA graph capture is underway (for tests).");
}};

}  // namespace
}  // namespace gpumem::python::torch_hooks
