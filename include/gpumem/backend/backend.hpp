/**
 * @file backend.hpp
 * The runtime interface under every gpumem handle and resource (DESIGN.md, "The backend").
 *
 * Two implementations, chosen once per process by `get_backend()`:
 * - `cuda`: the CUDA runtime (cudaMalloc, streams, events, graphs, ...). Chosen when a device is present.
 * - `host`: the same contract on the CPU. "Device" memory is 256-byte aligned host memory under a
 *   per-device capacity (GPUMEM_HOST_MEMORY, default 8 GiB, address space never touched until used), so
 *   out-of-memory paths are testable; each stream is an in-order queue run by its own worker thread, so
 *   stream-ordering bugs show on the CPU (and under TSan); events are completion markers with timestamps.
 * GPUMEM_BACKEND=cuda|host overrides the choice; asking for cuda where no device exists is a cuda_error.
 *
 * Handles keep CUDA's types. Under the host backend a cudaStream_t or cudaEvent_t points at a host object;
 * the special stream values 0 (legacy default), cudaStreamLegacy and cudaStreamPerThread keep their meaning.
 *
 * One deliberate difference: the host backend runs every copy asynchronously, also to and from pageable
 * host memory, where CUDA may block the calling thread until the stream reaches the copy. Code must be
 * right under both (keep a host buffer alive until its copy completes; never hold a stream back on a
 * condition that the submitting thread is meant to satisfy after a pageable copy).
 *
 * Error contract of every member: a failed call throws gpumem::cuda_error with the CUDA error code the
 * CUDA runtime would give (the host backend mimics those codes), except where a member says otherwise.
 * Members marked noexcept never throw (they are used by destructors and deallocation paths).
 *
 * Thread-safety: every member may be called from any thread.
 * The backend is off the hot path: sub-allocators call it only to grow, shrink or synchronise.
 */
#pragma once

