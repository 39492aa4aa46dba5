/**
 * @file free_block.hpp
 * A block of device addresses as the free lists see it: an address, a size and whether it starts an upstream
 * chunk. Pure value type: no CUDA here (DESIGN.md, mr/detail).
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

namespace gpumem::detail {

/**
 * @brief A range [address, address + size) of device addresses held by a sub-allocator.
 * `is_head` marks the first block of an upstream allocation (a chunk): a free list never merges a head
 * with the block before it, so that every block lies inside one chunk and a wholly free chunk can be
 * returned to its upstream as it was obtained.
 */
struct free_block {
  std::uintptr_t address{};
  std::size_t size{};
  bool is_head{};

  /** @return the first address after the block. */
  [[nodiscard]] constexpr std::uintptr_t end() const noexcept { return address + size; }
  friend constexpr bool operator==(free_block const&, free_block const&) noexcept = default;
};

/** @brief The chunks a resource holds from its upstream: start address -> size in bytes. */
using chunk_map = std::map<std::uintptr_t, std::size_t>;

}  // namespace gpumem::detail
