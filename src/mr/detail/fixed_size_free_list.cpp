// fixed_size_free_list (fixed_size_free_list.hpp): a vector used as a stack of block addresses.
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/detail/fixed_size_free_list.hpp>

#include <algorithm>
#include <iterator>
#include <string>
#include <utility>

namespace gpumem::detail {
namespace {

[[noreturn]] void violation(char const* function, std::string const& what)
{
  throw logic_error(std::string{"gpumem::detail::fixed_size_free_list::"} + function + ": " + what);
}

std::string describe(std::uintptr_t address, std::size_t size)
{
  return "block [" + format_pointer(reinterpret_cast<void const*>(address)) + ", +" + std::to_string(size) + ")";  // NOLINT
}

}  // namespace

fixed_size_free_list::fixed_size_free_list(std::size_t block_size) : block_size_{block_size}
{
  if (block_size == 0 || block_size % allocation_alignment != 0) {
    violation("fixed_size_free_list", "block size " + std::to_string(block_size) + " is not a positive multiple of " +
                                        std::to_string(allocation_alignment));
  }
}

void fixed_size_free_list::insert(free_block block)
{
  if (block.size != block_size_ || block.address % allocation_alignment != 0) {
    violation("insert", describe(block.address, block.size) + " is not a " + std::to_string(block_size_) +
                          "-byte block of this resource");
  }
#ifndef NDEBUG
  // A double free: the stack cannot see it without a search, so only debug builds pay for one (O(n)).
  if (std::find(blocks_.begin(), blocks_.end(), block.address) != blocks_.end()) {
    violation("insert", "double free of " + describe(block.address, block.size) + ": the block is already free");
  }
#endif
  blocks_.push_back(block.address);
}

void fixed_size_free_list::insert_chunk(std::uintptr_t address, std::size_t size)
{
  if (size == 0 || size % block_size_ != 0 || address % allocation_alignment != 0) {
    violation("insert_chunk", describe(address, size) + " is not a whole number of " + std::to_string(block_size_) +
                                "-byte blocks");
  }
  std::size_t const count = size / block_size_;
  blocks_.reserve(blocks_.size() + count);
  for (std::size_t i = count; i-- > 0;) { blocks_.push_back(address + i * block_size_); }
}

std::optional<free_block> fixed_size_free_list::get_block(std::size_t size) noexcept
{
  if (blocks_.empty() || size > block_size_) { return std::nullopt; }
  std::uintptr_t const address = blocks_.back();
  blocks_.pop_back();
  return free_block{address, block_size_, false};
}

void fixed_size_free_list::merge_from(fixed_size_free_list&& other)
{
  if (other.block_size_ != block_size_) {
    violation("merge_from", "block sizes differ: " + std::to_string(block_size_) + " and " +
                              std::to_string(other.block_size_));
  }
  if (blocks_.empty()) {
    blocks_.swap(other.blocks_);  // no allocation in the common case of an empty list taking another's
    return;
  }
  blocks_.insert(blocks_.end(), other.blocks_.begin(), other.blocks_.end());
  other.blocks_.clear();
}

std::vector<free_block> fixed_size_free_list::remove_whole_chunks(chunk_map const& chunks)
{
  // Count the free blocks of each chunk; a chunk is whole when all of its blocks are here.
  std::map<std::uintptr_t, std::size_t> free_per_chunk;
  auto chunk_of = [&chunks](std::uintptr_t address) {
    auto after = chunks.upper_bound(address);
    if (after == chunks.begin()) { return chunks.end(); }
    auto const chunk = std::prev(after);
    return address < chunk->first + chunk->second ? chunk : chunks.end();
  };
  for (std::uintptr_t const address : blocks_) {
    auto const chunk = chunk_of(address);
    if (chunk != chunks.end()) { ++free_per_chunk[chunk->first]; }
  }
  std::vector<free_block> whole;
  for (auto const& [start, count] : free_per_chunk) {
    std::size_t const size = chunks.at(start);
    if (count * block_size_ == size) { whole.push_back(free_block{start, size, true}); }
  }
  if (whole.empty()) { return whole; }
  std::erase_if(blocks_, [&](std::uintptr_t address) {
    auto const chunk = chunk_of(address);
    return chunk != chunks.end() && chunk->second == free_per_chunk[chunk->first] * block_size_;
  });
  return whole;
}

void fixed_size_free_list::check_invariants() const
{
  std::vector<std::uintptr_t> sorted = blocks_;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] % allocation_alignment != 0) {
      violation("check_invariants", describe(sorted[i], block_size_) + " is not 256-byte aligned");
    }
    if (i > 0 && sorted[i - 1] + block_size_ > sorted[i]) {
      violation("check_invariants", describe(sorted[i], block_size_) + " overlaps " +
                                      describe(sorted[i - 1], block_size_) + " (freed twice?)");
    }
  }
}

bool fixed_size_free_list::overlaps(std::uintptr_t address, std::size_t size) const noexcept
{
  return std::any_of(blocks_.begin(), blocks_.end(), [&](std::uintptr_t block) {
    return block < address ? address - block < block_size_ : block - address < size;
  });
}

}  // namespace gpumem::detail
