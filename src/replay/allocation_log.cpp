// Reading RMM-format allocation logs (allocation_log.hpp): a byte source (plain file, zlib, or a
// `gzip -dc` pipe) feeds a line splitter, and each line is parsed into a log_event. Every problem becomes a
// log_format_error naming the file and the line; nothing here may crash on hostile input.
#include <gpumem/replay/allocation_log.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <unordered_map>
#include <utility>

#include <sys/wait.h>

#ifdef GPUMEM_HAVE_ZLIB
#include <zlib.h>
#endif

namespace gpumem {

namespace {

constexpr std::string_view expected_header = "Thread,Time,Action,Pointer,Size,Stream";
constexpr std::size_t column_count = 6;
// A line longer than this is not a log row (it is binary data or a file of another kind): refusing it keeps
// memory bounded on garbage input.
constexpr std::size_t max_line_length = 64 * 1024;
constexpr std::size_t chunk_size = 1 << 20;
constexpr std::int64_t ns_per_second = 1'000'000'000;
constexpr std::int64_t ns_per_day = 24 * 3600 * ns_per_second;

/// A read failure of a byte source; the reader turns it into a log_format_error at the current line.
struct source_failure {
  std::string problem;
};

/// Where the log's bytes come from. read() returns 0 at the end, and throws source_failure on an error.
class byte_source {
 public:
  byte_source() = default;
  virtual ~byte_source() = default;
  byte_source(byte_source const&) = delete;
  byte_source& operator=(byte_source const&) = delete;
  byte_source(byte_source&&) = delete;
  byte_source& operator=(byte_source&&) = delete;

  [[nodiscard]] virtual std::size_t read(char* buffer, std::size_t size) = 0;
  /// Called once the data has ended: reports a failure seen only at the end (a pipe's exit status).
  virtual void finish() {}
};

class plain_file_source final : public byte_source {
 public:
  explicit plain_file_source(std::FILE* file) noexcept : file_{file} {}
  ~plain_file_source() override { std::fclose(file_); }
  plain_file_source(plain_file_source const&) = delete;
  plain_file_source& operator=(plain_file_source const&) = delete;
  plain_file_source(plain_file_source&&) = delete;
  plain_file_source& operator=(plain_file_source&&) = delete;

  std::size_t read(char* buffer, std::size_t size) override
  {
    std::size_t const n = std::fread(buffer, 1, size, file_);
    if (n == 0 && std::ferror(file_) != 0) { throw source_failure{std::string{"read error: "} + std::strerror(errno)}; }
    return n;
  }

 private:
  std::FILE* file_;
};

#ifdef GPUMEM_HAVE_ZLIB
class zlib_source final : public byte_source {
 public:
  explicit zlib_source(gzFile file) noexcept : file_{file} {}
  ~zlib_source() override { gzclose(file_); }
  zlib_source(zlib_source const&) = delete;
  zlib_source& operator=(zlib_source const&) = delete;
  zlib_source(zlib_source&&) = delete;
  zlib_source& operator=(zlib_source&&) = delete;

  std::size_t read(char* buffer, std::size_t size) override
  {
    int const n = gzread(file_, buffer, static_cast<unsigned>(std::min<std::size_t>(size, chunk_size)));
    // Data read before an error come first: the error stays set and is reported by the next call.
    if (n > 0) { return static_cast<std::size_t>(n); }
    int code = Z_OK;
    char const* const text = gzerror(file_, &code);
    if (n < 0 || (code != Z_OK && code != Z_STREAM_END)) {
      // zlib says "unexpected end of file" (Z_BUF_ERROR) for a stream cut short.
      std::string const why = text != nullptr ? text : "unknown zlib error";
      throw source_failure{code == Z_BUF_ERROR ? "truncated gzip data (" + why + ")"
                                               : "corrupt gzip data (" + why + ")"};
    }
    return static_cast<std::size_t>(n);
  }

 private:
  gzFile file_;
};
#endif

/// Decompresses through `gzip -dc`, for builds without zlib; also used when GPUMEM_LOG_GUNZIP=pipe.
class gzip_pipe_source final : public byte_source {
 public:
  explicit gzip_pipe_source(std::filesystem::path const& path)
  {
    // Single-quote the path for the shell; a quote inside becomes '\''.
    std::string quoted = "'";
    for (char const c : path.string()) {
      if (c == '\'') { quoted += "'\\''"; } else { quoted += c; }
    }
    quoted += "'";
    std::string const command = "gzip -dc -- " + quoted + " 2>/dev/null";
    pipe_ = ::popen(command.c_str(), "r");
    if (pipe_ == nullptr) { throw source_failure{std::string{"cannot run gzip -dc: "} + std::strerror(errno)}; }
  }
  ~gzip_pipe_source() override
  {
    if (pipe_ != nullptr) { ::pclose(pipe_); }
  }
  gzip_pipe_source(gzip_pipe_source const&) = delete;
  gzip_pipe_source& operator=(gzip_pipe_source const&) = delete;
  gzip_pipe_source(gzip_pipe_source&&) = delete;
  gzip_pipe_source& operator=(gzip_pipe_source&&) = delete;

