/**
 * @file unified_options.hpp
 * Where a unified_buffer's two copies come from.
 */
#pragma once

#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/host_memory_resource.hpp>
#include <gpumem/mr/pinned_memory_pool.hpp>

namespace gpumem {

class spill_manager;

/**
 * @brief Where a unified_buffer allocates its copies (each lazily, on first need).
 * Defaults: device copy from the current device's current resource at construction; host copy from
 * std::pmr::get_default_resource() (pageable), or from the default pinned pool when `pinned` is set.
 */
struct unified_options {
  /// Host copy in pinned memory: syncs are single asynchronous copies at the link's full speed. Without it
  /// the host copy is pageable and syncs are staged through pinned chunks (transfer.hpp).
  bool pinned{false};
  /// The device copy's resource; null: the current device resource. Must outlive the buffer.
  mr::device_memory_resource* device_resource{nullptr};
  /// The host copy's resource when not pinned; null: std::pmr::get_default_resource(). Must outlive the
  /// buffer. (Pinned host copies come from mr::get_default_pinned_pool() or `pinned_pool`.)
  mr::host_memory_resource* host_resource{nullptr};
  /// The pinned pool when `pinned`; null: mr::get_default_pinned_pool().
  mr::pinned_memory_pool* pinned_pool{nullptr};
  /// Opt-in spilling: the device copy is allocated within this manager's budget and may be given up (LRU)
  /// when another device allocation through the manager fails. Exclusive with `device_resource`. Must
  /// outlive the buffer.
  spill_manager* spill{nullptr};

  friend bool operator==(unified_options const&, unified_options const&) = default;
};

}  // namespace gpumem
