// log_source.hpp: a regular file is opened again for each pass; other input is copied on its first pass
// (log_copy.hpp) and later passes read the copy.
#include <gpumem/replay/log_source.hpp>

#include "replay/log_copy.hpp"
#include "replay/log_input.hpp"

#include <utility>

namespace gpumem {

log_source::log_source(std::filesystem::path path, log_passes passes)
  : path_{std::move(path)}, name_{detail::input_name(path_)}, reopenable_{detail::can_reopen(path_)}, passes_{passes}
{
}

log_source::~log_source() = default;
log_source::log_source(log_source&&) noexcept = default;
log_source& log_source::operator=(log_source&&) noexcept = default;

allocation_log_reader log_source::open()
{
  ++opened_;
  if (reopenable_) { return allocation_log_reader{path_}; }
  auto const reader_over = [this](std::unique_ptr<detail::byte_input> raw, std::shared_ptr<detail::log_copy> copy) {
    return allocation_log_reader{name_, std::make_unique<detail::decoded_input>(std::move(raw), std::move(copy))};
  };
  if (opened_ == 1) {
    std::unique_ptr<detail::byte_input> raw = detail::open_input(path_);
    if (passes_ == log_passes::many) { copy_ = std::make_shared<detail::log_copy>(name_); }
    return reader_over(std::move(raw), copy_);
  }
  if (!copy_) {
    throw log_format_error(name_, 0, "can be read only once (standard input, a pipe or a FIFO), and no copy was kept");
  }
  if (!copy_->complete()) {
    throw log_format_error(name_, 0, "can be read only once (standard input, a pipe or a FIFO), and its first pass "
                                     "stopped before the end");
  }
  return reader_over(copy_->open(), nullptr);
}

}  // namespace gpumem
