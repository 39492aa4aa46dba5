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

/** @pre multiple > 0. @return `value` rounded up to a multiple of `multiple` (any, not only a power of two),
 *  or nullopt on overflow. */
[[nodiscard]] constexpr std::optional<std::size_t> checked_round_up(std::size_t value, std::size_t multiple) noexcept
{
  std::size_t const remainder = value % multiple;
  if (remainder == 0) { return value; }
  std::size_t const missing = multiple - remainder;
  if (value > std::numeric_limits<std::size_t>::max() - missing) { return std::nullopt; }
  return value + missing;
}

/** @return a * b, or nullopt on overflow. */
[[nodiscard]] constexpr std::optional<std::size_t> checked_multiply(std::size_t a, std::size_t b) noexcept
{
  if (b != 0 && a > std::numeric_limits<std::size_t>::max() / b) { return std::nullopt; }
  return a * b;
}

/** @return a + b, or nullopt on overflow. */
[[nodiscard]] constexpr std::optional<std::size_t> checked_add(std::size_t a, std::size_t b) noexcept
{
  if (a > std::numeric_limits<std::size_t>::max() - b) { return std::nullopt; }
  return a + b;
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
static_assert(checked_round_up(7, 3) == 9 && checked_round_up(9, 3) == 9 && checked_round_up(0, 3) == 0);
static_assert(!checked_round_up(std::numeric_limits<std::size_t>::max() - 4095, std::size_t{2} << 20).has_value());
static_assert(checked_round_up(std::numeric_limits<std::size_t>::max(), 1) == std::numeric_limits<std::size_t>::max());
static_assert(checked_multiply(std::size_t{1} << 32, std::size_t{1} << 31) == std::size_t{1} << 63);
static_assert(!checked_multiply(std::size_t{1} << 32, std::size_t{1} << 32).has_value() && checked_multiply(0, 5) == 0);
static_assert(!checked_add(std::numeric_limits<std::size_t>::max(), 1).has_value() && checked_add(1, 2) == 3);

}  // namespace gpumem::detail
