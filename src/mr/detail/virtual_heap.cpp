// The algorithm of vmm_pool_memory_resource (virtual_heap.hpp has the contract and the placement rules).
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/virtual_heap.hpp>

#include <algorithm>
#include <functional>
#include <iterator>
#include <limits>
#include <string>

namespace gpumem::detail {
namespace {

[[nodiscard]] bool is_power_of_two(std::size_t value) noexcept { return value != 0 && (value & (value - 1)) == 0; }

[[nodiscard]] std::string hex(std::uintptr_t address) { return format_pointer(reinterpret_cast<void const*>(address)); }

/// How many erased ranges' nodes are kept for reuse.
constexpr std::size_t spare_nodes = 64;

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
  backed_.assign(size / slab_size, false);
  spare_address_nodes_.reserve(spare_nodes);
  spare_size_nodes_.reserve(spare_nodes);
}

std::optional<virtual_heap::block> virtual_heap::take(std::size_t bytes)
{
  auto const fit = by_size_.lower_bound({bytes, 0});
  if (fit == by_size_.end()) { return std::nullopt; }
  auto const [size, address] = *fit;
  auto const where = by_address_.find(address);
  std::uint64_t const streams = where->second.streams;
  if (size == bytes) {
    erase_range(where);
  } else {
    // The remainder keeps the range's streams; re-key it (node reuse: no allocation can fail here).
    auto const after = std::next(where);  // the new key sorts where the old one was: insert there in O(1)
    auto address_node = by_address_.extract(where);
    auto size_node = by_size_.extract(fit);
    if (address_node.empty() || size_node.empty()) { return std::nullopt; }  // cannot happen; tells the compiler
    address_node.key() = address + bytes;
    address_node.mapped().size = size - bytes;
    size_node.value() = {size - bytes, address + bytes};
    auto const moved = by_address_.insert(after, std::move(address_node));
    moved->second.by_size = by_size_.insert(std::move(size_node)).position;
    free_bytes_ -= bytes;
  }
  return block{address, streams};
}

void virtual_heap::give_back(std::uintptr_t address, std::size_t bytes, std::uint64_t streams)
{
  require(bytes > 0 && bytes % alignment_ == 0 && address % alignment_ == 0, [&] { return std::string{} + "block " + hex(address) + " of " + std::to_string(bytes) + " bytes is empty or not aligned to " +
            std::to_string(alignment_); });
  require(address >= base_ && address - base_ <= size_ && bytes <= size_ - (address - base_), [&] { return std::string{} + "block " + hex(address) + " of " + std::to_string(bytes) + " bytes is outside the reservation"; });
  // The first and the last slab (a full walk, in check_invariants, would cost a lookup per slab here).
  require(is_slab(slab_of(address)) && is_slab(slab_of(address + bytes - 1)), [&] { return std::string{} + "block " + hex(address) + " of " + std::to_string(bytes) +
                                    " bytes is not inside backed slabs (not from this pool)"; });
  auto next = by_address_.lower_bound(address);
  if (next != by_address_.end()) {
    require(next->first >= address + bytes, [&] { return std::string{} + "block " + hex(address) + " of " + std::to_string(bytes) +
                                              " bytes overlaps a free range at " + hex(next->first) +
                                              " (freed twice?)"; });
  }
  if (next != by_address_.begin()) {
    auto const previous = std::prev(next);
    require(previous->first + previous->second.size <= address, [&] { return std::string{} + "block " + hex(address) + " of " + std::to_string(bytes) + " bytes overlaps the free range at " +
              hex(previous->first) + " (freed twice?)"; });
  }
  insert_range(address, bytes, streams, next);
}

void virtual_heap::insert_range(std::uintptr_t address, std::size_t size, std::uint64_t streams)
{
  insert_range(address, size, streams, by_address_.lower_bound(address));
}

void virtual_heap::insert_range(std::uintptr_t address, std::size_t size, std::uint64_t streams,
                                address_index::iterator next)
{
  // Merging reuses the existing nodes (extract, change, insert): only a range with no free neighbour
  // allocates, so a std::bad_alloc leaves the heap as it was. `next` is the first range after `address`.
  bool const merge_next = next != by_address_.end() && next->first == address + size;
  bool merge_previous = false;
  address_index::iterator previous;
  if (next != by_address_.begin()) {
    previous = std::prev(next);
    merge_previous = previous->first + previous->second.size == address;
  }
  if (merge_previous) {
    auto size_node = by_size_.extract(previous->second.by_size);
    previous->second.size += size;
    previous->second.streams |= streams;
    if (merge_next) {
      previous->second.size += next->second.size;
      previous->second.streams |= next->second.streams;
      recycle(next);  // its bytes stay counted: they are now part of the previous range
    }
    size_node.value() = {previous->second.size, previous->first};
    previous->second.by_size = by_size_.insert(std::move(size_node)).position;
  } else if (merge_next) {
    auto size_node = by_size_.extract(next->second.by_size);
    auto const after = std::next(next);  // the new key sorts where the old one was: insert there in O(1)
    auto address_node = by_address_.extract(next);
    if (address_node.empty() || size_node.empty()) { return; }  // cannot happen; tells the compiler
    address_node.key() = address;
    address_node.mapped().size += size;
    address_node.mapped().streams |= streams;
    size_node.value() = {address_node.mapped().size, address};
    auto const merged = by_address_.insert(after, std::move(address_node));
    merged->second.by_size = by_size_.insert(std::move(size_node)).position;
  } else if (!spare_address_nodes_.empty() && !spare_size_nodes_.empty()) {
    auto address_node = std::move(spare_address_nodes_.back());
    spare_address_nodes_.pop_back();
    auto size_node = std::move(spare_size_nodes_.back());
    spare_size_nodes_.pop_back();
    address_node.key() = address;
    size_node.value() = {size, address};
    address_node.mapped() = range{size, streams, by_size_.insert(std::move(size_node)).position};
    by_address_.insert(next, std::move(address_node));  // it sorts just before `next`: O(1)
  } else {
    auto const indexed = by_size_.insert({size, address}).first;
    try {
      by_address_.emplace_hint(next, address, range{size, streams, indexed});
    } catch (...) {
      by_size_.erase(indexed);
      throw;
    }
  }
  free_bytes_ += size;
}

/// Re-keys and resizes the free range at `where` (node reuse: never allocates).
void virtual_heap::reshape(address_index::iterator where, std::uintptr_t address, std::size_t size) noexcept
{
  auto size_node = by_size_.extract(where->second.by_size);
  auto address_node = by_address_.extract(where);
  if (address_node.empty() || size_node.empty()) { return; }  // cannot happen; tells the compiler
  free_bytes_ -= address_node.mapped().size;
  address_node.key() = address;
  address_node.mapped().size = size;
  size_node.value() = {size, address};
  auto const moved = by_address_.insert(std::move(address_node)).position;
  moved->second.by_size = by_size_.insert(std::move(size_node)).position;
  free_bytes_ += size;
}

void virtual_heap::erase_range(address_index::iterator where) noexcept
{
  free_bytes_ -= where->second.size;
  recycle(where);
}

void virtual_heap::recycle(address_index::iterator where) noexcept
{
  auto size_node = by_size_.extract(where->second.by_size);
  auto address_node = by_address_.extract(where);
  // Keep the nodes for the next new range (the vectors' capacity is reserved: no allocation here).
  if (spare_address_nodes_.size() < spare_address_nodes_.capacity() &&
      spare_size_nodes_.size() < spare_size_nodes_.capacity() && !size_node.empty() && !address_node.empty()) {
    spare_address_nodes_.push_back(std::move(address_node));
    spare_size_nodes_.push_back(std::move(size_node));
  }
}

virtual_heap::address_index::const_iterator virtual_heap::containing(std::uintptr_t address, std::size_t bytes) const
{
  auto it = by_address_.upper_bound(address);
  if (it == by_address_.begin()) { return by_address_.end(); }
  --it;
  return it->first + it->second.size >= address + bytes ? it : by_address_.end();
}

std::size_t virtual_heap::free_ending_at(std::uintptr_t address) const
{
  auto it = by_address_.lower_bound(address);
  if (it == by_address_.begin()) { return 0; }
  --it;
  return it->first + it->second.size == address ? it->second.size : 0;
}

std::size_t virtual_heap::free_starting_at(std::uintptr_t address) const
{
  auto const it = by_address_.find(address);
  return it == by_address_.end() ? 0 : it->second.size;
}

std::uintptr_t virtual_heap::slab_of(std::uintptr_t address) const noexcept
{
  return address - (address - base_) % slab_size_;
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

void virtual_heap::back(std::uintptr_t address, std::uint64_t handle, std::size_t slabs)
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
    insert_range(address, slabs * slab_size_, 0);
  } catch (...) {
    mappings_.erase(address);
    throw;
  }
  for (std::size_t i = first; i < first + slabs; ++i) { backed_[i] = true; }
  backed_slabs_ += slabs;
}

