// device_buffer: allocation, copy and reallocation of an untyped stream-ordered buffer. Every operation
// that touches memory runs on one stream (the one passed in) with the buffer's device current, so the
// allocation, the copy and the deallocation of the old memory are ordered among themselves.
#include <gpumem/backend/backend.hpp>
#include <gpumem/buffer/device_buffer.hpp>
#include <gpumem/error.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace gpumem {

namespace {

/// Enqueues a copy of `bytes` bytes on `stream`; a zero-byte copy enqueues nothing.
void copy_async(void* dst, void const* src, std::size_t bytes, cuda_stream_view stream)
{
  if (bytes != 0) { detail::get_backend().memcpy_async(dst, src, bytes, stream.value()); }
}

/// The bytes over `capacity` that place the data on an `alignment` boundary within 256-aligned memory.
std::size_t padding(std::size_t alignment) noexcept
{
  return alignment > detail::allocation_alignment ? alignment - detail::allocation_alignment : 0;
}

/// @return `alignment`. @throws logic_error when it is not a power of two.
std::size_t checked_alignment(std::size_t alignment)
{
  if (!detail::is_pow2(alignment)) {
    throw logic_error("gpumem::device_buffer: alignment " + std::to_string(alignment) + " is not a power of two");
  }
  return alignment;
}

}  // namespace

device_buffer::device_buffer()
  : mr_{mr::get_current_device_resource()}, device_{get_current_cuda_device()}
{
}

device_buffer::device_buffer(std::size_t size, cuda_stream_view stream, mr::device_memory_resource* mr)
  : device_buffer{size, detail::allocation_alignment, stream, mr}
{
}

device_buffer::device_buffer(std::size_t size, std::size_t alignment, cuda_stream_view stream,
                             mr::device_memory_resource* mr)
  : alignment_{checked_alignment(alignment)}, stream_{stream}, mr_{mr}, device_{get_current_cuda_device()}
{
  expects(mr_ != nullptr, "the memory resource must not be null");
  storage const held = allocate_storage(size, stream_);
  allocation_ = held.allocation;
  data_ = held.data;
  size_ = size;
  capacity_ = size;
}

device_buffer::device_buffer(void const* source, std::size_t size, cuda_stream_view stream,
                             mr::device_memory_resource* mr)
  : device_buffer{source, size, detail::allocation_alignment, stream, mr}
{
}

device_buffer::device_buffer(void const* source, std::size_t size, std::size_t alignment, cuda_stream_view stream,
                             mr::device_memory_resource* mr)
  : alignment_{checked_alignment(alignment)}, stream_{stream}, mr_{mr}, device_{get_current_cuda_device()}
{
  expects(mr_ != nullptr, "the memory resource must not be null");
  expects(source != nullptr || size == 0, "the source must not be null when size > 0");
  storage const held = allocate_storage(size, stream_);
  allocation_ = held.allocation;
  data_ = held.data;
  size_ = size;
  capacity_ = size;
  try {
    copy_async(data_, source, size, stream_);
  } catch (...) {
    free_storage();  // the destructor does not run for a constructor that throws
    throw;
  }
}

device_buffer::device_buffer(device_buffer const& other, cuda_stream_view stream, mr::device_memory_resource* mr)
  : device_buffer{other.data(), other.size(), other.alignment(), stream, mr}
{
}

device_buffer::device_buffer(device_buffer&& other) noexcept
  : data_{std::exchange(other.data_, nullptr)},
    allocation_{std::exchange(other.allocation_, nullptr)},
    alignment_{other.alignment_},
    size_{std::exchange(other.size_, 0)},
    capacity_{std::exchange(other.capacity_, 0)},
    stream_{std::exchange(other.stream_, cuda_stream_view{})},
    mr_{other.mr_},
    device_{other.device_}
{
}

device_buffer& device_buffer::operator=(device_buffer&& other) noexcept
{
  if (this != &other) {
    free_storage();
    data_ = std::exchange(other.data_, nullptr);
    allocation_ = std::exchange(other.allocation_, nullptr);
    alignment_ = other.alignment_;
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
    stream_ = std::exchange(other.stream_, cuda_stream_view{});
    mr_ = other.mr_;
    device_ = other.device_;
  }
  return *this;
}

device_buffer::~device_buffer() noexcept { free_storage(); }

void device_buffer::reserve(std::size_t new_capacity, cuda_stream_view stream)
{
  if (new_capacity > capacity_) {
    reallocate(new_capacity, stream);
  } else {
    stream_ = stream;
  }
}

void device_buffer::resize(std::size_t new_size, cuda_stream_view stream)
{
  if (new_size > capacity_) {
    reallocate(new_size, stream);
  } else {
    stream_ = stream;
  }
  size_ = new_size;
}

void device_buffer::shrink_to_fit(cuda_stream_view stream)
{
  if (size_ != capacity_) {
    reallocate(size_, stream);
  } else {
    stream_ = stream;
  }
}

device_buffer::storage device_buffer::allocate_storage(std::size_t capacity, cuda_stream_view stream) const
{
  if (capacity == 0) { return {}; }
  std::size_t const extra = padding(alignment_);
  std::optional<std::size_t> const bytes = detail::checked_add(capacity, extra);
  if (!bytes) {
    throw bad_alloc("gpumem::device_buffer: " + std::to_string(capacity) + " bytes aligned to " +
                    std::to_string(alignment_) + " overflow std::size_t");
  }
  void* const allocation = mr_->allocate(*bytes, stream);
  auto const address = reinterpret_cast<std::uintptr_t>(allocation);  // NOLINT: address arithmetic
  std::size_t const offset = detail::align_up(address, alignment_) - address;
  if (offset > extra) {  // the resource broke its 256-byte contract: the data would run past the allocation
    mr_->deallocate(allocation, *bytes, stream);
    throw logic_error("gpumem::device_buffer: the memory resource returned " + format_pointer(allocation) +
                      ", which is not aligned to the 256 bytes every resource guarantees");
  }
  return {allocation, static_cast<char*>(allocation) + offset};
}

void device_buffer::deallocate_storage(storage held, std::size_t capacity, cuda_stream_view stream) const noexcept
{
  if (held.allocation != nullptr) { mr_->deallocate(held.allocation, capacity + padding(alignment_), stream); }
}

void device_buffer::reallocate(std::size_t new_capacity, cuda_stream_view stream)
{
  cuda_set_device_raii const on_device{device_};
  storage const fresh = allocate_storage(new_capacity, stream);
  try {
    copy_async(fresh.data, data_, size_, stream);
  } catch (...) {
    deallocate_storage(fresh, new_capacity, stream);
    throw;
  }
  // The copy above reads the old memory on `stream`, so the old memory is freed on `stream` too.
  deallocate_storage({allocation_, data_}, capacity_, stream);
  allocation_ = fresh.allocation;
  data_ = fresh.data;
  capacity_ = new_capacity;
  stream_ = stream;
}

void device_buffer::free_storage() noexcept
{
  if (data_ != nullptr) {
    std::optional<cuda_set_device_raii> on_device;
    try {
      on_device.emplace(device_);
    } catch (...) {
      // The device was valid when the memory was allocated; should switching to it fail now, freeing on
      // the current device is still better than leaking (and destructors must not throw).
    }
    deallocate_storage({allocation_, data_}, capacity_, stream_);
  }
  data_ = nullptr;
  allocation_ = nullptr;
  size_ = 0;
  capacity_ = 0;
}

}  // namespace gpumem
