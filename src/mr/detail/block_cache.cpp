// block_cache (mr/detail/block_cache.hpp): the cold members of a thread's cache of freed blocks.
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/detail/block_cache.hpp>

#include <algorithm>
#include <string>

namespace gpumem::detail {

std::size_t block_cache::cached_blocks() const noexcept
{
  std::size_t n = 0;
  for (slot const& s : slots_) { n += s.count; }
  return n;
}

std::size_t block_cache::largest() const noexcept
{
  std::size_t largest = 0;
  for (slot const& s : slots_) {
    if (s.count > 0) { largest = std::max(largest, s.block_size); }
  }
  return largest;
}

void block_cache::remove_oldest(slot& s, std::size_t n) noexcept
{
  std::copy(s.blocks.begin() + static_cast<std::ptrdiff_t>(n),
            s.blocks.begin() + static_cast<std::ptrdiff_t>(s.count), s.blocks.begin());
  s.count -= n;
  cached_bytes_ -= n * s.block_size;
}

void block_cache::check_alignment(std::uintptr_t address)
{
  if (address % allocation_alignment != 0) {
    throw logic_error("gpumem: deallocation of " + format_pointer(reinterpret_cast<void const*>(address)) +  // NOLINT(performance-no-int-to-ptr)
                      ", which is not " + std::to_string(allocation_alignment) +
                      "-byte aligned: it did not come from this resource");
  }
}

void block_cache::check_new(slot const& s, std::uintptr_t address)
{
  check_alignment(address);
  auto const end = s.blocks.begin() + static_cast<std::ptrdiff_t>(s.count);
  if (std::find(s.blocks.begin(), end, address) != end) {
    throw logic_error("gpumem: double free of " +
                      format_pointer(reinterpret_cast<void const*>(address)) +  // NOLINT(performance-no-int-to-ptr)
                      " (" + std::to_string(s.block_size) + " bytes): the block is already free");
  }
}

void block_cache::check_invariants() const
{
  auto violation = [](std::string const& what) { throw logic_error("gpumem::detail::block_cache: " + what); };
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < slot_count; ++i) {
    slot const& s = slots_[i];
    std::string const name = "slot " + std::to_string(i);
    if (s.block_size == 0) {
      if (s.count != 0) { violation(name + " is free but holds " + std::to_string(s.count) + " blocks"); }
      continue;
    }
    if (s.capacity != capacity_for(s.block_size) || s.count > s.capacity) {
      violation(name + " holds " + std::to_string(s.count) + " blocks, capacity " + std::to_string(s.capacity));
    }
    for (std::size_t j = 0; j < s.count; ++j) {
      if (s.blocks[j] % allocation_alignment != 0) { violation(name + " holds a misaligned address"); }
      for (std::size_t k = j + 1; k < s.count; ++k) {
        if (s.blocks[j] == s.blocks[k]) { violation(name + " holds an address twice"); }
      }
    }
    for (std::size_t j = i + 1; j < slot_count; ++j) {
      if (slots_[j].block_size == s.block_size && slots_[j].stream == s.stream) {
        violation(name + " and slot " + std::to_string(j) + " have the same stream and size");
      }
    }
    bytes += s.count * s.block_size;
  }
  if (bytes != cached_bytes_) {
    violation("cached_bytes is " + std::to_string(cached_bytes_) + " but the slots hold " + std::to_string(bytes));
  }
}

}  // namespace gpumem::detail
