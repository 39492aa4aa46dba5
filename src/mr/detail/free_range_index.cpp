// free_range_index (free_range_index.hpp has the contract and why the address index orders records).
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/free_range_index.hpp>

#include <iterator>
#include <string>

namespace gpumem::detail {
namespace {

/// How many erased ranges' set nodes are kept for reuse (records are always kept).
constexpr std::size_t spare_nodes = 64;

[[nodiscard]] std::string hex(std::uintptr_t address) { return format_pointer(reinterpret_cast<void const*>(address)); }

/// Inserts `value` into `set` in a spare node if there is one (no allocation), else in a new one.
template <class Set>
typename Set::iterator insert_reusing(Set& set, std::vector<typename Set::node_type>& spares, typename Set::value_type value)
{
  if (spares.empty()) { return set.insert(value).first; }
  auto node = std::move(spares.back());
  spares.pop_back();
  node.value() = value;
  return set.insert(std::move(node)).position;
}

}  // namespace

bool free_range_index::start_less::operator()(record const* a, record const* b) const noexcept { return a->start < b->start; }
bool free_range_index::start_less::operator()(record const* a, std::uintptr_t b) const noexcept { return a->start < b; }
bool free_range_index::start_less::operator()(std::uintptr_t a, record const* b) const noexcept { return a < b->start; }

bool free_range_index::fit_less::operator()(record const* a, record const* b) const noexcept
{
  return a->size != b->size ? a->size < b->size : a->start < b->start;
}
bool free_range_index::fit_less::operator()(record const* a, fit_key b) const noexcept
{
  return a->size != b.size ? a->size < b.size : a->start < b.start;
}
bool free_range_index::fit_less::operator()(fit_key a, record const* b) const noexcept
{
  return a.size != b->size ? a.size < b->size : a.start < b->start;
}

free_range_index::free_range_index()
{
  spare_address_nodes_.reserve(spare_nodes);
  spare_size_nodes_.reserve(spare_nodes);
}

free_range_index::range const* free_range_index::best_fit(std::size_t bytes) const noexcept
{
  auto const fit = by_size_.lower_bound(fit_key{bytes, 0});
  return fit == by_size_.end() ? nullptr : *fit;
}

free_range_index::neighbours free_range_index::around(std::uintptr_t address) const noexcept
{
  auto const after = by_address_.lower_bound(address);
  return {after == by_address_.begin() ? nullptr : *std::prev(after), after == by_address_.end() ? nullptr : *after};
}

free_range_index::range const* free_range_index::containing(std::uintptr_t address, std::size_t bytes) const noexcept
{
  auto it = by_address_.upper_bound(address);  // the first range starting after `address`
  if (it == by_address_.begin()) { return nullptr; }
  record const* r = *std::prev(it);
  return r->end() >= address + bytes ? r : nullptr;
}

free_range_index::record* free_range_index::new_record()
{
  if (!spare_records_.empty()) {
    record* r = spare_records_.back();
    spare_records_.pop_back();
    return r;
  }
  spare_records_.reserve(records_.size() + 1);  // so that erase() can always keep it
  return &records_.emplace_back();
}

free_range_index::range const* free_range_index::insert(std::uintptr_t start, std::size_t size, std::uint64_t streams)
{
  record* r = new_record();
  r->start = start;
  r->size = size;
  r->streams = streams;
  try {
    r->in_address = insert_reusing(by_address_, spare_address_nodes_, r);
  } catch (...) {
    spare_records_.push_back(r);  // capacity reserved: no allocation
    throw;
  }
  try {
    r->in_size = insert_reusing(by_size_, spare_size_nodes_, r);
  } catch (...) {
    by_address_.erase(r->in_address);
    spare_records_.push_back(r);
    throw;
  }
  bytes_ += size;
  return r;
}

void free_range_index::reshape(range const* which, std::uintptr_t start, std::size_t size, std::uint64_t streams) noexcept
{
  record* r = mutable_record(which);
  bytes_ = bytes_ - r->size + size;
  r->streams = streams;
  // The size index keeps the record where it is when its neighbours there still bracket the new key (a
  // cut from a range larger than every smaller one, a merge that stays below the next size): a store.
  fit_key const key{size, start};
  auto const where = r->in_size;
  bool const stays = (where == by_size_.begin() || fit_less{}(*std::prev(where), key)) &&
                     (std::next(where) == by_size_.end() || fit_less{}(key, *std::next(where)));
  if (stays) {
    r->start = start;
    r->size = size;
    return;
  }
  // Otherwise out of the size index before its key changes, and back in (the node is reused); the
  // address index keeps it either way (its order stays).
  auto node = by_size_.extract(where);
  r->start = start;
  r->size = size;
  r->in_size = by_size_.insert(std::move(node)).position;
}

void free_range_index::erase(range const* which) noexcept
{
  record* r = mutable_record(which);
  auto size_node = by_size_.extract(r->in_size);
  auto address_node = by_address_.extract(r->in_address);
  if (spare_size_nodes_.size() < spare_size_nodes_.capacity()) { spare_size_nodes_.push_back(std::move(size_node)); }
  if (spare_address_nodes_.size() < spare_address_nodes_.capacity()) {
    spare_address_nodes_.push_back(std::move(address_node));
  }
  bytes_ -= r->size;
  spare_records_.push_back(r);  // capacity reserved in new_record()
}

void free_range_index::clear_streams(std::uint64_t mask) noexcept
{
  for (record* r : by_address_) { r->streams &= ~mask; }
}

void free_range_index::check() const
{
  auto fail = [](std::string const& what) { throw logic_error("free_range_index invariant violated: " + what); };
  if (by_address_.size() != by_size_.size()) { fail("the two indexes hold different numbers of ranges"); }
  std::size_t total = 0;
  record const* previous = nullptr;
  for (auto it = by_address_.begin(); it != by_address_.end(); ++it) {
    record const* r = *it;
    if (r->size == 0) { fail("range " + hex(r->start) + " is empty"); }
    if (previous != nullptr && previous->end() > r->start) { fail("range " + hex(r->start) + " overlaps the previous one"); }
    if (r->in_address != it) { fail("range " + hex(r->start) + " does not know its place in the address index"); }
    auto const in_size = by_size_.find(fit_key{r->size, r->start});
    if (in_size == by_size_.end() || *in_size != r || r->in_size != in_size) {
      fail("range " + hex(r->start) + " is missing from the size index, or its entry there is another");
    }
    total += r->size;
    previous = r;
  }
  if (total != bytes_) { fail("bytes " + std::to_string(bytes_) + " != sum " + std::to_string(total)); }
}

}  // namespace gpumem::detail
