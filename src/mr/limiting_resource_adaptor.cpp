// limiting_resource_adaptor (limiting_resource_adaptor.hpp): a byte cap kept with one atomic counter.

#include <gpumem/backend/backend.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/limiting_resource_adaptor.hpp>

#include <optional>
#include <string>

namespace gpumem::mr {

limiting_resource_adaptor::limiting_resource_adaptor(device_memory_resource* upstream, std::size_t allocation_limit,
                                                     std::size_t alignment)
  : resource_adaptor_base{upstream}, allocation_limit_{allocation_limit}, alignment_{alignment}
{
  expects(detail::is_pow2(alignment), "the alignment " + std::to_string(alignment) + " is not a power of two");
}

bool limiting_resource_adaptor::has_room_for(std::size_t bytes) const noexcept
{
  std::optional<std::size_t> const size = detail::checked_align_up(bytes, alignment_);
  return size && *size <= allocation_limit_ && allocated_bytes_.load() <= allocation_limit_ - *size;
}

std::size_t limiting_resource_adaptor::counted_size(std::size_t bytes) const
{
  std::optional<std::size_t> const size = detail::checked_align_up(bytes, alignment_);
  if (!size) {
    throw bad_alloc("limiting_resource_adaptor: " + std::to_string(bytes) +
                    " bytes overflow when rounded up to the alignment of " + std::to_string(alignment_));
  }
  return *size;
}

void* limiting_resource_adaptor::do_allocate(std::size_t bytes, cuda_stream_view stream)
{
  std::size_t const size = counted_size(bytes);
  std::size_t in_use = allocated_bytes_.load();
  do {
    if (size > allocation_limit_ || in_use > allocation_limit_ - size) {
      throw_out_of_memory("limiting_resource_adaptor", bytes, detail::get_backend().current_device(),
                          "the allocation limit of " + format_bytes(allocation_limit_) + " would be exceeded: " +
                            format_bytes(in_use) + " in use through the adaptor, " + format_bytes(size) +
                            " requested after rounding up to " + std::to_string(alignment_));
    }
  } while (!allocated_bytes_.compare_exchange_weak(in_use, in_use + size));
  try {
    return upstream_resource()->allocate(bytes, stream);
  } catch (...) {
    allocated_bytes_.fetch_sub(size);
    throw;
  }
}

void limiting_resource_adaptor::do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept
{
  upstream_resource()->deallocate(ptr, bytes, stream);
  // After the upstream has the memory back: the count never says "free" before the upstream does.
  allocated_bytes_.fetch_sub(detail::align_up(bytes, alignment_));
}

}  // namespace gpumem::mr
