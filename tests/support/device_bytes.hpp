// Test helpers for device memory whose contents a test wants to set or see without a kernel, on both
// backends: "a kernel writes" is an asynchronous copy from pinned memory on the kernel's stream, and "read the
// device copy" is a copy back into pinned memory followed by a stream synchronisation. Device pointers are
// never dereferenced on the host. Also a stream hold that cannot outlive its test, and cheap patterns.
#pragma once

#include "support/gate.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/mr/pinned_memory_pool.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace gpumem::test {

/**
 * @brief Emulates a kernel on `stream` that writes `bytes` bytes of `source` to device memory `destination`:
 * the bytes are staged in pinned memory (so `source` may be reused at once) and copied asynchronously; the
 * staging block returns to the default pinned pool when the stream has done the copy.
 */
inline void device_write(void* destination, void const* source, std::size_t bytes, cuda_stream_view stream)
{
  if (bytes == 0) { return; }
  auto& pool = mr::get_default_pinned_pool();
  void* staging = pool.allocate(bytes);
  std::memcpy(staging, source, bytes);
  detail::get_backend().memcpy_async(destination, staging, bytes, stream.value());
  pool.deallocate_async(staging, bytes, stream);
}

template <class T>
void device_write(T* destination, std::vector<T> const& source, cuda_stream_view stream)
{
  device_write(static_cast<void*>(destination), source.data(), source.size() * sizeof(T), stream);
}

/**
 * @brief The `count` elements of device memory at `source`, as seen by work on `stream` after everything
 * submitted to it so far (copied into pinned memory; the stream is synchronised).
 */
template <class T>
[[nodiscard]] std::vector<T> device_read(T const* source, std::size_t count, cuda_stream_view stream)
{
  std::vector<T> out(count);
  std::size_t const bytes = count * sizeof(T);
  if (bytes == 0) { return out; }
  auto& pool = mr::get_default_pinned_pool();
  void* staging = pool.allocate(bytes);
  detail::get_backend().memcpy_async(staging, source, bytes, stream.value());
  detail::get_backend().stream_synchronize(stream.value());
  std::memcpy(out.data(), staging, bytes);
  pool.deallocate(staging, bytes);
  return out;
}

/**
 * @brief Holds `stream`'s work back until release() or destruction. Declare it after the stream: the
 * destructor opens the gate and waits for the stream, so that a failing assertion can neither leave the
 * stream blocked nor free the gate while the stream still waits on it.
 */
class stream_hold {
 public:
  explicit stream_hold(cuda_stream_view stream) : stream_{stream}
  {
    // device_write/device_read stage through the default pinned pool: let it have memory before a stream
    // is held, so that it never grows (cudaMallocHost) while a stream waits on the gate.
    auto& pool = mr::get_default_pinned_pool();
    pool.deallocate(pool.allocate(1), 1);
    gate_.hold(stream.value());
  }
  ~stream_hold()
  {
    gate_.release();
    try {
      detail::get_backend().stream_synchronize(stream_.value());
    } catch (...) {  // NOLINT(bugprone-empty-catch): the test has failed already
    }
  }
  stream_hold(stream_hold const&) = delete;
  stream_hold& operator=(stream_hold const&) = delete;

  void release() { gate_.release(); }

 private:
  cuda_stream_view stream_;
  gate gate_;
};

/// `count` values of T that differ between seeds and do not repeat with a short period (one splitmix64 step
/// per 8 bytes, so large patterns are cheap in a debug build).
template <class T>
[[nodiscard]] std::vector<T> pattern(std::size_t count, std::uint64_t seed)
{
  std::vector<T> out(count);
  std::size_t const bytes = count * sizeof(T);
  auto* dst = reinterpret_cast<unsigned char*>(out.data());
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
  for (std::size_t i = 0; i < bytes; i += 8) {
    state += 0x9E3779B97F4A7C15ULL;
    std::uint64_t z = state;
    z = (z ^ (z >> 30U)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27U)) * 0x94D049BB133111EBULL;
    z ^= z >> 31U;
    std::memcpy(dst + i, &z, bytes - i < 8 ? bytes - i : 8);
  }
  return out;
}

}  // namespace gpumem::test
