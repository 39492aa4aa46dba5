// The timeline file reader (allocation_timeline.hpp; the format is docs/formats.md's "Allocation timeline"):
// one record per line, fields separated by tabs, the last field of site and frame records (the filename)
// taking the rest of the line. Every problem names its line and the column of the field at fault.
#include <gpumem/report/allocation_timeline.hpp>

#include <charconv>
#include <fstream>
#include <sstream>
#include <unordered_map>
#include <utility>

namespace gpumem {
namespace {

constexpr std::string_view header = "gpumem-timeline 1";

std::string error_message(std::string const& file, std::size_t line, std::size_t column, std::string const& problem)
{
  std::string where = file + ":" + std::to_string(line);
  if (column != 0) { where += ":" + std::to_string(column); }
  return where + ": " + problem;
}

/** @brief One line being read, field by field. */
class line_fields {
 public:
  line_fields(std::string_view text, std::string const& file, std::size_t line)
    : text_{text}, file_{file}, line_{line}
  {
  }

  [[noreturn]] void fail(std::size_t column, std::string const& problem) const
  {
    throw timeline_format_error(file_, line_, column, problem);
  }

  /** @brief The next tab-separated field (`rest`: up to the end of the line), its column in *column. */
  std::string_view next(char const* what, bool rest = false)
  {
    if (pos_ > text_.size()) { fail(text_.size() + 1, std::string{"missing field: "} + what); }
    column_ = pos_ + 1;
    std::size_t const tab = rest ? std::string_view::npos : text_.find('\t', pos_);
    std::string_view const field = text_.substr(pos_, tab == std::string_view::npos ? std::string_view::npos : tab - pos_);
    pos_ = tab == std::string_view::npos ? text_.size() + 1 : tab + 1;
    return field;
  }

  template <class Integer>
  Integer number(char const* what, int base = 10)
  {
    std::string_view field = next(what);
    if (base == 16) {
      if (!field.starts_with("0x")) { fail(column_, std::string{what} + " must be hexadecimal with 0x, not '" + std::string{field} + "'"); }
      field.remove_prefix(2);
    }
    Integer value{};
    auto const [end, ec] = std::from_chars(field.data(), field.data() + field.size(), value, base);
    if (field.empty() || ec != std::errc{} || end != field.data() + field.size()) {
      fail(column_, std::string{what} + " must be " + (base == 16 ? "a hexadecimal" : "an") + " integer" +
                      (ec == std::errc::result_out_of_range ? " in range" : "") + ", not '" + std::string{field} + "'");
    }
    return value;
  }

  /** @brief An index in [-1, limit): -1 for none. */
  std::int64_t index(char const* what, std::size_t limit)
  {
    auto const value = number<std::int64_t>(what);
    if (value < -1 || (value >= 0 && static_cast<std::size_t>(value) >= limit)) {
      fail(column_, std::string{what} + " " + std::to_string(value) + " is not defined (" + std::to_string(limit) +
                      " defined so far; -1 for none)");
    }
    return value;
  }

  void expect_id(std::size_t expected)
  {
    auto const id = number<std::size_t>("id");
    if (id != expected) {
      fail(column_, "id " + std::to_string(id) + " out of order: expected " + std::to_string(expected));
    }
  }

  void end() const
  {
    if (pos_ <= text_.size()) { fail(pos_ + 1, "unexpected field after the last one"); }
  }

  [[nodiscard]] std::size_t column() const noexcept { return column_; }

 private:
  std::string_view text_;
  std::string const& file_;
  std::size_t line_;
  std::size_t pos_{0};
  std::size_t column_{1};
};

timeline_frame read_frame(line_fields& fields)
{
  timeline_frame f;
  f.line = fields.number<std::uint32_t>("line");
  f.name = std::string{fields.next("function name")};
  f.filename = std::string{fields.next("filename", true)};
  return f;
}

}  // namespace

timeline_format_error::timeline_format_error(std::string file, std::size_t line, std::size_t column,
                                             std::string const& problem)
  : logic_error(error_message(file, line, column, problem)), file_{std::move(file)}, line_{line}, column_{column}
{
}

allocation_timeline parse_allocation_timeline(std::string_view text, std::string_view source_name)
{
  std::string const file{source_name};
  allocation_timeline out;
  std::unordered_map<std::uint64_t, std::size_t> live;  // address -> alloc event index
  bool seen_header = false;
  std::size_t line_number = 0;
  while (!text.empty()) {
    std::size_t const newline = text.find('\n');
    std::string_view line = text.substr(0, newline);
    text.remove_prefix(newline == std::string_view::npos ? text.size() : newline + 1);
    ++line_number;
    if (line.ends_with('\r')) { line.remove_suffix(1); }
    if (!seen_header) {
      if (line != header) {
        throw timeline_format_error(file, line_number, 1, "expected the header '" + std::string{header} + "'");
      }
      seen_header = true;
      continue;
    }
    if (line.empty() || line.starts_with('#')) { continue; }
    line_fields fields{line, file, line_number};
    std::string_view const record = fields.next("record");
    if (record == "site") {
      fields.expect_id(out.sites.size());
      out.sites.push_back(read_frame(fields));
    } else if (record == "stack") {
      fields.expect_id(out.stacks.size());
      out.stacks.push_back({fields.index("site", out.sites.size()), {}});
      fields.end();
    } else if (record == "frame") {
      if (out.stacks.empty()) { fields.fail(1, "a frame before any stack record"); }
      out.stacks.back().frames.push_back(read_frame(fields));
    } else if (record == "alloc" || record == "free") {
      timeline_event e;
      e.what = record == "alloc" ? timeline_event::kind::alloc : timeline_event::kind::free;
      e.time_us = fields.number<std::int64_t>("time");
      e.address = fields.number<std::uint64_t>("address", 16);
      std::size_t const address_column = fields.column();
      if (e.what == timeline_event::kind::alloc) {
        e.size = fields.number<std::size_t>("size");
        e.stack = fields.index("stack", out.stacks.size());
        live[e.address] = out.events.size();  // an address still live: the older block is freed first
      } else if (live.erase(e.address) == 0) {
        fields.fail(address_column, "free of an address that is not live");
      }
      fields.end();
      out.events.push_back(e);
    } else {
      fields.fail(1, "unknown record '" + std::string{record} + "' (expected site, stack, frame, alloc or free)");
    }
  }
  if (!seen_header) { throw timeline_format_error(file, 1, 1, "empty file: expected the header '" + std::string{header} + "'"); }
  return out;
}

allocation_timeline read_allocation_timeline(std::filesystem::path const& path)
{
  std::ifstream in{path, std::ios::binary};
  if (!in) { throw logic_error(path.string() + ": cannot be read"); }
  std::ostringstream text;
  text << in.rdbuf();  // (not istreambuf_iterator: GCC 12 reports a null dereference inside it at -O2)
  if (in.bad() || text.bad()) { throw logic_error(path.string() + ": cannot be read"); }
  return parse_allocation_timeline(text.str(), path.string());
}

}  // namespace gpumem
