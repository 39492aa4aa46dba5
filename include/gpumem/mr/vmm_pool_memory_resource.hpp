/**
 * @file vmm_pool_memory_resource.hpp
 * A pool that never fragments into chunks: it reserves one large range of virtual addresses once, backs
 * it with physical memory in slabs as it grows (CUDA's virtual memory management: cuMemCreate, cuMemMap,
 * cuMemSetAccess), and moves or releases the physical memory of slabs that become wholly free. Free ranges
 * coalesce across growth boundaries, because the growth is contiguous in virtual addresses.
 * The algorithm is mr/detail/virtual_heap.hpp; docs/vmm_pool.md gives the reasoning behind the design and
 * the cost of each call, and docs/PERFORMANCE.md ("Fragmentation") what it buys on real PyTorch training and
 * inference logs.
 *
 *     gpumem::mr::vmm_pool_memory_resource pool;                      // the current device, 32 MiB slabs
 *     void* p = pool.allocate(bytes, stream);
 *     pool.deallocate(p, bytes, stream);
 *     pool.release_unused();                                          // give wholly free slabs back
 *
 * Growth: when no free range holds a request, the pool backs the place that needs the fewest new slabs
 * (often right after the free range at the top, so a 500 MiB request over a 300 MiB free top range maps
 * 200 MiB). It first moves wholly free pieces from elsewhere: their physical memory is mapped there at once,
 * and the old mapping is unmapped once the work of every stream that freed memory in the piece has completed
 * (an event query at the pool's next growth or release_unused(); a host wait only when a growth needs those
 * addresses again), so a growth never waits for the device. Only what is still missing is created, in
 * pieces of up to 1/64 of the pool (vmm_pool_options::mapping_divisor), or of 1/32 of the growth when that is
 * more (vmm_pool_options::max_pieces_per_growth). When the device has no memory for it
 * (or maximum_physical_size forbids it, or it exceeds the device's total memory, which fails before any
 * memory is created), the slabs backed for this request go back to the device and gpumem::out_of_memory
 * names the request, the pool's state and the device's free and total memory.
 *
 * Shrinking: release_unused() unmaps and releases every wholly free slab (the device's free memory rises
 * by that much); with vmm_pool_options::release_threshold, deallocations do it by themselves beyond the
 * threshold; the destructor releases everything. Physical memory of a slab is unmapped only after the
 * work of every stream that freed memory in it has completed (a host wait on those streams' events; for a
 * move, see Growth).
 *
 * Works as the whole pool, or as the upstream of another resource (pool_memory_resource over it gets
 * chunks that this pool can still give back to the device).
 *
 * Small blocks: a request of at most vmm_pool_options::small_block_limit bytes is served from pages of its
 * own size class (mr/detail/small_pages.hpp), each page one block of the heap, given back to it once its last
 * block is freed (before the pool's next operation on the heap, so that a block of one size allocated and
 * freed in a loop keeps its page). A small block thus never splits a large free range, and pins at most its
 * page. A new page spans about 1/128 of the pool's physical memory, from 64 KiB to 512 KiB, so that a small
 * pool is not held up by one page per size class.
 *
 * Thread caches: a small block of at most vmm_pool_options::thread_cache_limit bytes freed on a default
 * stream (the legacy default stream, or the thread's own per-thread default stream) goes into the freeing
 * thread's cache (mr/detail/block_cache.hpp), keyed by (stream, size class); a later request of that class on
 * that stream on that thread takes it back without the pool's mutex and without an event: stream order alone
 * makes the reuse safe, as in the pool of stream_ordered_memory_resource.hpp. Blocks freed on other streams go
 * to their pages at once: a block cached for an explicit stream would serve only that stream on that thread,
 * and programs that spread work over explicit streams free on one and allocate on another, so such blocks
 * would sit unused and pin their pages. Blocks leave a cache in batches into their pages, with their stream's
 * event rule applied once per batch: a full slot's older half, an evicted slot, a thread's whole cache when
 * it exits. Every cache is emptied into its pages before the pool takes a new page or grows (so cached blocks
 * never make it take more memory), before release_unused(), before it fails, and at destruction. A thread
 * hides at most block_cache::slot_count * thread_cache_limit * block_cache::slot_capacity bytes from the
 * others until one of those moments; free_bytes() counts them, bytes_in_use() does not.
 *
 * Cost: a cached allocate or deallocate takes the thread's cache lock (one uncontended atomic exchange), a
 * scan of its slots and no CUDA call. A small block otherwise takes the mutex and O(1) to take it from its
 * class's page; a free finds its page in O(1) when it is the page used last, else in O(log p) in the p pages.
 * Otherwise allocate and deallocate take one mutex and O(log n) in the
 * free ranges (one lower_bound and usually no re-insertion: mr/detail/free_range_index.hpp), plus O(log k)
 * in the k stream marks of a range of several streams (mr/detail/stream_marks.hpp), without any
 * CUDA call when the memory is backed; growing costs one cuMemCreate + cuMemMap + cuMemSetAccess per piece
 * (pieces grow with the pool: vmm_pool_options::mapping_divisor), after one lock of every thread's cache.
 * Its speed and live-bytes ratio on real PyTorch logs, against pool_memory_resource over cudaMalloc, are in
 * docs/PERFORMANCE.md.
 *
 * Thread-safety: all members may be called concurrently (one mutex, held also while growing, that a waiting
 * thread retries briefly before it sleeps: detail/spinning_mutex.hpp; a lock per
 * thread cache, taken before the mutex, never while it is held). Combining: a thread that finds the mutex
 * held publishes the locked part of its allocate or deallocate in a slot of its own and spins on that slot;
 * whichever thread holds the mutex runs the published operations before releasing it, in passes over the
 * slots until one finds none or it has run combining_budget operations for others, so the heap's data stays on
 * one core instead of moving to each thread in turn (docs/vmm_pool.md). A holder claims an operation
 * (one compare-exchange) before it runs it. A waiter not served within about a thousand spins takes its
 * operation back (the same compare-exchange; when a holder claimed it first, it spins until that one
 * operation is done) and sleeps on the mutex like any other thread: it never sleeps while its operation is
 * published, since a holder that ran it may plan an event record that the waiter makes after the call.
 * Not combined: calls on the per-thread default stream (their slot is the calling thread's), calls of a pool
 * with a release_threshold (a free may release memory), and frees whose stream has no slot yet or records its
 * event at every free (the calling thread makes those driver calls itself: the holder declines them). Up to 64
 * threads at once have a slot; others lock. The driver calls that order a block for a stream other than the
 * one that freed it (an event record and a cudaStreamWaitEvent) run after the mutex is released, so threads on
 * different streams make them in parallel.
 * Stream-ordering: as device_memory_resource.hpp says. Memory freed on stream A is reused on A at once;
 * another stream B that takes it first waits (cudaStreamWaitEvent, no host synchronisation) on an event
 * recorded on A after the free (cross_stream_takes() counts these takes, cross_stream_waits() their waits).
 * A block cut from a free range that merged pieces freed on several streams waits only for the streams of the
 * pieces it overlaps (mr/detail/virtual_heap.hpp). For the legacy default stream and
 * announced streams (gpumem::cuda_stream: before_stream_destroy.hpp) that event is recorded when B needs it,
 * once per batch of frees, by B's call after it released the mutex; an announced stream's event is recorded
 * before it is destroyed, its destruction waits for those records in flight, and the handle is then
 * forgotten. Every other stream (the per-thread default stream, CuPy's, PyTorch's, cudaStreamCreate's) has
 * its event recorded at every free, during the call, so the pool never uses such a stream after the call
 * that passed it. Up to 63 streams are tracked at once; when all are taken, the slots whose frees have
 * completed (an event query) come free, and only when none has does a deallocation on a further stream
 * synchronise that stream first.
 * Double frees: a block that overlaps a free range, or a small block already free in its page, is refused
 * (logged at error level, thrown by checked_deallocate()); the pool is unchanged. A small block freed twice
 * into a thread cache is refused when the second free finds it in its cache slot, else when the second copy
 * reaches its page, which may be in a later call, on any thread; one freed twice with a reuse in between
 * cannot be told from two allocations (undefined, as in RMM).
 *
 * Sharing with other processes (gpumem/ipc.hpp): shareable() exports the pieces of physical memory that hold
 * a range in use, each as a POSIX file descriptor (on CUDA devices that support them; a memfd on the host
 * backend); another process maps the same pieces. A piece that holds memory in use neither moves nor goes
 * back, so the pieces stay what the handle says until the memory is freed.
 *
 * Device: the pool belongs to the device that is current at its construction (or the provider's); use it
 * with that device current.
 *
 * Equality: a pool equals only itself.
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/detail/spinning_mutex.hpp>
#include <gpumem/detail/thread_annotations.hpp>
#include <gpumem/export.hpp>
#include <gpumem/before_stream_destroy.hpp>
#include <gpumem/mr/detail/invariant_checks.hpp>
#include <gpumem/mr/detail/small_pages.hpp>
#include <gpumem/mr/detail/thread_cache_registry.hpp>
#include <gpumem/mr/detail/virtual_heap.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/backend/virtual_memory_provider.hpp>

#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpumem::mr {

/** @brief How a vmm_pool_memory_resource is built. */
struct vmm_pool_options {
  /// With a mapping_divisor and no max_mapping_size, one growth creates at most this many new pieces (without
  /// it, a new pool asked for 8 GiB created 256 pieces of one 32 MiB slab: docs/vmm_pool.md).
  static constexpr std::size_t max_pieces_per_growth = 32;

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
  /// grows, or 1/max_pieces_per_growth of the growth when that is more (at least one slab; at most
  /// max_mapping_size, when that is set). A large pool then grows in fewer driver calls, what one whole piece
  /// pins stays a small share of the pool (on the PyTorch logs of data/logs 64 kept every ratio under 1.05
  /// with 13-31 % fewer pieces: docs/PERFORMANCE.md), and a large request to a small pool makes a bounded
  /// number of pieces. The price is the holes a large piece keeps: a program whose block sizes change with
  /// its data holds more (docs/vmm_pool.md, "Programs of other kinds"), and small slabs with 0 hold less at
  /// a driver call per piece. 0: pieces of max_mapping_size (one slab by default).
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
  /// Requests of at most this many bytes (a multiple of 256, at most block_cache::largest_cached_block) are
  /// served from pages of their size class (the file comment); 0: every request from the heap.
  std::size_t small_block_limit{std::size_t{128} << 10};
  /// Small blocks of at most this many bytes (at most small_block_limit) go through the thread caches (the
  /// file comment); 0 (the default) turns the caches off, and so does a release_threshold (a cached block
  /// would keep its page from the heap). Off by default: they speed up single-threaded loops of many small
  /// allocations (docs/vmm_pool.md), but a block freed and cached by one thread stays out of the other
  /// threads' reach until the pool drains the caches, which happens only before it takes a page or grows.
  std::size_t thread_cache_limit{0};
};