virtual_heap::unbacked virtual_heap::unback(std::uintptr_t address)
{
  auto const found_mapping = mappings_.find(address);
  require(found_mapping != mappings_.end(), [&] { return std::string{} + "no mapping at " + hex(address); });
  std::size_t const slabs = found_mapping->second.slabs;
  std::size_t const bytes = slabs * slab_size_;
  auto const found = containing(address, bytes);
  require(found != by_address_.end(), [&] { return std::string{} + "mapping " + hex(address) + " is not wholly free"; });
  auto const where = by_address_.find(found->first);
  std::uintptr_t const begin = where->first;
  std::size_t const size = where->second.size;
  std::uint64_t const streams = where->second.streams;
  // The parts before and after the mapping stay free with the same streams. The only allocation (a second
  // range, when both parts exist) comes first, so a std::bad_alloc changes nothing.
  std::size_t const before = address - begin;
  std::size_t const after = begin + size - (address + bytes);
  if (before > 0 && after > 0) {
    auto const indexed = by_size_.insert({after, address + bytes}).first;
    try {
      by_address_.emplace(address + bytes, range{after, streams, indexed});
    } catch (...) {
      by_size_.erase(indexed);
      throw;
    }
    free_bytes_ += after;
    reshape(where, begin, before);
  } else if (before > 0) {
    reshape(where, begin, before);
  } else if (after > 0) {
    reshape(where, address + bytes, after);
  } else {
    erase_range(where);
  }
  std::uint64_t const handle = found_mapping->second.handle;
  mappings_.erase(found_mapping);
  std::size_t const first = (address - base_) / slab_size_;
  for (std::size_t i = first; i < first + slabs; ++i) { backed_[i] = false; }
  backed_slabs_ -= slabs;
  return {handle, slabs, streams};
}

