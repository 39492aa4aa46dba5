// Test helpers of memory_checks.hpp.
#include "support/memory_checks.hpp"

#include <gpumem/error.hpp>

#include <algorithm>
#include <cstring>

namespace gpumem::test {

void write_pattern(void* ptr, std::size_t bytes, std::uint32_t seed, cudaStream_t stream)
{
  std::vector<std::uint8_t> host(bytes);
  for (std::size_t i = 0; i < bytes; ++i) { host[i] = pattern_byte(seed, i); }
  detail::backend& backend = detail::get_backend();
  backend.memcpy_async(ptr, host.data(), bytes, stream);
  backend.stream_synchronize(stream);  // `host` dies on return
}

::testing::AssertionResult has_pattern(void const* ptr, std::size_t bytes, std::uint32_t seed, cudaStream_t stream)
{
  std::vector<std::uint8_t> host(bytes);
  detail::backend& backend = detail::get_backend();
  backend.memcpy_async(host.data(), ptr, bytes, stream);
  backend.stream_synchronize(stream);
  for (std::size_t i = 0; i < bytes; ++i) {
    if (host[i] != pattern_byte(seed, i)) {
      return ::testing::AssertionFailure() << "pattern " << seed << " over " << bytes << " bytes at "
                                           << format_pointer(ptr) << ": byte " << i << " is "
                                           << static_cast<unsigned>(host[i]) << ", expected "
                                           << static_cast<unsigned>(pattern_byte(seed, i));
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult is_filled_with(void const* ptr, std::size_t bytes, std::uint8_t value, cudaStream_t stream)
{
  std::vector<std::uint8_t> host(bytes, static_cast<std::uint8_t>(~value));
  detail::backend& backend = detail::get_backend();
  backend.memcpy_async(host.data(), ptr, bytes, stream);
  backend.stream_synchronize(stream);
  auto const bad = std::find_if(host.begin(), host.end(), [value](std::uint8_t b) { return b != value; });
  if (bad != host.end()) {
    return ::testing::AssertionFailure() << bytes << " bytes at " << format_pointer(ptr) << ": byte "
                                         << (bad - host.begin()) << " is " << static_cast<unsigned>(*bad)
                                         << ", expected " << static_cast<unsigned>(value);
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult do_not_overlap(std::vector<block> blocks)
{
  std::sort(blocks.begin(), blocks.end(), [](block const& a, block const& b) {
    return reinterpret_cast<std::uintptr_t>(a.ptr) < reinterpret_cast<std::uintptr_t>(b.ptr);
  });
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (blocks[i].ptr == nullptr) { return ::testing::AssertionFailure() << "a block is null"; }
    if (i == 0) { continue; }
    auto const previous_end = reinterpret_cast<std::uintptr_t>(blocks[i - 1].ptr) + blocks[i - 1].bytes;
    if (previous_end > reinterpret_cast<std::uintptr_t>(blocks[i].ptr)) {
      return ::testing::AssertionFailure() << "block " << format_pointer(blocks[i - 1].ptr) << " (+"
                                           << blocks[i - 1].bytes << ") overlaps block "
                                           << format_pointer(blocks[i].ptr) << " (+" << blocks[i].bytes << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace gpumem::test
