/**
 * @file ipc.hpp
 * Device memory shared between processes on one host: the exporter turns memory it allocated into a
 * memory_handle (plain bytes, to send by any means: a pipe, a socket, a pickle), the importer maps it.
 *
 *     // exporter                                          // importer (another process)
 *     void* p = pool.allocate(bytes, stream);               auto handle = gpumem::ipc::memory_handle::from_bytes(b);
 *     stream.synchronize();   // the data is written        gpumem::ipc::imported_memory m = gpumem::ipc::import_memory(handle);
 *     auto e = gpumem::ipc::export_memory(pool, p, bytes);  use(m.data(), m.size());   // same bytes as p's
 *     send(e.handle().to_bytes());                          m.close();                  // or its destructor
 *
 * Which memory can be shared, and how (the resource answers: device_memory_resource::shareable):
 * - vmm_pool_memory_resource (and any adaptor or pool over it): the physical pieces that hold the range,
 *   each a POSIX file descriptor (cuMemExportToShareableHandle; a memfd on the host backend). The importer
 *   receives them over a Unix socket from the exporting process (SCM_RIGHTS: an abstract socket served by one
 *   thread per exporting process, started at its first export, refusing other users), imports them
 *   (cuMemImportFromShareableHandle), reserves addresses and maps them with access for the device.
 * - cuda_memory_resource (and a pool, arena or adaptor over it), cuda backend only: the CUDA IPC handle of the
 *   cudaMalloc allocation that holds the range (cudaIpcGetMemHandle) and the range's offset in it; the
 *   importer opens it with cudaIpcOpenMemHandle.
 * - cuda_async_memory_resource made with export_handle_type posix_file_descriptor (async_pool), cuda backend
 *   only: the pool's file descriptor (cudaMemPoolExportToShareableHandle, passed as the VMM pieces are) and
 *   the allocation's export data (cudaMemPoolExportPointer); the importer imports the pool and the pointer.
 *   Export whole allocations (their start).
 * Other memory (managed, pinned host, pools made without that handle type, the host backend's cudaMalloc and
 * pools) is refused with a gpumem::logic_error or cuda_error that names the resource.
 * Processes of one host only: fabric handles (VMM memory across the hosts of an NVLink domain) are not
 * offered, since drivers refuse to allocate with them without NVIDIA's IMEX service (docs/ipc.md).
 *
 * Lifetimes:
 * - An export lives as long as its exported_memory object: while it lives, any number of processes may
 *   import its handle; once it is destroyed (or withdraw() is called), later imports fail with a clear
 *   error and imports made before stay valid. Destroy the export before the memory is freed: a handle
 *   must not outlive what it names.
 * - vmm: an import maps the physical pieces themselves, which the driver (or the kernel, for memfds) keeps
 *   until every mapping of them is gone. So the importer's mapping stays valid, and keeps the bytes it had,
 *   after the exporter frees the memory or exits; but once the exporter frees it, its pool may hand the same
 *   pieces out again, and the importer then sees the new owner's writes. Free the memory only after every
 *   importer has closed it (as with PyTorch's shared CUDA tensors).
 * - cuda_ipc and async_pool: CUDA's rules: the memory stays valid while the exporting process keeps the
 *   allocation; the importer must close it before the exporter frees it or exits, else what it reads is
 *   undefined.
 * - Stream order: the exporter's writes must be complete (a stream or event synchronisation) before the
 *   importer reads, and the importer's work must be complete before close() (which waits for its device).
 *
 * Errors, never a crash: a truncated, corrupted or forged handle (checked: a magic, a version, a checksum,
 * every field's range), a handle of another backend, a device this process cannot see, a withdrawn export,
 * an exporting process that is gone, a CUDA IPC handle imported into the process that exported it (CUDA
 * forbids it; a vmm handle maps there as in any other process) each give gpumem::logic_error (or cuda_error
 * for what the driver refuses) naming what is wrong.
 *
 * Cost: an export is one driver call per piece not exported before (vmm), one cudaIpcGetMemHandle, or two
 * calls for a pool's allocation. The exporting process holds one file descriptor per exported piece, shared
 * by every export of memory in it, until the piece goes back and the last export holding it is withdrawn. An
 * import is a socket round trip and a cuMemImportFromShareableHandle + cuMemMap + cuMemSetAccess per piece,
 * one cudaIpcOpenMemHandle, or a pool and a pointer import.
 * Thread-safety: every function may be called from any thread; one exported_memory or imported_memory
 * object must not be used by two threads at once.
 */
#pragma once

#include <gpumem/backend/backend.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace gpumem::ipc {

/** @brief How the memory is shared (see the file comment). */
enum class mechanism : std::uint8_t { vmm = 1, cuda_ipc = 2, async_pool = 3 };

/** @brief "vmm", "cuda_ipc" or "async_pool". */
[[nodiscard]] GPUMEM_EXPORT std::string_view to_string(mechanism kind) noexcept;

/** @brief What an importer needs to map exported memory: a value, serialisable to bytes and back. */
class GPUMEM_EXPORT memory_handle {
 public:
  /** @brief What a handle holds (export_memory fills it in; tests forge handles with it). */
  struct fields {
    mechanism kind{mechanism::vmm};
    backend_kind backend{backend_kind::cuda};
    int device{};                           ///< the device's ordinal in the exporting process
    std::string pci_bus_id;                 ///< how an importer finds the device (empty under the host backend)
    std::int64_t exporter_pid{};            ///< the exporting process
    std::size_t bytes{};                    ///< the bytes shared
    std::size_t offset{};                   ///< where they start in the first piece (vmm) or the allocation (cuda_ipc)
    std::size_t granularity{};              ///< vmm: the exporter's mapping granularity
    std::vector<std::size_t> piece_bytes;   ///< vmm: the pieces of physical memory, in address order
    std::string server_address;             ///< vmm, async_pool: the exporting process's abstract Unix socket
    std::array<unsigned char, 16> token{};  ///< vmm, async_pool: names the export at that socket
    std::array<unsigned char, 64> cuda_data{};  ///< cuda_ipc: the cudaIpcMemHandle_t; async_pool: the cudaMemPoolPtrExportData
  };

