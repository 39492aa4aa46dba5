/**
 * @file virtual_memory_provider.hpp
 * What vmm_pool_memory_resource needs from the machine: reserve a range of virtual addresses, create and
 * release physical memory, and map physical memory into the range (CUDA's virtual memory management:
 * cuMemAddressReserve, cuMemCreate, cuMemMap + cuMemSetAccess, cuMemUnmap, cuMemRelease).
 *
 * Three providers:
 * - make_device_vmm_provider(device) on the process's backend:
 *   - cuda: the driver's cuMem* calls, found through cudaGetDriverEntryPointByVersion (gpumem does not
 *     link libcuda, so it still loads on machines without a driver). Access is granted to the device
 *     and to the peers asked for.
 *   - host: the same contract on the CPU. A reservation is an mmap of PROT_NONE address space; physical
 *     memory is a memfd of the requested size, counted against the emulated device's capacity (so
 *     mem_info's free memory falls and rises as on a GPU); mapping is mmap(MAP_FIXED | MAP_SHARED) of the
 *     memfd into the reservation, unmapping puts PROT_NONE address space back. Releasing a handle frees
 *     its pages once it is unmapped, as CUDA does.
 * - simulated_vmm_provider: addresses and byte counts only (no memory at all), with a physical capacity and
 *   failure injection in create and map, for replays at "80 GiB" scale on a laptop (`gpumem replay
 *   --simulate`) and for the failure tests.
 *
 * The provider is off the hot path: the resource calls it only to grow, to shrink and at destruction.
 * Thread-safety: every member may be called from any thread; the resource serialises its own calls.
 */
#pragma once

#include <gpumem/backend/backend.hpp>
#include <gpumem/export.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace gpumem::mr {

/** @brief A piece of physical memory (a CUmemGenericAllocationHandle, or the host emulation's). 0 is none. */
using physical_handle = std::uint64_t;

/** @brief The virtual-memory calls of one device (see the file comment). */
class GPUMEM_EXPORT virtual_memory_provider {
 public:
  virtual_memory_provider() = default;
  virtual ~virtual_memory_provider() = default;
  virtual_memory_provider(virtual_memory_provider const&) = delete;
  virtual_memory_provider& operator=(virtual_memory_provider const&) = delete;

  /** @return e.g. "cuda device 0", "host device 0", "simulated". */
  [[nodiscard]] virtual std::string describe() const = 0;
  /** @return the device whose physical memory this provider creates. */
  [[nodiscard]] virtual int device() const noexcept = 0;
  /** @return the size that every reservation, physical size and mapping must be a multiple of. */
  [[nodiscard]] virtual std::size_t granularity() const noexcept = 0;
  /** @return the device's free and total memory (for out-of-memory messages and tests). */
  [[nodiscard]] virtual memory_info mem_info() = 0;

  /**
   * @brief Reserves `bytes` (a multiple of granularity()) of virtual address space, backed by nothing.
   * @return its first address (a multiple of granularity()).
   * @throws gpumem::out_of_memory when the address space is not available; gpumem::cuda_error otherwise.
   */
  [[nodiscard]] virtual std::uintptr_t reserve(std::size_t bytes) = 0;
  /** @brief Gives a reservation back. @pre nothing is mapped in it. */
  virtual void unreserve(std::uintptr_t base, std::size_t bytes) noexcept = 0;

  /**
   * @brief Creates `bytes` (a multiple of granularity()) of physical memory on device().
   * @return its handle, or 0 when the device has not that much memory (an out-of-memory is no exception
   *         here, so that the resource can free memory and retry, and name its own state when it fails).
   * @throws gpumem::cuda_error for any other failure.
   */
  [[nodiscard]] virtual physical_handle create(std::size_t bytes) = 0;
  /** @brief Releases a handle; its memory goes back to the device once it is no longer mapped. */
  virtual void release(physical_handle handle) noexcept = 0;

  /**
   * @brief Maps the whole of `handle` (of `bytes`) at `address` inside a reservation, and makes it readable
   * and writable by device() and the provider's peers.
   * @throws gpumem::cuda_error when the mapping fails (nothing stays mapped then).
   */
  virtual void map(std::uintptr_t address, std::size_t bytes, physical_handle handle) = 0;
  /** @brief Unmaps what map() put at [address, address + bytes). @pre no work on any stream still uses it. */
  virtual void unmap(std::uintptr_t address, std::size_t bytes) noexcept = 0;

