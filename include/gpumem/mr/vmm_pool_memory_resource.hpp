/**
 * @file vmm_pool_memory_resource.hpp
 * A pool that never fragments into chunks: it reserves one large range of virtual addresses once, backs
 * it with physical memory in slabs as it grows (CUDA's virtual memory management: cuMemCreate, cuMemMap,
 * cuMemSetAccess), and moves or releases the physical memory of slabs that become wholly free. Free ranges
 * coalesce across growth boundaries, because the growth is contiguous in virtual addresses.
 * The algorithm is mr/detail/virtual_heap.hpp; docs/PERFORMANCE.md ("Fragmentation") has what it buys on
 * real PyTorch training and inference logs.
 *
 *     gpumem::mr::vmm_pool_memory_resource pool;                      // the current device, 32 MiB slabs
 *     void* p = pool.allocate(bytes, stream);
 *     pool.deallocate(p, bytes, stream);
 *     pool.release_unused();                                          // give wholly free slabs back
 *
 * Growth: when no free range holds a request, the pool backs the place that needs the fewest new slabs
 * (often right after the free range at the top, so a 500 MiB request over a 300 MiB free top range maps
 * 200 MiB). It first unmaps wholly free pieces elsewhere and maps their physical memory there; only what is
 * still missing is created, in pieces of up to 1/64 of the pool (vmm_pool_options::mapping_divisor). When the device has no memory for it (or maximum_physical_size forbids it,
 * or it exceeds the device's total memory, which fails before any memory is created),
 * the slabs backed for this request go back to the device and gpumem::out_of_memory names the request,
 * the pool's state and the device's free and total memory.
 *
 * Shrinking: release_unused() unmaps and releases every wholly free slab (the device's free memory rises
 * by that much); with vmm_pool_options::release_threshold, deallocations do it by themselves beyond the
 * threshold; the destructor releases everything. Physical memory of a slab is unmapped only after the
 * work of every stream that freed memory in it has completed (a host wait on those streams' events).
 *
 * Works as the whole pool, or as the upstream of another resource (pool_memory_resource over it gets
 * chunks that this pool can still give back to the device).
 *
 * Cost: allocate and deallocate take one mutex and O(log n) in the free ranges (one lower_bound and
 * usually no re-insertion: mr/detail/free_range_index.hpp), without any CUDA call when the memory is
 * backed; growing costs one cuMemCreate + cuMemMap + cuMemSetAccess per piece (pieces grow with the pool:
 * vmm_pool_options::mapping_divisor). Its speed and live-bytes ratio on real PyTorch logs, against
 * pool_memory_resource over cudaMalloc, are in docs/PERFORMANCE.md.
 *
 * Thread-safety: all members may be called concurrently (one mutex, held also while growing).
 * Stream-ordering: as device_memory_resource.hpp says. Memory freed on stream A is reused on A at once;
 * another stream B that takes it first waits (cudaStreamWaitEvent, no host synchronisation) on an event
 * recorded on A after the free. For the legacy default stream and announced streams (gpumem::cuda_stream:
 * before_stream_destroy.hpp) that event is recorded when B needs it, once per batch of frees; an
 * announced stream's event is recorded before it is destroyed, and the handle is then forgotten. Every
 * other stream (the per-thread default stream, CuPy's, PyTorch's, cudaStreamCreate's) has its event
 * recorded at every free, during the call, so the pool never uses such a stream after the call that
 * passed it. Up to 63 streams are tracked at once; when all are taken, the slots whose frees have
 * completed (an event query) come free, and only when none has does a deallocation on a further stream
 * synchronise that stream first.
 * Double frees: a block that overlaps a free range is refused (logged at error level, thrown by
 * checked_deallocate()); the pool is unchanged.
 *
 * Device: the pool belongs to the device that is current at its construction (or the provider's); use it
 * with that device current.
 *
 * Equality: a pool equals only itself.
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/detail/thread_annotations.hpp>
#include <gpumem/export.hpp>
#include <gpumem/before_stream_destroy.hpp>
#include <gpumem/mr/detail/invariant_checks.hpp>
#include <gpumem/mr/detail/virtual_heap.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/backend/virtual_memory_provider.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gpumem::mr {

/** @brief How a vmm_pool_memory_resource is built. */
struct vmm_pool_options {
  /// Bytes of physical memory per slab, rounded up to the device's granularity (2 MiB on Hopper). Smaller
  /// slabs waste less at the peak and cost more calls to grow (docs/PERFORMANCE.md measured 32 MiB).
  std::size_t slab_size{std::size_t{32} << 20};
  /// The most bytes one new piece of physical memory may cover (rounded down to whole slabs, at least one);
  /// none (the default): no cap but mapping_divisor's (one slab when mapping_divisor is 0). Growth creates
  /// what it needs in pieces, each with one cuMemCreate + cuMemMap + cuMemSetAccess, whose cost grows
  /// slowly with the size (docs/PERFORMANCE.md). But a piece moves and goes back to the device only whole,
  /// so larger pieces hold more memory than the live bytes need.
  std::optional<std::size_t> max_mapping_size{};
  /// N > 0 (the default, 64): a new piece covers up to 1/N of the physical memory the pool holds when it
  /// grows (at least one slab; at most max_mapping_size, when that is set). A large pool then grows in
  /// fewer driver calls, and what one whole piece pins stays a small share of the pool: on the PyTorch logs
  /// 64 kept every ratio under 1.05 with 13-31 % fewer pieces (docs/PERFORMANCE.md). 0: pieces of
  /// max_mapping_size (one slab by default).
  std::size_t mapping_divisor{64};
  /// Bytes of virtual address space to reserve (at least one slab; rounded up to slabs); none: four times
  /// the device's total memory.
  std::optional<std::size_t> reservation_size{};
  /// The most physical memory the pool may hold; none: no cap but the device's.
  std::optional<std::size_t> maximum_physical_size{};
  /// When set, a deallocation that leaves more than this many bytes in wholly free slabs releases the
  /// excess slabs at once. Like cudaFree, such a deallocation first waits (on the host) for the work of
  /// the streams that freed memory in those slabs. None (the default): wholly free slabs stay until the
  /// pool grows (they move), release_unused(), or destruction. 0 makes the pool follow its live bytes
  /// closely, at the price of unmapping and creating slabs in every cycle of a loop.
  std::optional<std::size_t> release_threshold{};
  /// Other devices that may read and write the pool's memory (cuMemSetAccess); the backend checks them.
  std::vector<int> peer_devices{};
};

