// The cuda backend (backend.hpp): thin calls into the CUDA runtime, the only place in gpumem that makes them
// (apart from the probe in backend.cpp). Out-of-memory is reported as nullptr so that resources can
// add their own state to the out_of_memory message; every other failure throws cuda_error.
#include "cublas_library.hpp"
#include "device_attributes.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/error.hpp>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>
#include <cstdio>

namespace gpumem::detail {
namespace {

/// Runs an allocation call; maps cudaErrorMemoryAllocation to nullptr (clearing the error).
template <class Call>
void* allocate_or_null(Call&& call, char const* text)
{
  void* ptr = nullptr;
  cudaError_t const status = call(&ptr);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return nullptr;
  }
  if (status != cudaSuccess) { throw_cuda_error(status, text, __FILE__, __LINE__); }
  return ptr;
}

/// Deallocation never throws: a failure is reported on stderr and the sticky error cleared.
void report_free_failure(cudaError_t status, char const* call, void* ptr) noexcept
{
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    std::fprintf(stderr, "gpumem cuda backend: %s(%p) failed: %s\n", call, ptr, cudaGetErrorString(status));
  }
}

/// cuMemGetAddressRange, looked up once through the runtime (gpumem does not link libcuda); null when the
/// driver lacks it.
decltype(&::cuMemGetAddressRange) address_range_call() noexcept
{
  static decltype(&::cuMemGetAddressRange) const call = [] {
    void* address = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &address, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      static_cast<void>(cudaGetLastError());
      return static_cast<decltype(&::cuMemGetAddressRange)>(nullptr);
    }
    return reinterpret_cast<decltype(&::cuMemGetAddressRange)>(address);
  }();
  return call;
}

class device_scope {
 public:
  explicit device_scope(int device)
  {
    GPUMEM_CUDA_TRY(cudaGetDevice(&previous_));
    if (previous_ != device) { GPUMEM_CUDA_TRY(cudaSetDevice(device)); }
    changed_ = previous_ != device;
  }
  ~device_scope()
  {
    if (changed_) { (void)cudaSetDevice(previous_); }
  }
  device_scope(device_scope const&) = delete;
  device_scope& operator=(device_scope const&) = delete;

 private:
  int previous_{};
  bool changed_{};
};

/// The driver's CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, which the runtime's enum lists only as
/// cudaDevAttrReserved128; cudaDeviceGetAttribute passes it to the driver.
constexpr auto fabric_handles_attribute = static_cast<cudaDeviceAttr>(128);

cudaStreamCaptureMode to_cuda(capture_mode mode)
{
  switch (mode) {
    case capture_mode::thread_local_: return cudaStreamCaptureModeThreadLocal;
    case capture_mode::relaxed: return cudaStreamCaptureModeRelaxed;
    case capture_mode::global: break;
  }
  return cudaStreamCaptureModeGlobal;
}

class cuda_backend final : public backend {
 public:
  [[nodiscard]] backend_kind kind() const noexcept override { return backend_kind::cuda; }

  [[nodiscard]] int device_count() override
  {
    // The runtime fixes the visible devices at its initialisation (CUDA_VISIBLE_DEVICES), so the count is
    // asked once; a failure is not remembered.
    int count = device_count_.load(std::memory_order_relaxed);
    if (count < 0) {
      GPUMEM_CUDA_TRY(cudaGetDeviceCount(&count));
      device_count_.store(count, std::memory_order_relaxed);
    }
    return count;
  }
  [[nodiscard]] int current_device() override
  {
    // With one visible device, it is always the current one: no cudaGetDevice (a runtime call, and the
    // plain API asks once per alloc and once per free).
    if (device_count() == 1) { return 0; }
    int device = 0;
    GPUMEM_CUDA_TRY(cudaGetDevice(&device));
    return device;
  }
  void set_current_device(int device) override { GPUMEM_CUDA_TRY(cudaSetDevice(device)); }

