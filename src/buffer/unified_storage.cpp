// unified_storage: the state machine of unified_buffer (unified_buffer.hpp has the transitions) and the
// copies between the two copies. Pinned host copies move with one asynchronous copy, recorded on
// host_event_; pageable ones through the staged engine (transfer.hpp), which returns when the host side is
// done. Every member runs under mutex_, which the spill manager also takes (try_lock) to spill.
#include <gpumem/backend/backend.hpp>
#include <gpumem/buffer/detail/unified_storage.hpp>
#include <gpumem/buffer/spill_manager.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/per_device_resource.hpp>
#include <gpumem/transfer.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory_resource>
#include <new>
#include <string>
#include <vector>

namespace gpumem {

std::string_view to_string(buffer_state state) noexcept
{
  switch (state) {
    case buffer_state::UNINITIALIZED: return "UNINITIALIZED";
    case buffer_state::HOST_ONLY: return "HOST_ONLY";
    case buffer_state::DEVICE_ONLY: return "DEVICE_ONLY";
    case buffer_state::SYNCHRONIZED: return "SYNCHRONIZED";
    case buffer_state::HOST_DIRTY: return "HOST_DIRTY";
    case buffer_state::DEVICE_DIRTY: return "DEVICE_DIRTY";
  }
  return "unknown buffer_state";
}

namespace detail {
namespace {

constexpr std::size_t host_alignment = 256;

[[nodiscard]] mr::device_memory_resource* choose_device_resource(unified_options const& options)
{
  expects(options.device_resource == nullptr || options.spill == nullptr,
          "unified_options: set either device_resource or spill (whose resource the buffer then uses), not both");
  if (options.spill != nullptr) { return options.spill->resource(); }
  if (options.device_resource != nullptr) { return options.device_resource; }
  return mr::get_current_device_resource();
}

[[nodiscard]] mr::pinned_memory_pool& pinned_pool_of(unified_options const& options)
{
  return options.pinned_pool != nullptr ? *options.pinned_pool : mr::get_default_pinned_pool();
}

[[nodiscard]] std::pmr::memory_resource& host_resource_of(unified_options const& options)
{
  return options.host_resource != nullptr ? *options.host_resource : *std::pmr::get_default_resource();
}

[[nodiscard]] bool is_byte_uniform(void const* pattern, std::size_t bytes) noexcept
{
  auto const* p = static_cast<unsigned char const*>(pattern);
  return std::all_of(p, p + bytes, [first = p[0]](unsigned char c) { return c == first; });
}

}  // namespace

unified_storage::unified_storage(std::size_t bytes, unified_options const& options)
  : bytes_{bytes},
    capacity_{bytes},
    options_{options},
    device_resource_{choose_device_resource(options)},
    device_id_{get_current_cuda_device()},
    spill_{options.spill}
{
  if (spill_ != nullptr) { spill_->on_buffer_created(this); }
}

unified_storage::~unified_storage()
{
  std::lock_guard lock{mutex_};  // a spill of this buffer in progress finishes first
  free_device();
  free_host();
  if (spill_ != nullptr) { spill_->on_buffer_destroyed(this); }
}

buffer_state unified_storage::state() const
{
  std::lock_guard lock{mutex_};
  return state_;
}

cuda_stream_view unified_storage::stream() const
{
  std::lock_guard lock{mutex_};
  return stream_;
}

void* unified_storage::host(bool write)
{
  std::lock_guard lock{mutex_};
  switch (state_) {
    case buffer_state::UNINITIALIZED:
      allocate_host();
      wait_host_copy();  // retained memory (a pool's) may still be read by an earlier copy
      state_ = buffer_state::HOST_ONLY;
      break;
    case buffer_state::HOST_ONLY:
    case buffer_state::SYNCHRONIZED:
    case buffer_state::HOST_DIRTY: wait_host_copy(); break;
    case buffer_state::DEVICE_ONLY:
    case buffer_state::DEVICE_DIRTY:
      allocate_host();
      copy_device_to_host(stream_);
      wait_host_copy();
      state_ = buffer_state::SYNCHRONIZED;
      break;
  }
  if (write) { state_ = buffer_state::HOST_DIRTY; }  // "host modified", also from HOST_ONLY
  return host_;
}

void* unified_storage::device(cuda_stream_view stream)
{
  std::lock_guard lock{mutex_};
  order_on(stream);
  switch (state_) {
    case buffer_state::UNINITIALIZED:
      allocate_device(stream);
      state_ = buffer_state::DEVICE_ONLY;
      break;
    case buffer_state::HOST_ONLY:
    case buffer_state::HOST_DIRTY:
      allocate_device(stream);
      copy_host_to_device(stream);
      state_ = buffer_state::SYNCHRONIZED;
      break;
    case buffer_state::DEVICE_ONLY:
    case buffer_state::SYNCHRONIZED:
    case buffer_state::DEVICE_DIRTY: break;
  }
  touch_device();
  return device_;
}

void unified_storage::sync_to_device(cuda_stream_view stream)
{
  std::lock_guard lock{mutex_};
  if (state_ == buffer_state::HOST_ONLY || state_ == buffer_state::HOST_DIRTY) { make_device_current(stream); }
}

void unified_storage::sync_to_host(cuda_stream_view stream)
{
  std::lock_guard lock{mutex_};
  if (state_ == buffer_state::DEVICE_ONLY || state_ == buffer_state::DEVICE_DIRTY) { make_host_current(stream); }
}

void unified_storage::synchronize(cuda_stream_view stream)
{
  std::lock_guard lock{mutex_};
  if (state_ == buffer_state::HOST_DIRTY) { make_device_current(stream); }
  if (state_ == buffer_state::DEVICE_DIRTY) { make_host_current(stream); }
}

void unified_storage::allocate(bool host, bool device, cuda_stream_view stream)
{
  std::lock_guard lock{mutex_};
  expects(host || device, "unified_buffer::allocate: neither the host nor the device copy was asked for");
  // The device copy first: if the host copy then fails, the state is unchanged (as after a pool's reset).
  if (device) {
    order_on(stream);
    allocate_device(stream);
    touch_device();
  }
  if (host) {
    allocate_host();
    wait_host_copy();  // retained memory (a pool's) may still be read by an earlier copy
  }
  if (state_ == buffer_state::UNINITIALIZED) {
    // Both copies hold the same (indeterminate) contents: nothing needs copying either way.
    state_ = host && device ? buffer_state::SYNCHRONIZED : host ? buffer_state::HOST_ONLY : buffer_state::DEVICE_ONLY;
  }
}

void unified_storage::free()
{
  std::lock_guard lock{mutex_};
  expects(!has_residency_hold(),
          "unified_buffer::free: a keep_resident() guard still holds the device copy (its pointers would dangle)");
  free_device();
  free_host();
  state_ = buffer_state::UNINITIALIZED;
}

void unified_storage::mark_host_dirty()
{
  std::lock_guard lock{mutex_};
  switch (state_) {
    case buffer_state::HOST_ONLY:
    case buffer_state::SYNCHRONIZED: state_ = buffer_state::HOST_DIRTY; break;
    case buffer_state::HOST_DIRTY: break;
    case buffer_state::UNINITIALIZED:
    case buffer_state::DEVICE_ONLY:
    case buffer_state::DEVICE_DIRTY:
      throw logic_error("unified_buffer::mark_host_dirty: the buffer is " + std::string{to_string(state_)} +
                        ", so its host copy " +
                        (state_ == buffer_state::UNINITIALIZED ? "holds no data"
                                                               : "is stale: a host write would be lost") +
                        " (read it with host() first, which copies the device data)");
  }
}

void unified_storage::mark_device_dirty()
{
  std::lock_guard lock{mutex_};
  switch (state_) {
    case buffer_state::DEVICE_ONLY:
    case buffer_state::SYNCHRONIZED: state_ = buffer_state::DEVICE_DIRTY; break;
    case buffer_state::DEVICE_DIRTY: break;
    case buffer_state::UNINITIALIZED:
    case buffer_state::HOST_ONLY:
    case buffer_state::HOST_DIRTY:
      throw logic_error("unified_buffer::mark_device_dirty: the buffer is " + std::string{to_string(state_)} +
                        ", so its device copy " +
                        (state_ == buffer_state::UNINITIALIZED ? "holds no data"
                                                               : "is not current: a device write would be lost") +
                        " (take the device copy with device() first, which copies the host data)");
  }
}

void unified_storage::copy_from(void const* source, std::size_t bytes, cuda_stream_view stream)
{
  std::lock_guard lock{mutex_};
  expects(bytes == bytes_, "copy_from: " + std::to_string(bytes) + " bytes given, the buffer holds " +
                             std::to_string(bytes_));
  expects(source != nullptr || bytes == 0, "copy_from: the source is null");
  order_on(stream);
  allocate_device(stream);
  copy_to_device(device_, source, bytes_, stream);
  // From pinned memory the copy is asynchronous; the contract lets the caller reuse `source` at once.
  if (get_backend().is_pinned_host(source)) { wait_for(stream); }
  state_ = host_allocated_ ? buffer_state::DEVICE_DIRTY : buffer_state::DEVICE_ONLY;
  touch_device();
}

void unified_storage::copy_to(void* destination, std::size_t bytes, cuda_stream_view stream)
{
  std::lock_guard lock{mutex_};
  expects(bytes == bytes_, "copy_to: " + std::to_string(bytes) + " bytes given, the buffer holds " +
                             std::to_string(bytes_));
  expects(state_ != buffer_state::UNINITIALIZED, "copy_to: the buffer is UNINITIALIZED: it holds no data");
  expects(destination != nullptr || bytes == 0, "copy_to: the destination is null");
  if (bytes_ == 0) { return; }
  if (host_is_current(state_)) {
    wait_host_copy();
    std::memcpy(destination, host_, bytes_);
    return;
  }
  order_on(stream);
  gpumem::copy_to_host(destination, device_, bytes_, stream);
  wait_for(stream);  // a pinned destination is copied asynchronously; the contract promises the data
}

void unified_storage::fill(void const* pattern, std::size_t pattern_bytes, cuda_stream_view stream)
{
  std::lock_guard lock{mutex_};
  expects(pattern_bytes > 0 && bytes_ % pattern_bytes == 0,
          "fill: a pattern of " + std::to_string(pattern_bytes) + " bytes does not divide " +
            std::to_string(bytes_) + " bytes");
  order_on(stream);
  allocate_device(stream);
  if (bytes_ > 0) {
    auto& backend = get_backend();
    if (is_byte_uniform(pattern, pattern_bytes)) {
      backend.memset_async(device_, *static_cast<unsigned char const*>(pattern), bytes_, stream.value());
    } else {
      // One element from the host, then doubling device-to-device copies: log2(n) copies, no kernel. The
      // element is copied from a private pageable copy, which the staged copy has read when it returns.
      std::vector<unsigned char> const element(static_cast<unsigned char const*>(pattern),
                                               static_cast<unsigned char const*>(pattern) + pattern_bytes);
      copy_to_device(device_, element.data(), pattern_bytes, stream);
      auto* const base = static_cast<unsigned char*>(device_);
      for (std::size_t filled = pattern_bytes; filled < bytes_;) {
        std::size_t const n = std::min(filled, bytes_ - filled);
        backend.memcpy_async(base + filled, base, n, stream.value());
        filled += n;
      }
    }
  }
  state_ = host_allocated_ ? buffer_state::DEVICE_DIRTY : buffer_state::DEVICE_ONLY;
  touch_device();
}

void unified_storage::reset_for_reuse(std::size_t bytes)
{
  std::lock_guard lock{mutex_};
  expects(bytes <= capacity_, "reset_for_reuse: " + std::to_string(bytes) + " bytes exceed the capacity " +
                                std::to_string(capacity_));
  bytes_ = bytes;
  state_ = buffer_state::UNINITIALIZED;
  if (spill_ != nullptr && device_allocated_ && capacity_ > 0) { spill_->on_device_cold(this); }
}

// ---- private: mutex_ held -------------------------------------------------------------------------------

void unified_storage::allocate_host()
{
  if (host_allocated_) { return; }
  if (capacity_ > 0) {
    try {
      host_ = options_.pinned ? pinned_pool_of(options_).allocate(capacity_, host_alignment)
                              : host_resource_of(options_).allocate(capacity_, host_alignment);
    } catch (gpumem::bad_alloc const&) {
      throw;
    } catch (std::bad_alloc const&) {
      throw out_of_memory("unified_buffer: cannot allocate its " + std::string{options_.pinned ? "pinned" : "pageable"} +
                          " host copy of " + format_bytes(capacity_));
    }
  }
  host_allocated_ = true;
}

void unified_storage::allocate_device(cuda_stream_view stream)
{
  if (device_allocated_) { return; }
  stream_ = stream;
  if (capacity_ > 0) {
    cuda_set_device_raii const on_device{device_id_};
    device_ = device_resource_->allocate(capacity_, stream);
  }
  device_allocated_ = true;
  if (spill_ != nullptr && capacity_ > 0) { spill_->on_device_allocated(this); }
}

void unified_storage::touch_device() noexcept
{
  if (spill_ != nullptr && device_allocated_ && capacity_ > 0) { spill_->on_device_used(this); }
}

void unified_storage::wait_host_copy()
{
  if (!host_copy_pending_) { return; }
  host_event_.synchronize();
  host_copy_pending_ = false;
}

void unified_storage::wait_for(cuda_stream_view stream)
{
  order_event_.record(stream);
  order_event_.synchronize();
}

void unified_storage::order_on(cuda_stream_view stream)
{
  if (stream == stream_) { return; }
  if (device_allocated_ || host_copy_pending_) {
    order_event_.record(stream_);
    order_event_.wait(stream);
  }
  stream_ = stream;
}

void unified_storage::make_device_current(cuda_stream_view stream)
{
  order_on(stream);
  allocate_device(stream);
  copy_host_to_device(stream);
  state_ = buffer_state::SYNCHRONIZED;
  touch_device();
}

void unified_storage::make_host_current(cuda_stream_view stream)
{
  allocate_host();
  copy_device_to_host(stream);
  state_ = buffer_state::SYNCHRONIZED;
}

void unified_storage::copy_host_to_device(cuda_stream_view stream)
{
  order_on(stream);
  if (bytes_ == 0) { return; }
  if (options_.pinned) {
    get_backend().memcpy_async(device_, host_, bytes_, stream.value());
    host_event_.record(stream);  // host writes wait until the copy has read the host copy
    host_copy_pending_ = true;
  } else {
    wait_host_copy();
    copy_to_device(device_, host_, bytes_, stream);
  }
}

void unified_storage::copy_device_to_host(cuda_stream_view stream)
{
  order_on(stream);
  if (bytes_ == 0) { return; }
  if (options_.pinned) {
    get_backend().memcpy_async(host_, device_, bytes_, stream.value());
    host_event_.record(stream);  // host accesses wait until the data are there
    host_copy_pending_ = true;
  } else {
    wait_host_copy();
    gpumem::copy_to_host(host_, device_, bytes_, stream);
  }
}

void unified_storage::free_device() noexcept
{
  if (!device_allocated_) { return; }
  if (capacity_ > 0) {
    try {
      cuda_set_device_raii const on_device{device_id_};
      device_resource_->deallocate(device_, capacity_, stream_);
    } catch (...) {
      std::fprintf(stderr, "gpumem: unified_buffer: could not select device %d to free its device copy\n",
                   device_id_.value());
    }
    if (spill_ != nullptr) { spill_->on_device_freed(this); }
  }
  device_ = nullptr;
  device_allocated_ = false;
}

void unified_storage::free_host() noexcept
{
  if (!host_allocated_) { return; }
  if (capacity_ > 0) {
    if (options_.pinned) {
      // A copy in flight may still use it: the pool takes it back once the buffer's stream gets there.
      pinned_pool_of(options_).deallocate_async(host_, capacity_, stream_);
    } else {
      try {
        wait_host_copy();
      } catch (...) {  // NOLINT(bugprone-empty-catch): a failed stream's copies never run
      }
      host_resource_of(options_).deallocate(host_, capacity_, host_alignment);
    }
  }
  host_ = nullptr;
  host_allocated_ = false;
  host_copy_pending_ = false;
}

std::size_t unified_storage::spill_device_copy() noexcept
{
  if (!device_allocated_ || capacity_ == 0) { return 0; }
  bool const copy_back = state_ == buffer_state::DEVICE_ONLY || state_ == buffer_state::DEVICE_DIRTY;
  if (copy_back) {
    try {
      allocate_host();
      copy_device_to_host(stream_);
    } catch (...) {  // the data cannot be saved: keep the device copy
      return 0;
    }
  }
  std::size_t const freed = capacity_;
  free_device();
  if (state_ != buffer_state::UNINITIALIZED) { state_ = buffer_state::HOST_ONLY; }
  if (spill_ != nullptr) { spill_->on_spilled(freed, copy_back); }
  return freed;
}

}  // namespace detail
}  // namespace gpumem
