/**
 * @file buffer_state.hpp
 * Which copy of a unified_buffer holds the current data: the published state names.
 */
#pragma once

#include <gpumem/export.hpp>

#include <string_view>

namespace gpumem {

/**
 * @brief The state of a unified_buffer (unified_buffer.hpp has the transitions). The enumerators keep the
 * published names, spelled as users know them.
 */
enum class buffer_state {
  UNINITIALIZED,  ///< no copy holds data (no memory, or memory kept by a buffer pool for reuse)
  HOST_ONLY,      ///< only the host copy holds the data (no device copy)
  DEVICE_ONLY,    ///< only the device copy holds the data (no host copy)
  SYNCHRONIZED,   ///< both copies hold the same data
  HOST_DIRTY,     ///< the host copy was written; the device copy is stale or not allocated
  DEVICE_DIRTY,   ///< the device copy was written; the host copy is stale or not allocated
};

/** @return the published name, e.g. "HOST_DIRTY". */
[[nodiscard]] GPUMEM_EXPORT std::string_view to_string(buffer_state state) noexcept;

/** @return true when the host copy holds the current data (HOST_ONLY, SYNCHRONIZED, HOST_DIRTY). */
[[nodiscard]] constexpr bool host_is_current(buffer_state state) noexcept
{
  return state == buffer_state::HOST_ONLY || state == buffer_state::SYNCHRONIZED ||
         state == buffer_state::HOST_DIRTY;
}

/** @return true when the device copy holds the current data (DEVICE_ONLY, SYNCHRONIZED, DEVICE_DIRTY). */
[[nodiscard]] constexpr bool device_is_current(buffer_state state) noexcept
{
  return state == buffer_state::DEVICE_ONLY || state == buffer_state::SYNCHRONIZED ||
         state == buffer_state::DEVICE_DIRTY;
}

}  // namespace gpumem
