// memcpy_async and memset_async (transfer.hpp): one backend call each, after the contract checks.
#include <gpumem/backend/backend.hpp>
#include <gpumem/error.hpp>
#include <gpumem/transfer.hpp>

#include <string>

namespace gpumem {

void memcpy_async(void* dst, void const* src, std::size_t bytes, cuda_stream_view stream)
{
  if (bytes == 0) { return; }
  if (dst == nullptr || src == nullptr) {
    throw logic_error("memcpy_async: a null " + std::string{dst == nullptr ? "destination" : "source"} +
                      " for a copy of " + std::to_string(bytes) + " bytes");
  }
  detail::get_backend().memcpy_async(dst, src, bytes, stream.value());
}

void memset_async(void* dst, int value, std::size_t bytes, cuda_stream_view stream)
{
  if (bytes == 0) { return; }
  if (dst == nullptr) {
    throw logic_error("memset_async: a null destination for a fill of " + std::to_string(bytes) + " bytes");
  }
  detail::get_backend().memset_async(dst, value, bytes, stream.value());
}

}  // namespace gpumem
