/**
 * @file align.hpp
 * Alignment arithmetic. Pure functions on sizes and addresses: no CUDA here (DESIGN.md, mr/detail).
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>

namespace gpumem::detail {

/** @brief Every allocation of a device resource is aligned to this many bytes (as cudaMalloc's are). */
inline constexpr std::size_t allocation_alignment = 256;

[[nodiscard]] constexpr bool is_pow2(std::size_t value) noexcept { return value != 0 && (value & (value - 1)) == 0; }

/** @pre is_pow2(alignment). @return `value` rounded up to a multiple of `alignment`, or nullopt on overflow. */
[[nodiscard]] constexpr std::optional<std::size_t> checked_align_up(std::size_t value, std::size_t alignment) noexcept
{
  if (value > std::numeric_limits<std::size_t>::max() - (alignment - 1)) { return std::nullopt; }
  return (value + alignment - 1) & ~(alignment - 1);
}

/** @pre is_pow2(alignment) and no overflow. */
[[nodiscard]] constexpr std::size_t align_up(std::size_t value, std::size_t alignment) noexcept
{
  return (value + alignment - 1) & ~(alignment - 1);
}

[[nodiscard]] constexpr std::size_t align_down(std::size_t value, std::size_t alignment) noexcept
{
  return value & ~(alignment - 1);
}

[[nodiscard]] inline bool is_aligned(void const* ptr, std::size_t alignment) noexcept
{
  return (reinterpret_cast<std::uintptr_t>(ptr) & (alignment - 1)) == 0;
}

static_assert(is_pow2(allocation_alignment));
static_assert(align_up(1, 256) == 256 && align_up(256, 256) == 256 && align_up(0, 256) == 0);
static_assert(!checked_align_up(std::numeric_limits<std::size_t>::max(), 256).has_value());

}  // namespace gpumem::detail