/** @brief See the file comment. */
class GPUMEM_EXPORT vmm_pool_memory_resource final : public device_memory_resource,
                                                     private detail::stream_destroy_listener {
 public:
  /**
   * @brief A pool on the current device, through the backend's provider (make_device_vmm_provider).
   * @throws gpumem::logic_error when the device does not support virtual memory management (naming it), or
   *         for bad options, naming the option and its value: slab_size 0, reservation_size or
   *         maximum_physical_size below one slab, a slab_size or reservation_size (default: four times the
   *         device's total memory) that overflows size_t when rounded up to the granularity or to slabs;
   *         gpumem::out_of_memory when the reservation fails.
   */
  explicit vmm_pool_memory_resource(vmm_pool_options const& options = {});
  /**
   * @brief A pool over `provider` (a simulated_vmm_provider in replays and tests).
   * @throws as above; gpumem::logic_error if provider is null.
   */
  vmm_pool_memory_resource(std::unique_ptr<virtual_memory_provider> provider, vmm_pool_options const& options);
  /** @brief Waits for the streams that freed memory here, unmaps and releases everything, unreserves. */
  ~vmm_pool_memory_resource() override;
  vmm_pool_memory_resource(vmm_pool_memory_resource const&) = delete;
  vmm_pool_memory_resource& operator=(vmm_pool_memory_resource const&) = delete;
  vmm_pool_memory_resource(vmm_pool_memory_resource&&) = delete;
  vmm_pool_memory_resource& operator=(vmm_pool_memory_resource&&) = delete;

  /**
   * @brief Unmaps and releases every wholly free slab, after the work of the streams that freed memory in
   * it has completed. @return the bytes of physical memory given back.
   */
  std::size_t release_unused();

  /**
   * @brief Changes the most physical memory the pool may hold (none: no cap but the device's). Growth beyond it
   * then fails with gpumem::out_of_memory; a cap below the memory held now gives nothing back, it only stops
   * growth (release_unused() gives back what is free). Thread-safety: takes the pool's mutex.
   * @throws gpumem::logic_error when `bytes` is below one slab.
   */
  void set_maximum_physical_size(std::optional<std::size_t> bytes);
  /** @return the cap set by the options or set_maximum_physical_size (none: no cap). */
  [[nodiscard]] std::optional<std::size_t> maximum_physical_size() const noexcept;
  /** @brief Sets the peak of physical memory to the memory held now. Thread-safety: takes the pool's mutex. */
  void reset_peak_physical_bytes() noexcept;

  /** @return the provider (its device, granularity, and for a simulated one its counters). */
  [[nodiscard]] virtual_memory_provider& provider() const noexcept { return *provider_; }
  [[nodiscard]] std::size_t slab_size() const noexcept;
  [[nodiscard]] std::size_t reservation_size() const noexcept;
  /** @return bytes handed out and not yet returned (each allocation rounded up to 256). */
  [[nodiscard]] std::size_t bytes_in_use() const noexcept;
  /** @return bytes of physical memory held now (slabs mapped). */
  [[nodiscard]] std::size_t physical_bytes() const noexcept;
  /** @return the most physical memory held at once since construction or reset_peak_physical_bytes(). */
  [[nodiscard]] std::size_t peak_physical_bytes() const noexcept;
  /** @return bytes free in the mapped slabs. */
  [[nodiscard]] std::size_t free_bytes() const noexcept;
  [[nodiscard]] std::size_t largest_free_block() const noexcept;
  [[nodiscard]] std::size_t slab_count() const noexcept;
  /** @return how many pieces of physical memory back the slabs. */
  [[nodiscard]] std::size_t mapping_count() const noexcept;
  /** @return the most bytes one new piece may cover (with a mapping_divisor and no max_mapping_size: the reservation). */
  [[nodiscard]] std::size_t max_mapping_size() const noexcept;
  [[nodiscard]] std::size_t mapping_divisor() const noexcept { return mapping_divisor_; }
  /** @return how many slabs were created, moved (unmapped and mapped elsewhere) and released since construction. */
  [[nodiscard]] std::size_t slabs_created() const noexcept;
  [[nodiscard]] std::size_t slabs_moved() const noexcept;
  [[nodiscard]] std::size_t slabs_released() const noexcept;
  /** @brief Checks the heap's invariants and the byte counts. @throws gpumem::logic_error naming a violation. */
  void check_invariants() const;

 private:
  struct stream_slot {
    cudaStream_t stream{};
    std::uint64_t thread{};        // this_thread_token() for the per-thread default stream, else 0
    cudaEvent_t event{};
    bool recorded_since_free{true};
    // The event is recorded at every free, during the call: for a stream gpumem may not use later
    // (before_stream_destroy.hpp), and for the per-thread default stream (only its thread can name it).
    bool record_at_free{false};
    bool in_use{false};
  };

  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override
  {
    return this == &other;
  }
  void stream_destroying(cudaStream_t stream) noexcept override;

  /// The slot of `stream` if it has one (never creates one). Lock held.
  [[nodiscard]] std::optional<unsigned> find_slot(cudaStream_t stream) const noexcept GPUMEM_REQUIRES(mutex_);
  /// The slot of `stream` (created on first use), or nullopt when all 63 are taken. Lock held.
  [[nodiscard]] std::optional<unsigned> slot_of(cudaStream_t stream) GPUMEM_REQUIRES(mutex_);
  /// The slot's event, recorded first if frees were made on its stream since its last record. Lock held.
  [[nodiscard]] cudaEvent_t event_after_frees(stream_slot& slot) GPUMEM_REQUIRES(mutex_);
  /// `stream` waits for the frees of every slot in `mask` but its own. Lock held.
  void order_after(std::uint64_t mask, std::optional<unsigned> own, cudaStream_t stream) GPUMEM_REQUIRES(mutex_);
  /// The host waits for the frees of every slot in `mask`. Lock held.
  void wait_on_host(std::uint64_t mask) GPUMEM_REQUIRES(mutex_);
  /// Backs enough slabs for `bytes` (`requested` rounded up; see the file comment); on failure gives back
  /// what it backed. Lock held. @throws out_of_memory naming `requested`, cuda_error.
  void grow(std::size_t requested, std::size_t bytes) GPUMEM_REQUIRES(mutex_);
  /// With a release threshold: releases wholly free slabs beyond the threshold (after their streams'
  /// work, a host wait). Lock held.
  void release_over_threshold() noexcept GPUMEM_REQUIRES(mutex_);
  /// Removes the wholly free mapping at `address` from the heap and unmaps it after the work of the
  /// streams that freed memory in it (it stays if that wait fails). Lock held. @return its handle, unreleased.
  [[nodiscard]] physical_handle take_down(std::uintptr_t address) GPUMEM_REQUIRES(mutex_);
  /// Unmaps and releases the wholly free `mappings` (after their streams). Lock held. @return bytes.
  std::size_t release_mappings(std::vector<detail::virtual_heap::mapping> const& mappings) GPUMEM_REQUIRES(mutex_);
  [[noreturn]] void fail(std::size_t bytes, std::string_view why) GPUMEM_REQUIRES(mutex_);

  std::unique_ptr<virtual_memory_provider> provider_;
  mutable detail::mutex mutex_;
  std::optional<std::size_t> maximum_physical_ GPUMEM_GUARDED_BY(mutex_);
  std::optional<std::size_t> release_threshold_;
  std::uintptr_t reservation_{};
  std::size_t reservation_size_{};
  std::unique_ptr<detail::virtual_heap> heap_ GPUMEM_PT_GUARDED_BY(mutex_);
  std::vector<stream_slot> slots_ GPUMEM_GUARDED_BY(mutex_);  // index = bit in the heap's masks
  std::size_t bytes_in_use_ GPUMEM_GUARDED_BY(mutex_){};
  std::size_t peak_physical_ GPUMEM_GUARDED_BY(mutex_){};
  std::size_t device_total_{};  // the provider's total memory: a growth beyond it fails before creating anything
  std::size_t max_mapping_slabs_{1};
  std::size_t mapping_divisor_{64};
  std::size_t created_ GPUMEM_GUARDED_BY(mutex_){};
  std::size_t moved_ GPUMEM_GUARDED_BY(mutex_){};
  std::size_t released_ GPUMEM_GUARDED_BY(mutex_){};
  detail::invariant_sampler invariant_sampler_;  // which calls check_invariants() after them (debug builds)
};

}  // namespace gpumem::mr
