/**
 * @file resource_registry.hpp
 * The benchmarks take the resource under test by name (docs/benchmarks.md). This registry maps each name
 * to a factory that builds the resource and everything below it (its upstream, a byte-counting adaptor)
 * as one owning handle. Adding a resource is one line in resource_registry.cpp.
 *
 * Peers: `cuda` is cudaMalloc/cudaFree per call (the cudaMalloc peer). The cudaMallocAsync peer
 * (`cuda_async_default`: the device's default pool, release threshold at the maximum) joins once the
 * library's cuda_async_memory_resource exists.
 */
#pragma once

#include "counting_resource.hpp"

#include <gpumem/mr/device_memory_resource.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpumem::bench {

/**
 * @brief Owns a resource under test and the resources it sits on. Destroys them top first (the resource
 * under test before its upstream). Movable, not copyable.
 */
class resource_handle {
 public:
  resource_handle() = default;
  ~resource_handle() { reset(); }
  resource_handle(resource_handle&& other) noexcept
    : name_{std::move(other.name_)},
      chain_{std::move(other.chain_)},
      counter_{std::exchange(other.counter_, nullptr)},
      peak_reserved_{std::move(other.peak_reserved_)},
      reserves_upfront_{other.reserves_upfront_}
  {
  }
  resource_handle& operator=(resource_handle&& other) noexcept
  {
    if (this != &other) {
      reset();
      name_ = std::move(other.name_);
      chain_ = std::move(other.chain_);
      counter_ = std::exchange(other.counter_, nullptr);
      peak_reserved_ = std::move(other.peak_reserved_);
      reserves_upfront_ = other.reserves_upfront_;
    }
    return *this;
  }
  resource_handle(resource_handle const&) = delete;
  resource_handle& operator=(resource_handle const&) = delete;

  /** @return false for a default-constructed or moved-from handle. */
  [[nodiscard]] explicit operator bool() const noexcept { return !chain_.empty(); }
  /** @pre *this. @return the resource under test (the top of the chain). */
  [[nodiscard]] mr::device_memory_resource& get() const noexcept { return *chain_.back(); }
  [[nodiscard]] std::string const& name() const noexcept { return name_; }
  /** @return the counter between the resource and its upstream, or nullptr when it has none (peers). */
  [[nodiscard]] counting_resource const* upstream_counter() const noexcept { return counter_; }
  /**
   * @return true when the resource takes a fixed reservation at construction (arena), so peak reserved
   * bytes / peak live bytes measures the configuration, not fragmentation.
   */
  [[nodiscard]] bool reserves_upfront() const noexcept { return reserves_upfront_; }
  /**
   * @return the peak bytes the resource has taken from below since it was built (from its upstream
   * counter, or its driver pool's reserved high-water mark), or -1 where it cannot say (the peers).
   */
  [[nodiscard]] double peak_reserved_bytes() const
  {
    if (peak_reserved_) { return static_cast<double>(peak_reserved_()); }
    if (counter_ != nullptr) { return static_cast<double>(counter_->peak_bytes()); }
    return -1;
  }

  /** @brief Destroys the chain, top first. */
  void reset() noexcept
  {
    peak_reserved_ = nullptr;
    while (!chain_.empty()) { chain_.pop_back(); }
    counter_ = nullptr;
  }

 private:
  friend class resource_builder;
  friend resource_handle make_resource(std::string_view name, std::size_t max_request);
  std::string name_;
  std::vector<std::unique_ptr<mr::device_memory_resource>> chain_;  // [0] bottom ... back() under test
  counting_resource* counter_{nullptr};
  std::function<std::size_t()> peak_reserved_;
  bool reserves_upfront_{false};
};

/** @brief Passed to a registry factory: builds the chain bottom-up. */
class resource_builder {
 public:
  resource_builder(resource_handle& handle, std::size_t max_request) noexcept
    : handle_{&handle}, max_request_{max_request}
  {
  }

  /**
   * @return the largest request the workload will make (fixed/<size>: the size; random: 4 MiB), for
   * resources that must be sized for it (fixed_size's block size).
   */
  [[nodiscard]] std::size_t max_request() const noexcept { return max_request_; }

  /**
   * @brief Constructs an R on top of the chain (it becomes the resource under test unless more follow).
   * @return the new resource, owned by the handle.
   */
  template <class R, class... Args>
  R* emplace(Args&&... args)
  {
    auto owned = std::make_unique<R>(std::forward<Args>(args)...);
    R* const raw = owned.get();
    handle_->chain_.push_back(std::move(owned));
    return raw;
  }

  /**
   * @brief A cuda_memory_resource behind a counting_resource, the upstream of every sub-allocator.
   * @return the counting adaptor (pass it as the sub-allocator's upstream).
   */
  counting_resource* counted_cuda_upstream();

  /** @brief Says how the resource reports its peak reserved bytes when it has no counted upstream. */
  void set_peak_reserved_probe(std::function<std::size_t()> probe) { handle_->peak_reserved_ = std::move(probe); }

  /** @brief Marks the resource as taking a fixed reservation at construction (no fragmentation figure). */
  void set_reserves_upfront() noexcept { handle_->reserves_upfront_ = true; }

  /** @return the free bytes of the current device now (cudaMemGetInfo, or the host backend's capacity). */
  [[nodiscard]] static std::size_t device_free_bytes();

 private:
  resource_handle* handle_;
  std::size_t max_request_;
};

/** @brief One registered resource. */
struct resource_entry {
  std::string_view name;
  std::string_view description;
  /** @brief A CUDA peer (cudaMalloc, cudaMallocAsync) rather than one of gpumem's sub-allocators. */
  bool peer;
  void (*build)(resource_builder&);
};

/** @return every registered resource, in registration order (peers first). */
[[nodiscard]] std::span<resource_entry const> registered_resources() noexcept;

/** @return the registered names joined with ", ". */
[[nodiscard]] std::string known_resource_names();

/** @return the entry named `name`, or nullptr. */
[[nodiscard]] resource_entry const* find_resource(std::string_view name) noexcept;

/**
 * @brief Builds the resource named `name` for a workload whose largest request is `max_request` bytes.
 * @throws std::invalid_argument naming the unknown name and listing the known ones.
 * @throws whatever the resource's constructor throws (gpumem::out_of_memory, gpumem::cuda_error, ...).
 */
[[nodiscard]] resource_handle make_resource(std::string_view name, std::size_t max_request);

/**
 * @brief Splits "a,b,c" and checks every name. An empty string means every registered resource.
 * @throws std::invalid_argument for an unknown name (listing the known ones) or a repeated one.
 */
[[nodiscard]] std::vector<std::string> parse_resource_list(std::string_view comma_separated);

}  // namespace gpumem::bench
