// cuda_stream_pool (cuda_stream_pool.hpp).
#include <gpumem/cuda_stream_pool.hpp>
#include <gpumem/error.hpp>

namespace gpumem {

cuda_stream_pool::cuda_stream_pool(std::size_t size, cuda_stream::flags flags)
{
  expects(size > 0, "a stream pool needs at least one stream (size was 0)");
  streams_.reserve(size);
  for (std::size_t i = 0; i < size; ++i) { streams_.emplace_back(flags); }
}

cuda_stream_view cuda_stream_pool::get_stream() noexcept
{
  return streams_[next_.fetch_add(1, std::memory_order_relaxed) % streams_.size()].view();
}

cuda_stream_view cuda_stream_pool::get_stream(std::size_t index) const noexcept
{
  return streams_[index % streams_.size()].view();
}

}  // namespace gpumem
