/**
 * @file shareable_memory.hpp
 * What a resource says of memory it handed out when another process is to map it
 * (device_memory_resource::shareable): the CUDA mechanism that can share it and what that mechanism needs.
 * gpumem/ipc.hpp turns it into a handle for the other process; applications use that header, not this one.
 *
 * Three mechanisms:
 * - vmm_pieces: the memory lies in pieces of physical memory of a VMM pool (cuMemCreate), each exported as a
 *   POSIX file descriptor (cuMemExportToShareableHandle; a memfd on the host backend). The pieces are
 *   consecutive in the exporter's addresses; the shared bytes start `offset` bytes into the first one.
 * - cuda_ipc: the memory lies in one cudaMalloc allocation, shared by its cudaIpcMemHandle_t; the shared bytes
 *   start `offset` bytes into the allocation.
 * - async_pool: the memory is an allocation of a stream-ordered pool (cudaMallocAsync) made with POSIX file
 *   descriptor handles: the pool's descriptor (cudaMemPoolExportToShareableHandle) and the allocation's export
 *   data (cudaMemPoolExportPointer).
 */
#pragma once

#include <gpumem/export.hpp>

#include <array>
#include <cstddef>
#include <memory>
#include <vector>

namespace gpumem::mr {

/** @brief A file descriptor that closes itself. -1: none. Move-only. */
class GPUMEM_EXPORT owned_fd {
 public:
  owned_fd() noexcept = default;
  explicit owned_fd(int fd) noexcept : fd_{fd} {}
  ~owned_fd() { reset(); }
  owned_fd(owned_fd&& other) noexcept : fd_{other.release()} {}
  owned_fd& operator=(owned_fd&& other) noexcept
  {
    if (this != &other) { reset(other.release()); }
    return *this;
  }
  owned_fd(owned_fd const&) = delete;
  owned_fd& operator=(owned_fd const&) = delete;

  [[nodiscard]] int get() const noexcept { return fd_; }
  /** @return the descriptor, which the caller now owns. */
  [[nodiscard]] int release() noexcept
  {
    int const fd = fd_;
    fd_ = -1;
    return fd;
  }
  /** @brief Closes the descriptor held (if any) and holds `fd`. */
  void reset(int fd = -1) noexcept;

 private:
  int fd_{-1};
};

/** @brief See the file comment. */
struct shareable_memory {
  enum class mechanism { vmm_pieces, cuda_ipc, async_pool };

  /** @brief One piece of physical memory, whole. */
  struct piece {
    std::shared_ptr<owned_fd const> fd;  ///< its shareable file descriptor (shared by the exports of the piece)
    std::size_t bytes{};                 ///< its size (a multiple of `granularity`)
  };

  mechanism how{mechanism::vmm_pieces};
  int device{};            ///< the device whose memory it is (the exporter's ordinal)
  std::size_t bytes{};     ///< how many bytes are shared
  std::size_t offset{};    ///< where they start: in the first piece (vmm_pieces) or the allocation (cuda_ipc)
  std::size_t granularity{};         ///< vmm_pieces: the provider's mapping granularity
  std::vector<piece> pieces;         ///< vmm_pieces: in address order
  std::array<unsigned char, 64> cuda_data{};  ///< cuda_ipc: the cudaIpcMemHandle_t; async_pool: the cudaMemPoolPtrExportData
  owned_fd pool_fd;                           ///< async_pool: the pool's shareable descriptor
};

}  // namespace gpumem::mr
