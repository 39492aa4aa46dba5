/**
 * @file backend_memory_resource.hpp
 * The upstream resources, written once: every allocation is one allocation call of the backend for one kind
 * of memory (device, managed or pinned host), every deallocation the matching free. cuda_memory_resource,
 * managed_memory_resource and pinned_host_memory_resource are this resource for one kind each.
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <cstddef>

namespace gpumem::mr {

/** @brief The kinds of memory the backend allocates directly, each with its own allocation and free call. */
enum class memory_kind {
  device,       ///< cudaMalloc / cudaFree on the current device
  managed,      ///< cudaMallocManaged (cudaMemAttachGlobal) / cudaFree: host- and device-accessible
  pinned_host,  ///< cudaMallocHost / cudaFreeHost: page-locked host memory, device-accessible
};

/**
 * @brief A device_memory_resource whose every call is one backend call for its memory kind: allocate is
 * the kind's allocation on the calling thread's current device, deallocate its free. Made only as one of
 * the three resources that name a kind (cuda_memory_resource, managed_memory_resource,
 * pinned_host_memory_resource), whose headers say what each kind's memory is.
 *
 * Every call goes to the CUDA runtime, which is slow (the allocation and free calls synchronise the
 * device): use it as the upstream of a pool, not on a hot path. Cost: one backend call per allocate and
 * per deallocate, no lock.
 *
 * Thread-safety: all members may be called concurrently (the resource has no state besides its kind).
 * Stream-ordering: allocate ignores the stream (the memory is usable by every stream once the call
 * returns). deallocate frees at once: the runtime's free (and the host backend's emulation of it) first
 * waits for all work on the device, which keeps the contract of device_memory_resource.hpp on both
 * backends.
 * Equality: any two resources of the same kind compare equal (each can free the other's memory); resources
 * of different kinds never do.
 */
class GPUMEM_EXPORT backend_memory_resource : public device_memory_resource {
 public:
  ~backend_memory_resource() override = default;

  /** @return the kind of memory this resource allocates. */
  [[nodiscard]] memory_kind kind() const noexcept { return kind_; }

 protected:
  explicit backend_memory_resource(memory_kind kind) noexcept : kind_{kind} {}
  // Copied only as one of the resources that name a kind, never sliced into a bare backend_memory_resource.
  backend_memory_resource(backend_memory_resource const&) = default;
  backend_memory_resource(backend_memory_resource&&) noexcept = default;
  backend_memory_resource& operator=(backend_memory_resource const&) = default;
  backend_memory_resource& operator=(backend_memory_resource&&) noexcept = default;

 private:
  /**
   * @brief The kind's allocation call for `bytes`.
   * @throws gpumem::out_of_memory naming the resource (e.g. "managed_memory_resource"), the size, the
   *         current device and its free/total memory when the memory is not available (for pinned host
   *         memory the message adds that the host's physical memory is the limit, not the device's).
   * @throws gpumem::cuda_error when the runtime fails otherwise.
   */
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) final;
  /** @brief The kind's free call, which waits for the device's work first. Never throws. */
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept final;
  /**
   * @brief Device memory: its allocation's CUDA IPC handle (cuda backend only; the host backend's cudaMalloc
   * memory is private to its process). @throws gpumem::logic_error for managed and pinned memory, which CUDA
   * IPC cannot share; gpumem::cuda_error from the backend.
   */
  [[nodiscard]] shareable_memory do_shareable(void const* ptr, std::size_t bytes) const final;
  /** @return true when `other` is a backend_memory_resource of the same kind. */
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept final;

  memory_kind kind_;
};

}  // namespace gpumem::mr
