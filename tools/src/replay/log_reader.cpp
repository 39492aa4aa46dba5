// log_reader.hpp: decoded bytes (log_input.hpp) into a buffer, split at '\n', each line to the parser
// (log_parser.hpp). The buffer holds one chunk plus the longest line allowed, so memory does not depend on
// the log's length.
#include <gpumem/replay/log_reader.hpp>

#include "replay/log_input.hpp"
#include "replay/log_parser.hpp"

#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

namespace gpumem {

namespace {
constexpr std::size_t chunk_size = std::size_t{1} << 20;
}  // namespace

struct allocation_log_reader::impl {
  impl(std::string source, std::unique_ptr<detail::decoded_input> bytes)
    : parser{std::move(source)}, input{std::move(bytes)}, buffer(chunk_size + detail::max_log_line_length + 1)
  {
  }

  std::optional<log_event> next();

  detail::log_parser parser;
  std::unique_ptr<detail::decoded_input> input;
  std::vector<char> buffer;  // unparsed text: [begin, end)
  std::size_t begin{0};
  std::size_t end{0};
  bool input_ended{false};
  bool finished{false};
};

std::optional<log_event> allocation_log_reader::impl::next()
{
  auto const too_long = [this] {
    parser.fail_reading("line longer than " + std::to_string(detail::max_log_line_length) +
                        " characters (not a CSV log?)");
  };
  while (true) {
    char* const data = buffer.data();
    if (auto const* const newline = static_cast<char const*>(std::memchr(data + begin, '\n', end - begin))) {
      auto const length = static_cast<std::size_t>(newline - (data + begin));
      if (length > detail::max_log_line_length) { too_long(); }
      std::string_view const line{data + begin, length};
      begin += length + 1;
      if (auto event = parser.add_line(line)) { return event; }
      continue;
    }
    if (end - begin > detail::max_log_line_length) { too_long(); }
    if (input_ended) {
      if (begin < end) {  // a last line without a newline
        std::string_view const line{data + begin, end - begin};
        begin = end;
        if (auto event = parser.add_line(line)) { return event; }
        continue;
      }
      if (!finished) {
        finished = true;
        parser.finish();
      }
      return std::nullopt;
    }
    std::memmove(data, data + begin, end - begin);
    end -= std::exchange(begin, 0);
    std::size_t got = 0;
    try {
      got = input->read(data + end, buffer.size() - end);
    } catch (detail::source_failure const& failure) {
      parser.fail_reading(failure.problem);
    }
    if (got == 0) {
      input_ended = true;
    } else {
      end += got;
    }
  }
}

allocation_log_reader::allocation_log_reader(std::filesystem::path const& path)
  : allocation_log_reader{detail::input_name(path), std::make_unique<detail::decoded_input>(detail::open_input(path))}
{
}

allocation_log_reader::allocation_log_reader(std::string source, std::unique_ptr<detail::decoded_input> input)
  : impl_{std::make_unique<impl>(std::move(source), std::move(input))}
{
}

allocation_log_reader allocation_log_reader::from_text(std::string text, std::string source_name)
{
  return allocation_log_reader{std::move(source_name),
                               std::make_unique<detail::decoded_input>(detail::memory_input(std::move(text)))};
}

allocation_log_reader::~allocation_log_reader() = default;
allocation_log_reader::allocation_log_reader(allocation_log_reader&&) noexcept = default;
allocation_log_reader& allocation_log_reader::operator=(allocation_log_reader&&) noexcept = default;

std::optional<log_event> allocation_log_reader::next() { return impl_->next(); }

std::size_t allocation_log_reader::read(std::span<log_event> out)
{
  std::size_t n = 0;
  while (n < out.size()) {
    std::optional<log_event> const event = impl_->next();
    if (!event) { break; }
    out[n++] = *event;
  }
  return n;
}

std::string const& allocation_log_reader::source() const noexcept { return impl_->parser.source(); }

std::optional<double> allocation_log_reader::fraction_read() const noexcept { return impl_->input->fraction_read(); }

}  // namespace gpumem
