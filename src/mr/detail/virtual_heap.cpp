// The algorithm of vmm_pool_memory_resource (virtual_heap.hpp has the contract and the placement rules).
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/virtual_heap.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <functional>
#include <iterator>
#include <limits>
#include <string>

namespace gpumem::detail {
namespace {

/// Whether a range of these streams keeps its pieces' streams in the marks.
[[nodiscard]] bool several_streams(std::uint64_t streams) noexcept { return (streams & (streams - 1)) != 0; }

[[nodiscard]] bool is_power_of_two(std::size_t value) noexcept { return value != 0 && (value & (value - 1)) == 0; }

[[nodiscard]] std::string hex(std::uintptr_t address) { return format_pointer(reinterpret_cast<void const*>(address)); }

/// Throws logic_error with `message()` (built only on failure: these checks sit on the allocation path).
template <class Message>
void require(bool condition, Message&& message)
{
  if (!condition) [[unlikely]] { throw logic_error("virtual_heap: " + message()); }
}

}  // namespace

virtual_heap::virtual_heap(std::uintptr_t base, std::size_t size, std::size_t slab_size, std::size_t alignment)
  : base_{base}, size_{size}, slab_size_{slab_size}, alignment_{alignment}
{
  require(is_power_of_two(alignment), [&] { return std::string{} + "alignment " + std::to_string(alignment) + " is not a power of two"; });
  require(slab_size > 0 && slab_size % alignment == 0, [&] { return std::string{} + "slab size " + std::to_string(slab_size) + " is not a positive multiple of the alignment " +
            std::to_string(alignment); });
  require(base % slab_size == 0, [&] { return std::string{} + "base " + hex(base) + " is not a multiple of the slab size " + std::to_string(slab_size); });
  require(size > 0 && size % slab_size == 0, [&] { return std::string{} + "size " + std::to_string(size) + " is not a positive multiple of the slab size " + std::to_string(slab_size); });
  require(base <= std::numeric_limits<std::uintptr_t>::max() - size, [&] { return std::string{} + "the range " + hex(base) + " + " +
                                                                       std::to_string(size) + " wraps around"; });
  backed_.assign(size / slab_size, 0);
}

std::optional<virtual_heap::block> virtual_heap::take(std::size_t bytes)
{
  auto const* fit = free_.best_fit(bytes);
  if (fit == nullptr) { return std::nullopt; }
  // A range of several streams has its pieces' streams in the marks: the block takes those it overlaps. The
  // cut is at the range's start, where no mark begins before it, so no mark splits (nothing allocates).
  block const taken{fit->start, several_streams(fit->streams) ? marks_.remove(fit->start, fit->start + bytes)
                                                              : fit->streams};
  if (fit->size == bytes) {
    free_.erase(fit);
  } else {  // the remainder keeps the range's streams
    free_.reshape(fit, fit->start + bytes, fit->size - bytes, fit->streams);
  }
  return taken;
}

void virtual_heap::give_back(std::uintptr_t address, std::size_t bytes, std::uint64_t streams)
{
  require(bytes > 0 && bytes % alignment_ == 0 && address % alignment_ == 0, [&] { return std::string{} + "block " + hex(address) + " of " + std::to_string(bytes) + " bytes is empty or not aligned to " +
            std::to_string(alignment_); });
  require(address >= base_ && address - base_ <= size_ && bytes <= size_ - (address - base_), [&] { return std::string{} + "block " + hex(address) + " of " + std::to_string(bytes) + " bytes is outside the reservation"; });
  // The first and the last slab (a full walk, in check_invariants, would cost a lookup per slab here).
  require(is_slab(slab_of(address)) && is_slab(slab_of(address + bytes - 1)), [&] { return std::string{} + "block " + hex(address) + " of " + std::to_string(bytes) +
                                    " bytes is not inside backed slabs (not from this pool)"; });
  // Named members, not a structured binding: the lambdas below capture them (clang before 16 cannot).
  free_range_index::neighbours const around = free_.around(address);
  free_range_index::range const* const previous = around.before;
  free_range_index::range const* const next = around.after;
  if (next != nullptr) {
    require(next->start >= address + bytes, [&] { return std::string{} + "block " + hex(address) + " of " + std::to_string(bytes) +
                                              " bytes overlaps a free range at " + hex(next->start) +
                                              " (freed twice?)"; });
  }
  if (previous != nullptr) {
    require(previous->end() <= address, [&] { return std::string{} + "block " + hex(address) + " of " + std::to_string(bytes) + " bytes overlaps the free range at " +
              hex(previous->start) + " (freed twice?)"; });
  }
  add_free(address, bytes, streams, previous, next);
}

void virtual_heap::add_free(std::uintptr_t address, std::size_t bytes, std::uint64_t streams,
                            free_range_index::range const* previous, free_range_index::range const* next)
{
  // Merging changes existing ranges (no allocation); only a block with no free neighbour adds one. The
  // marks a merge of several streams needs come first, and go again if anything throws, so a std::bad_alloc
  // leaves the heap as it was.
  bool const merge_previous = previous != nullptr && previous->end() == address;
  bool const merge_next = next != nullptr && next->start == address + bytes;
  std::uint64_t const merged_streams =
    (merge_previous ? previous->streams : 0) | streams | (merge_next ? next->streams : 0);
  std::array<std::pair<std::uintptr_t, std::size_t>, 3> marked{};
  std::size_t marked_count = 0;
  try {
    if (several_streams(merged_streams)) {
      // A range of one stream (or none) has no marks: its bytes carry its streams. Joined to others, it
      // gets a mark of them first.
      auto mark = [&](std::uintptr_t start, std::size_t size, std::uint64_t mask) {
        marks_.add(start, size, mask);
        marked[marked_count++] = {start, size};
      };
      if (merge_previous && previous->streams != 0 && !several_streams(previous->streams)) {
        mark(previous->start, previous->size, previous->streams);
      }
      if (streams != 0) { mark(address, bytes, streams); }
      if (merge_next && next->streams != 0 && !several_streams(next->streams)) {
        mark(next->start, next->size, next->streams);
      }
    }
    if (merge_previous && merge_next) {
      std::size_t const size = previous->size + bytes + next->size;
      free_.erase(next);
      free_.reshape(previous, previous->start, size, merged_streams);
    } else if (merge_previous) {
      free_.reshape(previous, previous->start, previous->size + bytes, merged_streams);
    } else if (merge_next) {
      free_.reshape(next, address, bytes + next->size, merged_streams);
    } else {
      (void)free_.insert(address, bytes, streams);
    }
  } catch (...) {
    // Latest first: each mark taken away is then the end of what remains, so no mark splits (no allocation).
    while (marked_count > 0) {
      auto const [start, size] = marked[--marked_count];
      (void)marks_.remove(start, start + size);
    }
    throw;
  }
}

std::size_t virtual_heap::free_ending_at(std::uintptr_t address) const
{
  auto const* before = free_.around(address).before;
  return before != nullptr && before->end() == address ? before->size : 0;
}

std::size_t virtual_heap::free_starting_at(std::uintptr_t address) const
{
  auto const* after = free_.around(address).after;
  return after != nullptr && after->start == address ? after->size : 0;
}

std::uintptr_t virtual_heap::slab_of(std::uintptr_t address) const noexcept
{
  return address - (address - base_) % slab_size_;
}

std::vector<virtual_heap::mapping_piece> virtual_heap::mappings_covering(std::uintptr_t address,
                                                                         std::size_t bytes) const
{
  auto const range_text = [&] { return hex(address) + " of " + std::to_string(bytes) + " bytes"; };
  require(bytes > 0 && address >= base_ && address - base_ <= size_ && bytes <= size_ - (address - base_),
          [&] { return range_text() + " is empty or outside the reservation"; });
  require(backed(address, bytes), [&] { return range_text() + " is not inside backed slabs (not from this pool)"; });
  free_range_index::neighbours const around = free_.around(address);
  bool const overlaps_free = (around.after != nullptr && around.after->start < address + bytes) ||
                             (around.before != nullptr && around.before->end() > address);
  require(!overlaps_free, [&] { return range_text() + " overlaps free memory (not handed out, or freed already)"; });
  std::vector<mapping_piece> pieces;
  auto it = mappings_.upper_bound(address);
  --it;  // backed: a mapping starts at or before `address`
  for (; it != mappings_.end() && it->first < address + bytes; ++it) {
    pieces.push_back({it->first, it->second.handle, it->second.slabs * slab_size_});
  }
  return pieces;
}

bool virtual_heap::backed(std::uintptr_t address, std::size_t bytes) const
{
  std::uintptr_t slab = address - (address - base_) % slab_size_;
  for (; slab < address + bytes; slab += slab_size_) {
    if (slab >= base_ + size_ || !is_slab(slab)) { return false; }
  }
  return true;
}

std::optional<virtual_heap::growth_plan> virtual_heap::plan_growth(std::size_t bytes) const
{
  std::optional<growth_plan> best;
  // Reserved for the chosen place: the free ranges it extends (their slabs must stay).
  std::uintptr_t keep_begin = 0;
  std::uintptr_t keep_end = 0;
  std::size_t gap_slabs = 0;  // of the chosen gap
  auto consider = [&](std::uintptr_t gap_begin, std::uintptr_t gap_end) {
    if (gap_begin >= gap_end) { return; }
    std::size_t const left = free_ending_at(gap_begin);
    std::size_t const gap = gap_end - gap_begin;
    std::size_t const missing = bytes > left ? bytes - left : 0;
    std::size_t slabs = (missing + slab_size_ - 1) / slab_size_;
    std::size_t right = 0;
    if (slabs * slab_size_ > gap) {  // the whole gap, and the range after it
      right = free_starting_at(gap_end);
      if (left + gap + right < bytes) { return; }
      slabs = gap / slab_size_;
    }
    if (slabs == 0) { return; }
    if (!best || slabs < best->slabs) {
      best = growth_plan{gap_begin, slabs, {}};
      keep_begin = gap_begin - left;
      keep_end = slabs * slab_size_ == gap ? gap_end + right : gap_begin;
      gap_slabs = gap / slab_size_;
    }
  };
  std::uintptr_t previous_end = base_;
  for (auto const& [address, m] : mappings_) {
    consider(previous_end, address);
    previous_end = address + m.slabs * slab_size_;
  }
  consider(previous_end, base_ + size_);
  if (!best) { return std::nullopt; }
  std::vector<mapping> const wholly_free = wholly_free_mappings();
  std::size_t still_needed = best->slabs;
  for (mapping const& m : wholly_free) {
    if (still_needed == 0) { break; }
    if (m.slabs > still_needed) { continue; }
    if (m.address + m.slabs * slab_size_ > keep_begin && m.address < keep_end) { continue; }
    best->movable.push_back(m);
    still_needed -= m.slabs;
  }
  // Still short, and a larger wholly free mapping elsewhere: move it whole (the growth backs more than it
  // needs, the extra slabs free at the new place) rather than create memory, when the gap has room.
  if (still_needed > 0 && keep_end == best->address) {
    std::optional<mapping> larger;
    for (mapping const& m : wholly_free) {
      if (m.slabs <= still_needed || best->slabs - still_needed + m.slabs > gap_slabs) { continue; }
      if (m.address + m.slabs * slab_size_ > keep_begin && m.address < keep_end) { continue; }
      if (std::find(best->movable.begin(), best->movable.end(), m) != best->movable.end()) { continue; }
      if (!larger || m.slabs < larger->slabs) { larger = m; }
    }
    if (larger) {
      best->movable.push_back(*larger);
      best->slabs += larger->slabs - still_needed;
    }
  }
  return best;
}

void virtual_heap::back(std::uintptr_t address, std::uint64_t handle, std::size_t slabs, std::uint64_t streams)
{
  require(slabs > 0, [&] { return std::string{} + "mapping " + hex(address) + " has no slabs"; });
  require(address >= base_ && address < base_ + size_ && (address - base_) % slab_size_ == 0 &&
            slabs <= (base_ + size_ - address) / slab_size_,
          [&] { return std::string{} + "mapping at " + hex(address) + ": not a slab address of the reservation, or " +
                       std::to_string(slabs) + " slabs from it do not fit in it"; });
  std::size_t const first = (address - base_) / slab_size_;
  for (std::size_t i = first; i < first + slabs; ++i) {
    require(!backed_[i], [&] { return std::string{} + "slab " + hex(base_ + i * slab_size_) + " is already backed"; });
  }
  mappings_.emplace(address, mapped{handle, slabs});
  try {
    auto const [previous, next] = free_.around(address);
    add_free(address, slabs * slab_size_, streams, previous, next);
  } catch (...) {
    mappings_.erase(address);
    throw;
  }
  for (std::size_t i = first; i < first + slabs; ++i) { backed_[i] = 1; }
  backed_slabs_ += slabs;
}

virtual_heap::unbacked virtual_heap::unback(std::uintptr_t address)
{
  auto const found_mapping = mappings_.find(address);
  require(found_mapping != mappings_.end(), [&] { return std::string{} + "no mapping at " + hex(address); });
  std::size_t const slabs = found_mapping->second.slabs;
  std::size_t const bytes = slabs * slab_size_;
  auto const* const found = free_.containing(address, bytes);
  require(found != nullptr, [&] { return std::string{} + "mapping " + hex(address) + " is not wholly free"; });
  std::uintptr_t const begin = found->start;
  std::size_t const size = found->size;
  std::uint64_t streams = found->streams;
  // The parts before and after the mapping stay free with the range's streams (and marks). The allocations
  // (a second range when both parts exist, then a mark split in two) come first, so a std::bad_alloc changes
  // nothing.
  std::size_t const before = address - begin;
  std::size_t const after = begin + size - (address + bytes);
  free_range_index::range const* const second = before > 0 && after > 0 ? free_.insert(address + bytes, after, streams) : nullptr;
  if (several_streams(streams)) {
    try {
      streams = marks_.remove(address, address + bytes);  // the mapping's own pieces' streams
    } catch (...) {
      if (second != nullptr) { free_.erase(second); }
      throw;
    }
  }
  if (second != nullptr) {
    free_.reshape(found, begin, before, found->streams);
  } else if (before > 0) {
    free_.reshape(found, begin, before, found->streams);
  } else if (after > 0) {
    free_.reshape(found, address + bytes, after, found->streams);
  } else {
    free_.erase(found);
  }
  std::uint64_t const handle = found_mapping->second.handle;
  mappings_.erase(found_mapping);
  std::size_t const first = (address - base_) / slab_size_;
  for (std::size_t i = first; i < first + slabs; ++i) { backed_[i] = 0; }
  backed_slabs_ -= slabs;
  return {handle, slabs, streams};
}

std::vector<virtual_heap::mapping> virtual_heap::wholly_free_mappings() const
{
  // Only a free range of at least a slab can hold one: walk those (smallest first), and the
  // mappings inside each, not every mapping, so that growing costs O(large ranges + result).
  std::vector<mapping> result;
  free_.for_each_at_least(slab_size_, [&](free_range_index::range const& r) {
    for (auto m = mappings_.lower_bound(r.start); m != mappings_.end(); ++m) {
      std::uintptr_t const end = m->first + m->second.slabs * slab_size_;
      if (end > r.end()) { break; }
      result.push_back({m->first, m->second.slabs});
    }
  });
  std::sort(result.begin(), result.end(), [](mapping const& a, mapping const& b) { return a.address > b.address; });
  return result;
}

std::uint64_t virtual_heap::streams_in_use() const noexcept
{
  std::uint64_t mask = 0;
  free_.for_each([&](free_range_index::range const& r) { mask |= r.streams; });
  return mask;
}

void virtual_heap::forget_streams(std::uint64_t mask) noexcept
{
  free_.clear_streams(mask);
  marks_.clear(mask);
  // A range left with one stream (or none) carries it on all its bytes: its marks go.
  marks_.erase_if([this](std::uintptr_t start, std::size_t size, std::uint64_t) {
    auto const* r = free_.containing(start, size);
    return r == nullptr || !several_streams(r->streams);
  });
}

void virtual_heap::check_invariants() const
{
  auto fail = [](std::string const& what) { throw logic_error("virtual_heap invariant violated: " + what); };
  free_.check();
  std::uintptr_t previous_end = 0;
  bool first = true;
  free_.for_each([&](free_range_index::range const& r) {
    if (r.start % alignment_ != 0 || r.size % alignment_ != 0) { fail("range " + hex(r.start) + " misaligned"); }
    if (!first && r.start <= previous_end) { fail("range " + hex(r.start) + " touches the previous one"); }
    if (!backed(r.start, r.size)) { fail("range " + hex(r.start) + " is not backed"); }
    previous_end = r.end();
    first = false;
  });
  marks_.check();
  marks_.for_each([&](std::uintptr_t start, std::size_t size, std::uint64_t streams) {
    auto const* r = free_.containing(start, size);
    if (r == nullptr) {
      fail("the stream mark at " + hex(start) + " lies outside the free ranges");
      return;
    }
    if (!several_streams(r->streams) || (streams & ~r->streams) != 0) {
      fail("the stream mark at " + hex(start) + " has streams its range (" + std::to_string(r->streams) + ") has not, or the range has one stream");
    }
  });
  std::uintptr_t mapped_end = base_;
  std::size_t slabs = 0;
  for (auto const& [address, m] : mappings_) {
    if (address < mapped_end || (address - base_) % slab_size_ != 0 || m.slabs == 0 ||
        m.slabs > (base_ + size_ - address) / slab_size_) {
      fail("mapping " + hex(address) + " of " + std::to_string(m.slabs) + " slabs misplaced or overlapping");
    }
    for (std::size_t i = (address - base_) / slab_size_; i < (address - base_) / slab_size_ + m.slabs; ++i) {
      if (!backed_[i]) { fail("slab " + hex(base_ + i * slab_size_) + " of a mapping is not marked backed"); }
    }
    mapped_end = address + m.slabs * slab_size_;
    slabs += m.slabs;
  }
  if (slabs != backed_slabs_ || static_cast<std::size_t>(std::count(backed_.begin(), backed_.end(), std::uint8_t{1})) != slabs) {
    fail("the backed slabs (" + std::to_string(backed_slabs_) + ") do not match the mappings (" + std::to_string(slabs) + ")");
  }
}

}  // namespace gpumem::detail
