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

std::ostream& operator<<(std::ostream& os, cuda_stream_view stream)
{
  return os << format_pointer(static_cast<void const*>(stream.value()));
}

}  // namespace gpumem
