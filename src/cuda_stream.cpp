// cuda_stream (cuda_stream.hpp).
#include <gpumem/backend/backend.hpp>
#include <gpumem/cuda_stream.hpp>
#include <gpumem/before_stream_destroy.hpp>
#include <gpumem/error.hpp>

#include <utility>

namespace gpumem {

cuda_stream::cuda_stream(flags stream_flags, int priority)
  : stream_{detail::get_backend().stream_create(static_cast<unsigned>(stream_flags), priority)},
    device_{get_current_cuda_device()}
{
  try {
    detail::announce_stream(stream_);  // resources may defer work on it until destroy() says otherwise
  } catch (...) {
    detail::get_backend().stream_destroy(stream_);
    throw;
  }
}

cuda_stream::~cuda_stream() noexcept { destroy(); }

cuda_stream::cuda_stream(cuda_stream&& other) noexcept
  : stream_{std::exchange(other.stream_, nullptr)}, device_{other.device_}
{
}

cuda_stream& cuda_stream::operator=(cuda_stream&& other) noexcept
{
  if (this != &other) {
    destroy();
    stream_ = std::exchange(other.stream_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

void cuda_stream::destroy() noexcept
{
  if (stream_ != nullptr) {
    mr::before_stream_destroy(cuda_stream_view{stream_});  // blocks cached for it leave the thread caches
    detail::get_backend().stream_destroy(stream_);
    stream_ = nullptr;
  }
}

cuda_stream::flags cuda_stream::get_flags() const
{
  expects(is_valid(), "the stream was moved from");
  return static_cast<flags>(detail::get_backend().stream_flags(stream_));
}

int cuda_stream::priority() const
{
  expects(is_valid(), "the stream was moved from");
  return view().priority();
}

void cuda_stream::synchronize() const
{
  expects(is_valid(), "the stream was moved from");
  detail::get_backend().stream_synchronize(stream_);
}

bool cuda_stream::synchronize_no_throw() const noexcept { return is_valid() && view().synchronize_no_throw(); }

bool cuda_stream::is_idle() const
{
  expects(is_valid(), "the stream was moved from");
  return detail::get_backend().stream_query(stream_);
}

std::pair<int, int> cuda_stream::priority_range() { return detail::get_backend().stream_priority_range(); }

}  // namespace gpumem
