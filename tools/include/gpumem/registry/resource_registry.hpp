/**
 * @file resource_registry.hpp
 * The one registry of resources by name, for everything that measures resources against each other:
 * `gpumem replay`, `gpumem report`, `gpumem bench`, `gpumem demo` and the Google Benchmarks. A name means
 * one configuration everywhere, so two figures called "binning" are of the same resource.
 *
 * Each entry builds a chain bottom-up: the upstream (cudaMalloc; with `simulate` a simulated upstream of
 * addresses only; with `managed` managed memory), a byte counter over it (mr::statistics_resource_adaptor), then the resource
 * under test. The counter is what `peak_upstream_bytes` reports, so "peak bytes taken from below / peak
 * live bytes" is comparable across resources. It is called only when a sub-allocator grows or shrinks,
 * never on its fast path; `cuda` itself runs behind it (one lock per call, beside a driver call).
 *
 * The entries, in the order every command runs them by default:
 *   pool        mr::pool_memory_resource, initial size 0 (grows by doubling, no maximum)
 *   vmm         mr::vmm_pool_memory_resource: one virtual range, physical memory in slabs
 *   arena       mr::arena_memory_resource: one arena of half the free memory taken at construction
 *   binning     mr::binning_memory_resource: bins of 256 KiB .. 4 MiB over a pool (RMM's benchmarks)
 *   fixed_size  mr::fixed_size_memory_resource, blocks of the workload's largest request (needs it)
 *   cuda_async  mr::cuda_async_memory_resource: a driver pool of its own, keeps everything
 *   cuda_async_default  cudaMallocAsync on the device's default pool (the cudaMallocAsync peer)
 *   cuda        mr::cuda_memory_resource: cudaMalloc/cudaFree per call (the cudaMalloc peer)
 */
#pragma once

#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpumem::registry {

/** @brief One registered resource. */
struct resource_info {
  std::string_view name;
  std::string_view description;
  bool peer;         ///< a peer gpumem is measured against (cudaMalloc, cudaMallocAsync), not a gpumem allocator
  bool simulatable;  ///< can run over a simulated upstream (the sub-allocators)
  bool any_size;     ///< serves any request size (false: fixed_size, built for one block size)
  /// its handle reports the bytes it took from below (false: the device's default pool, which outlives it)
  bool measures_upstream;
  /// in the default set of the commands that replay logs (any size, and an upstream figure to compare)
  [[nodiscard]] constexpr bool replays_by_default() const noexcept { return any_size && measures_upstream; }
};

/** @brief How make_resource builds a resource. */
struct resource_options {
  /// Put the sub-allocators over a simulated_memory_resource instead of cuda_memory_resource.
  bool simulate{false};
  /// Put the sub-allocators over managed memory (mr::managed_memory_resource) instead.
  bool managed{false};
  /// The simulated upstream's capacity (a multiple of 256).
  std::size_t simulated_capacity{mr::simulated_memory_resource::default_capacity};
  /// The workload's largest request: fixed_size's block size (required for fixed_size, unused otherwise).
  std::size_t max_request{0};
  /// The vmm resource's slab size (vmm_pool_options::slab_size).
  std::size_t vmm_slab_size{std::size_t{32} << 20};
  /// The vmm resource's vmm_pool_options::max_mapping_size (none: no cap but the divisor's).
  std::optional<std::size_t> vmm_max_mapping_size{};
  /// The vmm resource's vmm_pool_options::mapping_divisor, with the pool's default (checked where built).
  std::size_t vmm_mapping_divisor{64};
};

/**
 * @brief Owns a resource under test and everything below it (upstream, byte counter); destroys them top
 * first. Movable, not copyable.
 */