/** @brief See the file comment. */
class GPUMEM_EXPORT vmm_pool_memory_resource final : public device_memory_resource,
                                                     private detail::stream_destroy_listener,
                                                     private detail::thread_cache_owner {
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
   * it has completed (every thread's cache is emptied into the pool first). @return the bytes of physical
   * memory given back.
   */
  std::size_t release_unused();

  /** @brief Moves the blocks that every thread holds in its cache into the pool's free ranges. */
  void flush_thread_caches() noexcept;

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
  /** @return bytes handed out and not yet returned (each allocation rounded up to 256, a small one to its
   *  size class: mr/detail/small_pages.hpp). */
  [[nodiscard]] std::size_t bytes_in_use() const noexcept;
  /** @return bytes of freed blocks held in thread caches (counted in free_bytes()). */
  [[nodiscard]] std::size_t bytes_in_thread_caches() const noexcept;
  /** @return the largest request served from pages and thread caches (0: none). */
  [[nodiscard]] std::size_t small_block_limit() const noexcept { return small_block_limit_; }
  /** @return the largest block the thread caches hold (0: no caches, also with a release_threshold). */
  [[nodiscard]] std::size_t thread_cache_limit() const noexcept { return thread_cache_limit_; }
  /** @return how many pages of small blocks the pool holds now. */
  [[nodiscard]] std::size_t small_page_count() const noexcept;
  /** @return bytes of physical memory held now (slabs mapped). */
  [[nodiscard]] std::size_t physical_bytes() const noexcept;
  /** @return the most physical memory held at once since construction or reset_peak_physical_bytes(). */
  [[nodiscard]] std::size_t peak_physical_bytes() const noexcept;
  /** @return bytes free in the mapped slabs (in the free ranges and in thread caches). */
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
  /** @return how many allocations since construction took a block freed on another stream, and so made
   *  their stream wait (on the device) for that stream's work: each such wait orders two streams' work. */
  [[nodiscard]] std::size_t cross_stream_takes() const noexcept;
  /** @return how many stream waits those takes made: one per other stream whose frees the block carries
   *  (the streams that freed the pieces it is cut from). */
  [[nodiscard]] std::size_t cross_stream_waits() const noexcept;
  /** @return how many allocations and deallocations since construction were run by another thread that held
   *  the mutex when their own thread found it held (combining: the file comment's Thread-safety). */
  [[nodiscard]] std::size_t combined_operations() const noexcept;
  /** @brief Checks the heap's invariants and the byte counts. @throws gpumem::logic_error naming a violation. */
  void check_invariants() const;

 private:
  struct stream_slot {
    cudaStream_t stream{};
    std::uint64_t thread{};        // this_thread_token() for the per-thread default stream, else 0
    cudaEvent_t event{};
    std::uint64_t frees{};         // frees made on the stream so far (stream_progress::recorded_through)
    // The event is recorded at every free, during the call: for a stream gpumem may not use later
    // (before_stream_destroy.hpp), and for the per-thread default stream (only its thread can name it).
    bool record_at_free{false};
    bool in_use{false};
  };
  /// What takers of a slot's blocks do after the mutex is released, counted so that the slot keeps its stream
  /// and event meanwhile: a slot is reused only with no holder, and a stream's destruction waits for its
  /// recorders.
  struct stream_progress {
    std::atomic<std::uint64_t> recorded_through{0};  // the slot's frees that its event's latest record follows
    std::atomic<unsigned> holders{0};    // takers still to wait on the event (or to give their block back)
    std::atomic<unsigned> recorders{0};  // takers still to record the event on the slot's stream
  };
  /// The stream waits of a block taken under the mutex, made after it is released (their driver calls run
  /// outside the lock): per slot of the block's streams but the taker's own, the slot's event is recorded on
  /// its stream first when frees were made there since its latest record, then the taker's stream waits on it.
  struct stream_waits {
    struct wait {
      cudaEvent_t event;
      cudaStream_t stream;   // the slot's stream, for the record
      std::uint64_t through; // the slot's frees the record follows
      unsigned slot;
      bool record;
    };
    std::array<wait, 64> waits;  // the first `count`
    unsigned count{0};
    std::uint64_t streams{0};    // the block's mask: what it goes back with when a wait fails
  };

  /// The locked part of an allocate or deallocate, published by a thread that found the mutex held, for the
  /// holder to run (Thread-safety in the file comment). Fields are written by the publishing thread before
  /// `state` becomes published, and by the holder that runs it before `state` becomes done or declined.
  struct alignas(64) combined_op {
    static constexpr std::uint32_t idle = 0;
    static constexpr std::uint32_t published = 1;
    static constexpr std::uint32_t done = 2;
    static constexpr std::uint32_t declined = 3;  // needs a driver call: its thread runs it
    static constexpr std::uint32_t running = 4;   // claimed by a holder, which runs it
    std::atomic<std::uint32_t> state{idle};
    std::atomic<detail::block_cache const*> owner{nullptr};  // the owning thread's cache (none: free slot)
    bool is_free{};
    std::size_t rounded{};
    std::size_t size{};            // the small class (0: from the heap)
    cudaStream_t stream{};
    std::uintptr_t address{};      // a free's block
    stream_waits* waits{};         // an allocation's waits, filled by the take
    void* block{};                 // an allocation's block (null: no room without growing)
    std::exception_ptr error;      // what the operation threw
  };
  static constexpr unsigned combining_slots = 64;
  /// The most published operations one holder runs for others before it releases the mutex.
  static constexpr unsigned combining_budget = 128;

  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override
  {
    return this == &other;
  }
  /// The pieces of physical memory that hold [ptr, ptr + bytes), each exported as a file descriptor (one
  /// driver call each, under the mutex). @throws gpumem::logic_error when the range is not memory in use
  /// here; what the provider's export_handle throws.
  [[nodiscard]] shareable_memory do_shareable(void const* ptr, std::size_t bytes) const override;
  void stream_destroying(cudaStream_t stream) noexcept override;
  void thread_exiting(detail::block_cache& cache) noexcept override;

  /// The cache's name for a stream: its handle, with both names of the legacy default stream as 0.
  [[nodiscard]] static std::uintptr_t cache_key(cuda_stream_view stream) noexcept;
  /// A block for `rounded` bytes without growing: from a page of class `size` when small (size != 0; or,
  /// when new_page is not 0, from a new page of new_page bytes taken from the heap: only once the thread caches
  /// were drained into their pages), else from the heap, counted in use; nullptr when there is no room. Fills
  /// `waits` with the stream waits the block needs before `stream` may use it (wait_for_frees). Lock held.
  void* try_take(std::size_t rounded, std::size_t size, cuda_stream_view stream, std::size_t new_page,
                 stream_waits& waits) GPUMEM_REQUIRES(mutex_);
  /// The waits `stream` needs for a block last freed on the slots of `mask`, counted as held (and in
  /// cross_stream_takes when there is one). Lock held.
  void plan_waits(std::uint64_t mask, cudaStream_t stream, stream_waits& waits) GPUMEM_REQUIRES(mutex_);
  /// Makes the planned waits (records and cudaStreamWaitEvent), without the lock. When one fails, the block
  /// at `block` (small, or `heap_bytes` bytes from the heap) goes back with its streams and it rethrows.
  void wait_for_frees(stream_waits const& waits, void* block, std::size_t heap_bytes, cudaStream_t stream)
    GPUMEM_EXCLUDES(mutex_);
  /// Whether calls on `stream` may be combined (Thread-safety in the file comment).
  [[nodiscard]] bool combinable(cuda_stream_view stream) const noexcept
  {
    return !stream.is_per_thread_default() && !release_threshold_;
  }
  /// The calling thread's combining slot (claimed on first use), or null: none free, or no thread cache.
  [[nodiscard]] combined_op* combining_slot() noexcept;
  /// Runs `op` with the mutex held: here when the mutex is free, else published for the holder to run, spinning
  /// until a holder ran it, this thread got the mutex by a try, or it took the operation back after spin_limit
  /// spins and then locked; a declined op then runs here under the mutex. Errors land in op.error.
  void run_locked(combined_op& op) noexcept GPUMEM_EXCLUDES(mutex_);
  /// Runs `op` (own: the calling thread's, so it may make driver calls; else it declines the frees that need
  /// them). @return combined_op::done or combined_op::declined. Lock held.
  std::uint32_t run_op(combined_op& op, bool own) noexcept GPUMEM_REQUIRES(mutex_);
  /// Runs every published operation of other threads once (an atomic load when there is none: after every
  /// call that holds the mutex). Lock held.
  void run_published() noexcept GPUMEM_REQUIRES(mutex_)
  {
    if (combined_waiting_.load(std::memory_order_acquire) != 0) { run_published_ops(); }
  }
  void run_published_ops() noexcept GPUMEM_REQUIRES(mutex_);
  /// Frees a small block into its page, and a page that empties into the heap. Lock held.
  /// @throws gpumem::logic_error for a double free or an address that is no block's (nothing changes).
  void free_into_page(std::uintptr_t address, std::uint64_t mask) GPUMEM_REQUIRES(mutex_);
  /// Gives the small pages' kept empty pages back to the heap: before every operation on the heap. Lock held.
  void retire_empty_pages() GPUMEM_REQUIRES(mutex_);
  /// The size class of a small request (rounded to 256), the key of the thread caches; 0 when not small.
  [[nodiscard]] std::size_t small_class(std::size_t rounded) const noexcept;
  /// Puts a freed block in the calling thread's cache when its stream may be cached. @return whether it did.
  /// @throws gpumem::logic_error for a double free found in the cache slot (the cache is unchanged).
  bool cache_freed_block(cuda_stream_view stream, std::size_t size, std::uintptr_t address);
  /// Frees a batch of blocks of one stream and size into the heap, applying the stream's event rule once.
  /// own_thread: whether cudaStreamPerThread names the calling thread's stream (else the legacy stream's
  /// slot takes the blocks: its event follows every blocking stream's earlier work).
  void spill(detail::block_cache::spill_batch const& batch, bool own_thread) noexcept GPUMEM_EXCLUDES(mutex_);
  /// Frees `address` (a small block when `small`) into its page or the heap on the slot of `stream` (record
  /// or count its event). Lock held.
  void free_into_heap(std::uintptr_t address, std::size_t rounded, bool small, cudaStream_t stream)
    GPUMEM_REQUIRES(mutex_);
  /// Empties every thread's cache into the heap.
  void drain_thread_caches() noexcept GPUMEM_EXCLUDES(mutex_);
  /// The bytes (and largest block) that thread caches hold now.
  [[nodiscard]] std::pair<std::size_t, std::size_t> cached_totals() const noexcept;

  /// What find_slot and slot_of return for no slot.
  static constexpr unsigned no_slot = 64;
  /// The slot of `stream` if it has one (never creates one), else no_slot. The slot found last is tried
  /// first, inline: O(1) when one stream makes the calls in a row, else a scan of the slots. Lock held.
  [[nodiscard]] unsigned find_slot(cudaStream_t stream) const noexcept GPUMEM_REQUIRES(mutex_)
  {
    if (stream != cudaStreamPerThread && last_slot_ < slots_.size()) {  // that one is named by its thread too
      stream_slot const& last = slots_[last_slot_];
      if (last.in_use && last.stream == stream && last.thread == 0) { return last_slot_; }
    }
    return find_slot_scan(stream);
  }
  /// find_slot past its inline test: the slot found last again (for the per-thread default stream), else a
  /// scan of every slot, which remembers the slot it finds. Lock held.
  [[nodiscard]] unsigned find_slot_scan(cudaStream_t stream) const noexcept GPUMEM_REQUIRES(mutex_);
  /// The slot of `stream` (created on first use), or no_slot when all 63 are taken. Lock held.
  [[nodiscard]] unsigned slot_of(cudaStream_t stream) GPUMEM_REQUIRES(mutex_);
  /// The event of slot `i`, recorded first if frees were made on its stream since its latest record. Lock held.
  [[nodiscard]] cudaEvent_t event_after_frees(unsigned i) GPUMEM_REQUIRES(mutex_);
  /// The host waits for the frees of every slot in `mask`. Lock held.
  void wait_on_host(std::uint64_t mask) GPUMEM_REQUIRES(mutex_);
  /// Backs enough slabs for `bytes` (`requested` rounded up; see the file comment); on failure gives back
  /// what it backed. Lock held. @throws out_of_memory naming `requested`, cuda_error.
  void grow(std::size_t requested, std::size_t bytes) GPUMEM_REQUIRES(mutex_);
  /// With a release threshold: releases wholly free slabs beyond the threshold (after their streams'
  /// work, a host wait). Lock held.
  void release_over_threshold() noexcept GPUMEM_REQUIRES(mutex_);
  /// Removes the wholly free mapping at `address` from the heap for a move: unmaps it now when the streams
  /// that freed memory in it are done (or there are none), else keeps the old mapping until they are (the
  /// moved mappings, unmap_moved). Lock held. @return its handle, unreleased, and the streams whose work may
  /// still use its memory (0 when none): its new place carries them, so its next user waits for them.
  [[nodiscard]] std::pair<physical_handle, std::uint64_t> move_out(std::uintptr_t address) GPUMEM_REQUIRES(mutex_);
  /// Whether the work of every stream in `mask` up to its frees so far has completed (an event or stream query
  /// per stream). Lock held.
  [[nodiscard]] bool streams_done(std::uint64_t mask) GPUMEM_REQUIRES(mutex_);
  /// Unmaps the old mappings of moved pieces whose streams are done; with `wait`, waits for them all first;
  /// with a range, only those overlapping it, waiting for them. Lock held. @throws what waiting throws.
  void unmap_moved(bool wait, std::uintptr_t address = 0, std::size_t bytes = ~std::size_t{0}) GPUMEM_REQUIRES(mutex_);
  /// Removes the wholly free mapping at `address` from the heap and unmaps it after the work of the
  /// streams that freed memory in it (it stays if that wait fails). Lock held. @return its handle, unreleased.
  [[nodiscard]] physical_handle take_down(std::uintptr_t address) GPUMEM_REQUIRES(mutex_);
  /// Unmaps and releases the wholly free `mappings` (after their streams). Lock held. @return bytes.
  std::size_t release_mappings(std::vector<detail::virtual_heap::mapping> const& mappings) GPUMEM_REQUIRES(mutex_);
  [[noreturn]] void fail(std::size_t bytes, std::string_view why) GPUMEM_REQUIRES(mutex_);
  /// Releases a piece of physical memory, forgetting its exported descriptor (the exports keep theirs).
  void release_piece(physical_handle handle) noexcept;

  std::unique_ptr<virtual_memory_provider> provider_;
  mutable detail::spinning_mutex mutex_;  // short critical sections from many threads (spinning_mutex.hpp)
  std::optional<std::size_t> maximum_physical_ GPUMEM_GUARDED_BY(mutex_);
  std::optional<std::size_t> release_threshold_;
  std::uintptr_t reservation_{};
  std::size_t reservation_size_{};
  std::unique_ptr<detail::virtual_heap> heap_ GPUMEM_PT_GUARDED_BY(mutex_);
  std::vector<stream_slot> slots_ GPUMEM_GUARDED_BY(mutex_);  // index = bit in the heap's masks
  mutable unsigned last_slot_ GPUMEM_GUARDED_BY(mutex_){no_slot};  // the slot find_slot found last
  std::array<stream_progress, 64> progress_;  // per slot; atomics, read and written without the lock
  /// The old mapping of a moved piece, unmapped once the streams that freed memory there are done (its slots
  /// count it as a holder, so they keep their events meanwhile).
  struct moved_mapping {
    std::uintptr_t address;
    std::size_t bytes;
    std::uint64_t streams;
  };
  std::vector<moved_mapping> moved_mappings_ GPUMEM_GUARDED_BY(mutex_);
  std::size_t bytes_in_use_ GPUMEM_GUARDED_BY(mutex_){};
  std::size_t peak_physical_ GPUMEM_GUARDED_BY(mutex_){};
  std::size_t device_total_{};  // the provider's total memory: a growth beyond it fails before creating anything
  std::size_t max_mapping_slabs_{1};
  std::size_t mapping_divisor_{64};
  std::size_t created_ GPUMEM_GUARDED_BY(mutex_){};
  std::size_t moved_ GPUMEM_GUARDED_BY(mutex_){};
  std::size_t released_ GPUMEM_GUARDED_BY(mutex_){};
  std::size_t cross_stream_takes_ GPUMEM_GUARDED_BY(mutex_){};
  std::size_t cross_stream_waits_ GPUMEM_GUARDED_BY(mutex_){};
  std::size_t combined_operations_ GPUMEM_GUARDED_BY(mutex_){};
  detail::invariant_sampler invariant_sampler_;  // which calls check_invariants() after them (debug builds)
  std::size_t small_block_limit_{};   // fixed at construction (read without the lock)
  std::size_t thread_cache_limit_{};  // fixed at construction (read without the lock)
  std::optional<detail::small_pages> pages_ GPUMEM_GUARDED_BY(mutex_);  // none: small_block_limit 0
  mutable detail::mutex exports_mutex_;  // taken inside mutex_, never the other way round
  /// The descriptor of each piece that was exported (shareable()), shared by the exports, until it goes back.
  mutable std::map<physical_handle, std::shared_ptr<owned_fd const>> exported_pieces_ GPUMEM_GUARDED_BY(exports_mutex_);
  std::array<combined_op, combining_slots> combined_{};  // one per thread that found the mutex held
  std::atomic<unsigned> combined_claimed_{0};  // slots [0, this) were ever claimed (the holder scans them)
  std::atomic<unsigned> combined_waiting_{0};  // operations published and not yet run
  mutable detail::thread_cache_registry caches_{this};  // after everything spill() uses: detached first
};

}  // namespace gpumem::mr
