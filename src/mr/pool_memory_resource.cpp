// pool_memory_resource (pool_memory_resource.hpp): the pool's policy (block sizes, growth, limits) over the
// stream-ordered machinery of stream_ordered_memory_resource.hpp.
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>

#include "mr/option_checks.hpp"

#include <algorithm>
#include <limits>
#include <string>

namespace gpumem::mr {
namespace {

constexpr std::size_t alignment = detail::allocation_alignment;
constexpr char const* resource_name = "gpumem::mr::pool_memory_resource";

std::size_t checked_initial_size(std::size_t initial, std::optional<std::size_t> maximum)
{
  std::size_t const aligned = detail::round_up_option(resource_name, "initial_pool_size", initial, alignment);
  if (maximum && *maximum < alignment) {
    detail::throw_option_error(resource_name, "maximum_pool_size", *maximum,
                               "cannot hold one " + std::to_string(alignment) +
                                 "-byte block (leave it unset for no maximum)");
  }
  if (maximum && aligned > *maximum) {
    throw logic_error(std::string{resource_name} + ": initial pool size " + format_bytes(initial) +
                      " exceeds the maximum pool size " + format_bytes(*maximum));
  }
  return aligned;
}

}  // namespace

pool_memory_resource::pool_memory_resource(device_memory_resource* upstream, std::size_t initial_pool_size,
                                           std::optional<std::size_t> maximum_pool_size)
  : stream_ordered_memory_resource{upstream, detail::coalescing_free_list{}, "pool_memory_resource"},
    maximum_pool_size_{maximum_pool_size}
{
  std::size_t const initial = checked_initial_size(initial_pool_size, maximum_pool_size);
  if (initial > 0) { grow_now(initial); }
}

std::size_t pool_memory_resource::block_size_for(std::size_t bytes) const noexcept
{
  return detail::align_up(bytes, alignment);  // no overflow: device_memory_resource::allocate checked it
}

std::size_t pool_memory_resource::maximum_allocation_size() const noexcept
{
  return maximum_pool_size_ ? detail::align_down(*maximum_pool_size_, alignment)
                            : std::numeric_limits<std::size_t>::max();
}

std::size_t pool_memory_resource::growth_size(std::size_t block_bytes, std::size_t pool_bytes) const noexcept
{
  std::size_t const wanted = std::max(block_bytes, pool_bytes);  // double the pool, or at least the request
  if (!maximum_pool_size_) { return wanted; }
  std::size_t const headroom =
    pool_bytes >= *maximum_pool_size_ ? 0 : detail::align_down(*maximum_pool_size_ - pool_bytes, alignment);
  return headroom < block_bytes ? 0 : std::min(wanted, headroom);
}

std::size_t pool_memory_resource::smaller_growth_size(std::size_t block_bytes,
                                                      std::size_t failed_bytes) const noexcept
{
  if (failed_bytes <= block_bytes) { return 0; }
  return std::max(block_bytes, detail::align_up(failed_bytes / 2, alignment));
}

std::string pool_memory_resource::describe_policy() const
{
  return maximum_pool_size_ ? "maximum pool size " + format_bytes(*maximum_pool_size_) : "no maximum pool size";
}

}  // namespace gpumem::mr