  [[nodiscard]] device_properties properties(int device) override
  {
    cudaDeviceProp prop{};
    GPUMEM_CUDA_TRY(cudaGetDeviceProperties(&prop, device));
    device_properties p;
    p.name = prop.name;
    p.compute_capability_major = prop.major;
    p.compute_capability_minor = prop.minor;
    p.total_memory = prop.totalGlobalMem;
    p.multiprocessor_count = prop.multiProcessorCount;
    int pools = 0;
    GPUMEM_CUDA_TRY(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device));
    p.memory_pools_supported = pools != 0;
    p.managed_memory_supported = prop.managedMemory != 0;
    p.concurrent_managed_access = prop.concurrentManagedAccess != 0;
    std::array<char, 32> bus{};
    GPUMEM_CUDA_TRY(cudaDeviceGetPCIBusId(bus.data(), static_cast<int>(bus.size()), device));
    p.pci_bus_id = bus.data();
    int pageable = 0;
    GPUMEM_CUDA_TRY(cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, device));
    p.pageable_memory_access = pageable != 0;
    int fabric = 0;
    // A driver that does not know the attribute has no fabric handles: that is an answer, not a failure.
    if (cudaDeviceGetAttribute(&fabric, fabric_handles_attribute, device) != cudaSuccess) {
      (void)cudaGetLastError();
      fabric = 0;
    }
    p.fabric_handles_supported = fabric != 0;
    return p;
  }

  [[nodiscard]] memory_info mem_info(int device) override
  {
    device_scope const scope{device};
    memory_info info;
    GPUMEM_CUDA_TRY(cudaMemGetInfo(&info.free, &info.total));
    return info;
  }

  [[nodiscard]] int runtime_version() override
  {
    int version = 0;
    GPUMEM_CUDA_TRY(cudaRuntimeGetVersion(&version));
    return version;
  }
  [[nodiscard]] int driver_version() override
  {
    int version = 0;
    GPUMEM_CUDA_TRY(cudaDriverGetVersion(&version));
    return version;
  }
  void device_synchronize() override { GPUMEM_CUDA_TRY(cudaDeviceSynchronize()); }
  [[nodiscard]] std::vector<std::pair<std::string, int>> device_attributes(int device) override
  {
    std::vector<std::pair<std::string, int>> values;
    for (device_attribute const& a : device_attribute_table()) {
      int value = 0;
      cudaError_t const status = cudaDeviceGetAttribute(&value, a.attribute, device);
      if (status == cudaErrorInvalidValue) {  // an attribute this driver does not know: left out, as CuPy does
        static_cast<void>(cudaGetLastError());
        continue;
      }
      if (status != cudaSuccess) { throw_cuda_error(status, "cudaDeviceGetAttribute", __FILE__, __LINE__); }
      values.emplace_back(std::string{a.name}, value);
    }
    return values;
  }
  [[nodiscard]] int device_by_pci_bus_id(std::string const& pci_bus_id) override
  {
    int device = -1;
    GPUMEM_CUDA_TRY(cudaDeviceGetByPCIBusId(&device, pci_bus_id.c_str()));
    return device;
  }

  [[nodiscard]] void* malloc_device(std::size_t bytes) override
  {
    if (bytes == 0) { return nullptr; }
    return allocate_or_null([bytes](void** p) { return cudaMalloc(p, bytes); }, "cudaMalloc");
  }
  void free_device(void* ptr) noexcept override { report_free_failure(cudaFree(ptr), "cudaFree", ptr); }

  [[nodiscard]] void* malloc_managed(std::size_t bytes) override
  {
    if (bytes == 0) { return nullptr; }
    return allocate_or_null([bytes](void** p) { return cudaMallocManaged(p, bytes, cudaMemAttachGlobal); },
                            "cudaMallocManaged");
  }
  void free_managed(void* ptr) noexcept override { report_free_failure(cudaFree(ptr), "cudaFree", ptr); }

  [[nodiscard]] void* malloc_pinned(std::size_t bytes) override
  {
    if (bytes == 0) { return nullptr; }
    return allocate_or_null([bytes](void** p) { return cudaMallocHost(p, bytes); }, "cudaMallocHost");
  }
  void free_pinned(void* ptr) noexcept override { report_free_failure(cudaFreeHost(ptr), "cudaFreeHost", ptr); }
  [[nodiscard]] bool is_pinned_host(void const* ptr) noexcept override
  {
    if (ptr == nullptr) { return false; }
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
      static_cast<void>(cudaGetLastError());  // clear the sticky-free error of an unknown pointer
      return false;
    }
    return attributes.type == cudaMemoryTypeHost;
  }
  [[nodiscard]] pointer_attributes pointer_get_attributes(void const* ptr) override
  {
    cudaPointerAttributes attributes{};
    GPUMEM_CUDA_TRY(cudaPointerGetAttributes(&attributes, ptr));
    return {static_cast<int>(attributes.type), attributes.device, attributes.devicePointer, attributes.hostPointer};
  }
  [[nodiscard]] ipc_memory_handle ipc_get_mem_handle(void const* ptr, std::size_t bytes) override
  {
    auto const fail = [&](cudaError_t code, std::string const& why) {
      throw cuda_error(code, "cudaIpcGetMemHandle(" + format_pointer(ptr) + ", " + std::to_string(bytes) +
                               " bytes): " + why);
    };
    auto const range = address_range_call();
    if (range == nullptr) { fail(cudaErrorNotSupported, "the driver has no cuMemGetAddressRange"); }
    CUdeviceptr base = 0;
    std::size_t size = 0;
    if (CUresult const r = range(&base, &size, reinterpret_cast<CUdeviceptr>(ptr)); r != CUDA_SUCCESS) {
      fail(cudaErrorInvalidValue, "not device memory that CUDA knows (cuMemGetAddressRange: CUresult " +
                                    std::to_string(static_cast<int>(r)) + ")");
    }
    auto const offset = static_cast<std::size_t>(reinterpret_cast<CUdeviceptr>(ptr) - base);
    if (bytes > size - offset) {
      fail(cudaErrorInvalidValue, "the range runs past its allocation of " + format_bytes(size) + " at " +
                                    format_pointer(reinterpret_cast<void const*>(base)));
    }
    cudaIpcMemHandle_t handle{};
    if (cudaError_t const status = cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(base)); status != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      fail(status, std::string{"the allocation at "} + format_pointer(reinterpret_cast<void const*>(base)) +
                     " cannot be shared (memory from cudaMalloc only): " + cudaGetErrorString(status));
    }
    ipc_memory_handle result;
    static_assert(sizeof(handle) == result.handle.size());
    std::memcpy(result.handle.data(), &handle, sizeof(handle));
    result.offset = offset;
    result.allocation_bytes = size;
    return result;
  }
  [[nodiscard]] void* ipc_open_mem_handle(std::array<unsigned char, 64> const& bytes, int device) override
  {
    device_scope const scope{device};
    cudaIpcMemHandle_t handle{};
    std::memcpy(&handle, bytes.data(), sizeof(handle));
    void* ptr = nullptr;
    if (cudaError_t const status = cudaIpcOpenMemHandle(&ptr, handle, cudaIpcMemLazyEnablePeerAccess);
        status != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      throw cuda_error(status, "cudaIpcOpenMemHandle on device " + std::to_string(device) + ": " +
                                 cudaGetErrorString(status) +
                                 " (a handle of this process, of memory its exporter freed, or not a CUDA IPC handle)");
    }
    return ptr;
  }
  void ipc_close_mem_handle(void* ptr) noexcept override
  {
    report_free_failure(cudaIpcCloseMemHandle(ptr), "cudaIpcCloseMemHandle", ptr);
  }
  [[nodiscard]] int mempool_export_handle(cudaMemPool_t pool) override
  {
    int fd = -1;
    cudaError_t const status =
      cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0);
    if (status != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      throw cuda_error(status, std::string{"cudaMemPoolExportToShareableHandle: "} + cudaGetErrorString(status) +
                                 " (a pool shares its memory only when made with POSIX file descriptor handles: "
                                 "cuda_async_memory_resource's export_handle_type)");
    }
    return fd;
  }
  [[nodiscard]] std::array<unsigned char, 64> mempool_export_pointer(void const* ptr) override
  {
    cudaMemPoolPtrExportData data{};
    cudaError_t const status = cudaMemPoolExportPointer(&data, const_cast<void*>(ptr));  // NOLINT: CUDA's signature
    if (status != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      throw cuda_error(status, "cudaMemPoolExportPointer(" + format_pointer(ptr) + "): " + cudaGetErrorString(status) +
                                 " (export the start of an allocation of the pool)");
    }
    std::array<unsigned char, 64> result{};
    static_assert(sizeof(data) == result.size());
    std::memcpy(result.data(), &data, sizeof data);
    return result;
  }
  [[nodiscard]] cudaMemPool_t mempool_import_handle(int fd) override
  {
    cudaMemPool_t pool{};
    cudaError_t const status = cudaMemPoolImportFromShareableHandle(
      &pool, reinterpret_cast<void*>(static_cast<std::uintptr_t>(fd)), cudaMemHandleTypePosixFileDescriptor, 0);
    if (status != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      throw cuda_error(status, std::string{"cudaMemPoolImportFromShareableHandle: "} + cudaGetErrorString(status));
    }
    return pool;
  }
  [[nodiscard]] void* mempool_import_pointer(cudaMemPool_t pool, std::array<unsigned char, 64> const& bytes) override
  {
    cudaMemPoolPtrExportData data{};
    std::memcpy(&data, bytes.data(), sizeof data);
    void* ptr = nullptr;
    cudaError_t const status = cudaMemPoolImportPointer(&ptr, pool, &data);
    if (status != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      throw cuda_error(status, std::string{"cudaMemPoolImportPointer: "} + cudaGetErrorString(status) +
                                 " (an allocation its exporter freed, or not export data of this pool)");
    }
    return ptr;
  }

  [[nodiscard]] bool is_migratable(void const* ptr, int device) noexcept override
  {
    if (ptr == nullptr) { return false; }
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      return false;
    }
    // The device whose abilities decide: the target, or the current one for a prefetch to the host.
    int target = device;
    if (target == cudaCpuDeviceId && cudaGetDevice(&target) != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      return false;
    }
    auto const attribute = [target](cudaDeviceAttr which) {
      int value = 0;
      if (cudaDeviceGetAttribute(&value, which, target) != cudaSuccess) {
        static_cast<void>(cudaGetLastError());
        return false;
      }
      return value != 0;
    };
    switch (attributes.type) {
      case cudaMemoryTypeManaged: return attribute(cudaDevAttrConcurrentManagedAccess);
      case cudaMemoryTypeUnregistered: return attribute(cudaDevAttrPageableMemoryAccess);
      default: return false;
    }
  }

  [[nodiscard]] cudaMemPool_t mempool_create(int device, mempool_handle_type handle_type, std::size_t max_size) override
  {
    int supported = 0;
    GPUMEM_CUDA_TRY(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device));
    if (supported == 0) {
      throw cuda_error(cudaErrorNotSupported, "device " + std::to_string(device) +
                                                " does not support stream-ordered memory pools (cudaMallocAsync)");
    }
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    props.maxSize = max_size;
    switch (handle_type) {
      case mempool_handle_type::none: props.handleTypes = cudaMemHandleTypeNone; break;
      case mempool_handle_type::posix_file_descriptor: props.handleTypes = cudaMemHandleTypePosixFileDescriptor; break;
      case mempool_handle_type::fabric: props.handleTypes = cudaMemHandleTypeFabric; break;
    }
    cudaMemPool_t pool{};
    GPUMEM_CUDA_TRY(cudaMemPoolCreate(&pool, &props));
    return pool;
  }
  void mempool_destroy(cudaMemPool_t pool) noexcept override
  {
    if (cudaMemPoolDestroy(pool) != cudaSuccess) { (void)cudaGetLastError(); }
  }
  [[nodiscard]] cudaMemPool_t mempool_default(int device) override
  {
    cudaMemPool_t pool{};
    GPUMEM_CUDA_TRY(cudaDeviceGetDefaultMemPool(&pool, device));
    return pool;
  }
  void mempool_set_release_threshold(cudaMemPool_t pool, std::uint64_t bytes) override
  {
    GPUMEM_CUDA_TRY(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &bytes));
  }
  [[nodiscard]] std::uint64_t mempool_release_threshold(cudaMemPool_t pool) override
  {
    std::uint64_t bytes = 0;
    GPUMEM_CUDA_TRY(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &bytes));
    return bytes;
  }
  void mempool_trim(cudaMemPool_t pool, std::size_t min_bytes_to_keep) override
  {
    GPUMEM_CUDA_TRY(cudaMemPoolTrimTo(pool, min_bytes_to_keep));
  }
  [[nodiscard]] mempool_usage mempool_get_usage(cudaMemPool_t pool) override
  {
    auto const read = [pool](cudaMemPoolAttr attribute) {
      std::uint64_t value = 0;
      GPUMEM_CUDA_TRY(cudaMemPoolGetAttribute(pool, attribute, &value));
      return static_cast<std::size_t>(value);
    };
    return {read(cudaMemPoolAttrReservedMemCurrent), read(cudaMemPoolAttrReservedMemHigh),
            read(cudaMemPoolAttrUsedMemCurrent), read(cudaMemPoolAttrUsedMemHigh)};
  }
  [[nodiscard]] void* mempool_malloc_async(cudaMemPool_t pool, std::size_t bytes, cudaStream_t stream) override
  {
    if (bytes == 0) { return nullptr; }
    return allocate_or_null([=](void** p) { return cudaMallocFromPoolAsync(p, bytes, pool, stream); },
                            "cudaMallocFromPoolAsync");
  }
  void mempool_free_async(void* ptr, cudaStream_t stream) noexcept override
  {
    report_free_failure(cudaFreeAsync(ptr, stream), "cudaFreeAsync", ptr);
  }
  [[nodiscard]] cudaMemPool_t mempool_default_managed(int device) override
  {
    constexpr int first_version = 13000;  // stream-ordered managed memory pools came with CUDA 13.0
    std::string const where = "the managed memory pool of device " + std::to_string(device);
    if (runtime_version() < first_version || driver_version() < first_version) {
      throw cuda_error(cudaErrorNotSupported, where + " needs CUDA 13.0 or newer (runtime " +
                                                std::to_string(runtime_version()) + ", driver " +
                                                std::to_string(driver_version()) + ")");
    }
    int concurrent = 0;
    GPUMEM_CUDA_TRY(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, device));
    if (concurrent == 0) {
      throw cuda_error(cudaErrorNotSupported, where + " needs a device with concurrent managed access");
    }