  std::size_t read(char* buffer, std::size_t size) override
  {
    std::size_t const n = std::fread(buffer, 1, size, pipe_);
    if (n == 0 && std::ferror(pipe_) != 0) { throw source_failure{std::string{"read error: "} + std::strerror(errno)}; }
    return n;
  }

  void finish() override
  {
    int const status = ::pclose(std::exchange(pipe_, nullptr));
    if (status == -1) { throw source_failure{std::string{"gzip -dc: "} + std::strerror(errno)}; }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      throw source_failure{"truncated or corrupt gzip data (gzip -dc exited with status " +
                           std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : status) + ")"};
    }
  }

 private:
  std::FILE* pipe_{nullptr};
};

/// Opens `path`, recognising gzip by its magic bytes. @throws log_format_error (line 0) if it cannot be opened.
std::unique_ptr<byte_source> open_source(std::filesystem::path const& path)
{
  std::string const name = path.string();
  std::FILE* const file = std::fopen(name.c_str(), "rb");
  if (file == nullptr) { throw log_format_error(name, 0, std::string{"cannot open: "} + std::strerror(errno)); }
  std::array<unsigned char, 2> magic{};
  std::size_t const got = std::fread(magic.data(), 1, magic.size(), file);
  bool const gzip = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  if (!gzip) {
    std::rewind(file);
    return std::make_unique<plain_file_source>(file);
  }
  std::fclose(file);
  char const* const force = std::getenv("GPUMEM_LOG_GUNZIP");
  bool const use_pipe = force != nullptr && std::string_view{force} == "pipe";
#ifdef GPUMEM_HAVE_ZLIB
  if (!use_pipe) {
    gzFile const gz = gzopen(name.c_str(), "rb");
    if (gz == nullptr) { throw log_format_error(name, 0, std::string{"cannot open: "} + std::strerror(errno)); }
    gzbuffer(gz, 256 * 1024);
    return std::make_unique<zlib_source>(gz);
  }
#else
  (void)use_pipe;
#endif
  try {
    return std::make_unique<gzip_pipe_source>(path);
  } catch (source_failure const& f) {
    throw log_format_error(name, 0, f.problem);
  }
}

[[nodiscard]] std::string_view trim(std::string_view s) noexcept
{
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) { s.remove_prefix(1); }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) { s.remove_suffix(1); }
  return s;
}

/// Quotes a field for an error message, shortened so that garbage cannot flood the terminal.
[[nodiscard]] std::string quote(std::string_view field)
{
  constexpr std::size_t shown = 40;
  std::string out = "'";
  for (char const c : field.substr(0, shown)) {
    out += (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) ? '?' : c;
  }
  if (field.size() > shown) { out += "..."; }
  return out + "'";
}

