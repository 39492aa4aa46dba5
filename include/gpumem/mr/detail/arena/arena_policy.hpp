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
 * - An arena holds at least 16 superblocks: one smaller than 64 MiB has superblocks of 1/16 of its size,
 *   rounded down to a power of two (64 KiB for the smallest arena, 1 MiB), so that 16 threads or streams
 *   can each hold one before any has to borrow (arena_memory_resource.hpp, "Out of memory").
 */
#pragma once

#include <gpumem/mr/detail/align.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>

namespace gpumem::detail {

/**
 * @brief The sizes of one arena_memory_resource (file comment), derived from its arena size.
 * Thread-safety: an immutable value.
 */
struct arena_policy {
  /** @brief Superblock size when the arena is large enough. */
  static constexpr std::size_t default_superblock_size = std::size_t{4} << 20;
  /** @brief The fewest superblocks an arena is cut into (smaller arenas get smaller superblocks). */
  static constexpr std::size_t minimum_superblock_count = 16;
  /** @brief The smallest arena accepted: its superblocks (64 KiB) still hold four requests of the threshold. */
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
    std::size_t const superblock =
      std::min(default_superblock_size, std::bit_floor(arena_size / minimum_superblock_count));
    return {superblock, superblock / 4, superblock};
  }
};

static_assert(arena_policy::for_arena(std::size_t{80} << 30).superblock_size == std::size_t{4} << 20);
static_assert(arena_policy::for_arena(std::size_t{80} << 30).large_threshold == std::size_t{1} << 20);
static_assert(arena_policy::for_arena(std::size_t{64} << 20).superblock_size == std::size_t{4} << 20);
static_assert(arena_policy::for_arena(std::size_t{2} << 20).superblock_size == std::size_t{128} << 10);
static_assert(arena_policy::for_arena((std::size_t{3} << 20) + 512).superblock_size == std::size_t{128} << 10);
static_assert(arena_policy::for_arena(arena_policy::minimum_arena_size).superblock_size == std::size_t{64} << 10);
static_assert(arena_policy::for_arena(arena_policy::minimum_arena_size).large_threshold % allocation_alignment == 0);
static_assert(arena_policy::default_superblock_size % allocation_alignment == 0);

}  // namespace gpumem::detail
