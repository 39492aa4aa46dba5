// Test helpers for memory that may live on a device: write a byte pattern through the backend and read it
// back, check that allocations do not overlap, own a backend stream. They work on both backends, because
// they touch device memory only through get_backend().memcpy_async.
#pragma once

#include <gpumem/backend/backend.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gpumem::test {

/// The pattern byte at `offset` for pattern `seed`: differs between seeds and is not periodic in 256, so a
/// copy shifted by any small offset or a buffer swapped with another's shows up.
[[nodiscard]] constexpr std::uint8_t pattern_byte(std::uint32_t seed, std::size_t offset) noexcept
{
  auto const o = static_cast<std::uint32_t>(offset);
  return static_cast<std::uint8_t>((seed * 0x9Du + o * 7u + (o >> 8u) * 13u + (o >> 16u)) & 0xFFu);
}

/// Writes pattern `seed` over [ptr, ptr + bytes) with memcpy_async on `stream`, then synchronises `stream`.
void write_pattern(void* ptr, std::size_t bytes, std::uint32_t seed, cudaStream_t stream);

/// Reads [ptr, ptr + bytes) back on `stream` and compares it with pattern `seed`; names the first mismatch.
[[nodiscard]] ::testing::AssertionResult has_pattern(void const* ptr, std::size_t bytes, std::uint32_t seed,
                                                     cudaStream_t stream);

/// Reads [ptr, ptr + bytes) back on `stream`; success when every byte is `value`.
[[nodiscard]] ::testing::AssertionResult is_filled_with(void const* ptr, std::size_t bytes, std::uint8_t value,
                                                        cudaStream_t stream);

/// One allocation: where and how large.
struct block {
  void const* ptr;
  std::size_t bytes;
};

/// Success when no two blocks overlap (and none is null); names the first overlapping pair.
[[nodiscard]] ::testing::AssertionResult do_not_overlap(std::vector<block> blocks);

/// A stream created with the backend's stream_create and destroyed with stream_destroy, as CuPy, PyTorch or
/// raw CUDA make them: never announced to gpumem (before_stream_destroy.hpp), so no resource may use it
/// after the call that passed it returned (the host backend aborts on a destroyed handle).
class backend_stream {
 public:
  explicit backend_stream(unsigned flags = cudaStreamNonBlocking)
    : stream_{detail::get_backend().stream_create(flags, 0)}
  {
  }
  ~backend_stream() { detail::get_backend().stream_destroy(stream_); }
  backend_stream(backend_stream const&) = delete;
  backend_stream& operator=(backend_stream const&) = delete;
  backend_stream(backend_stream&&) = delete;
  backend_stream& operator=(backend_stream&&) = delete;

  [[nodiscard]] cudaStream_t get() const noexcept { return stream_; }

 private:
  cudaStream_t stream_;
};

}  // namespace gpumem::test
