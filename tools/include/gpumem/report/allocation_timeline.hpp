/**
 * @file allocation_timeline.hpp
 * The allocation timeline of `gpumem report`: a program's allocations and frees with the Python call site and
 * stack of each allocation, read from a timeline file (docs/formats.md, "Allocation timeline"; written by
 * `python -m gpumem.tools.torch_snapshot --timeline` from a PyTorch memory snapshot), and its layout as
 * PyTorch's memory_viz draws active memory: each live block stacked on the blocks allocated before it, so that
 * a block's offset is the bytes of the older blocks still live and falls when one of them is freed.
 */
#pragma once

#include <gpumem/error.hpp>
#include <gpumem/export.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpumem {

/** @brief One Python frame: where an allocation was made, or a call on the way there. */
struct timeline_frame {
  std::string filename;
  std::uint32_t line{};
  std::string name;  ///< the function
  friend bool operator==(timeline_frame const&, timeline_frame const&) = default;
};

/** @brief The stack of an allocation: its frames (innermost first) and its call site. */
struct timeline_stack {
  std::int64_t site{-1};  ///< index into allocation_timeline::sites, or -1 (no frame outside the libraries)
  std::vector<timeline_frame> frames;
};

/** @brief An allocation or a free, in the program's order. */
struct timeline_event {
  enum class kind : std::uint8_t { alloc, free } what{kind::alloc};
  std::int64_t time_us{};   ///< microseconds (since the Unix epoch for a PyTorch snapshot)
  std::uint64_t address{};
  std::size_t size{};       ///< bytes allocated (0 for a free)
  std::int64_t stack{-1};   ///< alloc: index into allocation_timeline::stacks, or -1 (no stack)
};

/** @brief A timeline file's contents. Every stack and site index in it is in range (the reader checks). */
struct allocation_timeline {
  std::vector<timeline_frame> sites;  ///< call sites: the first frame of a stack outside torch and the stdlib
  std::vector<timeline_stack> stacks;
  std::vector<timeline_event> events;
};

/** @brief A timeline file that does not follow docs/formats.md; what() is "FILE:LINE:COLUMN: problem". */
class GPUMEM_EXPORT timeline_format_error : public logic_error {
 public:
  /** @param line 1-based; @param column 1-based (bytes), 0 for the whole line. */
  timeline_format_error(std::string file, std::size_t line, std::size_t column, std::string const& problem);

  [[nodiscard]] std::string const& file() const noexcept { return file_; }
  [[nodiscard]] std::size_t line() const noexcept { return line_; }
  [[nodiscard]] std::size_t column() const noexcept { return column_; }

 private:
  std::string file_;
  std::size_t line_;
  std::size_t column_;
};

/**
 * @brief Parses a timeline file held in memory.
 * Thread-safety: reentrant.
 * @param source_name the file's name in error messages.
 * @throws gpumem::timeline_format_error at the first problem: a missing or unknown header, an unknown record,
 *         a missing, extra or malformed field, an id out of order, an index out of range, a frame before any
 *         stack, a free of an address that is not live.
 */
[[nodiscard]] GPUMEM_EXPORT allocation_timeline parse_allocation_timeline(std::string_view text,
                                                                          std::string_view source_name);

/**
 * @brief Reads the timeline file at `path`, as parse_allocation_timeline.
 * @throws gpumem::logic_error naming the path when it cannot be read; timeline_format_error as the parser.
 */
[[nodiscard]] GPUMEM_EXPORT allocation_timeline read_allocation_timeline(std::filesystem::path const& path);

/** @brief A block drawn by the layout: where it sits over its life. x is the event index (0 to events). */
struct timeline_block {
  std::size_t alloc_event{};  ///< index of its alloc in allocation_timeline::events
  std::size_t begin{};        ///< x where it starts (= alloc_event)
  std::size_t end{};          ///< x where it ends: its free's event index, or the number of events (never freed)
  bool freed{false};
  std::size_t size{};
  /// (x, offset) each time its offset changes, the first at `begin`: the bytes of older live blocks from x on.
  std::vector<std::pair<std::size_t, std::size_t>> offsets;
};

/** @brief One call site's share of the timeline. */
struct timeline_site_summary {
  std::int64_t site{-1};      ///< index into allocation_timeline::sites, -1 for allocations without a call site
  std::size_t allocations{};  ///< alloc events
  std::size_t peak_bytes{};   ///< the most bytes its blocks held live at once
};

/** @brief What the report draws of a timeline. */
struct timeline_layout {
  std::size_t events{};                 ///< x runs from 0 to events
  std::vector<std::size_t> live_bytes;  ///< live bytes after each event (events entries)
  std::size_t peak_bytes{};
  std::vector<timeline_block> blocks;   ///< the drawn blocks, in allocation order
  std::size_t blocks_total{};           ///< every allocation of the timeline
  std::vector<timeline_site_summary> sites;  ///< by peak_bytes, then allocations, descending; then site id
};

/**
 * @brief Lays `timeline` out: every block's offset over time is the sum of the sizes of the blocks allocated
 * before it and still live; of all blocks, the `max_blocks` largest by size × lifetime (in events) are kept
 * (ties: the earlier first), the others show only in live_bytes. An alloc at an address still live frees the
 * older block first. Pure; O(events × max_blocks) at worst.
 */
[[nodiscard]] GPUMEM_EXPORT timeline_layout layout_allocation_timeline(allocation_timeline const& timeline,
                                                                       std::size_t max_blocks);

}  // namespace gpumem
