// coalescing_free_list (coalescing_free_list.hpp): two indexes over the same free blocks, kept in step by
// every operation; merging and resizing move existing nodes, so only a block that merges with nothing
// allocates.
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/coalescing_free_list.hpp>

#include <iterator>
#include <string>
#include <utility>

namespace gpumem::detail {
namespace {

std::string describe(std::uintptr_t address, std::size_t size, bool is_head)
{
  return std::string{is_head ? "head block [" : "block ["} +
         format_pointer(reinterpret_cast<void const*>(address)) + ", +" + std::to_string(size) + ")";  // NOLINT
}

std::string describe(free_block const& block) { return describe(block.address, block.size, block.is_head); }

[[noreturn]] void violation(char const* function, std::string const& what)
{
  throw logic_error(std::string{"gpumem::detail::coalescing_free_list::"} + function + ": " + what);
}

}  // namespace

void coalescing_free_list::insert(free_block block)
{
  address_index::node_type no_address_node;
  size_index::node_type no_size_node;
  insert_with(block, no_address_node, no_size_node);
}

void coalescing_free_list::insert_with(free_block block, address_index::node_type& address_node,
                                       size_index::node_type& size_node)
{
  if (block.size == 0 || block.size % alignment_ != 0 || block.address % alignment_ != 0) {
    violation("insert", describe(block) + " is empty or not a multiple of " + std::to_string(alignment_) +
                          " bytes: not a block of this resource");
  }
  auto next = by_address_.lower_bound(block.address);
  auto prev = next == by_address_.begin() ? by_address_.end() : std::prev(next);
  if (next != by_address_.end() && next->first < block.end()) {
    violation("insert", describe(block) + " overlaps the free " +
                          describe(next->first, next->second.size, next->second.is_head) +
                          " (freed twice, or not from this resource)");
  }
  if (prev != by_address_.end() && prev->first + prev->second.size > block.address) {
    violation("insert", describe(block) + " overlaps the free " +
                          describe(prev->first, prev->second.size, prev->second.is_head) +
                          " (freed twice, or not from this resource)");
  }
  // Merge with a neighbour only inside one chunk: a head starts a chunk, so nothing merges into it.
  bool const merge_prev = prev != by_address_.end() && prev->first + prev->second.size == block.address &&
                          !block.is_head;
  bool const merge_next = next != by_address_.end() && next->first == block.end() && !next->second.is_head;

  if (merge_prev && merge_next) {
    std::size_t const merged = prev->second.size + block.size + next->second.size;
    erase(next);  // its bytes stay counted: they become part of `prev`
    resize(prev, merged);
  } else if (merge_prev) {
    resize(prev, prev->second.size + block.size);
  } else if (merge_next) {
    // The block takes over its right neighbour: move that neighbour's nodes to the new address and size.
    std::size_t const merged = block.size + next->second.size;
    auto moved_size = by_size_.extract({next->second.size, next->first});
    auto moved_address = by_address_.extract(next);
    if (moved_size.empty() || moved_address.empty()) { return; }  // cannot happen; says so to the compiler
    moved_address.key() = block.address;
    moved_address.mapped() = extent{merged, block.is_head};
    moved_size.value() = {merged, block.address};
    by_address_.insert(std::move(moved_address));
    by_size_.insert(std::move(moved_size));
  } else {
    // A block of its own: two new index entries, from the spare nodes when the caller gave them.
    address_index::iterator placed;
    if (!address_node.empty()) {
      address_node.key() = block.address;
      address_node.mapped() = extent{block.size, block.is_head};
      placed = by_address_.insert(next, std::move(address_node));
    } else {
      placed = by_address_.emplace_hint(next, block.address, extent{block.size, block.is_head});
    }
    try {
      if (!size_node.empty()) {
        size_node.value() = {block.size, block.address};
        by_size_.insert(std::move(size_node));
      } else {
        by_size_.emplace(block.size, block.address);
      }
    } catch (...) {
      by_address_.erase(placed);
      throw;
    }
  }
  total_bytes_ += block.size;
}

void coalescing_free_list::resize(address_index::iterator where, std::size_t new_size) noexcept
{
  auto node = by_size_.extract({where->second.size, where->first});
  if (node.empty()) { return; }  // cannot happen (the indexes agree); says so to the compiler
  node.value().first = new_size;
  by_size_.insert(std::move(node));
  where->second.size = new_size;
}

void coalescing_free_list::erase(address_index::iterator where) noexcept
{
  by_size_.erase({where->second.size, where->first});
  by_address_.erase(where);
}

std::optional<free_block> coalescing_free_list::get_block(std::size_t size) noexcept
{
  auto const fit = by_size_.lower_bound({size, 0});
  if (fit == by_size_.end()) { return std::nullopt; }
  auto const where = by_address_.find(fit->second);
  free_block const block{where->first, where->second.size, where->second.is_head};
  by_size_.erase(fit);
  by_address_.erase(where);
  total_bytes_ -= block.size;
  return block;
}

void coalescing_free_list::remove(free_block const& block)
{
  auto const where = by_address_.find(block.address);
  if (where == by_address_.end() || where->second.size != block.size) {
    violation("remove", describe(block) + " is not a free block of the list");
  }
  erase(where);
  total_bytes_ -= block.size;
}

void coalescing_free_list::merge_from(coalescing_free_list&& other)
{
  while (!other.by_address_.empty()) {
    auto const first = other.by_address_.begin();
    free_block const block{first->first, first->second.size, first->second.is_head};
    auto size_node = other.by_size_.extract({block.size, block.address});
    auto address_node = other.by_address_.extract(first);
    other.total_bytes_ -= block.size;
    try {
      insert_with(block, address_node, size_node);
    } catch (...) {
      // Put the block back where it came from (from its own nodes: no allocation), then report.
      if (address_node.empty() || size_node.empty()) { throw; }  // cannot happen: rejected blocks keep them
      address_node.key() = block.address;
      address_node.mapped() = extent{block.size, block.is_head};
      size_node.value() = {block.size, block.address};
      other.by_address_.insert(std::move(address_node));
      other.by_size_.insert(std::move(size_node));
      other.total_bytes_ += block.size;
      throw;
    }
  }
}

std::vector<free_block> coalescing_free_list::remove_whole_chunks(chunk_map const& chunks)
{
  std::vector<free_block> whole;
  for (auto where = by_address_.begin(); where != by_address_.end();) {
    auto const chunk = where->second.is_head ? chunks.find(where->first) : chunks.end();
    if (chunk != chunks.end() && chunk->second == where->second.size) {
      whole.push_back(free_block{where->first, where->second.size, true});
      total_bytes_ -= where->second.size;
      by_size_.erase({where->second.size, where->first});
      where = by_address_.erase(where);
    } else {
      ++where;
    }
  }
  return whole;
}

void coalescing_free_list::check_invariants() const
{
  if (by_address_.size() != by_size_.size()) {
    violation("check_invariants", "the address index holds " + std::to_string(by_address_.size()) +
                                    " blocks but the size index " + std::to_string(by_size_.size()));
  }
  std::size_t total = 0;
  auto prev = by_address_.end();
  for (auto it = by_address_.begin(); it != by_address_.end(); prev = it, ++it) {
    auto const address = it->first;  // not a structured binding: the lambda below captures it
    auto const e = it->second;
    auto block = [&] { return describe(address, e.size, e.is_head); };  // built only for a message
    if (e.size == 0 || e.size % alignment_ != 0 || address % alignment_ != 0) {
      violation("check_invariants", block() + " is empty or not " + std::to_string(alignment_) + "-byte aligned");
    }
    if (!by_size_.contains({e.size, address})) {
      violation("check_invariants", block() + " is missing from the size index");
    }
    if (prev != by_address_.end()) {
      std::uintptr_t const prev_end = prev->first + prev->second.size;
      if (prev_end > address) {
        violation("check_invariants", block() + " overlaps the block before it");
      }
      if (prev_end == address && !e.is_head) {
        violation("check_invariants", block() + " touches the free block before it in the same chunk: not coalesced");
      }
    }
    total += e.size;
  }
  if (total != total_bytes_) {
    violation("check_invariants", "the blocks hold " + std::to_string(total) + " bytes but total_bytes is " +
                                    std::to_string(total_bytes_));
  }
}

bool coalescing_free_list::overlaps(std::uintptr_t address, std::size_t size) const noexcept
{
  auto const after = by_address_.lower_bound(address);
  if (after != by_address_.end() && after->first - address < size) { return true; }
  if (after == by_address_.begin()) { return false; }
  auto const before = std::prev(after);
  return address - before->first < before->second.size;
}

}  // namespace gpumem::detail