  /**
   * @brief A handle of these fields.
   * @throws gpumem::logic_error naming a field out of range: no bytes, a device below 0, a process id below 1;
   *         vmm: no pieces, pieces that are not positive multiples of the granularity, bytes past their end,
   *         an empty or overlong socket address; a pci bus id or address over 255 characters.
   */
  explicit memory_handle(fields contents);

  /** @brief The handle's bytes: a magic, a version, the fields, a checksum. */
  [[nodiscard]] std::string to_bytes() const;
  /**
   * @brief The handle that to_bytes() gave.
   * @throws gpumem::logic_error naming what is wrong: too short or too long, not a gpumem handle, another
   *         version, a checksum that does not match (truncated or corrupted), a field out of range.
   */
  [[nodiscard]] static memory_handle from_bytes(std::string_view bytes);

  [[nodiscard]] fields const& contents() const noexcept { return fields_; }
  [[nodiscard]] mechanism kind() const noexcept { return fields_.kind; }
  /** @return the bytes shared. */
  [[nodiscard]] std::size_t size() const noexcept { return fields_.bytes; }
  /** @return the device's ordinal in the exporting process. */
  [[nodiscard]] int device() const noexcept { return fields_.device; }
  [[nodiscard]] std::int64_t exporter_pid() const noexcept { return fields_.exporter_pid; }
  /** @brief e.g. "vmm handle of 4.00 MiB at device 0 (2 pieces) from process 1234". */
  [[nodiscard]] std::string describe() const;

 private:
  fields fields_;
};

class exported_memory;
class imported_memory;

/**
 * @brief Exports `bytes` bytes at `ptr`, memory that `mr` handed out (a whole allocation or part of one).
 * @throws gpumem::logic_error when the resource cannot share its memory (naming it and what can), when the
 *         range is not memory in use there, or for a null pointer or 0 bytes; gpumem::cuda_error when the
 *         driver refuses.
 */
[[nodiscard]] GPUMEM_EXPORT exported_memory export_memory(mr::device_memory_resource const& mr, void const* ptr,
                                                          std::size_t bytes);

/**
 * @brief Maps the memory `handle` names (see the file comment), with access for its device and `peers`
 * (vmm only; cuda_ipc enables peer access lazily, as cudaIpcMemLazyEnablePeerAccess does).
 * @throws gpumem::logic_error naming what is wrong (the file comment's list); gpumem::cuda_error when the
 *         driver refuses; gpumem::out_of_memory when the addresses cannot be reserved.
 */
[[nodiscard]] GPUMEM_EXPORT imported_memory import_memory(memory_handle const& handle,
                                                          std::vector<int> const& peers = {});

/** @brief An export: its handle stays importable while the object lives (see the file comment). Move-only. */
class GPUMEM_EXPORT exported_memory {
 public:
  exported_memory(exported_memory&& other) noexcept;
  exported_memory& operator=(exported_memory&& other) noexcept;
  exported_memory(exported_memory const&) = delete;
  exported_memory& operator=(exported_memory const&) = delete;
  /** @brief withdraw(). */
  ~exported_memory();

  [[nodiscard]] memory_handle const& handle() const noexcept { return handle_; }
  /** @brief Later imports of the handle fail; imports made stay valid. Releases the file descriptors held. */
  void withdraw() noexcept;
  /** @return whether the handle can still be imported (not withdrawn, not moved from). */
  [[nodiscard]] bool active() const noexcept { return active_; }

 private:
  friend exported_memory export_memory(mr::device_memory_resource const& mr, void const* ptr, std::size_t bytes);
  explicit exported_memory(memory_handle handle) : handle_{std::move(handle)} {}

  memory_handle handle_;
  bool active_{true};
};

/** @brief Memory of another process (or of this one: vmm), mapped here until close(). Move-only. */
class GPUMEM_EXPORT imported_memory {
 public:
  imported_memory() = default;
  imported_memory(imported_memory&& other) noexcept;
  imported_memory& operator=(imported_memory&& other) noexcept;
  imported_memory(imported_memory const&) = delete;
  imported_memory& operator=(imported_memory const&) = delete;
  /** @brief close(). */
  ~imported_memory();

  /** @return the first shared byte (nullptr once closed). */
  [[nodiscard]] void* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }
  /** @return this process's ordinal of the device the memory lives on. */
  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] mechanism kind() const noexcept { return kind_; }
  [[nodiscard]] bool is_open() const noexcept { return data_ != nullptr; }
  /**
   * @brief Waits for the device's work (its memory may still be in use), then unmaps the memory (vmm:
   * cuMemUnmap and cuMemAddressFree; cuda_ipc: cudaIpcCloseMemHandle). Does nothing when closed.
   */
  void close() noexcept;

 private:
  friend imported_memory import_memory(memory_handle const& handle, std::vector<int> const& peers);
  struct mapping;  // vmm: the provider, the reservation and the mapped pieces

  void* data_{};
  std::size_t bytes_{};
  int device_{};
  mechanism kind_{mechanism::vmm};
  void* base_{};                     // cuda_ipc: what cudaIpcOpenMemHandle returned; async_pool: the import
  cudaMemPool_t imported_pool_{};    // async_pool
  std::shared_ptr<mapping> mapping_;  // vmm
};

}  // namespace gpumem::ipc