#if CUDART_VERSION >= 13000
    cudaMemLocation location{};
    location.type = cudaMemLocationTypeDevice;
    location.id = device;
    cudaMemPool_t pool{};
    GPUMEM_CUDA_TRY(cudaMemGetDefaultMemPool(&pool, &location, cudaMemAllocationTypeManaged));
    return pool;
#else
    throw cuda_error(cudaErrorNotSupported, where + " needs gpumem built with CUDA 13.0 or newer");
#endif
  }

  [[nodiscard]] cudaStream_t stream_create(unsigned flags, int priority) override
  {
    cudaStream_t stream{};
    GPUMEM_CUDA_TRY(cudaStreamCreateWithPriority(&stream, flags, priority));
    return stream;
  }
  void stream_destroy(cudaStream_t stream) noexcept override
  {
    cudaError_t const status = cudaStreamDestroy(stream);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      std::fprintf(stderr, "gpumem cuda backend: cudaStreamDestroy failed: %s\n", cudaGetErrorString(status));
    }
  }
  void stream_synchronize(cudaStream_t stream) override { GPUMEM_CUDA_TRY(cudaStreamSynchronize(stream)); }
  [[nodiscard]] bool stream_query(cudaStream_t stream) override
  {
    cudaError_t const status = cudaStreamQuery(stream);
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    GPUMEM_CUDA_TRY(status);
    return true;
  }
  void stream_wait_event(cudaStream_t stream, cudaEvent_t event) override
  {
    GPUMEM_CUDA_TRY(cudaStreamWaitEvent(stream, event, 0));
  }
  [[nodiscard]] int stream_device(cudaStream_t stream) override
  {
    int device = 0;
    GPUMEM_CUDA_TRY(cudaStreamGetDevice(stream, &device));
    return device;
  }
  [[nodiscard]] unsigned stream_flags(cudaStream_t stream) override
  {
    unsigned flags = 0;
    GPUMEM_CUDA_TRY(cudaStreamGetFlags(stream, &flags));
    return flags;
  }
  [[nodiscard]] int stream_priority(cudaStream_t stream) override
  {
    int priority = 0;
    GPUMEM_CUDA_TRY(cudaStreamGetPriority(stream, &priority));
    return priority;
  }
  [[nodiscard]] std::pair<int, int> stream_priority_range() override
  {
    int least = 0;
    int greatest = 0;
    GPUMEM_CUDA_TRY(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    return {least, greatest};
  }
  void launch_host_func(cudaStream_t stream, void (*fn)(void*), void* user_data) override
  {
    GPUMEM_CUDA_TRY(cudaLaunchHostFunc(stream, fn, user_data));
  }

  [[nodiscard]] cudaEvent_t event_create(unsigned flags) override
  {
    cudaEvent_t event{};
    GPUMEM_CUDA_TRY(cudaEventCreateWithFlags(&event, flags));
    return event;
  }
  void event_destroy(cudaEvent_t event) noexcept override
  {
    if (cudaEventDestroy(event) != cudaSuccess) { (void)cudaGetLastError(); }
  }
  void event_record(cudaEvent_t event, cudaStream_t stream) override
  {
    GPUMEM_CUDA_TRY(cudaEventRecord(event, stream));
  }
  void event_synchronize(cudaEvent_t event) override { GPUMEM_CUDA_TRY(cudaEventSynchronize(event)); }
  [[nodiscard]] bool event_query(cudaEvent_t event) override
  {
    cudaError_t const status = cudaEventQuery(event);
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    GPUMEM_CUDA_TRY(status);
    return true;
  }
  [[nodiscard]] float event_elapsed_ms(cudaEvent_t start, cudaEvent_t end) override
  {
    float ms = 0;
    GPUMEM_CUDA_TRY(cudaEventElapsedTime(&ms, start, end));
    return ms;
  }

  void memcpy_async(void* dst, void const* src, std::size_t bytes, cudaStream_t stream) override
  {
    if (bytes == 0) { return; }
    GPUMEM_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
  }
  void memset_async(void* dst, int value, std::size_t bytes, cudaStream_t stream) override
  {
    if (bytes == 0) { return; }
    GPUMEM_CUDA_TRY(cudaMemsetAsync(dst, value, bytes, stream));
  }

  void mem_prefetch_async(void const* ptr, std::size_t bytes, int device, cudaStream_t stream) override
  {
    if (bytes == 0) { return; }
    GPUMEM_CUDA_TRY(cudaMemPrefetchAsync(ptr, bytes, to_location(device), 0 /*flags*/, stream));
  }
  void mem_advise(void const* ptr, std::size_t bytes, int advice, int device) override
  {
    GPUMEM_CUDA_TRY(cudaMemAdvise(ptr, bytes, static_cast<cudaMemoryAdvise>(advice), to_location(device)));
  }

  void stream_begin_capture(cudaStream_t stream, capture_mode mode) override
  {
    GPUMEM_CUDA_TRY(cudaStreamBeginCapture(stream, to_cuda(mode)));
  }
  [[nodiscard]] cudaGraph_t stream_end_capture(cudaStream_t stream) override
  {
    cudaGraph_t graph{};
    GPUMEM_CUDA_TRY(cudaStreamEndCapture(stream, &graph));
    return graph;
  }
  [[nodiscard]] bool stream_is_capturing(cudaStream_t stream) override
  {
    cudaStreamCaptureStatus status{};
    GPUMEM_CUDA_TRY(cudaStreamIsCapturing(stream, &status));
    return status == cudaStreamCaptureStatusActive;
  }
  [[nodiscard]] cudaGraphExec_t graph_instantiate(cudaGraph_t graph) override
  {
    cudaGraphExec_t exec{};
    GPUMEM_CUDA_TRY(cudaGraphInstantiate(&exec, graph, 0ULL));
    return exec;
  }
  void graph_launch(cudaGraphExec_t exec, cudaStream_t stream) override { GPUMEM_CUDA_TRY(cudaGraphLaunch(exec, stream)); }
  void graph_destroy(cudaGraph_t graph) noexcept override
  {
    if (cudaGraphDestroy(graph) != cudaSuccess) { (void)cudaGetLastError(); }
  }
  void graph_exec_destroy(cudaGraphExec_t exec) noexcept override
  {
    if (cudaGraphExecDestroy(exec) != cudaSuccess) { (void)cudaGetLastError(); }
  }

  [[nodiscard]] void* cublas_create(int device) override
  {
    cublas_library const& cublas = load_cublas();
    device_scope const scope{device};
    void* handle = nullptr;
    if (int const status = cublas.create(&handle); status != 0) {
      throw cuda_error(cudaErrorUnknown, "cublasCreate failed on device " + std::to_string(device) +
                                           " with cublasStatus_t " + std::to_string(status));
    }
    return handle;
  }
  void cublas_destroy(void* handle, int device) noexcept override
  {
    try {
      device_scope const scope{device};
      static_cast<void>(load_cublas().destroy(handle));
    } catch (...) {  // NOLINT(bugprone-empty-catch): a handle that cannot be destroyed is left to the process's end
    }
  }

 private:
  /// A device ordinal, or -1 (cudaCpuDeviceId) for the host, as a cudaMemLocation.
  static cudaMemLocation to_location(int device) noexcept
  {
    cudaMemLocation location{};
    location.type = device == cudaCpuDeviceId ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
    location.id = device == cudaCpuDeviceId ? 0 : device;
    return location;
  }

  std::atomic<int> device_count_{-1};  // -1: not asked yet
};

}  // namespace

backend& cuda_backend_instance()
{
  static cuda_backend* const instance = new cuda_backend{};  // never destroyed, like the host backend
  return *instance;
}

}  // namespace gpumem::detail
