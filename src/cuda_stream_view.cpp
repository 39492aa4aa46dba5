// cuda_stream_view's out-of-line members (cuda_stream_view.hpp).
#include <gpumem/backend/backend.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/error.hpp>

#include <ostream>

namespace gpumem {

void cuda_stream_view::synchronize() const { detail::get_backend().stream_synchronize(stream_); }

bool cuda_stream_view::synchronize_no_throw() const noexcept
{
  try {
    synchronize();
    return true;
  } catch (...) {
    return false;
  }
}

bool cuda_stream_view::is_idle() const { return detail::get_backend().stream_query(stream_); }

int cuda_stream_view::priority() const { return detail::get_backend().stream_priority(stream_); }

unsigned cuda_stream_view::flags() const { return detail::get_backend().stream_flags(stream_); }

bool cuda_stream_view::is_capturing() const { return detail::get_backend().stream_is_capturing(stream_); }

void cuda_stream_view::launch_host_func(void (*fn)(void*), void* user_data) const
{
  expects(fn != nullptr, "launch_host_func: the function must not be null");
  detail::get_backend().launch_host_func(stream_, fn, user_data);
}

std::ostream& operator<<(std::ostream& os, cuda_stream_view stream)
{
  return os << format_pointer(static_cast<void const*>(stream.value()));
}

}  // namespace gpumem
