/**
 * @file address_range.hpp
 * A half-open range of device addresses [begin, begin + size): the unit that the arena algorithms move
 * between free lists, superblocks and arenas. Pure arithmetic, no CUDA (DESIGN.md, mr/detail).
 */
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpumem::detail {

/**
 * @brief The address range [begin, begin + size). A value type; an empty range has size 0.
 * Thread-safety: a value; copies may be used concurrently.
 */
struct address_range {
  std::uintptr_t begin{};  ///< first address
  std::size_t size{};      ///< bytes

  /** @return one past the last address. @pre begin + size does not overflow. */
  [[nodiscard]] constexpr std::uintptr_t end() const noexcept { return begin + size; }

  /** @return true when `inner` lies entirely inside this range (an empty `inner` at end() does too). */
  [[nodiscard]] constexpr bool contains(address_range const& inner) const noexcept
  {
    return inner.begin >= begin && inner.end() <= end();
  }

  /** @return true when the two ranges share at least one byte. */
  [[nodiscard]] constexpr bool overlaps(address_range const& other) const noexcept
  {
    return begin < other.end() && other.begin < end();
  }

  friend constexpr bool operator==(address_range const&, address_range const&) noexcept = default;
};

static_assert(address_range{256, 256}.contains(address_range{256, 256}));
static_assert(!address_range{256, 256}.overlaps(address_range{512, 256}), "touching is not overlapping");
static_assert(address_range{256, 512}.overlaps(address_range{512, 256}));

}  // namespace gpumem::detail
