// The host backend (backend.hpp): CUDA's contract on the CPU, so every algorithm and every stream-ordering
// rule is exercised by CI without a GPU.
//
// - Device memory: 256-byte aligned host memory, counted against each emulated device's capacity
//   (host_config.hpp). Freeing waits for all work on the device first, as cudaFree does. Pinned memory: host memory, up to the machine's physical memory. Managed memory
//   counts against the device like device memory.
// - Streams: stream_queue (a worker thread each). CUDA's implicit synchronisation is kept: work on the
//   legacy default stream waits for all earlier work of the device's blocking streams, and work on a
//   blocking stream waits for earlier work of the legacy default stream. Each thread has its own
//   per-thread default stream per device (blocking), as CUDA's cudaStreamPerThread.
// - Events: the completion marker of their latest record (with the time it completed).
// - Stream-ordered memory pools: host_mempool (mempool.hpp), with CUDA's default reuse rules.
// - Stream capture (capture_sequence.hpp): stream-ordered calls on a capturing stream become graph nodes,
//   and a stream that waits on an event recorded in a capture joins it. Calls that CUDA forbids during a
//   capture are refused with CUDA's error and invalidate the capture (capture_rules.hpp); what is not
//   emulated (graph memory nodes) is refused with cudaErrorNotSupported. A graph launch runs the nodes on
//   the launch stream in dependency order (host_graph.hpp).
// - Handles (handle_table.hpp): stream and event handles are never reused, and a call on a destroyed one
//   stops the process, where CUDA's behaviour is undefined.
#include "../device_attributes.hpp"
#include "capture_rules.hpp"
#include "handle_table.hpp"
#include "host_config.hpp"
#include "host_error.hpp"
#include "host_graph.hpp"
#include "mempool.hpp"
#include "stream_queue.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/detail/thread_annotations.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/align.hpp>

#include <cuda_runtime_api.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

namespace gpumem::detail {
namespace {

using host::captured_record;
using host::completion;
using host::completion_ptr;
using host::fail;
using host::stream_queue;

struct host_event {
  host_event(unsigned f, int d) noexcept : flags{f}, device{d} {}

  unsigned flags;
  int device;  // current at creation: CUDA records an event only on a stream of its own device
  detail::mutex mutex;
  completion_ptr last GPUMEM_GUARDED_BY(mutex);  // the latest record's marker; null until first recorded
  std::optional<captured_record> captured GPUMEM_GUARDED_BY(mutex);  // set while the latest record was captured
};

/// What an event's latest record was: a completion marker, or a captured record.
struct event_record_state {
  completion_ptr last;
  std::optional<captured_record> captured;
};

enum class memory_kind { device, managed, pinned };

struct allocation {
  std::size_t bytes;
  int device;
  memory_kind kind;
};

std::size_t physical_memory() noexcept
{
  long const pages = sysconf(_SC_PHYS_PAGES);
  long const page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) { return std::size_t{1} << 40; }
  return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page_size);
}

class host_backend final : public backend {
 public:
  host_backend()
    : config_{host::read_host_config()},
      used_(static_cast<std::size_t>(config_.device_count())),
      default_mempools_(static_cast<std::size_t>(config_.device_count()), nullptr),
      default_managed_mempools_(static_cast<std::size_t>(config_.device_count()), nullptr)
  {
    for (int device = 0; device < config_.device_count(); ++device) {
      default_streams_.push_back(
        std::make_shared<stream_queue>(device, 0U, 0, stream_queue::role::legacy_default));
    }
  }

  [[nodiscard]] backend_kind kind() const noexcept override { return backend_kind::host; }

  // ---- devices --------------------------------------------------------------------------------------
  [[nodiscard]] int device_count() override { return config_.device_count(); }
  [[nodiscard]] int current_device() override { return current_device_; }
  void set_current_device(int device) override
  {
    check_device(device);
    current_device_ = device;
  }

  [[nodiscard]] device_properties properties(int device) override
  {
    check_device(device);
    device_properties p;
    // The emulated device's own ordinal (GPUMEM_HOST_VISIBLE_DEVICES), so processes that see the same
    // emulated device under different ordinals can tell that it is the same one, as a GPU's PCI bus id tells.
    p.name = "gpumem host device " + std::to_string(config_.visible_devices[static_cast<std::size_t>(device)]);
    p.total_memory = config_.device_capacity;
    p.multiprocessor_count = static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
    p.memory_pools_supported = true;
    p.managed_memory_supported = true;
    p.concurrent_managed_access = true;
    p.pageable_memory_access = true;  // the emulated device's memory is host memory
    p.fabric_handles_supported = false;
    return p;
  }

  [[nodiscard]] memory_info mem_info(int device) override
  {
    check_device(device);
    std::size_t const used = used_[static_cast<std::size_t>(device)].load(std::memory_order_relaxed);
    return {config_.device_capacity - std::min(used, config_.device_capacity), config_.device_capacity};
  }

  [[nodiscard]] int runtime_version() override { return CUDART_VERSION; }
  [[nodiscard]] int driver_version() override { return 0; }

