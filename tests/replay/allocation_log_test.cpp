// read_allocation_log: RMM's CSV, plain and gzip, the shared ResNet-50 trace, times around midnight,
// sizes past 2^64, and one test per kind of bad input, each checking that the message names the file, the
// line and the problem. Pipes, FIFOs and standard input: log_reader_test.cpp.
#include "replay/log_files.hpp"

#include <gpumem/error.hpp>
#include <gpumem/replay/allocation_log.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <limits>
#include <string>

namespace gpumem::test {
namespace {

constexpr std::string_view small_log =
  "Thread,Time,Action,Pointer,Size,Stream\n"
  "1,13:09:44.158987,allocate,0x7f98f9e00000,37632,0x0\n"
  "1,13:09:44.159110,allocate,0x7f98f9e09400,256,0x0\n"
  "2,13:09:44.159131,free,0x7f98f9e00000,37632,0x7f00aa\n"
  "1,13:09:44.2,allocate failure,0x0,1099511627776,0x0\n"
  "1,13:09:45,free,0x7f98f9e09400,256,0x0\n";

void expect_small_log(allocation_log const& log)
{
  ASSERT_EQ(log.events.size(), 5U);
  EXPECT_EQ(log.events[0], (log_event{1, 0, log_action::allocate, 0x7f98f9e00000, 37632, 0}));
  EXPECT_EQ(log.events[1], (log_event{1, 123'000, log_action::allocate, 0x7f98f9e09400, 256, 0}));
  EXPECT_EQ(log.events[2], (log_event{2, 144'000, log_action::free, 0x7f98f9e00000, 37632, 0x7f00aa}));
  EXPECT_EQ(log.events[3], (log_event{1, 41'013'000, log_action::allocate_failure, 0, std::size_t{1} << 40, 0}));
  EXPECT_EQ(log.events[4], (log_event{1, 841'013'000, log_action::free, 0x7f98f9e09400, 256, 0}));
}

TEST(allocation_log, reads_a_plain_file)
{
  scratch_dir dir;
  auto const file = dir.write("log.csv", small_log);
  allocation_log const log = read_allocation_log(file);
  EXPECT_EQ(log.source, file.string());
  expect_small_log(log);
  EXPECT_EQ(peak_live_bytes(log), 37632U + 256U);
}

TEST(allocation_log, reads_gzip_by_its_magic_bytes_not_its_name)
{
  scratch_dir dir;
  expect_small_log(read_allocation_log(dir.write("log.csv.gz", gzip_stored(small_log))));
  expect_small_log(read_allocation_log(dir.write("named_plain.csv", gzip_stored(small_log))));
  expect_small_log(read_allocation_log(dir.write("named_gzip.csv.gz", small_log)));
}

TEST(allocation_log, reads_gzip_larger_than_one_chunk)
{
  // Over 1 MiB of text, so lines straddle the reader's chunks; several stored blocks.
  std::string text{"Thread,Time,Action,Pointer,Size,Stream\n"};
  constexpr int rows = 40'000;
  for (int i = 0; i < rows; ++i) {
    text += "7,23:59:59.999999,allocate,0x" + std::to_string(100000 + i) + "00,4096,0x0\n";
  }
  ASSERT_GT(text.size(), std::size_t{1} << 20);
  scratch_dir dir;
  auto const file = dir.write("big.csv.gz", gzip_stored(text));
  allocation_log const log = read_allocation_log(file);
  ASSERT_EQ(log.events.size(), std::size_t{rows});
  // The pointer column is the row number's decimal digits and "00", read as hexadecimal.
  EXPECT_EQ(log.events.back().pointer, std::stoull(std::to_string(100000 + rows - 1) + "00", nullptr, 16));
  EXPECT_EQ(peak_live_bytes(log), std::size_t{rows} * 4096);
}

TEST(allocation_log, concatenated_gzip_members_read_as_one_log)
{
  // `cat a.gz b.gz` is valid gzip (RFC 1952: a series of members), and gzip -dc reads it as one stream.
  std::string const head{small_log.substr(0, small_log.find("1,13:09:44.2"))};
  std::string const tail{small_log.substr(head.size())};
  scratch_dir dir;
  expect_small_log(read_allocation_log(dir.write("two.csv.gz", gzip_stored(head) + gzip_stored(tail))));
}

TEST(allocation_log, accepts_crlf_blank_lines_spaces_and_a_missing_final_newline)
{
  allocation_log const log = parse_allocation_log(
    "\xEF\xBB\xBFThread, Time, Action, Pointer, Size, Stream\r\n"
    "\r\n"
    "1, 00:00:01.5 ,allocate,0xABCdef00,10,0x0\r\n"
    "\n"
    "1,00:00:02.000000001,free,0XABCDEF00,10,0x0",
    "inline");
  ASSERT_EQ(log.events.size(), 2U);
  EXPECT_EQ(log.events[0].pointer, 0xABCDEF00U);
  EXPECT_EQ(log.events[1].pointer, 0xABCDEF00U);
  EXPECT_EQ(log.events[1].time_ns, 500'000'001);
}

TEST(allocation_log, a_time_that_jumps_back_by_hours_crosses_midnight)
{
  allocation_log const log = parse_allocation_log(
    "Thread,Time,Action,Pointer,Size,Stream\n"
    "1,23:59:59.900000,allocate,0x100,10,0x0\n"
    "1,23:59:59.800000,allocate,0x200,10,0x0\n"  // a little older (another thread's row): not a new day
    "1,00:00:00.100000,free,0x100,10,0x0\n",
    "midnight");
  ASSERT_EQ(log.events.size(), 3U);
  EXPECT_EQ(log.events[1].time_ns, -100'000'000);
  EXPECT_EQ(log.events[2].time_ns, 200'000'000);
}

TEST(allocation_log, a_row_a_little_older_than_the_previous_stays_on_its_day_across_midnight)
{
  // Rows of two threads written a little out of order around midnight: the older row is yesterday's, not
  // tomorrow's.
  allocation_log const log = parse_allocation_log(
    "Thread,Time,Action,Pointer,Size,Stream\n"
    "1,23:59:59.900000,allocate,0x100,10,0x0\n"
    "2,00:00:00.100000,allocate,0x200,10,0x0\n"
    "1,23:59:59.950000,free,0x100,10,0x0\n"   // thread 1's, written late
    "2,00:00:00.200000,free,0x200,10,0x0\n",
    "midnight");
  ASSERT_EQ(log.events.size(), 4U);
  EXPECT_EQ(log.events[1].time_ns, 200'000'000);
  EXPECT_EQ(log.events[2].time_ns, 50'000'000) << "not a day later";
  EXPECT_EQ(log.events[3].time_ns, 300'000'000);
}

TEST(allocation_log, times_running_on_for_a_century_are_refused_not_overflowed)
{
  // Every third row jumps back 16 hours: a new day each time. After 36 525 days (a century) the reader
  // refuses the log, long before nanoseconds since the first row could overflow an int64 (at 106 751 days).
  std::string text{"Thread,Time,Action,Pointer,Size,Stream\n"};
  constexpr std::size_t days = 110'000;
  text.reserve(days * 3 * 40);
  for (std::size_t day = 0; day < days; ++day) {
    for (char const* const time : {"00:00:00", "08:00:00", "16:00:00"}) {
      text += std::string{"1,"} + time + ",allocate failure,0x0,1,0x0\n";
    }
  }
  try {
    (void)parse_allocation_log(text, "centuries");
    FAIL() << "a log spanning 300 years was accepted";
  } catch (log_format_error const& e) {
    EXPECT_EQ(e.line(), 2 + 3 * 36'526U) << "the first row of day 36 526" << e.what();
    EXPECT_NE(std::string{e.what()}.find("more than 36525 days (100 years) from the first row"), std::string::npos)
      << e.what();
  }
}

TEST(allocation_log, peak_live_bytes_saturates_instead_of_wrapping_past_2_to_the_64)
{
  allocation_log const log = parse_allocation_log(
    "Thread,Time,Action,Pointer,Size,Stream\n"
    "1,00:00:00.000001,allocate,0x100,9223372036854775808,0x0\n"   // 2^63
    "1,00:00:00.000002,allocate,0x200,9223372036854775808,0x0\n"   // 2^63 more: 2^64 live
    "1,00:00:00.000003,free,0x100,9223372036854775808,0x0\n"
    "1,00:00:00.000004,allocate,0x300,1,0x0\n",
    "huge");
  EXPECT_EQ(peak_live_bytes(log), std::numeric_limits<std::size_t>::max());
}

TEST(allocation_log, a_header_alone_is_an_empty_log)
{
  EXPECT_TRUE(parse_allocation_log("Thread,Time,Action,Pointer,Size,Stream\n", "h").events.empty());
}

TEST(allocation_log, peak_live_bytes_ignores_unknown_frees_and_failures)
{
  allocation_log const log = parse_allocation_log(
    "Thread,Time,Action,Pointer,Size,Stream\n"
    "1,00:00:00.000001,allocate,0x100,1000,0x0\n"
    "1,00:00:00.000002,free,0x999,5000,0x0\n"            // unknown
    "1,00:00:00.000003,allocate failure,0x0,9000,0x0\n"  // not live
    "1,00:00:00.000004,allocate,0x200,500,0x0\n"
    "1,00:00:00.000005,free,0x100,1000,0x0\n"
    "1,00:00:00.000006,free,0x100,1000,0x0\n"            // double
    "1,00:00:00.000007,allocate,0x300,1200,0x0\n",
    "peak");
  EXPECT_EQ(peak_live_bytes(log), 1700U);
}

TEST(allocation_log, reads_the_shared_resnet50_trace)
{
  auto const trace = resnet50_trace();
  if (trace.empty()) {
    GTEST_SKIP() << "shared trace pytorch_resnet50_train.csv.gz not found under '" << traces_dir().string()
                 << "' (set GPUMEM_TRACES_DIR); the synthetic logs above still test the reader";
  }
  allocation_log const log = read_allocation_log(trace);
  ASSERT_EQ(log.events.size(), 41'696U);
  std::size_t allocations = 0;
  std::size_t frees = 0;
  for (auto const& e : log.events) {
    allocations += e.action == log_action::allocate ? 1 : 0;
    frees += e.action == log_action::free ? 1 : 0;
    EXPECT_EQ(e.stream, 0U);
  }
  EXPECT_EQ(allocations, 20'848U);
  EXPECT_EQ(frees, 20'848U);
  EXPECT_EQ(log.events.front().time_ns, 0);
  EXPECT_EQ(peak_live_bytes(log), 9'386'021'008U) << "the figure traces/README.md gives";
}

// ---- bad input: the message is FILE:LINE: PROBLEM --------------------------------------------------------

/// Any line: for expect_format_error.
constexpr std::size_t any_line = 0;

/// Reads `content` from a file and expects a log_format_error at `line` (or at any_line) whose message names
/// the file, that line and the problem.
void expect_format_error(std::string_view content, std::size_t line, std::string const& problem)
{
  scratch_dir dir;
  auto const file = dir.write("bad.csv", content);
  try {
    (void)read_allocation_log(file);
    FAIL() << "no error for a log with: " << problem;
  } catch (log_format_error const& e) {
    std::string const message = e.what();
    EXPECT_EQ(e.file(), file.string());
    if (line != any_line) {
      EXPECT_EQ(e.line(), line) << message;
      EXPECT_NE(message.find(file.string() + ":" + std::to_string(line) + ": "), std::string::npos) << message;
    }
    EXPECT_NE(message.find(problem), std::string::npos) << message;
  }
}

constexpr std::string_view header = "Thread,Time,Action,Pointer,Size,Stream\n";
constexpr std::string_view good_row = "1,13:09:44.158987,allocate,0x7f98f9e00000,37632,0x0\n";

TEST(allocation_log_errors, bad_header)
{
  expect_format_error("Thread,Time,Action,Pointer,Bytes,Stream\n", 1, "wrong header 'Thread,Time,Action,Pointer,Bytes,Stream'");
  expect_format_error("1,13:09:44.158987,allocate,0x7f98f9e00000,37632,0x0\n", 1, "wrong header");
}

TEST(allocation_log_errors, wrong_column_count)
{
  expect_format_error(std::string{header} + std::string{good_row} + "1,13:09:44.158987,allocate,0x7f98f9e00000,37632\n",
                      3, "wrong column count: 5 columns, expected 6");
  expect_format_error(std::string{header} + "1,13:09:44.158987,allocate,0x7f98f9e00000,37632,0x0,extra\n", 2,
                      "wrong column count: 7 columns");
}

TEST(allocation_log_errors, bad_pointer)
{
  expect_format_error(std::string{header} + std::string{good_row} + std::string{good_row} +
                        "1,13:09:44.158987,free,7f98f9e00000,37632,0x0\n",
                      4, "bad pointer '7f98f9e00000'");
  expect_format_error(std::string{header} + "1,13:09:44.158987,free,0xZZ,37632,0x0\n", 2, "bad pointer '0xZZ'");
  expect_format_error(std::string{header} + "1,13:09:44.158987,free,0x1ffffffffffffffff,1,0x0\n", 2, "bad pointer");
}

TEST(allocation_log_errors, bad_size)
{
  expect_format_error(std::string{header} + "1,13:09:44.158987,allocate,0x100,12a,0x0\n", 2,
                      "bad size '12a': expected a decimal number of bytes");
  expect_format_error(std::string{header} + "1,13:09:44.158987,allocate,0x100,-5,0x0\n", 2, "bad size '-5'");
  expect_format_error(std::string{header} + "1,13:09:44.158987,allocate,0x100,99999999999999999999999,0x0\n", 2,
                      "bad size");
}

TEST(allocation_log_errors, unknown_action)
{
  expect_format_error(std::string{header} + std::string{good_row} + "1,13:09:44.158987,alloc,0x100,12,0x0\n", 3,
                      "unknown action 'alloc': expected allocate, free or allocate failure");
}

TEST(allocation_log_errors, bad_thread_time_and_stream)
{
  expect_format_error(std::string{header} + "x,13:09:44.158987,allocate,0x100,12,0x0\n", 2, "bad thread 'x'");
  expect_format_error(std::string{header} + "1,13:9:44,allocate,0x100,12,0x0\n", 2, "bad time '13:9:44'");
  expect_format_error(std::string{header} + "1,25:00:00.0,allocate,0x100,12,0x0\n", 2, "bad time");
  expect_format_error(std::string{header} + "1,13:09:44.158987,allocate,0x100,12,0\n", 2, "bad stream '0'");
}

TEST(allocation_log_errors, truncated_gzip)
{
  std::string text{header};
  for (int i = 0; i < 3000; ++i) { text += good_row; }
  std::string const gz = gzip_stored(text);
  scratch_dir dir;
  for (std::size_t const keep : {gz.size() / 2, gz.size() - 6 /* inside the trailer */, std::size_t{12}}) {
    auto const file = dir.write("cut.csv.gz", gz.substr(0, keep));
    try {
      (void)read_allocation_log(file);
      ADD_FAILURE() << "no error for gzip cut at " << keep << " of " << gz.size() << " bytes";
    } catch (log_format_error const& e) {
      std::string const message = e.what();
      EXPECT_NE(message.find(file.string() + ":"), std::string::npos) << message;
      EXPECT_NE(message.find("truncated"), std::string::npos) << message;
      EXPECT_GE(e.line(), 1U) << message;
      EXPECT_LE(e.line(), 3002U) << message;
      if (keep == gz.size() / 2) {
        EXPECT_GT(e.line(), 2U) << "the rows before the cut were read: " << message;
      }
    }
  }
}

TEST(allocation_log_errors, corrupt_gzip_and_data_after_the_gzip_stream)
{
  std::string const gz = gzip_stored(std::string{header} + std::string{good_row});
  std::string bad_crc = gz;
  bad_crc[bad_crc.size() - 8] = static_cast<char>(bad_crc[bad_crc.size() - 8] ^ 0x01);
  expect_format_error(bad_crc, any_line, "corrupt gzip data (incorrect data check)");
  // gzip -dc warns and exits with 2 here, and zlib's gzread ignores it silently: gpumem refuses, one rule.
  expect_format_error(gz + "garbage\n", any_line, "data after the end of the gzip stream");
  expect_format_error(gz + std::string(512, '\0'), any_line, "data after the end of the gzip stream");
}

TEST(allocation_log_errors, missing_file)
{
  try {
    (void)read_allocation_log("/nonexistent/gpumem/no_such_log.csv");
    FAIL() << "no error for a missing file";
  } catch (logic_error const& e) {  // log_format_error is a gpumem::logic_error
    std::string const message = e.what();
    EXPECT_NE(message.find("/nonexistent/gpumem/no_such_log.csv: cannot open: No such file or directory"),
              std::string::npos)
      << message;
  }
}

TEST(allocation_log_errors, a_directory)
{
  scratch_dir dir;
  try {
    (void)read_allocation_log(dir.path());
    FAIL() << "a directory was read as a log";
  } catch (log_format_error const& e) {
    EXPECT_NE(std::string{e.what()}.find(dir.path().string() + ": cannot read: it is a directory"), std::string::npos)
      << e.what();
  }
}

TEST(allocation_log_errors, empty_file_and_binary_garbage)
{
  expect_format_error("", 1, "empty file");
  expect_format_error(std::string(100'000, '\x01'), 1, "line longer than 65536 characters");
  expect_format_error(std::string{header} + std::string(3, '\0') + "\n", 2, "wrong column count: 1 columns");
}

}  // namespace
}  // namespace gpumem::test