template <class Unsigned>
[[nodiscard]] std::optional<Unsigned> parse_unsigned(std::string_view text, int base) noexcept
{
  if (text.empty()) { return std::nullopt; }
  Unsigned value{};
  auto const [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (ec != std::errc{} || end != text.data() + text.size()) { return std::nullopt; }
  return value;
}

[[nodiscard]] std::optional<std::uintptr_t> parse_hex(std::string_view text) noexcept
{
  if (text.size() < 3 || text[0] != '0' || (text[1] != 'x' && text[1] != 'X')) { return std::nullopt; }
  text.remove_prefix(2);
  // from_chars accepts no sign for unsigned types, so "0x-1" is refused.
  return parse_unsigned<std::uintptr_t>(text, 16);
}

/// "HH:MM:SS" with an optional ".f" of 1 to 9 digits. @return nanoseconds since midnight.
[[nodiscard]] std::optional<std::int64_t> parse_time(std::string_view text) noexcept
{
  auto const two_digits = [](std::string_view s, int limit) -> std::optional<std::int64_t> {
    if (s.size() != 2) { return std::nullopt; }
    auto const v = parse_unsigned<unsigned>(s, 10);
    if (!v || *v >= static_cast<unsigned>(limit)) { return std::nullopt; }
    return static_cast<std::int64_t>(*v);
  };
  if (text.size() < 8 || text[2] != ':' || text[5] != ':') { return std::nullopt; }
  auto const h = two_digits(text.substr(0, 2), 24);
  auto const m = two_digits(text.substr(3, 2), 60);
  auto const s = two_digits(text.substr(6, 2), 61);  // 60: a leap second
  if (!h || !m || !s) { return std::nullopt; }
  std::int64_t ns = ((*h * 60 + *m) * 60 + *s) * ns_per_second;
  std::string_view rest = text.substr(8);
  if (rest.empty()) { return ns; }
  if (rest.front() != '.' || rest.size() < 2 || rest.size() > 10) { return std::nullopt; }
  rest.remove_prefix(1);
  auto const fraction = parse_unsigned<std::uint32_t>(rest, 10);
  if (!fraction) { return std::nullopt; }
  std::int64_t scaled = *fraction;
  for (std::size_t digits = rest.size(); digits < 9; ++digits) { scaled *= 10; }
  return ns + scaled;
}

/// Turns lines into events; keeps the state that spans lines (the first time, midnight crossings).
class log_parser {
 public:
  explicit log_parser(std::string source) { log_.source = std::move(source); }

  /// @param line without its '\n'. @throws log_format_error.
  void add_line(std::string_view line)
  {
    ++line_number_;
    if (line_number_ == 1) {
      // A UTF-8 byte-order mark, as some editors write, is not part of the header.
      if (line.starts_with("\xEF\xBB\xBF")) { line.remove_prefix(3); }
      check_header(line);
      return;
    }
    if (trim(line).empty()) { return; }
    log_.events.push_back(parse_row(line));
  }

  [[noreturn]] void fail(std::string const& problem) const
  {
    throw log_format_error(log_.source, line_number_, problem);
  }
  /// A failure while reading the line after the last complete one.
  [[noreturn]] void fail_reading(std::string const& problem) const
  {
    throw log_format_error(log_.source, line_number_ + 1, problem);
  }

  [[nodiscard]] allocation_log finish() &&
  {
    if (line_number_ == 0) {
      throw log_format_error(log_.source, 1, "empty file: expected the header '" + std::string{expected_header} + "'");
    }
    return std::move(log_);
  }

 private:
  void check_header(std::string_view line) const
  {
    // Spaces around the column names are tolerated; names and order are not negotiable.
    std::string normalised;
    std::string_view rest = line;
    while (true) {
      std::size_t const comma = rest.find(',');
      normalised += trim(rest.substr(0, comma));
      if (comma == std::string_view::npos) { break; }
      normalised += ',';
      rest.remove_prefix(comma + 1);
    }
    if (normalised != expected_header) {
      fail("wrong header " + quote(trim(line)) + ": expected '" + std::string{expected_header} + "'");
    }
  }

  [[nodiscard]] log_event parse_row(std::string_view line)
  {
    std::array<std::string_view, column_count> fields{};
    std::size_t count = 0;
    std::string_view rest = line;
    while (true) {
      std::size_t const comma = rest.find(',');
      if (count < column_count) { fields[count] = trim(rest.substr(0, comma)); }
      ++count;
      if (comma == std::string_view::npos) { break; }
      rest.remove_prefix(comma + 1);
    }
    if (count != column_count) {
      fail("wrong column count: " + std::to_string(count) + " columns, expected 6 (" + std::string{expected_header} +
           ")");
    }

    log_event e;
    auto const thread = parse_unsigned<std::uint64_t>(fields[0], 10);
    if (!thread) { fail("bad thread " + quote(fields[0]) + ": expected a decimal integer"); }
    e.thread = *thread;

    auto const time = parse_time(fields[1]);
    if (!time) { fail("bad time " + quote(fields[1]) + ": expected HH:MM:SS.ffffff"); }
    if (!first_time_) { first_time_ = *time; }
    std::int64_t absolute = *time + day_offset_;
    if (absolute < previous_time_ - ns_per_day / 2) {  // the clock went past midnight
      day_offset_ += ns_per_day;
      absolute += ns_per_day;
    }
    previous_time_ = absolute;
    e.time_ns = absolute - *first_time_;

    if (fields[2] == "allocate") {
      e.action = log_action::allocate;
    } else if (fields[2] == "free") {
      e.action = log_action::free;
    } else if (fields[2] == "allocate failure") {
      e.action = log_action::allocate_failure;
    } else {
      fail("unknown action " + quote(fields[2]) + ": expected allocate, free or allocate failure");
    }

    auto const pointer = parse_hex(fields[3]);
    if (!pointer) { fail("bad pointer " + quote(fields[3]) + ": expected hexadecimal with 0x, e.g. 0x7f98f9e00000"); }
    e.pointer = *pointer;

    auto const size = parse_unsigned<std::size_t>(fields[4], 10);
    if (!size) { fail("bad size " + quote(fields[4]) + ": expected a decimal number of bytes"); }
    e.size = *size;

    auto const stream = parse_hex(fields[5]);
    if (!stream) { fail("bad stream " + quote(fields[5]) + ": expected hexadecimal with 0x, e.g. 0x0"); }
    e.stream = *stream;
    return e;
  }

  allocation_log log_;
  std::size_t line_number_{0};
  std::optional<std::int64_t> first_time_;
  std::int64_t previous_time_{std::numeric_limits<std::int64_t>::min() / 2};
  std::int64_t day_offset_{0};
};

/// Feeds `text` line by line; `pending` carries a line split across chunks.
void feed(log_parser& parser, std::string& pending, std::string_view text)
{
  while (!text.empty()) {
    std::size_t const newline = text.find('\n');
    if (newline == std::string_view::npos) {
      pending.append(text);
      if (pending.size() > max_line_length) {
        parser.fail_reading("line longer than " + std::to_string(max_line_length) + " characters (not a CSV log?)");
      }
      return;
    }
    if (pending.empty()) {
      if (newline > max_line_length) {
        parser.fail_reading("line longer than " + std::to_string(max_line_length) + " characters (not a CSV log?)");
      }
      parser.add_line(text.substr(0, newline));
    } else {
      pending.append(text.substr(0, newline));
      if (pending.size() > max_line_length) {
        parser.fail_reading("line longer than " + std::to_string(max_line_length) + " characters (not a CSV log?)");
      }
      parser.add_line(pending);
      pending.clear();
    }
    text.remove_prefix(newline + 1);
  }
}

}  // namespace