  void device_synchronize() override
  {
    captures_.check_device_synchronize(current_device_);
    for (auto const& queue : queues_of_device(current_device_)) { queue->synchronize(); }
    release_pools_over_threshold();
  }
  [[nodiscard]] std::vector<std::pair<std::string, int>> device_attributes(int device) override
  {
    device_properties const p = properties(device);
    auto const [least, greatest] = stream_priority_range();
    std::vector<std::pair<std::string, int>> values;
    for (device_attribute const& a : device_attribute_table()) {
      int value = 0;  // a feature the emulated device does not have (it runs no kernels, has no bus, no textures)
      switch (a.attribute) {
        case cudaDevAttrMultiProcessorCount: value = p.multiprocessor_count; break;
        case cudaDevAttrManagedMemory:
        case cudaDevAttrConcurrentManagedAccess:
        case cudaDevAttrMemoryPoolsSupported:
        case cudaDevAttrUnifiedAddressing:
        case cudaDevAttrCanMapHostMemory: value = 1; break;
        case cudaDevAttrStreamPrioritiesSupported: value = least != greatest ? 1 : 0; break;
        default: break;
      }
      values.emplace_back(std::string{a.name}, value);
    }
    return values;
  }
  [[nodiscard]] int device_by_pci_bus_id(std::string const& pci_bus_id) override
  {
    // CUDA's forms: "domain:bus:device.function" or "bus:device.function", hexadecimal fields.
    auto const hex_field = [](std::string_view field, std::size_t max_digits) {
      return !field.empty() && field.size() <= max_digits &&
             field.find_first_not_of("0123456789abcdefABCDEF") == std::string_view::npos;
    };
    std::string_view id{pci_bus_id};
    bool well_formed = false;
    if (auto const dot = id.rfind('.'); dot != std::string_view::npos && hex_field(id.substr(dot + 1), 1)) {
      std::string_view const head = id.substr(0, dot);
      auto const last = head.rfind(':');
      if (last != std::string_view::npos && hex_field(head.substr(last + 1), 2)) {
        std::string_view const front = head.substr(0, last);
        auto const first = front.rfind(':');
        well_formed = first == std::string_view::npos ? hex_field(front, 2)
                                                       : hex_field(front.substr(first + 1), 2) && hex_field(front.substr(0, first), 8);
      }
    }
    if (!well_formed) { fail(cudaErrorInvalidValue, "device_by_pci_bus_id: \"" + pci_bus_id + "\" is not a PCI bus id"); }
    fail(cudaErrorInvalidDevice, "device_by_pci_bus_id: no device at \"" + pci_bus_id + "\" (host devices have no PCI bus)");
  }

