/**
 * @file replay_resource.hpp
 * The resources an allocation log can be replayed against, by name (`gpumem replay --resource NAME`):
 *
 *   cuda        mr::cuda_memory_resource (cudaMalloc/cudaFree per call)
 *   cuda_async  mr::cuda_async_memory_resource (a driver pool of its own, release threshold: keep all)
 *   pool        mr::pool_memory_resource over the upstream, initial size 0 (grows by doubling)
 *   vmm         mr::vmm_pool_memory_resource: one reserved virtual range backed by slabs of physical memory
 *               (replay_resource_options::vmm_slab_size); with `simulate`, over a simulated_vmm_provider of
 *               simulated_capacity. Its peak upstream bytes are its peak physical bytes.
 *   arena       mr::arena_memory_resource over the upstream (one fixed arena, taken at construction)
 *   binning     mr::binning_memory_resource: power-of-two bins 2^8 .. 2^22 bytes over a pool (RMM's setup);
 *               larger requests go to the pool
 *
 * The sub-allocators (pool, arena, binning) sit on an upstream behind a byte counter, so the handle can say
 * how many bytes they took at peak. The upstream is cuda_memory_resource, or with `simulate` a
 * simulated_memory_resource of 1 TiB (addresses only: replaying an 80 GiB log needs no GPU). cuda and
 * cuda_async allocate device memory themselves and cannot be simulated.
 */
#pragma once

#include <gpumem/export.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>
#include <gpumem/replay/replay.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gpumem {

/** @brief One resource a log can be replayed against. */
struct replay_resource_info {
  std::string_view name;
  std::string_view description;
  bool simulatable;  ///< true when it can run over a simulated upstream (the sub-allocators)
};

/** @return every replayable resource, in the order `gpumem replay` runs them by default. */
[[nodiscard]] GPUMEM_EXPORT std::span<replay_resource_info const> replay_resources() noexcept;

/** @return the entry named `name`, or nullptr. */
[[nodiscard]] GPUMEM_EXPORT replay_resource_info const* find_replay_resource(std::string_view name) noexcept;

/** @return the names, joined with ", " (only the simulatable ones when `simulatable_only`). */
[[nodiscard]] GPUMEM_EXPORT std::string replay_resource_names(bool simulatable_only = false);

/** @brief How make_replay_resource builds a resource. */
struct replay_resource_options {
  /// Put the sub-allocators over a simulated_memory_resource instead of cuda_memory_resource.
  bool simulate{false};
  /// The simulated upstream's capacity (a multiple of 256).
  std::size_t simulated_capacity{mr::simulated_memory_resource::default_capacity};
  /// The vmm resource's slab size (vmm_pool_options::slab_size).
  std::size_t vmm_slab_size{std::size_t{32} << 20};
  /// The vmm resource's vmm_pool_options::max_mapping_size (none: no cap but the divisor's).
  std::optional<std::size_t> vmm_max_mapping_size{};
  /// The vmm resource's vmm_pool_options::mapping_divisor, with the same default (replay_resource.cpp
  /// checks that they agree; 0: pieces of vmm_max_mapping_size, one slab when that is none).
  std::size_t vmm_mapping_divisor{64};
};

/**
 * @brief Owns a resource to replay against and everything below it (upstream, byte counter); destroys
 * them top first. Movable, not copyable.
 */
class GPUMEM_EXPORT replay_resource {
 public:
  replay_resource() = default;
  ~replay_resource();
  replay_resource(replay_resource&&) noexcept;
  replay_resource& operator=(replay_resource&&) noexcept;
  replay_resource(replay_resource const&) = delete;
  replay_resource& operator=(replay_resource const&) = delete;

  /** @pre the handle came from make_replay_resource. @return the resource to replay against. */
  [[nodiscard]] mr::device_memory_resource& get() const noexcept { return *chain_.back(); }
  /** @return the registered name. */
  [[nodiscard]] std::string const& name() const noexcept { return name_; }
  /**
   * @return the peak bytes the resource has taken from below since it was built: its upstream's byte
   * counter, or for cuda_async its pool's reserved high-water mark.
   */
  [[nodiscard]] std::size_t peak_upstream_bytes() const { return peak_upstream_(); }
  /** @return the bytes the resource holds from below now (same sources as peak_upstream_bytes). */
  [[nodiscard]] std::size_t upstream_bytes() const { return upstream_(); }
  /**
   * @return true when the resource takes a fixed reservation at construction (arena): its peak upstream
   * bytes are that reservation, so peak upstream / peak live says nothing about fragmentation.
   */
  [[nodiscard]] bool reserves_upfront() const noexcept { return reserves_upfront_; }

 private:
  friend replay_resource make_replay_resource(std::string_view, replay_resource_options const&);
  void reset() noexcept;

  std::string name_;
  std::vector<std::unique_ptr<mr::device_memory_resource>> chain_;  // [0] bottom ... back() replayed
  std::function<std::size_t()> peak_upstream_;
  std::function<std::size_t()> upstream_;
  bool reserves_upfront_{false};
};

/**
 * @brief Builds the resource named `name` (see the file comment).
 * @throws gpumem::logic_error for an unknown name (listing the known ones), or for cuda / cuda_async with
 *         `simulate` (naming the resources that can be simulated).
 * @throws whatever the resource's constructor throws (gpumem::cuda_error, gpumem::out_of_memory).
 */
[[nodiscard]] GPUMEM_EXPORT replay_resource make_replay_resource(std::string_view name,
                                                                 replay_resource_options const& options = {});

/**
 * @brief replay(log, r.get(), options) with the peak upstream bytes (and, unless `options` has its own, the
 * current upstream bytes for a timeline) taken from `r`.
 * @throws as replay().
 */
[[nodiscard]] GPUMEM_EXPORT replay_result replay(allocation_log_reader& log, replay_resource& resource,
                                                 replay_options options = {});

/** @brief As the overload above, for a log held in memory. @throws as replay(). */
[[nodiscard]] GPUMEM_EXPORT replay_result replay(allocation_log const& log, replay_resource& resource,
                                                 replay_options options = {});

}  // namespace gpumem
