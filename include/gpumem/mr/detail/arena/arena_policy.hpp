/**
 * @file arena_policy.hpp
 * The sizes that shape arena_memory_resource: superblock size, the threshold above which a request goes
 * straight to the global arena, and how much free memory a local arena may keep. Pure arithmetic, no CUDA.
 *
 * Why these numbers (after Kaiyu Shi et al.'s arena design, as in RMM's arena_memory_resource):
 * - A superblock is the unit that moves between the global arena and a local (per-thread or per-stream)
 *   arena. 4 MiB: large enough that a thread allocating small blocks goes to the global arena (and its
 *   lock) rarely, small enough that 16 or 64 threads each caching one or two superblocks tie up little
 *   (128 MiB of 80 GiB at worst with 16 threads).
 * - Requests above a quarter superblock (1 MiB) go to the global arena: in a superblock they would leave
 *   at most three of them, so a mix of large requests would fragment superblocks; large requests are also
 *   rare and expensive for their caller anyway, so the global lock is not on the fast path.
 * - A local arena hands an emptied superblock back only while it would still keep one superblock of free
 *   space: a thread that allocates and frees one block in a loop never moves a superblock back and forth.
 * An arena smaller than 4 MiB uses one superblock of its whole (256-aligned) size.
 */
#pragma once

#include <gpumem/mr/detail/align.hpp>

#include <algorithm>
#include <cstddef>

namespace gpumem::detail {

/**
 * @brief The sizes of one arena_memory_resource (file comment), derived from its arena size.
 * Thread-safety: an immutable value.
 */
struct arena_policy {
  /** @brief Superblock size when the arena is large enough. */
  static constexpr std::size_t default_superblock_size = std::size_t{4} << 20;
  /** @brief The smallest arena accepted: a superblock must hold a few allocations of the threshold. */
  static constexpr std::size_t minimum_arena_size = std::size_t{1} << 20;

  std::size_t superblock_size{};  ///< bytes per superblock; a multiple of allocation_alignment
  std::size_t large_threshold{};  ///< requests of more bytes (rounded up to 256) go to the global arena
  std::size_t keep_free{};        ///< a local arena keeps at least this much free when it releases one

  /**
   * @brief The policy for an arena of `arena_size` bytes.
   * @pre arena_size >= minimum_arena_size and a multiple of allocation_alignment.
   */
  [[nodiscard]] static constexpr arena_policy for_arena(std::size_t arena_size) noexcept
  {
    std::size_t const superblock = std::min(default_superblock_size, align_down(arena_size, allocation_alignment));
    return {superblock, align_down(superblock / 4, allocation_alignment), superblock};
  }
};

static_assert(arena_policy::for_arena(std::size_t{80} << 30).superblock_size == std::size_t{4} << 20);
static_assert(arena_policy::for_arena(std::size_t{80} << 30).large_threshold == std::size_t{1} << 20);
static_assert(arena_policy::for_arena(arena_policy::minimum_arena_size).superblock_size ==
              arena_policy::minimum_arena_size);
static_assert(arena_policy::for_arena(arena_policy::minimum_arena_size).large_threshold % allocation_alignment == 0);
static_assert(arena_policy::default_superblock_size % allocation_alignment == 0);

}  // namespace gpumem::detail