  /**
   * @brief A new POSIX file descriptor for `handle` that another process can import (after receiving it over
   * a Unix socket): cuMemExportToShareableHandle, or a dup of the host backend's memfd. The caller owns it.
   * The physical memory lives on while the descriptor, or any import of it, is open.
   * @throws gpumem::logic_error when the provider cannot share memory (the default: simulated providers, and
   *         CUDA devices without POSIX file descriptor handles); gpumem::cuda_error when the driver refuses.
   */
  [[nodiscard]] virtual int export_handle(physical_handle handle);
  /**
   * @brief A handle for the `bytes` of physical memory behind `fd`, exported by export_handle() in any
   * process (cuMemImportFromShareableHandle; the host backend checks that `fd` is one of its memfds of that
   * size). Map it and release it like a handle of create(); its memory is not counted against this device's
   * (it is the exporter's). `fd` stays the caller's.
   * @throws gpumem::logic_error as export_handle, or when `fd` is not such memory; gpumem::cuda_error.
   */
  [[nodiscard]] virtual physical_handle import_handle(int fd, std::size_t bytes);
};

/**
 * @brief The backend's provider for `device` (see the file comment), granting access also to `peers`.
 * @throws gpumem::logic_error naming the device when it does not support virtual memory management (the
 *         cuda backend asks CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED), when a device id is out
 *         of range, or when a peer cannot access the device's memory.
 * @throws gpumem::cuda_error when the driver's entry points cannot be found.
 */
[[nodiscard]] GPUMEM_EXPORT std::unique_ptr<virtual_memory_provider> make_device_vmm_provider(
  int device, std::vector<int> const& peers = {});

/**
 * @brief A provider of addresses only: reservations come from a simulated address space, "physical" memory
 * is a byte count under a capacity. Never dereference its addresses.
 *
 * Failure injection: fail_create_after(n) makes every create() after the next n return 0 (out of memory);
 * fail_map_after(n) makes every map() after the next n throw gpumem::cuda_error; clear_failures() ends both.
 * Misuse (mapping over a mapping, unmapping what is not mapped, releasing an unknown handle) is counted in
 * misuse_count(), which tests assert on.
 *
 * Thread-safety: all members may be called concurrently (one mutex).
 */
class GPUMEM_EXPORT simulated_vmm_provider final : public virtual_memory_provider {
 public:
  /**
   * @param physical_capacity bytes of "physical" memory that create() may hand out in all.
   * @param granularity       a power of two (CUDA's is 2 MiB on current GPUs).
   */
  explicit simulated_vmm_provider(std::size_t physical_capacity = std::size_t{1} << 40,
                                  std::size_t granularity = std::size_t{2} << 20);

  [[nodiscard]] std::string describe() const override { return "simulated"; }
  [[nodiscard]] int device() const noexcept override { return 0; }
  [[nodiscard]] std::size_t granularity() const noexcept override { return granularity_; }
  [[nodiscard]] memory_info mem_info() override;
  [[nodiscard]] std::uintptr_t reserve(std::size_t bytes) override;
  void unreserve(std::uintptr_t base, std::size_t bytes) noexcept override;
  [[nodiscard]] physical_handle create(std::size_t bytes) override;
  void release(physical_handle handle) noexcept override;
  void map(std::uintptr_t address, std::size_t bytes, physical_handle handle) override;
  void unmap(std::uintptr_t address, std::size_t bytes) noexcept override;

  void fail_create_after(std::size_t calls);
  void fail_map_after(std::size_t calls);
  void clear_failures();

  /** @return bytes of handles created and not released. */
  [[nodiscard]] std::size_t physical_bytes() const;
  /** @return bytes mapped now. */
  [[nodiscard]] std::size_t mapped_bytes() const;
  [[nodiscard]] std::size_t create_calls() const;
  [[nodiscard]] std::size_t map_calls() const;
  [[nodiscard]] std::size_t unmap_calls() const;
  [[nodiscard]] std::size_t release_calls() const;
  [[nodiscard]] std::size_t misuse_count() const;

 private:
  std::size_t const capacity_;
  std::size_t const granularity_;
  mutable std::mutex mutex_;
  std::uintptr_t next_reservation_;
  std::vector<std::pair<std::uintptr_t, std::size_t>> reservations_;
  std::map<physical_handle, std::size_t> handles_;   // live handles -> bytes
  std::map<std::uintptr_t, std::size_t> mappings_;    // address -> bytes (O(log n) checks: thousands of slabs)
  physical_handle next_handle_{1};
  std::size_t physical_bytes_{};
  std::size_t mapped_bytes_{};
  std::optional<std::size_t> creates_until_failure_;
  std::optional<std::size_t> maps_until_failure_;
  std::size_t create_calls_{}, map_calls_{}, unmap_calls_{}, release_calls_{}, misuse_{};
};

}  // namespace gpumem::mr
