/**
 * @file pinned_memory_pool.hpp
 * A pool of page-locked (pinned) host memory in front of cudaMallocHost, which is slow (a driver call that
 * pins pages and maps them for the device, costing more the larger it is; docs/PERFORMANCE.md): blocks are
 * carved from large pinned chunks and reused. A block
 * that an asynchronous copy still reads or writes is returned with deallocate_async(): it goes back to
 * the pool only after the work submitted to that stream so far has completed, so no later allocation can
 * hand out memory that a copy in flight still uses.
 *
 * CuPy's PinnedMemoryPool keeps the same promise with one event per freed block; this pool does too, and
 * coalesces neighbouring free blocks (best fit by size, coalescing by address), so one large chunk serves
 * blocks of every size.
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/host_memory_resource.hpp>

#include <cstddef>
#include <memory>

namespace gpumem::mr {

/** @brief How a pinned_memory_pool grows. */
struct pinned_pool_options {
  /// Pinned memory is requested in chunks of max(chunk_size, the request rounded up to 2 MiB) bytes.
  std::size_t chunk_size{std::size_t{32} << 20U};
  /// The most pinned bytes the pool may hold (chunks in use, free or pending), at least one 256-byte block;
  /// 0 means no limit other than the machine's. Reaching it first waits for pending blocks, then throws
  /// out_of_memory.
  std::size_t maximum_bytes{0};
};

/** @brief What a pinned_memory_pool holds, in bytes. */
struct pinned_pool_usage {
  std::size_t reserved{};  ///< pinned bytes held from cudaMallocHost (all chunks)
  std::size_t in_use{};    ///< handed out and not yet deallocated
  std::size_t pending{};   ///< deallocated with deallocate_async, waiting for their stream
  std::size_t free{};      ///< free for reuse now
  std::size_t chunks{};    ///< number of pinned chunks
};

/**
 * @brief A thread-safe pool of pinned host memory; a std::pmr::memory_resource, so pmr containers use it.
 *
 * Blocks are 256-byte aligned (alignment requests up to 256 are honoured; larger ones are a logic_error)
 * and may be used by the host at once and by copies on any stream. A zero-byte request returns a valid
 * unique pointer (the standard's rule) that must be deallocated like any other.
 *
 * Stream-ordering: memory is free for reuse when deallocate() returns (the caller promises no copy still
 * uses it), or, for deallocate_async(), once the stream has completed the work submitted before the call.
 * allocate() never waits for a stream while it can pin more memory (a stream may be waiting on the calling
 * thread), so a loop that frees with deallocate_async faster than its streams progress makes the pool grow:
 * synchronise now and then. (The staged copies of transfer.hpp bound what they leave in flight per stream.)
 * deallocate_async() takes a stream of any device, whichever device is current: it records an event of the
 * stream's own device (the pool keeps spare events per device), and never waits for the stream unless no
 * event can be created or recorded there.
 * Failure: allocate() throws gpumem::out_of_memory naming the size and the pool's usage when neither the
 * pool, nor waiting for its pending blocks, nor new pinned memory can serve the request; the pool is
 * unchanged. Misuse (unknown pointer, wrong size, double free) throws gpumem::logic_error from
 * deallocate() and is reported on stderr (and ignored) by deallocate_async(), which never throws.
 * Destruction: returns every chunk to cudaFreeHost after waiting for pending blocks; blocks still in use
 * are reported on stderr (their memory is freed anyway).
 */
class GPUMEM_EXPORT pinned_memory_pool final : public host_memory_resource {
 public:
  /** @throws gpumem::logic_error naming the option if chunk_size is 0 or maximum_bytes is below 256 (but not 0). */
  explicit pinned_memory_pool(pinned_pool_options options = {});
  ~pinned_memory_pool() override;
  pinned_memory_pool(pinned_memory_pool const&) = delete;
  pinned_memory_pool& operator=(pinned_memory_pool const&) = delete;
  pinned_memory_pool(pinned_memory_pool&&) = delete;
  pinned_memory_pool& operator=(pinned_memory_pool&&) = delete;

  using host_memory_resource::allocate;
  using host_memory_resource::deallocate;

  /**
   * @brief Returns `ptr` (from allocate(bytes)) to the pool once the work submitted to `stream` so far has
   * completed: the copies that read or write it. Returns at once. Never throws (see the class comment).
   */
  void deallocate_async(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept;

  /** @brief Frees every wholly free chunk with cudaFreeHost (after reclaiming completed pending blocks). */
  void release_free_chunks() noexcept;

  /** @brief Blocks until every pending block has returned to the pool. */
  void wait_pending();

  [[nodiscard]] pinned_pool_usage usage() const;
  [[nodiscard]] pinned_pool_options const& options() const noexcept { return options_; }

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override;
  void do_deallocate(void* ptr, std::size_t bytes, std::size_t alignment) override;
  [[nodiscard]] bool do_is_equal(std::pmr::memory_resource const& other) const noexcept override;

  struct impl;
  pinned_pool_options options_;
  std::unique_ptr<impl> impl_;
};

/**
 * @brief The process's default pinned pool (CuPy's get_default_pinned_memory_pool), created on first use
 * with default options. It is never destroyed (its chunks go back to the system with the process), so it
 * may be used from static destructors.
 */
[[nodiscard]] GPUMEM_EXPORT pinned_memory_pool& get_default_pinned_pool();

}  // namespace gpumem::mr
