// fixed_size_memory_resource (fixed_size_memory_resource.hpp): the fixed-size policy (one block size,
// batches) over the stream-ordered machinery of stream_ordered_memory_resource.hpp.
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/fixed_size_memory_resource.hpp>

#include <algorithm>
#include <limits>
#include <string>

namespace gpumem::mr {
namespace {

constexpr std::size_t alignment = detail::allocation_alignment;

std::size_t checked_block_size(std::size_t block_size, std::size_t blocks_per_batch)
{
  auto const aligned = detail::checked_align_up(block_size, alignment);
  if (block_size == 0 || !aligned) {
    throw logic_error("gpumem::mr::fixed_size_memory_resource: block size " + std::to_string(block_size) +
                      " must be positive and fit size_t when rounded up to " + std::to_string(alignment));
  }
  if (blocks_per_batch == 0) {
    throw logic_error("gpumem::mr::fixed_size_memory_resource: blocks per batch must be at least 1");
  }
  if (*aligned > std::numeric_limits<std::size_t>::max() / blocks_per_batch) {
    throw logic_error("gpumem::mr::fixed_size_memory_resource: a batch of " + std::to_string(blocks_per_batch) +
                      " blocks of " + std::to_string(*aligned) + " bytes overflows size_t");
  }
  return *aligned;
}

}  // namespace

fixed_size_memory_resource::fixed_size_memory_resource(device_memory_resource* upstream, std::size_t block_size,
                                                       std::size_t blocks_per_batch, std::size_t initial_batches)
  : stream_ordered_memory_resource{upstream,
                                   detail::fixed_size_free_list{checked_block_size(block_size, blocks_per_batch)},
                                   "fixed_size_memory_resource"},
    block_size_{checked_block_size(block_size, blocks_per_batch)},
    blocks_per_batch_{blocks_per_batch}
{
  for (std::size_t i = 0; i < initial_batches; ++i) { grow_now(block_size_ * blocks_per_batch_); }
}

std::size_t fixed_size_memory_resource::block_size_for(std::size_t /*bytes*/) const noexcept { return block_size_; }

std::size_t fixed_size_memory_resource::maximum_allocation_size() const noexcept { return block_size_; }

std::size_t fixed_size_memory_resource::growth_size(std::size_t /*block_bytes*/,
                                                    std::size_t /*pool_bytes*/) const noexcept
{
  return block_size_ * blocks_per_batch_;
}

std::size_t fixed_size_memory_resource::smaller_growth_size(std::size_t /*block_bytes*/,
                                                            std::size_t failed_bytes) const noexcept
{
  std::size_t const failed_blocks = failed_bytes / block_size_;
  return failed_blocks <= 1 ? 0 : (failed_blocks / 2) * block_size_;
}

std::string fixed_size_memory_resource::describe_policy() const
{
  return "block size " + format_bytes(block_size_) + ", " + std::to_string(blocks_per_batch_) + " blocks per batch";
}

}  // namespace gpumem::mr