#include <gpumem/export.hpp>

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpumem {

/** @brief Which backend implementation the process runs on. */
enum class backend_kind { cuda, host };

/** @brief "cuda" or "host". */
[[nodiscard]] GPUMEM_EXPORT std::string_view to_string(backend_kind kind) noexcept;

/** @brief What a device is. Under the host backend the values describe the emulated device. */
struct device_properties {
  std::string name;                     ///< e.g. "NVIDIA H200", or "gpumem host device 0"
  int compute_capability_major{};       ///< 0 under the host backend
  int compute_capability_minor{};       ///< 0 under the host backend
  std::size_t total_memory{};           ///< bytes (the configured capacity under the host backend)
  int multiprocessor_count{};           ///< SMs, or hardware threads under the host backend
  bool memory_pools_supported{};        ///< cudaMallocAsync pools (always true under the host backend)
  bool managed_memory_supported{};      ///< cudaMallocManaged
  bool concurrent_managed_access{};     ///< managed memory usable on device and host at once
  std::string pci_bus_id;               ///< "0000:3b:00.0"; empty under the host backend
  /// the device can access pageable host memory (HMM or ATS: cudaDevAttrPageableMemoryAccess), so
  /// system_memory_resource works; true under the host backend, whose device memory is host memory
  bool pageable_memory_access{};
  /// memory pools can export fabric handles (cudaDevAttrHandleTypeFabricSupported); false under the host
  /// backend, which has no fabric
  bool fabric_handles_supported{};
};

/** @brief Free and total bytes of a device, as cudaMemGetInfo reports them. */
struct memory_info {
  std::size_t free{};
  std::size_t total{};
};

/** @brief Byte counts of a stream-ordered memory pool (cudaMemPoolAttr{Reserved,Used}Mem{Current,High}). */
struct mempool_usage {
  std::size_t reserved_current{};  ///< bytes the pool holds from the device, in use or cached
  std::size_t reserved_high{};     ///< high-water mark of reserved_current
  std::size_t used_current{};      ///< bytes handed out and not yet freed
  std::size_t used_high{};         ///< high-water mark of used_current
};

/** @brief What cudaPointerGetAttributes says of an address (cudaPointerAttributes). */
struct pointer_attributes {
  int type{};                     ///< cudaMemoryType: 0 unregistered host memory, 1 host (pinned), 2 device, 3 managed
  int device{-2};                 ///< the device of the allocation; -2 (cudaInvalidDeviceId) for unregistered memory
  void* device_pointer{};         ///< the address usable on the device; nullptr for unregistered memory
  void* host_pointer{};           ///< the address usable on the host; nullptr for device memory
};

/** @brief A cudaMalloc allocation's CUDA IPC handle (cudaIpcMemHandle_t), and where a pointer lies in it. */
struct ipc_memory_handle {
  std::array<unsigned char, 64> handle{};  ///< the cudaIpcMemHandle_t's bytes
  std::size_t offset{};                    ///< of the pointer asked about, from the allocation's start
  std::size_t allocation_bytes{};          ///< the allocation's size
};

/** @brief How a stream-ordered pool's memory can be shared with other processes (cudaMemAllocationHandleType). */
enum class mempool_handle_type { none, posix_file_descriptor, fabric };

/** @brief How cudaStreamBeginCapture treats unsafe API calls during capture (CUDA's three modes). */
enum class capture_mode { global, thread_local_, relaxed };

namespace detail {

/**
 * @brief The runtime interface. One instance per process, obtained from get_backend().
 * See the file comment for the error and thread-safety contract.
 */
class GPUMEM_EXPORT backend {
 public:
  backend() = default;
  virtual ~backend() = default;
  backend(backend const&) = delete;
  backend& operator=(backend const&) = delete;

  [[nodiscard]] virtual backend_kind kind() const noexcept = 0;

  // ---- devices --------------------------------------------------------------------------------------
  [[nodiscard]] virtual int device_count() = 0;
  [[nodiscard]] virtual int current_device() = 0;        ///< the calling thread's current device
  virtual void set_current_device(int device) = 0;       ///< @throws cuda_error (cudaErrorInvalidDevice)
  [[nodiscard]] virtual device_properties properties(int device) = 0;
  [[nodiscard]] virtual memory_info mem_info(int device) = 0;
  [[nodiscard]] virtual int runtime_version() = 0;       ///< CUDART_VERSION encoding, e.g. 13000
  [[nodiscard]] virtual int driver_version() = 0;        ///< 0 under the host backend
  virtual void device_synchronize() = 0;                 ///< waits for all work on the current device
  /// cudaDeviceGetAttribute of `device` for every cudaDeviceAttr the runtime answers, named as the enumerator
  /// without its "cudaDevAttr" prefix ("MaxThreadsPerBlock"), in the enumeration's order. Under the host backend
  /// the same names, with the emulated device's values (0 where the emulation has no such feature).
  /// @throws cuda_error (cudaErrorInvalidDevice)
  [[nodiscard]] virtual std::vector<std::pair<std::string, int>> device_attributes(int device) = 0;
  /// The ordinal of the device at PCI bus id `pci_bus_id` ("0000:3b:00.0"; cudaDeviceGetByPCIBusId).
  /// @throws cuda_error: cudaErrorInvalidValue for a malformed id, cudaErrorInvalidDevice when no device is there
  /// (the host backend's devices have no bus id: every well-formed id gives cudaErrorInvalidDevice).
  [[nodiscard]] virtual int device_by_pci_bus_id(std::string const& pci_bus_id) = 0;

  // ---- memory (on the calling thread's current device) ----------------------------------------------
  /// @return nullptr when the memory is not available (cudaErrorMemoryAllocation); other failures throw.
  /// A zero-byte request returns nullptr.
  [[nodiscard]] virtual void* malloc_device(std::size_t bytes) = 0;
  virtual void free_device(void* ptr) noexcept = 0;
  /// Managed (unified) memory; same nullptr-on-exhaustion contract as malloc_device.
  [[nodiscard]] virtual void* malloc_managed(std::size_t bytes) = 0;
  virtual void free_managed(void* ptr) noexcept = 0;
  /// Page-locked host memory, accessible from the device; same nullptr-on-exhaustion contract.
  [[nodiscard]] virtual void* malloc_pinned(std::size_t bytes) = 0;
  virtual void free_pinned(void* ptr) noexcept = 0;
  /// @return true when `ptr` points into page-locked host memory (from malloc_pinned, or registered with
  /// CUDA by anyone), so that copies from or to it can run asynchronously; false for pageable host memory,
  /// device or managed memory, and nullptr. Never throws.
  [[nodiscard]] virtual bool is_pinned_host(void const* ptr) noexcept = 0;
  /// What `ptr` is (cudaPointerGetAttributes): type, device and addresses of the allocation it points into;
  /// type 0 and device -2 for memory that CUDA does not know (plain host memory).
  /// @throws cuda_error (cudaErrorInvalidValue for nullptr)
  [[nodiscard]] virtual pointer_attributes pointer_get_attributes(void const* ptr) = 0;
  /// @return true when mem_prefetch_async can migrate the memory at `ptr` to `device` (a device ordinal, or
  /// cudaCpuDeviceId for the host): managed memory (malloc_managed, a managed pool, or cudaMallocManaged by
  /// anyone) on a device with concurrent managed access, or pageable host memory on a device that accesses
  /// pageable memory (HMM/ATS). False for device memory, pinned host memory, unknown pointers and nullptr.
  /// Never throws (a failed query is false).
  [[nodiscard]] virtual bool is_migratable(void const* ptr, int device) noexcept = 0;

  // ---- memory shared between processes (CUDA IPC) ---------------------------------------------------
  /// The CUDA IPC handle of the malloc_device allocation that holds [ptr, ptr + bytes) (cudaIpcGetMemHandle
  /// of its start, found with cuMemGetAddressRange). @throws cuda_error naming the pointer:
  /// cudaErrorInvalidValue when the range is not inside one such allocation; cudaErrorNotSupported under the
  /// host backend, whose malloc_device memory is private to its process.
  [[nodiscard]] virtual ipc_memory_handle ipc_get_mem_handle(void const* ptr, std::size_t bytes) = 0;
  /// Maps another process's allocation on `device` (cudaIpcOpenMemHandle, cudaIpcMemLazyEnablePeerAccess).
  /// @return its start. @throws cuda_error (a handle of this process, of a freed allocation, or forged).
  [[nodiscard]] virtual void* ipc_open_mem_handle(std::array<unsigned char, 64> const& handle, int device) = 0;
  /// Unmaps what ipc_open_mem_handle mapped (cudaIpcCloseMemHandle). Never throws (reports on stderr).
  virtual void ipc_close_mem_handle(void* ptr) noexcept = 0;
  /// A POSIX file descriptor (the caller's) of `pool` for another process (cudaMemPoolExportToShareableHandle).
  /// @throws cuda_error: cudaErrorInvalidValue when the pool was made without that handle type,
  /// cudaErrorNotSupported under the host backend (its pools' memory is private to its process).
  [[nodiscard]] virtual int mempool_export_handle(cudaMemPool_t pool) = 0;
  /// cudaMemPoolExportPointer of an allocation of an exported pool (its start). @throws cuda_error.
  [[nodiscard]] virtual std::array<unsigned char, 64> mempool_export_pointer(void const* ptr) = 0;
  /// The pool behind another process's descriptor (cudaMemPoolImportFromShareableHandle); mempool_destroy
  /// releases it. @throws cuda_error.
  [[nodiscard]] virtual cudaMemPool_t mempool_import_handle(int fd) = 0;
  /// An allocation of an imported pool (cudaMemPoolImportPointer); free_device frees the import.
  /// @throws cuda_error (an allocation the exporter freed, or forged data).
  [[nodiscard]] virtual void* mempool_import_pointer(cudaMemPool_t pool, std::array<unsigned char, 64> const& data) = 0;

  // ---- stream-ordered memory pools (cudaMallocAsync) ------------------------------------------------
  // Reuse rules are CUDA's defaults: memory freed on a stream is reused at once by later allocations on
  // that stream, and by other streams once the free has completed. Nothing here synchronises a stream.
  /// A new pool on `device`. max_size 0 means no limit. @throws cuda_error (cudaErrorNotSupported when the
  /// device has no memory pools).
  [[nodiscard]] virtual cudaMemPool_t mempool_create(int device, mempool_handle_type handle_type,
                                                     std::size_t max_size) = 0;
  virtual void mempool_destroy(cudaMemPool_t pool) noexcept = 0;
  /// The device's default pool (the one cudaMallocAsync uses). Owned by the backend: never destroy it.
  [[nodiscard]] virtual cudaMemPool_t mempool_default(int device) = 0;
  /// Bytes the pool may keep cached at a synchronisation point before releasing memory to the device.
  virtual void mempool_set_release_threshold(cudaMemPool_t pool, std::uint64_t bytes) = 0;
  [[nodiscard]] virtual std::uint64_t mempool_release_threshold(cudaMemPool_t pool) = 0;
  /// Releases cached memory until at most `min_bytes_to_keep` stay reserved (only free, completed blocks).
  virtual void mempool_trim(cudaMemPool_t pool, std::size_t min_bytes_to_keep) = 0;
  [[nodiscard]] virtual mempool_usage mempool_get_usage(cudaMemPool_t pool) = 0;
  /// Stream-ordered allocation from `pool`. @return nullptr when the memory is not available.
  [[nodiscard]] virtual void* mempool_malloc_async(cudaMemPool_t pool, std::size_t bytes, cudaStream_t stream) = 0;
  /// Stream-ordered free: the memory returns to its pool once `stream`'s earlier work has completed.
  virtual void mempool_free_async(void* ptr, cudaStream_t stream) noexcept = 0;
  /// The device's default pool of managed memory (cudaMemGetDefaultMemPool with cudaMemAllocationTypeManaged,
  /// CUDA 13): stream-ordered allocations of memory that is accessible from the host and every device. Owned
  /// by the backend: never destroy it. The host backend emulates it (its memory counts as managed).
  /// @throws cuda_error (cudaErrorNotSupported) naming what is missing, where the runtime, the driver (13.0
  /// or newer) or the device (concurrent managed access) cannot provide it.
  [[nodiscard]] virtual cudaMemPool_t mempool_default_managed(int device) = 0;

  // ---- streams --------------------------------------------------------------------------------------
  [[nodiscard]] virtual cudaStream_t stream_create(unsigned flags, int priority) = 0;
  virtual void stream_destroy(cudaStream_t stream) noexcept = 0;
  virtual void stream_synchronize(cudaStream_t stream) = 0;
  /// @return true when all work submitted to the stream so far has completed.
  [[nodiscard]] virtual bool stream_query(cudaStream_t stream) = 0;
  /// Later work on `stream` waits until `event`'s most recent record completes.
  virtual void stream_wait_event(cudaStream_t stream, cudaEvent_t event) = 0;
  [[nodiscard]] virtual int stream_device(cudaStream_t stream) = 0;
  [[nodiscard]] virtual unsigned stream_flags(cudaStream_t stream) = 0;
  [[nodiscard]] virtual int stream_priority(cudaStream_t stream) = 0;
  /// {least, greatest} priority, CUDA's convention (numerically lower = higher priority).
  [[nodiscard]] virtual std::pair<int, int> stream_priority_range() = 0;
  /// Runs `fn(user_data)` on the host once all earlier work on `stream` has completed (cudaLaunchHostFunc).
  /// `fn` must not call the backend.
  virtual void launch_host_func(cudaStream_t stream, void (*fn)(void*), void* user_data) = 0;

  // ---- events ---------------------------------------------------------------------------------------
  [[nodiscard]] virtual cudaEvent_t event_create(unsigned flags) = 0;
  virtual void event_destroy(cudaEvent_t event) noexcept = 0;
  virtual void event_record(cudaEvent_t event, cudaStream_t stream) = 0;
  virtual void event_synchronize(cudaEvent_t event) = 0;
  /// @return true when the most recent record has completed (or the event was never recorded).
  [[nodiscard]] virtual bool event_query(cudaEvent_t event) = 0;
  /// Milliseconds between two completed records. @throws cuda_error as cudaEventElapsedTime would.
  [[nodiscard]] virtual float event_elapsed_ms(cudaEvent_t start, cudaEvent_t end) = 0;

  // ---- copies and fills (stream-ordered) ------------------------------------------------------------
  virtual void memcpy_async(void* dst, void const* src, std::size_t bytes, cudaStream_t stream) = 0;
  virtual void memset_async(void* dst, int value, std::size_t bytes, cudaStream_t stream) = 0;
  /// Migrates managed memory [ptr, ptr + bytes) to `device` (or to the host for cudaCpuDeviceId), ordered on
  /// `stream` (a hint: the data stay valid wherever they are). The host backend checks the arguments as CUDA
  /// does (memory that is_migratable() refuses is cudaErrorInvalidValue) and enqueues nothing of substance.
  /// @throws cuda_error as cudaMemPrefetchAsync would (e.g. for an invalid stream or device, or memory that
  /// is not managed).
  virtual void mem_prefetch_async(void const* ptr, std::size_t bytes, int device, cudaStream_t stream) = 0;
  /// cudaMemAdvise on managed memory [ptr, ptr + bytes): `advice` is a cudaMemoryAdvise value (1 to 6), `device`
  /// a device ordinal or -1 (cudaCpuDeviceId). A hint; the host backend checks the arguments as CUDA does.
  /// @throws cuda_error (cudaErrorInvalidValue for memory that is not managed or a bad advice,
  /// cudaErrorInvalidDevice for a bad device)
  virtual void mem_advise(void const* ptr, std::size_t bytes, int advice, int device) = 0;

  // ---- graphs ---------------------------------------------------------------------------------------
  // Stream capture as CUDA does it (graph.hpp says what that means for a caller). The host backend applies
  // CUDA's capture rules: a stream that waits on an event recorded in a capture joins it; a call CUDA
  // refuses during a capture throws CUDA's error and invalidates the capture; stream-ordered pool allocations
  // and frees on a capturing stream (graph memory nodes) are refused with cudaErrorNotSupported, and so is
  // graph_launch into a capturing stream (cudaErrorStreamCaptureUnsupported, as CUDA 12 measured).
  // Every thread is in CUDA's default global thread capture mode (no cudaThreadExchangeStreamCaptureMode).
  /// @throws cuda_error as cudaStreamBeginCapture (the legacy stream; a stream already capturing).
  virtual void stream_begin_capture(cudaStream_t stream, capture_mode mode) = 0;
  /// Takes every stream of the capture out of capture mode. @throws cuda_error as cudaStreamEndCapture
  /// (cudaErrorStreamCaptureInvalidated, cudaErrorStreamCaptureUnjoined, cudaErrorStreamCaptureUnmatched,
  /// cudaErrorStreamCaptureWrongThread, ...).
  [[nodiscard]] virtual cudaGraph_t stream_end_capture(cudaStream_t stream) = 0;
  /// @return true while `stream` takes part in a capture that has not been invalidated (cudaStreamIsCapturing
  /// reports cudaStreamCaptureStatusActive). @throws cuda_error (cudaErrorStreamCaptureImplicit) for the
  /// legacy stream while a blocking stream of its device is capturing; that capture stays valid.
  [[nodiscard]] virtual bool stream_is_capturing(cudaStream_t stream) = 0;
  [[nodiscard]] virtual cudaGraphExec_t graph_instantiate(cudaGraph_t graph) = 0;
  virtual void graph_launch(cudaGraphExec_t exec, cudaStream_t stream) = 0;
  virtual void graph_destroy(cudaGraph_t graph) noexcept = 0;
  virtual void graph_exec_destroy(cudaGraphExec_t exec) noexcept = 0;

  // ---- libraries of the CUDA toolkit (loaded at run time: gpumem does not link them) -----------------
  /// A new cuBLAS handle (cublasHandle_t) made with `device` current (cublasCreate). libcublas is loaded on
  /// first use (libcublas.so.<major> of the runtime, else libcublas.so). @throws cuda_error:
  /// cudaErrorNotSupported under the host backend or when libcublas cannot be loaded (the message says which),
  /// cudaErrorUnknown when cublasCreate fails (the message names its status).
  [[nodiscard]] virtual void* cublas_create(int device) = 0;
  /// Destroys a handle from cublas_create (cublasDestroy) with `device` current; failures are ignored.
  virtual void cublas_destroy(void* handle, int device) noexcept = 0;
};

/**
 * @brief The process's backend, chosen on first call (see the file comment) and never changed after.
 * @throws cuda_error when GPUMEM_BACKEND=cuda but no CUDA device is usable.
 * @throws logic_error when GPUMEM_BACKEND holds anything other than "cuda" or "host".
 */
[[nodiscard]] GPUMEM_EXPORT backend& get_backend();

/**
 * @brief "cudaErrorMemoryAllocation (2: out of memory)": the name, number and text of `code`, as the CUDA
 * runtime describes it (a table look-up: no device, no state). Never throws but std::bad_alloc.
 */
[[nodiscard]] GPUMEM_EXPORT std::string describe_cuda_error(cudaError_t code);

/** @brief The backends themselves (for tests that want one explicitly). Defined in src/backend/. */
[[nodiscard]] GPUMEM_EXPORT backend& cuda_backend_instance();
[[nodiscard]] GPUMEM_EXPORT backend& host_backend_instance();

}  // namespace detail

/** @brief The kind of the process's backend (chooses it on first call). */
[[nodiscard]] GPUMEM_EXPORT backend_kind current_backend_kind();

}  // namespace gpumem