  /// Counts `bytes` of physical memory made outside allocate() (the VMM emulation) against `device`'s
  /// capacity. @return false (nothing counted) when the device has not that much left.
  bool charge_device(int device, std::size_t bytes) noexcept
  {
    auto& counter = used_[static_cast<std::size_t>(device)];
    std::size_t used = counter.load(std::memory_order_relaxed);
    do {
      if (bytes > config_.device_capacity - std::min(used, config_.device_capacity)) { return false; }
    } while (!counter.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
    return true;
  }
  void uncharge_device(int device, std::size_t bytes) noexcept
  {
    used_[static_cast<std::size_t>(device)].fetch_sub(bytes, std::memory_order_relaxed);
  }

  // ---- memory ---------------------------------------------------------------------------------------
  [[nodiscard]] void* malloc_device(std::size_t bytes) override
  {
    captures_.check_unsafe_call("malloc_device");
    return allocate(bytes, memory_kind::device, current_device_);
  }
  void free_device(void* ptr) noexcept override { free_unless_refused(ptr, memory_kind::device, "free_device"); }
  [[nodiscard]] void* malloc_managed(std::size_t bytes) override
  {
    captures_.check_unsafe_call("malloc_managed");
    return allocate(bytes, memory_kind::managed, current_device_);
  }
  void free_managed(void* ptr) noexcept override { free_unless_refused(ptr, memory_kind::managed, "free_managed"); }
  [[nodiscard]] void* malloc_pinned(std::size_t bytes) override
  {
    return allocate(bytes, memory_kind::pinned, current_device_);
  }
  void free_pinned(void* ptr) noexcept override { release(ptr, memory_kind::pinned, "free_pinned", true); }
  [[nodiscard]] bool is_pinned_host(void const* ptr) noexcept override
  {
    if (ptr == nullptr) { return false; }
    detail::lock_guard lock{memory_mutex_};
    auto it = allocations_.upper_bound(const_cast<void*>(ptr));  // NOLINT: map key only
    if (it == allocations_.begin()) { return false; }
    --it;
    auto const offset = static_cast<std::size_t>(static_cast<char const*>(ptr) - static_cast<char const*>(it->first));
    return it->second.kind == memory_kind::pinned && offset < it->second.bytes;
  }
  [[nodiscard]] pointer_attributes pointer_get_attributes(void const* ptr) override
  {
    if (ptr == nullptr) { fail(cudaErrorInvalidValue, "pointer_get_attributes: null pointer"); }
    std::optional<allocation> const found = find_allocation(ptr, 1);
    if (!found) { return {}; }  // memory the backend did not allocate: unregistered host memory
    void* const address = const_cast<void*>(ptr);  // NOLINT(cppcoreguidelines-pro-type-const-cast): CUDA's struct
    switch (found->kind) {
      case memory_kind::device: return {2, found->device, address, nullptr};
      case memory_kind::managed: return {3, found->device, address, address};
      case memory_kind::pinned: return {1, found->device, address, address};
    }
    return {};
  }
  [[nodiscard]] ipc_memory_handle ipc_get_mem_handle(void const* ptr, std::size_t bytes) override
  {
    fail(cudaErrorNotSupported, "ipc_get_mem_handle(" + format_pointer(ptr) + ", " + std::to_string(bytes) +
                                  " bytes): the host backend's cudaMalloc memory is private to its process; "
                                  "share memory of a vmm_pool_memory_resource instead");
  }
  [[nodiscard]] void* ipc_open_mem_handle(std::array<unsigned char, 64> const& /*handle*/, int device) override
  {
    fail(cudaErrorNotSupported, "ipc_open_mem_handle on device " + std::to_string(device) +
                                  ": the host backend has no CUDA IPC (its cudaMalloc memory is private to its process)");
  }
  void ipc_close_mem_handle(void* ptr) noexcept override
  {
    std::fprintf(stderr, "gpumem host backend: ipc_close_mem_handle(%p) of memory it never opened\n", ptr);
  }  [[nodiscard]] int mempool_export_handle(cudaMemPool_t pool) override
  {
    fail(cudaErrorNotSupported, "mempool_export_handle(" + format_pointer(pool) +
                                  "): the host backend's memory pools are private to their process; share memory "
                                  "of a vmm_pool_memory_resource instead");
  }
  [[nodiscard]] std::array<unsigned char, 64> mempool_export_pointer(void const* ptr) override
  {
    fail(cudaErrorNotSupported, "mempool_export_pointer(" + format_pointer(ptr) +
                                  "): the host backend's memory pools are private to their process");
  }
  [[nodiscard]] cudaMemPool_t mempool_import_handle(int fd) override
  {
    fail(cudaErrorNotSupported, "mempool_import_handle(" + std::to_string(fd) +
                                  "): the host backend's memory pools are private to their process");
  }
  [[nodiscard]] void* mempool_import_pointer(cudaMemPool_t pool, std::array<unsigned char, 64> const& /*data*/) override
  {
    fail(cudaErrorNotSupported, "mempool_import_pointer(" + format_pointer(pool) +
                                  "): the host backend's memory pools are private to their process");
  }


  [[nodiscard]] bool is_migratable(void const* ptr, int device) noexcept override
  {
    // Every emulated device has concurrent managed access and none accesses pageable memory, so exactly
    // managed memory (malloc_managed or a managed pool's blocks) migrates.
    if (device != cudaCpuDeviceId && (device < 0 || device >= config_.device_count())) { return false; }
    return managed_allocation_size(ptr).has_value();
  }

  // ---- stream-ordered memory pools ------------------------------------------------------------------
  [[nodiscard]] cudaMemPool_t mempool_create(int device, mempool_handle_type /*handle_type*/,
                                             std::size_t max_size) override
  {
    check_device(device);
    auto pool = make_mempool(device, max_size);
    auto* handle = reinterpret_cast<cudaMemPool_t>(pool.get());
    detail::lock_guard lock{registry_mutex_};
    mempools_.emplace(handle, std::move(pool));
    return handle;
  }

  void mempool_destroy(cudaMemPool_t pool) noexcept override
  {
    std::unique_ptr<host::host_mempool> doomed;
    {
      detail::lock_guard lock{registry_mutex_};
      auto const found = mempools_.find(pool);
      if (found == mempools_.end() || is_default_mempool(pool) || is_default_managed_mempool(pool)) {
        std::fprintf(stderr, "gpumem host backend: mempool_destroy of an unknown or default pool %p ignored\n",
                     static_cast<void*>(pool));
        return;
      }
      doomed = std::move(found->second);
      mempools_.erase(found);
    }
  }

  [[nodiscard]] cudaMemPool_t mempool_default(int device) override
  {
    check_device(device);
    detail::lock_guard lock{registry_mutex_};
    auto& slot = default_mempools_[static_cast<std::size_t>(device)];
    if (slot == nullptr) {
      auto pool = make_mempool(device, 0);
      slot = reinterpret_cast<cudaMemPool_t>(pool.get());
      mempools_.emplace(slot, std::move(pool));
    }
    return slot;
  }

  [[nodiscard]] cudaMemPool_t mempool_default_managed(int device) override
  {
    check_device(device);
    detail::lock_guard lock{registry_mutex_};
    auto& slot = default_managed_mempools_[static_cast<std::size_t>(device)];
    if (slot == nullptr) {
      auto pool = make_mempool(device, 0, memory_kind::managed);
      slot = reinterpret_cast<cudaMemPool_t>(pool.get());
      mempools_.emplace(slot, std::move(pool));
    }
    return slot;
  }

  void mempool_set_release_threshold(cudaMemPool_t pool, std::uint64_t bytes) override
  {
    resolve(pool).set_release_threshold(bytes);
  }
  [[nodiscard]] std::uint64_t mempool_release_threshold(cudaMemPool_t pool) override
  {
    return resolve(pool).release_threshold();
  }
  void mempool_trim(cudaMemPool_t pool, std::size_t min_bytes_to_keep) override { resolve(pool).trim(min_bytes_to_keep); }
  [[nodiscard]] mempool_usage mempool_get_usage(cudaMemPool_t pool) override { return resolve(pool).usage(); }

  [[nodiscard]] void* mempool_malloc_async(cudaMemPool_t pool, std::size_t bytes, cudaStream_t stream) override
  {
    auto& target = resolve(pool);
    auto const queue = resolve(stream);
    captures_.refuse_if_capturing(*queue, "mempool_malloc_async", cudaErrorNotSupported, not_emulated_in_capture);
    return target.allocate(bytes, queue.get());
  }

  void mempool_free_async(void* ptr, cudaStream_t stream) noexcept override
  {
    if (ptr == nullptr) { return; }
    try {
      auto const queue = resolve(stream);
      captures_.refuse_if_capturing(*queue, "mempool_free_async", cudaErrorNotSupported, not_emulated_in_capture);
      auto marker = std::make_shared<completion>();
      enqueue(*queue, [marker] { marker->signal(); });
      detail::lock_guard lock{registry_mutex_};
      for (auto const& [handle, pool] : mempools_) {
        if (pool->free(ptr, queue.get(), marker)) { return; }
      }
      std::fprintf(stderr, "gpumem host backend: mempool_free_async(%p): not a live pool allocation; ignored\n", ptr);
    } catch (std::exception const& e) {
      std::fprintf(stderr, "gpumem host backend: mempool_free_async(%p) failed: %s\n", ptr, e.what());
    }
  }

  // ---- streams --------------------------------------------------------------------------------------
  [[nodiscard]] cudaStream_t stream_create(unsigned flags, int priority) override
  {
    if ((flags & ~static_cast<unsigned>(cudaStreamNonBlocking)) != 0) {
      fail(cudaErrorInvalidValue, "stream_create: unknown flags");
    }
    auto const [least, greatest] = stream_priority_range();
    int const clamped = std::clamp(priority, greatest, least);  // CUDA clamps priorities into range
    auto queue =
      std::make_shared<stream_queue>(current_device_, flags, clamped, stream_queue::role::created);
    detail::lock_guard lock{registry_mutex_};
    return streams_.add(std::move(queue));
  }

  void stream_destroy(cudaStream_t stream) noexcept override
  {
    std::shared_ptr<stream_queue> queue;
    {
      detail::lock_guard lock{registry_mutex_};
      auto [found, state] = streams_.remove(stream);
      if (state == host::handle_state::destroyed) { host::stop_on_destroyed_handle("stream", stream, "stream_destroy"); }
      if (state == host::handle_state::unknown) {
        std::fprintf(stderr, "gpumem host backend: stream_destroy of an unknown stream %p ignored\n",
                     static_cast<void*>(stream));
        return;
      }
      queue = std::move(found);
    }
    // As in CUDA, work already submitted completes; here the destroying thread waits for it.
    queue.reset();
  }

  void stream_synchronize(cudaStream_t stream) override
  {
    auto const queue = resolve(stream);
    captures_.refuse_if_capturing(*queue, "stream_synchronize", cudaErrorStreamCaptureUnsupported);
    captures_.check_unsafe_call("stream_synchronize");
    queue->synchronize();
    release_pools_over_threshold();
  }

  [[nodiscard]] bool stream_query(cudaStream_t stream) override
  {
    auto const queue = resolve(stream);
    captures_.refuse_if_capturing(*queue, "stream_query", cudaErrorStreamCaptureUnsupported);
    captures_.check_unsafe_call("stream_query");
    return queue->idle();
  }

  void stream_wait_event(cudaStream_t stream, cudaEvent_t event) override
  {
    auto const queue = resolve(stream);
    event_record_state const state = latest_record(event);
    if (captures_.wait_event(queue, state.captured)) { return; }  // a fork or a join of a capture
    if (state.last == nullptr) { return; }  // never recorded: nothing to wait for (CUDA's behaviour)
    enqueue(*queue, [marker = state.last] { marker->wait(); });
  }

  [[nodiscard]] int stream_device(cudaStream_t stream) override { return resolve(stream)->device(); }
  [[nodiscard]] unsigned stream_flags(cudaStream_t stream) override { return resolve(stream)->flags(); }
  [[nodiscard]] int stream_priority(cudaStream_t stream) override { return resolve(stream)->priority(); }
  [[nodiscard]] std::pair<int, int> stream_priority_range() override { return {0, -5}; }

  void launch_host_func(cudaStream_t stream, void (*fn)(void*), void* user_data) override
  {
    if (fn == nullptr) { fail(cudaErrorInvalidValue, "launch_host_func: null function"); }
    submit(stream, [fn, user_data] { fn(user_data); }, "launch_host_func");
  }

  // ---- events ---------------------------------------------------------------------------------------
  [[nodiscard]] cudaEvent_t event_create(unsigned flags) override
  {
    unsigned const known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
    if ((flags & ~known) != 0) { fail(cudaErrorInvalidValue, "event_create: unknown flags"); }
    if ((flags & cudaEventInterprocess) != 0 && (flags & cudaEventDisableTiming) == 0) {
      fail(cudaErrorInvalidValue, "event_create: an interprocess event must also disable timing");
    }
    auto event = std::make_shared<host_event>(flags, current_device_);
    detail::lock_guard lock{registry_mutex_};
    return events_.add(std::move(event));
  }

  void event_destroy(cudaEvent_t event) noexcept override
  {
    detail::lock_guard lock{registry_mutex_};
    auto const state = events_.remove(event).second;
    if (state == host::handle_state::destroyed) { host::stop_on_destroyed_handle("event", event, "event_destroy"); }
    if (state == host::handle_state::unknown) {
      std::fprintf(stderr, "gpumem host backend: event_destroy of an unknown event %p ignored\n",
                   static_cast<void*>(event));
    }
  }

  void event_record(cudaEvent_t event, cudaStream_t stream) override
  {
    auto const target = resolve(event);
    auto const queue = resolve(stream);
    if (target->device != queue->device()) {
      std::string const what = "event_record: an event of device " + std::to_string(target->device) +
                               " on a stream of device " + std::to_string(queue->device());
      fail(cudaErrorInvalidResourceHandle, what.c_str());
    }
    if (auto captured = captures_.capture_event_record(*queue)) {
      detail::lock_guard lock{target->mutex};
      target->captured = std::move(captured);
      return;
    }
    auto marker = std::make_shared<completion>();
    // Enqueued before it becomes the event's latest record: a wait that finds it (another thread's
    // stream_wait_event) then always follows a record already in its stream, as in CUDA, where a record
    // enters its stream at once. Published first, a wait could enter a stream ahead of the record it waits
    // for, and two streams waiting on each other's records would never finish.
    enqueue(*queue, [marker] { marker->signal(); });
    detail::lock_guard lock{target->mutex};
    target->last = std::move(marker);
    target->captured.reset();
  }

  void event_synchronize(cudaEvent_t event) override
  {
    event_record_state const state = latest_record(event);
    if (state.captured) { host::capture_rules::refuse_captured_event(*state.captured, "event_synchronize"); }
    captures_.check_unsafe_call("event_synchronize");  // as cudaEventSynchronize: unsafe while a capture prohibits it
    if (state.last != nullptr) { state.last->wait(); }
    release_pools_over_threshold();
  }

  [[nodiscard]] bool event_query(cudaEvent_t event) override
  {
    event_record_state const state = latest_record(event);
    if (state.captured) { host::capture_rules::refuse_captured_event(*state.captured, "event_query"); }
    captures_.check_unsafe_call("event_query");  // as cudaEventQuery: unsafe while a capture prohibits it
    return state.last == nullptr || state.last->done();
  }

  [[nodiscard]] float event_elapsed_ms(cudaEvent_t start, cudaEvent_t end) override
  {
    for (cudaEvent_t const event : {start, end}) {
      if ((resolve(event)->flags & cudaEventDisableTiming) != 0) {
        fail(cudaErrorInvalidResourceHandle, "event_elapsed_ms: an event was created with timing disabled");
      }
    }
    event_record_state const start_state = latest_record(start);
    event_record_state const end_state = latest_record(end);
    for (event_record_state const* state : {&start_state, &end_state}) {
      if (state->captured) { host::capture_rules::refuse_captured_event(*state->captured, "event_elapsed_ms"); }
    }
    completion_ptr const& first = start_state.last;
    completion_ptr const& second = end_state.last;
    if (first == nullptr || second == nullptr) {
      fail(cudaErrorInvalidResourceHandle, "event_elapsed_ms: an event was never recorded");
    }
    if (!first->done() || !second->done()) { fail(cudaErrorNotReady, "event_elapsed_ms: an event has not completed"); }
    return std::chrono::duration<float, std::milli>(second->when() - first->when()).count();
  }

  // ---- copies and fills -----------------------------------------------------------------------------
  void memcpy_async(void* dst, void const* src, std::size_t bytes, cudaStream_t stream) override
  {
    if (bytes == 0) { return; }
    if (dst == nullptr || src == nullptr) { fail(cudaErrorInvalidValue, "memcpy_async: null pointer"); }
    submit(stream, [dst, src, bytes] { std::memcpy(dst, src, bytes); }, "memcpy_async");
  }

  void memset_async(void* dst, int value, std::size_t bytes, cudaStream_t stream) override
  {
    if (bytes == 0) { return; }
    if (dst == nullptr) { fail(cudaErrorInvalidValue, "memset_async: null pointer"); }
    submit(stream, [dst, value, bytes] { std::memset(dst, value, bytes); }, "memset_async");
  }

  void mem_prefetch_async(void const* ptr, std::size_t bytes, int device, cudaStream_t stream) override
  {
    if (bytes == 0) { return; }
    if (ptr == nullptr) { fail(cudaErrorInvalidValue, "mem_prefetch_async: null pointer"); }
    if (device != cudaCpuDeviceId) { check_device(device); }
    // As cudaMemPrefetchAsync: only managed memory migrates, and the range must lie in one allocation.
    std::optional<std::size_t> const available = managed_allocation_size(ptr);
    if (!available) {
      fail(cudaErrorInvalidValue, "mem_prefetch_async: the memory is not managed memory");
    }
    if (bytes > *available) {
      fail(cudaErrorInvalidValue, "mem_prefetch_async: the range runs past the end of its managed allocation");
    }
    // Host memory is where it is: the prefetch is an empty operation, enqueued so that the stream is
    // validated and the call is ordered like cudaMemPrefetchAsync.
    submit(stream, [] {}, "mem_prefetch_async");
  }

  void mem_advise(void const* ptr, std::size_t bytes, int advice, int device) override
  {
    if (advice < cudaMemAdviseSetReadMostly || advice > cudaMemAdviseUnsetAccessedBy) {
      fail(cudaErrorInvalidValue, "mem_advise: advice " + std::to_string(advice) + " is not a cudaMemoryAdvise");
    }
    if (ptr == nullptr || bytes == 0) { fail(cudaErrorInvalidValue, "mem_advise: null pointer or zero bytes"); }
    std::optional<allocation> const found = find_allocation(ptr, bytes);
    if (!found || found->kind != memory_kind::managed) {
      fail(cudaErrorInvalidValue, "mem_advise: the range is not inside one managed allocation");
    }
    if (device != cudaCpuDeviceId) { check_device(device); }
    // Managed memory of the host backend is host memory: the advice changes nothing there.
  }

  // ---- graphs ---------------------------------------------------------------------------------------
  void stream_begin_capture(cudaStream_t stream, capture_mode mode) override { captures_.begin(resolve(stream), mode); }

  [[nodiscard]] cudaGraph_t stream_end_capture(cudaStream_t stream) override
  {
    auto* graph = new host::host_graph{captures_.end(*resolve(stream))};
    return reinterpret_cast<cudaGraph_t>(graph);
  }

  [[nodiscard]] bool stream_is_capturing(cudaStream_t stream) override { return captures_.is_capturing(*resolve(stream)); }

  [[nodiscard]] cudaGraphExec_t graph_instantiate(cudaGraph_t graph) override
  {
    if (graph == nullptr) { fail(cudaErrorInvalidValue, "graph_instantiate: null graph"); }
    auto* exec = new host::host_graph_exec{host::instantiate(*reinterpret_cast<host::host_graph*>(graph))};
    return reinterpret_cast<cudaGraphExec_t>(exec);
  }

  void graph_launch(cudaGraphExec_t exec, cudaStream_t stream) override
  {
    if (exec == nullptr) { fail(cudaErrorInvalidValue, "graph_launch: null graph"); }
    auto const queue = resolve(stream);
    captures_.refuse_if_capturing(*queue, "graph_launch", cudaErrorStreamCaptureUnsupported);
    for (auto const& work : reinterpret_cast<host::host_graph_exec*>(exec)->work) { enqueue(*queue, work); }
  }

  void graph_destroy(cudaGraph_t graph) noexcept override { delete reinterpret_cast<host::host_graph*>(graph); }
  void graph_exec_destroy(cudaGraphExec_t exec) noexcept override
  {
    delete reinterpret_cast<host::host_graph_exec*>(exec);
  }

  [[nodiscard]] void* cublas_create(int device) override
  {
    check_device(device);
    fail(cudaErrorNotSupported, "cuBLAS needs the cuda backend (a GPU); the host backend runs no kernels");
  }
  void cublas_destroy(void* /*handle*/, int /*device*/) noexcept override {}

 private:
  /// The allocation that holds [ptr, ptr + bytes) whole, if any.
  std::optional<allocation> find_allocation(void const* ptr, std::size_t bytes)
  {
    detail::lock_guard lock{memory_mutex_};
    auto it = allocations_.upper_bound(const_cast<void*>(ptr));  // NOLINT: map key only
    if (it == allocations_.begin()) { return std::nullopt; }
    --it;
    auto const offset = static_cast<std::size_t>(static_cast<char const*>(ptr) - static_cast<char const*>(it->first));
    if (offset >= it->second.bytes || bytes > it->second.bytes - offset) { return std::nullopt; }
    return it->second;
  }

  void check_device(int device) const
  {
    if (device < 0 || device >= config_.device_count()) {
      fail(cudaErrorInvalidDevice, ("device " + std::to_string(device) + " does not exist (" +
                                    std::to_string(config_.device_count()) + " host devices)")
                                     .c_str());
    }
  }

  void* allocate(std::size_t bytes, memory_kind kind, int device)
  {
    if (bytes == 0) { return nullptr; }
    auto const rounded = checked_align_up(bytes, allocation_alignment);
    if (!rounded) { return nullptr; }
    std::atomic<std::size_t>* counter = nullptr;
    if (kind == memory_kind::pinned) {
      if (*rounded > physical_memory()) { return nullptr; }
    } else {
      counter = &used_[static_cast<std::size_t>(device)];
      std::size_t used = counter->load(std::memory_order_relaxed);
      do {
        if (*rounded > config_.device_capacity - std::min(used, config_.device_capacity)) { return nullptr; }
      } while (!counter->compare_exchange_weak(used, used + *rounded, std::memory_order_relaxed));
    }
    void* const ptr = std::aligned_alloc(allocation_alignment, *rounded);
    if (ptr == nullptr) {
      if (counter != nullptr) { counter->fetch_sub(*rounded, std::memory_order_relaxed); }
      return nullptr;
    }
    detail::lock_guard lock{memory_mutex_};
    allocations_.emplace(ptr, allocation{*rounded, device, kind});
    return ptr;
  }

  /// @param synchronize_device wait for the device's work first, as cudaFree does (pool trims do not).
  void release(void* ptr, memory_kind kind, char const* call, bool synchronize_device) noexcept
  {
    if (ptr == nullptr) { return; }
    allocation found{};
    {
      detail::lock_guard lock{memory_mutex_};
      auto const it = allocations_.find(ptr);
      if (it == allocations_.end() || it->second.kind != kind) {
        std::fprintf(stderr, "gpumem host backend: %s(%p): not a live allocation of that kind; ignored\n", call,
                     ptr);
        return;
      }
      found = it->second;
      allocations_.erase(it);
    }
    // cudaFree and cudaFreeHost synchronise the device before freeing; so does the emulation, so that
    // work still queued on any stream never touches freed memory.
    if (synchronize_device) {
      for (auto const& queue : queues_of_device(found.device)) {
        try {
          queue->synchronize();
        } catch (...) {  // NOLINT(bugprone-empty-catch): a failed operation is reported by the stream's owner
        }
      }
    }
    if (kind != memory_kind::pinned) {
      used_[static_cast<std::size_t>(found.device)].fetch_sub(found.bytes, std::memory_order_relaxed);
    }
    std::free(ptr);
  }

  /// The calling thread's per-thread default stream of `device`, created on first use and destroyed
  /// (after its work completes) when the thread exits.
  std::shared_ptr<stream_queue> per_thread_stream(int device)
  {
    struct holder {
      host_backend* owner{};
      std::map<int, std::shared_ptr<stream_queue>> queues;
      ~holder()
      {
        if (owner == nullptr) { return; }
        detail::lock_guard lock{owner->registry_mutex_};
        for (auto const& [dev, queue] : queues) {
          std::erase(owner->per_thread_streams_, queue);
        }
      }
    };
    thread_local holder mine;
    auto& slot = mine.queues[device];
    if (slot == nullptr) {
      slot = std::make_shared<stream_queue>(device, 0U, 0, stream_queue::role::per_thread_default);
      mine.owner = this;
      detail::lock_guard lock{registry_mutex_};
      per_thread_streams_.push_back(slot);
    }
    return slot;
  }

  /// The queue of `stream`. A destroyed stream stops the process (handle_table.hpp); an unknown handle
  /// is cudaErrorInvalidResourceHandle.
  std::shared_ptr<stream_queue> resolve(cudaStream_t stream,
                                        std::source_location const where = std::source_location::current())
  {
    if (stream == nullptr || stream == cudaStreamLegacy) {
      return default_streams_[static_cast<std::size_t>(current_device_)];
    }
    if (stream == cudaStreamPerThread) { return per_thread_stream(current_device_); }
    detail::lock_guard lock{registry_mutex_};
    auto [found, state] = streams_.find(stream);
    if (state == host::handle_state::destroyed) {
      host::stop_on_destroyed_handle("stream", stream, where.function_name());
    }
    if (!found) { fail(cudaErrorInvalidResourceHandle, "unknown stream handle"); }
    return found;
  }

  /// CUDA gives a pool's memory beyond its release threshold back at the next stream, event or device
  /// synchronisation: every pool does so here.
  void release_pools_over_threshold()
  {
    detail::lock_guard lock{registry_mutex_};
    for (auto const& [handle, pool] : mempools_) { pool->release_over_threshold(); }
  }

  host::host_mempool& resolve(cudaMemPool_t pool)
  {
    detail::lock_guard lock{registry_mutex_};
    auto const found = mempools_.find(pool);
    if (found == mempools_.end()) { fail(cudaErrorInvalidValue, "unknown memory pool handle"); }
    return *found->second;
  }

  std::unique_ptr<host::host_mempool> make_mempool(int device, std::size_t max_size,
                                                  memory_kind kind = memory_kind::device)
  {
    return std::make_unique<host::host_mempool>(
      device, max_size, [this, device, kind](std::size_t bytes) { return allocate(bytes, kind, device); },
      [this, kind](void* ptr) { release(ptr, kind, "mempool release", false); });
  }

  bool is_default_managed_mempool(cudaMemPool_t pool) const GPUMEM_REQUIRES(registry_mutex_)
  {
    return std::find(default_managed_mempools_.begin(), default_managed_mempools_.end(), pool) !=
           default_managed_mempools_.end();
  }

  /// @return the bytes from `ptr` to the end of the managed allocation that holds it; nullopt when `ptr` is
  /// not inside managed memory.
  std::optional<std::size_t> managed_allocation_size(void const* ptr) noexcept
  {
    if (ptr == nullptr) { return std::nullopt; }
    detail::lock_guard lock{memory_mutex_};
    auto it = allocations_.upper_bound(const_cast<void*>(ptr));  // NOLINT: map key only
    if (it == allocations_.begin()) { return std::nullopt; }
    --it;
    auto const offset = static_cast<std::size_t>(static_cast<char const*>(ptr) - static_cast<char const*>(it->first));
    if (it->second.kind != memory_kind::managed || offset >= it->second.bytes) { return std::nullopt; }
    return it->second.bytes - offset;
  }

  bool is_default_mempool(cudaMemPool_t pool) const GPUMEM_REQUIRES(registry_mutex_)
  {
    return std::find(default_mempools_.begin(), default_mempools_.end(), pool) != default_mempools_.end();
  }

  /// The event of `event`; destroyed and unknown handles as resolve(cudaStream_t).
  std::shared_ptr<host_event> resolve(cudaEvent_t event,
                                      std::source_location const where = std::source_location::current())
  {
    detail::lock_guard lock{registry_mutex_};
    auto [found, state] = events_.find(event);
    if (state == host::handle_state::destroyed) { host::stop_on_destroyed_handle("event", event, where.function_name()); }
    if (!found) { fail(cudaErrorInvalidResourceHandle, "unknown event handle"); }
    return found;
  }

  event_record_state latest_record(cudaEvent_t event)
  {
    auto const target = resolve(event);
    detail::lock_guard lock{target->mutex};
    return {target->last, target->captured};
  }

  std::vector<std::shared_ptr<stream_queue>> queues_of_device(int device)
  {
    std::vector<std::shared_ptr<stream_queue>> queues{default_streams_[static_cast<std::size_t>(device)]};
    detail::lock_guard lock{registry_mutex_};
    streams_.for_each([&](std::shared_ptr<stream_queue> const& queue) {
      if (queue->device() == device) { queues.push_back(queue); }
    });
    for (auto const& queue : per_thread_streams_) {
      if (queue->device() == device) { queues.push_back(queue); }
    }
    return queues;
  }

  /// Submits a stream-ordered operation, or records it as a graph node when the stream is capturing.
  void submit(cudaStream_t stream, stream_queue::operation op, char const* call)
  {
    auto const queue = resolve(stream);
    if (captures_.capture_work(*queue, op, call)) { return; }
    enqueue(*queue, std::move(op));
  }

  /// cudaFree during a capture whose mode prohibits it fails, and the memory stays allocated.
  void free_unless_refused(void* ptr, memory_kind kind, char const* call) noexcept
  {
    if (ptr == nullptr) { return; }
    try {
      captures_.check_unsafe_call(call);
    } catch (std::exception const& e) {
      std::fprintf(stderr, "gpumem host backend: %s(%p) refused, the memory stays allocated: %s\n", call, ptr, e.what());
      return;
    }
    release(ptr, kind, call, true);
  }

  /// Why a stream-ordered pool allocation or free on a capturing stream is refused (a refused free frees nothing).
  static constexpr char const* not_emulated_in_capture =
    ": graph memory nodes are not emulated by the host backend (a refused free leaves the memory allocated)";

  /// Enqueues `op` on `queue` behind CUDA's implicit dependencies between the legacy default stream and
  /// the device's blocking streams.
  void enqueue(stream_queue& queue, stream_queue::operation op)
  {
    for (completion_ptr const& marker : implicit_dependencies(queue)) {
      queue.submit([marker] { marker->wait(); });
    }
    queue.submit(std::move(op));
  }

  std::vector<completion_ptr> implicit_dependencies(stream_queue& queue)
  {
    std::vector<completion_ptr> markers;
    if (queue.kind() == stream_queue::role::legacy_default) {
      for (auto const& other : queues_of_device(queue.device())) {
        if (other.get() != &queue && other->blocking() && !other->idle()) { markers.push_back(other->submit_marker()); }
      }
    } else if (queue.blocking()) {
      auto const& legacy = default_streams_[static_cast<std::size_t>(queue.device())];
      if (!legacy->idle()) { markers.push_back(legacy->submit_marker()); }
    }
    return markers;
  }

  host::host_config const config_;
  std::vector<std::atomic<std::size_t>> used_;  // bytes of device+managed memory in use, per device
  std::vector<std::shared_ptr<stream_queue>> default_streams_;  // legacy default stream, per device

  detail::mutex memory_mutex_;
  std::map<void*, allocation> allocations_ GPUMEM_GUARDED_BY(memory_mutex_);  // ordered: is_pinned_host

  detail::mutex registry_mutex_;
  host::handle_table<cudaStream_t, stream_queue> streams_ GPUMEM_GUARDED_BY(registry_mutex_){0x5};
  std::vector<std::shared_ptr<stream_queue>> per_thread_streams_ GPUMEM_GUARDED_BY(registry_mutex_);
  host::handle_table<cudaEvent_t, host_event> events_ GPUMEM_GUARDED_BY(registry_mutex_){0xe};
  std::unordered_map<cudaMemPool_t, std::unique_ptr<host::host_mempool>> mempools_ GPUMEM_GUARDED_BY(registry_mutex_);
  std::vector<cudaMemPool_t> default_mempools_ GPUMEM_GUARDED_BY(registry_mutex_);  // per device, created lazily
  std::vector<cudaMemPool_t> default_managed_mempools_ GPUMEM_GUARDED_BY(registry_mutex_);  // likewise, managed
  host::capture_rules captures_;

  static thread_local int current_device_;
};

thread_local int host_backend::current_device_ = 0;

}  // namespace

backend& host_backend_instance()
{
  // Never destroyed: streams of other threads and static destructors may still use it at exit.
  static host_backend* const instance = new host_backend{};
  return *instance;
}

bool host_charge_device_memory(int device, std::size_t bytes) noexcept
{
  return static_cast<host_backend&>(host_backend_instance()).charge_device(device, bytes);
}

void host_uncharge_device_memory(int device, std::size_t bytes) noexcept
{
  static_cast<host_backend&>(host_backend_instance()).uncharge_device(device, bytes);
}

}  // namespace gpumem::detail
