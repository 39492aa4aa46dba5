// small_pages (small_pages.hpp has the contract).
#include <gpumem/mr/detail/small_pages.hpp>

#include <gpumem/error.hpp>

#include <algorithm>
#include <bit>
#include <limits>
#include <string>

namespace gpumem::detail {

namespace {

[[nodiscard]] std::string hex(std::uintptr_t a)
{
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  do {
    s.insert(s.begin(), digits[a % 16]);
    a /= 16;
  } while (a != 0);
  return "0x" + s;
}

[[nodiscard]] bool test_bit(std::vector<std::uint64_t> const& bits, std::size_t i) noexcept
{
  return ((bits[i / 64] >> (i % 64)) & 1U) != 0;
}
/// Throws the logic_error of a give_back that names no block in use (messages are built only on failure).
[[noreturn]] void refuse(std::uintptr_t address, std::string const& why)
{
  throw logic_error("small_pages: " + hex(address) + why);
}

void set_bit(std::vector<std::uint64_t>& bits, std::size_t i, bool on) noexcept
{
  std::uint64_t const bit = std::uint64_t{1} << (i % 64);
  bits[i / 64] = on ? (bits[i / 64] | bit) : (bits[i / 64] & ~bit);
}

}  // namespace

small_pages::small_pages(options const& o) : options_{o}
{
  spare_.reserve(spare_limit);
  empty_.reserve(empty_limit + 1);
  expects(o.alignment > 0 && std::has_single_bit(o.alignment),
          "small_pages: alignment " + std::to_string(o.alignment) + " is not a power of two");
  expects(o.classes_per_doubling >= 1 && o.classes_per_doubling <= 16 && std::has_single_bit(o.classes_per_doubling),
          "small_pages: classes_per_doubling " + std::to_string(o.classes_per_doubling) + " is not 1, 2, 4, 8 or 16");
  expects(o.small_limit >= o.alignment && o.small_limit % o.alignment == 0,
          "small_pages: small_limit " + std::to_string(o.small_limit) + " is not a positive multiple of the alignment");
  expects(o.min_blocks_per_page >= 1, "small_pages: min_blocks_per_page is 0");
  expects(o.min_page_bytes >= o.alignment && o.min_page_bytes % o.alignment == 0,
          "small_pages: min_page_bytes " + std::to_string(o.min_page_bytes) + " is not a positive multiple of the alignment");
  expects(o.max_page_bytes >= o.min_page_bytes && o.max_page_bytes % o.alignment == 0,
          "small_pages: max_page_bytes " + std::to_string(o.max_page_bytes) +
            " is not a multiple of the alignment of at least min_page_bytes " + std::to_string(o.min_page_bytes));
  expects(o.pool_divisor >= 1, "small_pages: pool_divisor is 0");
  // The largest class has the largest pages; give_back divides offsets in a page in 32 bits. (Each factor below
  // 2^32 first, so that the product cannot overflow.)
  constexpr std::size_t four_gib = std::size_t{1} << 32;
  bool const fits = o.small_limit < four_gib && o.max_page_bytes < four_gib && o.min_blocks_per_page < four_gib &&
                    page_bytes_for(class_of(o.small_limit), std::numeric_limits<std::size_t>::max()) < four_gib;
  expects(fits, "small_pages: pages would span 4 GiB or more (small_limit " + std::to_string(o.small_limit) +
                  ", max_page_bytes " + std::to_string(o.max_page_bytes) + ", min_blocks_per_page " +
                  std::to_string(o.min_blocks_per_page) + ")");
  newest_with_room_.assign(class_index(class_of(o.small_limit)) + 1, nullptr);
}

std::size_t small_pages::class_index(std::size_t block_size) const noexcept
{
  // The classes up to alignment * classes_per_doubling are its multiples; after that each doubling (2^k, 2^(k+1)]
  // has classes_per_doubling classes 2^k + j * 2^k / classes_per_doubling, j = 1 .. classes_per_doubling.
  std::size_t const a = options_.alignment;
  std::size_t const per_doubling = options_.classes_per_doubling;
  std::size_t const linear_end = a * per_doubling;  // a power of two
  if (block_size <= linear_end) { return block_size / a - 1; }
  auto const k = static_cast<std::size_t>(std::bit_width(block_size - 1) - 1);  // 2^k < block_size <= 2^(k+1)
  auto const k0 = static_cast<std::size_t>(std::countr_zero(linear_end));
  std::size_t const j = (block_size - (std::size_t{1} << k)) / ((std::size_t{1} << k) / per_doubling);
  return per_doubling - 1 + (k - k0) * per_doubling + j;
}

std::size_t small_pages::whole_page(std::size_t block_size, std::size_t target) const noexcept
{
  std::size_t const wanted = std::max(target, options_.min_blocks_per_page * block_size);
  return (wanted + block_size - 1) / block_size * block_size;
}

std::size_t small_pages::page_bytes_for(std::size_t block_size, std::size_t pool_bytes) const noexcept
{
  std::size_t const by_pool = std::bit_floor(std::max<std::size_t>(pool_bytes / options_.pool_divisor, 1));
  return whole_page(block_size, std::clamp(by_pool, options_.min_page_bytes, options_.max_page_bytes));
}

bool small_pages::is_page_size(std::size_t block_size, std::size_t bytes) const noexcept
{
  // page_bytes_for clamps a power of two: its targets are min_page_bytes, the powers of two between the two
  // bounds and max_page_bytes (both below 4 GiB: the constructor checks).
  std::size_t const low = options_.min_page_bytes;
  std::size_t const high = options_.max_page_bytes;
  if (bytes == whole_page(block_size, low) || bytes == whole_page(block_size, high)) { return true; }
  for (std::size_t target = std::bit_ceil(low); target < high; target *= 2) {
    if (bytes == whole_page(block_size, target)) { return true; }
  }
  return false;
}

small_pages::block small_pages::take_from(page& p)
{
  std::size_t index = 0;
  if (!p.free.empty()) {
    index = p.free.back();
    p.free.pop_back();
    set_bit(p.is_free, index, false);
  } else {
    index = p.carved++;
    p.streams[index] = p.first_streams;  // never used: the streams of the heap range the page came from
  }
  if (p.used == 0) {  // a kept empty page in use again (or a page add_page has just made)
    if (auto const kept = std::find(empty_.begin(), empty_.end(), p.address); kept != empty_.end()) { empty_.erase(kept); }
  }
  ++p.used;
  used_bytes_ += p.block_size;
  if (!has_room(p)) { unlist(p); }
  last_page_ = &p;
  return block{p.address + index * p.block_size, p.streams[index]};
}

void small_pages::list(page& p) noexcept
{
  page*& newest = newest_with_room_[class_index(p.block_size)];
  p.newer = nullptr;
  p.older = newest;
  if (newest != nullptr) { newest->newer = &p; }
  newest = &p;
}

void small_pages::unlist(page& p) noexcept
{
  if (p.newer != nullptr) {
    p.newer->older = p.older;
  } else {
    newest_with_room_[class_index(p.block_size)] = p.older;
  }
  if (p.older != nullptr) { p.older->newer = p.newer; }
  p.newer = nullptr;
  p.older = nullptr;
}

std::optional<small_pages::block> small_pages::take(std::size_t bytes)
{
  page* const newest = newest_with_room_[class_index(class_of(bytes))];
  if (newest == nullptr) { return std::nullopt; }
  return take_from(*newest);
}

small_pages::page const* small_pages::find_page(std::uintptr_t address) const noexcept
{
  auto it = pages_.upper_bound(address);
  if (it == pages_.begin()) { return nullptr; }
  --it;
  return address < it->first + it->second.bytes ? &it->second : nullptr;
}

small_pages::page* small_pages::page_of(std::uintptr_t address) noexcept
{
  if (last_page_ != nullptr && address >= last_page_->address && address - last_page_->address < last_page_->bytes) {
    return last_page_;
  }
  return const_cast<page*>(find_page(address));  // NOLINT(cppcoreguidelines-pro-type-const-cast): our own page
}

small_pages::block small_pages::add_page(std::uintptr_t address, std::size_t bytes, std::size_t page_bytes,
                                         std::uint64_t streams)
{
  std::size_t const block_size = class_of(bytes);
  std::size_t const size = page_bytes;
  if (address % options_.alignment != 0) { throw logic_error("small_pages: a page at " + hex(address) + " is misaligned"); }
  if (!is_page_size(block_size, size)) {
    throw logic_error("small_pages: a page of " + std::to_string(size) + " bytes for blocks of " +
                      std::to_string(block_size) + " bytes has no size that page_bytes_for gives");
  }
  auto const after = pages_.lower_bound(address);
  bool const overlaps_next = after != pages_.end() && after->first < address + size;
  bool const overlaps_previous = after != pages_.begin() && std::prev(after)->first + std::prev(after)->second.bytes > address;
  if (overlaps_next || overlaps_previous) { throw logic_error("small_pages: a page at " + hex(address) + " overlaps another"); }
  // A retired page's node and vectors are reused: no heap allocation when a page of a class of at most the
  // same number of blocks is added, and no work per block (blocks are set up as they are carved).
  std::map<std::uintptr_t, page>::node_type node;
  if (!spare_.empty()) {
    node = std::move(spare_.back());
    spare_.pop_back();
    node.key() = address;
  } else {
    std::map<std::uintptr_t, page> one;
    one.emplace(address, page{});  // may throw: nothing changed yet
    node = one.extract(one.begin());
  }
  page& p = node.mapped();
  p.address = address;
  p.bytes = size;
  p.block_size = block_size;
  p.capacity = size / block_size;
  p.carved = 0;
  p.used = 0;
  p.first_streams = streams;
  p.newer = nullptr;
  p.older = nullptr;
  p.streams.resize(p.capacity);  // may throw (the node is dropped): nothing changed yet
  p.is_free.assign((p.capacity + 63) / 64, 0);
  p.free.clear();
  p.free.reserve(p.capacity);
  page& added = pages_.insert(after, std::move(node))->second;
  page_bytes_ += size;
  list(added);  // unlisted by take_from when one block fills the page
  return take_from(added);
}

std::optional<small_pages::retired_page> small_pages::give_back(std::uintptr_t address, std::uint64_t streams)
{
  page* const found = page_of(address);
  if (found == nullptr) { refuse(address, " is in no page"); }
  page& p = *found;
  std::uintptr_t const base = p.address;
  // A page spans less than 4 GiB (the constructor checks): a 32-bit division, several times cheaper than a 64-bit one.
  auto const offset = static_cast<std::uint32_t>(address - base);
  auto const block_size = static_cast<std::uint32_t>(p.block_size);
  if (offset % block_size != 0) {
    refuse(address, " is not the start of a block of " + std::to_string(p.block_size) + " bytes");
  }
  std::size_t const index = offset / block_size;
  if (index >= p.carved || test_bit(p.is_free, index)) {
    throw logic_error("small_pages: double free of " + hex(address) + ": the block is already free");
  }
  bool const was_full = !has_room(p);

  p.free.push_back(static_cast<std::uint32_t>(index));  // capacity reserved at add_page: no throw
  set_bit(p.is_free, index, true);
  --p.used;
  used_bytes_ -= p.block_size;
  p.streams[index] = streams;
  if (was_full) { list(p); }
  last_page_ = &p;
  if (p.used != 0) { return std::nullopt; }
  // Kept until the owner's next heap operation, or until more pages are empty.
  empty_.push_back(base);  // capacity reserved at construction: no throw
  if (empty_.size() <= empty_limit) { return std::nullopt; }
  std::uintptr_t const oldest = empty_.front();
  empty_.erase(empty_.begin());
  return retire(pages_.find(oldest));
}

std::optional<small_pages::retired_page> small_pages::retire_empty_page() noexcept
{
  if (empty_.empty()) { return std::nullopt; }
  std::uintptr_t const address = empty_.back();
  empty_.pop_back();
  return retire(pages_.find(address));
}

small_pages::retired_page small_pages::retire(std::map<std::uintptr_t, page>::iterator it) noexcept
{
  page& p = it->second;
  retired_page const out{it->first, p.bytes, streams_of(p)};
  unlist(p);  // an empty page has room: it is listed
  if (last_page_ == &p) { last_page_ = nullptr; }
  page_bytes_ -= p.bytes;
  if (spare_.size() < spare_limit) {
    spare_.push_back(pages_.extract(it));  // capacity reserved at construction: no throw
  } else {
    pages_.erase(it);
  }
  return out;
}

bool small_pages::owns(std::uintptr_t address) const noexcept { return find_page(address) != nullptr; }

void small_pages::forget_streams(std::uint64_t mask) noexcept
{
  for (auto& [address, p] : pages_) {
    for (std::size_t i = 0; i < p.carved; ++i) { p.streams[i] &= ~mask; }
    p.first_streams &= ~mask;
  }
}

std::uint64_t small_pages::streams_in_use() const noexcept
{
  std::uint64_t mask = 0;
  for (auto const& [address, p] : pages_) { mask |= streams_of(p); }
  return mask;
}

std::uint64_t small_pages::streams_of(page const& p) noexcept
{
  std::uint64_t mask = p.carved < p.capacity ? p.first_streams : 0;
  for (std::size_t i = 0; i < p.carved; ++i) { mask |= p.streams[i]; }
  return mask;
}

void small_pages::check_invariants() const
{
  auto const fail = [](std::string const& what) { throw logic_error("small_pages invariant violated: " + what); };
  std::size_t bytes = 0;
  std::size_t used = 0;
  std::uintptr_t previous_end = 0;
  for (auto const& [address, p] : pages_) {
    if (address < previous_end) { fail("the page at " + hex(address) + " overlaps the one before it"); }
    if (p.address != address) { fail("the page at " + hex(address) + " names another address"); }
    previous_end = address + p.bytes;
    if (!is_page_size(p.block_size, p.bytes) || p.bytes % p.block_size != 0 || p.capacity != p.bytes / p.block_size) {
      fail("the page at " + hex(address) + " has the wrong size for its class");
    }
    if ((p.used == 0) != (std::find(empty_.begin(), empty_.end(), address) != empty_.end())) {
      fail("the page at " + hex(address) + (p.used == 0 ? " is empty but neither kept nor retired"
                                                        : " is in the list of empty pages but in use"));
    }
    if (p.used + p.free.size() != p.carved || p.carved > p.capacity) {
      fail("the page at " + hex(address) + ": used + free != carved");
    }
    std::size_t set = 0;
    for (std::size_t i = 0; i < p.capacity; ++i) { set += test_bit(p.is_free, i) ? 1 : 0; }
    if (set != p.free.size()) { fail("the page at " + hex(address) + ": the bitmap disagrees with the free list"); }
    for (std::uint32_t const i : p.free) {
      if (i >= p.carved || !test_bit(p.is_free, i)) { fail("the page at " + hex(address) + ": a bad free index"); }
    }
    bytes += p.bytes;
    used += p.used * p.block_size;
  }
  std::size_t listed = 0;
  for (std::size_t index = 0; index < newest_with_room_.size(); ++index) {
    page const* newer = nullptr;
    for (page const* at = newest_with_room_[index]; at != nullptr; at = at->older) {
      auto const it = pages_.find(at->address);
      if (it == pages_.end() || &it->second != at || class_index(at->block_size) != index) {
        fail("a listed page " + hex(at->address) + " is gone or in another class's list");
      }
      if (!has_room(*at)) { fail("the full page at " + hex(at->address) + " is listed"); }
      if (at->newer != newer) { fail("the list of pages with room is broken at " + hex(at->address)); }
      if (++listed > pages_.size()) { fail("the list of pages with room has a cycle"); }
      newer = at;
    }
  }
  std::size_t with_room = 0;
  for (auto const& [address, p] : pages_) { with_room += has_room(p) ? 1 : 0; }
  if (listed != with_room) { fail("a page with room is not listed"); }
  if (last_page_ != nullptr) {
    auto const it = pages_.find(last_page_->address);
    if (it == pages_.end() || &it->second != last_page_) { fail("the page last used is gone"); }
  }
  if (bytes != page_bytes_ || used != used_bytes_) { fail("the byte counts disagree"); }
  if (empty_.size() > empty_limit) { fail("more empty pages kept than " + std::to_string(empty_limit)); }
  for (std::uintptr_t const address : empty_) {
    if (!pages_.contains(address)) { fail("a kept empty page " + hex(address) + " is gone"); }
  }
}

}  // namespace gpumem::detail