namespace {
/// "FILE:LINE: PROBLEM", or "FILE: PROBLEM" for line 0. Appended piece by piece: GCC 12 reports a false
/// -Wrestrict on the equivalent chain of operator+ at -O3 (GCC bug 105329).
std::string format_error_message(std::string const& file, std::size_t line, std::string const& problem)
{
  std::string message = file;
  if (line != 0) {
    message += ':';
    message += std::to_string(line);
  }
  message += ": ";
  message += problem;
  return message;
}
}  // namespace

log_format_error::log_format_error(std::string file, std::size_t line, std::string const& problem)
  : logic_error(format_error_message(file, line, problem)),
    file_{std::move(file)},
    line_{line}
{
}

std::string_view to_string(log_action action) noexcept
{
  switch (action) {
    case log_action::allocate: return "allocate";
    case log_action::free: return "free";
    case log_action::allocate_failure: return "allocate failure";
  }
  return "unknown";
}

allocation_log read_allocation_log(std::filesystem::path const& path)
{
  std::unique_ptr<byte_source> const source = open_source(path);
  log_parser parser{path.string()};
  std::string pending;
  std::string chunk(chunk_size, '\0');
  try {
    while (true) {
      std::size_t const n = source->read(chunk.data(), chunk.size());
      if (n == 0) { break; }
      feed(parser, pending, std::string_view{chunk.data(), n});
    }
    source->finish();
  } catch (source_failure const& f) {
    parser.fail_reading(f.problem);
  }
  if (!pending.empty()) { parser.add_line(pending); }
  return std::move(parser).finish();
}

allocation_log parse_allocation_log(std::string_view text, std::string_view source_name)
{
  log_parser parser{std::string{source_name}};
  std::string pending;
  feed(parser, pending, text);
  if (!pending.empty()) { parser.add_line(pending); }
  return std::move(parser).finish();
}

std::size_t peak_live_bytes(allocation_log const& log)
{
  std::unordered_map<std::uintptr_t, std::size_t> live;
  live.reserve(log.events.size() / 2 + 1);
  std::size_t current = 0;
  std::size_t peak = 0;
  for (log_event const& e : log.events) {
    if (e.action == log_action::allocate) {
      auto const [it, inserted] = live.try_emplace(e.pointer, e.size);
      if (!inserted) {  // the log lost the free of the previous block at this address
        current -= it->second;
        it->second = e.size;
      }
      current += e.size;
      peak = std::max(peak, current);
    } else if (e.action == log_action::free) {
      if (auto const it = live.find(e.pointer); it != live.end()) {
        current -= it->second;
        live.erase(it);
      }
    }
  }
  return peak;
}

}  // namespace gpumem
