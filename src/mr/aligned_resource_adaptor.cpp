// aligned_resource_adaptor (aligned_resource_adaptor.hpp): over-allocate, align up, remember the original.

#include <gpumem/error.hpp>
#include <gpumem/mr/aligned_resource_adaptor.hpp>

#include <cstdint>
#include <limits>
#include <string>

namespace gpumem::mr {

aligned_resource_adaptor::aligned_resource_adaptor(device_memory_resource* upstream, std::size_t alignment,
                                                   std::size_t alignment_threshold)
  : resource_adaptor_base{upstream}, alignment_{alignment}, alignment_threshold_{alignment_threshold}
{
  expects(detail::is_pow2(alignment), "the alignment " + std::to_string(alignment) + " is not a power of two");
}

void* aligned_resource_adaptor::do_allocate(std::size_t bytes, cuda_stream_view stream)
{
  if (passes_through(bytes)) { return upstream_resource()->allocate(bytes, stream); }
  std::size_t const extra = alignment_ - detail::allocation_alignment;
  if (bytes > std::numeric_limits<std::size_t>::max() - extra) {
    throw bad_alloc("aligned_resource_adaptor: " + std::to_string(bytes) + " bytes overflow with the " +
                    std::to_string(extra) + " extra bytes needed to align to " + std::to_string(alignment_));
  }
  void* original = nullptr;
  try {
    original = upstream_resource()->allocate(bytes + extra, stream);
  } catch (out_of_memory const& e) {  // name the caller's request, not only the larger upstream one
    throw out_of_memory("aligned_resource_adaptor: could not allocate " + format_bytes(bytes) + " aligned to " +
                        std::to_string(alignment_) + " (" + format_bytes(bytes + extra) +
                        " from the upstream): " + e.what());
  }
  auto const address = reinterpret_cast<std::uintptr_t>(original);
  void* const aligned = reinterpret_cast<void*>(detail::align_up(address, alignment_));
  if (aligned != original) {
    try {
      gpumem::detail::lock_guard const lock{mutex_};
      originals_.emplace(aligned, original);
    } catch (...) {
      upstream_resource()->deallocate(original, bytes + extra, stream);
      throw;
    }
  }
  return aligned;
}

void aligned_resource_adaptor::do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept
{
  if (passes_through(bytes)) {
    upstream_resource()->deallocate(ptr, bytes, stream);
    return;
  }
  void* original = ptr;
  {
    gpumem::detail::lock_guard const lock{mutex_};
    if (auto const it = originals_.find(ptr); it != originals_.end()) {
      original = it->second;
      originals_.erase(it);
    }
  }
  upstream_resource()->deallocate(original, bytes + (alignment_ - detail::allocation_alignment), stream);
}

bool aligned_resource_adaptor::do_is_equal(device_memory_resource const& other) const noexcept
{
  if (!resource_adaptor_base::do_is_equal(other)) { return false; }
  auto const& same = static_cast<aligned_resource_adaptor const&>(other);  // the same type, as the base checked
  return alignment_ == same.alignment_ && alignment_threshold_ == same.alignment_threshold_;
}

}  // namespace gpumem::mr