class resource_handle {
 public:
  resource_handle() = default;
  /** @brief An empty handle named `name`, for a chain built with emplace (a benchmark's own resource). */
  explicit resource_handle(std::string name) : name_{std::move(name)} {}
  ~resource_handle();
  resource_handle(resource_handle&&) noexcept;
  resource_handle& operator=(resource_handle&&) noexcept;
  resource_handle(resource_handle const&) = delete;
  resource_handle& operator=(resource_handle const&) = delete;

  /** @return false for a default-constructed or moved-from handle. */
  [[nodiscard]] explicit operator bool() const noexcept { return !chain_.empty(); }
  /** @pre *this. @return the resource under test. */
  [[nodiscard]] mr::device_memory_resource& get() const noexcept { return *chain_.back(); }
  /** @return the registered name. */
  [[nodiscard]] std::string const& name() const noexcept { return name_; }
  /**
   * @return the peak bytes the resource has taken from below since it was built (its counter, or a
   * driver pool's reserved high-water mark), or nullopt where nothing can say (the device's default pool,
   * which outlives the handle).
   */
  [[nodiscard]] std::optional<std::size_t> peak_upstream_bytes() const;
  /** @return the bytes it holds from below now (same sources), or nullopt. */
  [[nodiscard]] std::optional<std::size_t> upstream_bytes() const;
  /** @return how many allocations it made from its upstream (its counter), or nullopt without one. */
  [[nodiscard]] std::optional<std::size_t> upstream_allocations() const;
  /** @return how many allocations took a block freed on another stream (a stream wait), or nullopt where the
   *  resource does not count them (vmm counts them). */
  [[nodiscard]] std::optional<std::size_t> cross_stream_takes() const;
  /** @return how many stream waits those takes made (one per other stream a block's pieces were freed on), or
   *  nullopt where the resource does not count them. */
  [[nodiscard]] std::optional<std::size_t> cross_stream_waits() const;
  /**
   * @return true when the resource takes a fixed reservation at construction (arena): its peak upstream
   * bytes are that reservation, so peak upstream / peak live says nothing about fragmentation.
   */
  [[nodiscard]] bool reserves_upfront() const noexcept { return reserves_upfront_; }

  /** @brief Destroys the chain, top first. */
  void reset() noexcept;

  /**
   * @brief Constructs an R on top of the chain: it becomes the resource under test (an adaptor over the
   * previous top, say). The handle owns it and destroys it before everything below it.
   * @return the new resource.
   */
  template <class R, class... Args>
  R* emplace(Args&&... args)
  {
    auto owned = std::make_unique<R>(std::forward<Args>(args)...);
    R* const raw = owned.get();
    chain_.push_back(std::move(owned));
    return raw;
  }

 private:
  friend class resource_builder;
  std::string name_;
  std::vector<std::unique_ptr<mr::device_memory_resource>> chain_;  // [0] bottom ... back() under test
  std::function<std::size_t()> peak_upstream_;
  std::function<std::size_t()> upstream_;
  std::function<std::size_t()> upstream_allocations_;
  std::function<std::size_t()> cross_stream_takes_;
  std::function<std::size_t()> cross_stream_waits_;
  bool reserves_upfront_{false};
};

/** @return every registered resource, in the order the commands run them by default. */
[[nodiscard]] std::span<resource_info const> resources() noexcept;

/** @return the entry named `name`, or nullptr. */
[[nodiscard]] resource_info const* find_resource(std::string_view name) noexcept;

/** @return the names of the entries `keep` accepts (all by default), joined with ", ". */
[[nodiscard]] std::string resource_names(std::function<bool(resource_info const&)> const& keep = {});

/**
 * @brief Builds the resource named `name`.
 * @throws gpumem::logic_error for an unknown name (listing the known ones), for a peer with `simulate`
 *         (naming the resources that can be simulated), or for fixed_size without `max_request`.
 * @throws whatever the resource's constructor throws (gpumem::cuda_error, gpumem::out_of_memory).
 */
[[nodiscard]] resource_handle make_resource(std::string_view name, resource_options const& options = {});

}  // namespace gpumem::registry