std::vector<virtual_heap::mapping> virtual_heap::wholly_free_mappings() const
{
  // Only a free range of at least a slab can hold one: walk those (by_size_ from slab_size up), and the
  // mappings inside each, not every mapping, so that growing costs O(large ranges + result).
  std::vector<mapping> result;
  for (auto it = by_size_.lower_bound({slab_size_, 0}); it != by_size_.end(); ++it) {
    auto const [size, address] = *it;
    for (auto m = mappings_.lower_bound(address); m != mappings_.end(); ++m) {
      std::uintptr_t const end = m->first + m->second.slabs * slab_size_;
      if (end > address + size) { break; }
      result.push_back({m->first, m->second.slabs});
    }
  }
  std::sort(result.begin(), result.end(), [](mapping const& a, mapping const& b) { return a.address > b.address; });
  return result;
}

std::uint64_t virtual_heap::streams_in_use() const noexcept
{
  std::uint64_t mask = 0;
  for (auto const& [address, r] : by_address_) { mask |= r.streams; }
  return mask;
}

void virtual_heap::forget_streams(std::uint64_t mask) noexcept
{
  for (auto& [address, r] : by_address_) { r.streams &= ~mask; }
}

void virtual_heap::check_invariants() const
{
  auto fail = [](std::string const& what) { throw logic_error("virtual_heap invariant violated: " + what); };
  if (by_address_.size() != by_size_.size()) { fail("the two indexes hold different numbers of ranges"); }
  std::size_t total = 0;
  std::uintptr_t previous_end = 0;
  bool first = true;
  for (auto const& [address, r] : by_address_) {
    if (r.size == 0 || address % alignment_ != 0 || r.size % alignment_ != 0) { fail("range " + hex(address) + " empty or misaligned"); }
    if (!first && address <= previous_end) { fail("range " + hex(address) + " overlaps or touches the previous one"); }
    if (!by_size_.contains({r.size, address}) || *r.by_size != std::pair{r.size, address}) {
      fail("range " + hex(address) + " missing from the size index, or its entry there is another");
    }
    if (!backed(address, r.size)) { fail("range " + hex(address) + " is not backed"); }
    previous_end = address + r.size;
    first = false;
    total += r.size;
  }
  if (total != free_bytes_) { fail("free bytes " + std::to_string(free_bytes_) + " != sum " + std::to_string(total)); }
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
  if (slabs != backed_slabs_ || static_cast<std::size_t>(std::count(backed_.begin(), backed_.end(), true)) != slabs) {
    fail("the backed slabs (" + std::to_string(backed_slabs_) + ") do not match the mappings (" + std::to_string(slabs) + ")");
  }
}

}  // namespace gpumem::detail
