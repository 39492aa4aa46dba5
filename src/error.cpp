// Exception types and error-message helpers (error.hpp).
#include <gpumem/backend/backend.hpp>
#include <gpumem/error.hpp>

#include <array>
#include <cinttypes>
#include <cstdio>
#include <sstream>
#include <string>

namespace gpumem {

cuda_error::cuda_error(cudaError_t code, std::string const& message) : std::runtime_error{message}, code_{code} {}

bad_alloc::bad_alloc(std::string message) : message_{std::move(message)} {}

std::string format_bytes(std::size_t bytes)
{
  static constexpr std::array<char const*, 6> units{"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < units.size()) {
    value /= 1024.0;
    ++unit;
  }
  std::array<char, 96> text{};
  if (unit == 0) {
    std::snprintf(text.data(), text.size(), "%zu B", bytes);
  } else {
    std::snprintf(text.data(), text.size(), "%.2f %s (%zu bytes)", value, units[unit], bytes);
  }
  return text.data();
}

std::string format_pointer(void const* ptr)
{
  std::array<char, 32> text{};
  std::snprintf(text.data(), text.size(), "0x%" PRIxPTR, reinterpret_cast<std::uintptr_t>(ptr));
  return text.data();
}

void throw_out_of_memory(std::string_view resource, std::size_t bytes, int device, std::string_view details)
{
  std::ostringstream message;
  message << "out of memory: " << resource << " could not allocate " << format_bytes(bytes) << " on device "
          << device;
  try {
    memory_info const info = detail::get_backend().mem_info(device);
    message << " (" << format_bytes(info.free) << " free of " << format_bytes(info.total) << " total)";
  } catch (std::exception const& e) {
    message << " (free and total memory unknown: " << e.what() << ")";
  }
  if (!details.empty()) { message << "; " << details; }
  throw out_of_memory(message.str());
}

namespace detail {
void throw_cuda_error(cudaError_t code, char const* call, char const* file, int line)
{
  std::ostringstream message;
  message << "CUDA error " << describe_cuda_error(code) << " in " << call << " at " << file << ":" << line;
  throw cuda_error(code, message.str());
}
}  // namespace detail

}  // namespace gpumem
