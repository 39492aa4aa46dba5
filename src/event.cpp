// event (event.hpp).
#include <gpumem/backend/backend.hpp>
#include <gpumem/error.hpp>
#include <gpumem/event.hpp>

#include <utility>

namespace gpumem {

namespace {
event_flags checked(event_flags flags)
{
  expects(!has_flag(flags, event_flags::interprocess) || has_flag(flags, event_flags::disable_timing),
          "an interprocess event must also have event_flags::disable_timing (CUDA's rule)");
  return flags;
}
}  // namespace

event::event(event_flags flags)
  : event_{detail::get_backend().event_create(static_cast<unsigned>(checked(flags)))}, flags_{flags}
{
}

event::~event() noexcept { destroy(); }

event::event(event&& other) noexcept : event_{std::exchange(other.event_, nullptr)}, flags_{other.flags_} {}

event& event::operator=(event&& other) noexcept
{
  if (this != &other) {
    destroy();
    event_ = std::exchange(other.event_, nullptr);
    flags_ = other.flags_;
  }
  return *this;
}

void event::destroy() noexcept
{
  if (event_ != nullptr) {
    detail::get_backend().event_destroy(event_);
    event_ = nullptr;
  }
}

void event::check_valid() const { expects(is_valid(), "the event was moved from"); }

void event::record(cuda_stream_view stream)
{
  check_valid();
  detail::get_backend().event_record(event_, stream.value());
}

void event::wait(cuda_stream_view stream) const
{
  check_valid();
  detail::get_backend().stream_wait_event(stream.value(), event_);
}

bool event::query() const
{
  check_valid();
  return detail::get_backend().event_query(event_);
}

void event::synchronize() const
{
  check_valid();
  detail::get_backend().event_synchronize(event_);
}

float event::elapsed_time(event const& start, event const& end)
{
  start.check_valid();
  end.check_valid();
  expects(!has_flag(start.flags_, event_flags::disable_timing) && !has_flag(end.flags_, event_flags::disable_timing),
          "elapsed_time needs two events created without event_flags::disable_timing");
  return detail::get_backend().event_elapsed_ms(start.event_, end.event_);
}

}  // namespace gpumem
