// An emulated stream-ordered memory pool of the host backend (cudaMemPool_t / cudaMallocAsync semantics):
// - a block freed on stream S is reused at once by later allocations on S (stream order makes that safe),
//   and by other streams only once the free has completed (its completion marker), as CUDA's default
//   reuse policy allows;
// - memory goes back to the device (the backend's capacity) when the pool holds more than its release
//   threshold at a synchronisation (stream, event or device: release_over_threshold, which the backend calls
//   there, as CUDA releases "on the next call to stream, event or context synchronize"), on trim, or when the
//   device is full; only blocks whose free has completed, and nothing here blocks. So a block freed on a stream
//   is reused by that stream's next allocation whatever the threshold, until a synchronisation.
// Blocks are reused whole (best fit up to twice the request), so bookkeeping stays simple; the pool's
// purpose is the contract, not the packing.
#pragma once

#include "completion.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/detail/thread_annotations.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <unordered_map>

namespace gpumem::detail::host {

class host_mempool {
 public:
  using raw_allocate = std::function<void*(std::size_t bytes)>;  ///< device memory; nullptr when exhausted
  using raw_free = std::function<void(void* ptr)>;               ///< returns it without synchronising

  host_mempool(int device, std::size_t max_size, raw_allocate allocate, raw_free free);
  ~host_mempool();  ///< waits for pending frees, then returns every cached block
  host_mempool(host_mempool const&) = delete;
  host_mempool& operator=(host_mempool const&) = delete;

  /// @param stream identifies the allocating stream (same-stream reuse). @return nullptr when exhausted.
  [[nodiscard]] void* allocate(std::size_t bytes, void const* stream);
  /// @return false if `ptr` is not a live block of this pool.
  [[nodiscard]] bool free(void* ptr, void const* stream, completion_ptr done);
  [[nodiscard]] bool owns(void* ptr);

  void trim(std::size_t keep);
  /// Gives back completed frees beyond the release threshold (called by the backend at every synchronisation).
  void release_over_threshold();
  void set_release_threshold(std::uint64_t bytes);
  [[nodiscard]] std::uint64_t release_threshold();
  [[nodiscard]] mempool_usage usage();
  [[nodiscard]] int device() const noexcept { return device_; }

 private:
  struct cached_block {
    void* ptr;
    std::size_t bytes;
    void const* freed_on;  // the stream the block was freed on
    completion_ptr done;   // signalled once that stream's work up to the free has run
  };

  void* take_cached(std::size_t bytes, void const* stream) GPUMEM_REQUIRES(mutex_);
  void release_completed(std::size_t keep) GPUMEM_REQUIRES(mutex_);

  int const device_;
  std::size_t const max_size_;  // 0: no limit
  raw_allocate const allocate_;
  raw_free const free_;

  detail::mutex mutex_;
  std::multimap<std::size_t, cached_block> cached_ GPUMEM_GUARDED_BY(mutex_);  // free blocks by size
  std::unordered_map<void*, std::size_t> live_ GPUMEM_GUARDED_BY(mutex_);     // handed-out block -> bytes
  // reserved == sum(cached_ bytes) + used; used == sum(live_ bytes)
  mempool_usage usage_ GPUMEM_GUARDED_BY(mutex_){};
  std::uint64_t release_threshold_ GPUMEM_GUARDED_BY(mutex_){0};
};

}  // namespace gpumem::detail::host
