// logging_resource_adaptor: the conformance battery, then the CSV it writes, parsed back: the header, every
// column of every row (thread, time, action, pointer, size, stream), the `allocate failure` row, buffering
// and auto_flush, the three destinations (stream, file, GPUMEM_LOG_FILE), and 8 threads at once.
#include "conformance/resource_battery.hpp"
#include "support/gate.hpp"
#include "support/memory_checks.hpp"
#include "support/sub_allocator_checks.hpp"

#include <gpumem/error.hpp>
#include <gpumem/mr/logging_resource_adaptor.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <sys/syscall.h>
#include <unistd.h>

namespace gpumem::test {
namespace {

/// Rows of the battery go nowhere (an ostream without a buffer drops what it is given).
std::ostream& discarding_stream()
{
  static std::ostream stream{nullptr};
  return stream;
}

struct logging_factory {
  static std::unique_ptr<mr::device_memory_resource> make()
  {
    return std::make_unique<mr::logging_resource_adaptor>(&cuda_upstream(), discarding_stream());
  }
  static constexpr char const* name = "cuda_memory_resource";  // the upstream's failure passes through
  static constexpr bool oversubscription_safe = true;
};

}  // namespace

INSTANTIATE_TYPED_TEST_SUITE_P(logging_resource_adaptor, resource_battery, logging_factory);

namespace {

struct row {
  std::string thread;
  std::string time;
  std::string action;
  std::string pointer;
  std::string size;
  std::string stream;
};

std::vector<std::string> split(std::string const& text, char separator)
{
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in{text};
  while (std::getline(in, part, separator)) { parts.push_back(part); }
  if (!text.empty() && text.back() == separator) { parts.emplace_back(); }
  return parts;
}

/// Parses a whole log; fails the test on a wrong header or a row without exactly six columns.
std::vector<row> parse_log(std::string const& text)
{
  std::vector<std::string> lines = split(text, '\n');
  if (!lines.empty() && lines.back().empty()) { lines.pop_back(); }  // after the last line break
  EXPECT_FALSE(lines.empty());
  if (lines.empty()) { return {}; }
  EXPECT_EQ(lines.front(), "Thread,Time,Action,Pointer,Size,Stream");
  EXPECT_EQ(text.back(), '\n') << "the last row must be complete";
  std::vector<row> rows;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    std::vector<std::string> const columns = split(lines[i], ',');
    EXPECT_EQ(columns.size(), 6U) << "row " << i << ": " << lines[i];
    if (columns.size() != 6) { continue; }
    rows.push_back({columns[0], columns[1], columns[2], columns[3], columns[4], columns[5]});
  }
  return rows;
}

std::string read_file(std::filesystem::path const& path)
{
  std::ifstream in{path};
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// The complete lines of the file (a row being written may not be complete yet).
std::size_t line_count(std::filesystem::path const& path)
{
  std::string const text = read_file(path);
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

std::filesystem::path temp_path(std::string const& name)
{
  return std::filesystem::temp_directory_path() /
         ("gpumem_" + name + "_" + std::to_string(::getpid()) + ".csv");
}

std::string this_thread_number() { return std::to_string(::syscall(SYS_gettid)); }

std::string hex(std::uintptr_t value)
{
  std::ostringstream text;
  text << "0x" << std::hex << value;
  return text.str();
}

/// Seconds since local midnight of a `HH:MM:SS.ffffff` time.
double seconds_of_day(std::string const& time)
{
  return std::stoi(time.substr(0, 2)) * 3600.0 + std::stoi(time.substr(3, 2)) * 60.0 + std::stod(time.substr(6));
}

double local_seconds_of_day_now()
{
  std::time_t const now = std::time(nullptr);
  std::tm local{};
  ::localtime_r(&now, &local);
  return local.tm_hour * 3600.0 + local.tm_min * 60.0 + local.tm_sec;
}

TEST(logging_resource_adaptor, every_column_of_every_row_is_in_rmm_format)
{
  mr::simulated_memory_resource upstream;
  std::ostringstream out;
  backend_stream stream;
  void* a = nullptr;
  void* b = nullptr;
  {
    mr::logging_resource_adaptor log{&upstream, out};
    EXPECT_EQ(log.upstream_resource(), &upstream);
    a = log.allocate(37632);
    b = log.allocate(1, cuda_stream_view{stream.get()});
    log.deallocate(a, 37632);
    log.deallocate(b, 1, cuda_stream_view{stream.get()});
    EXPECT_EQ(log.allocate(0), nullptr);  // not logged: it never reaches the adaptor
  }
  std::vector<row> const rows = parse_log(out.str());
  ASSERT_EQ(rows.size(), 4U) << out.str();
  std::regex const time_format{R"(\d\d:\d\d:\d\d\.\d{6})"};
  double const now = local_seconds_of_day_now();
  for (row const& r : rows) {
    EXPECT_EQ(r.thread, this_thread_number());
    EXPECT_TRUE(std::regex_match(r.time, time_format)) << r.time;
    double const difference = std::abs(seconds_of_day(r.time) - now);
    EXPECT_TRUE(difference < 5.0 || difference > 86'395.0) << r.time << " is not the local time";
  }
  EXPECT_EQ(rows[0].action, "allocate");
  EXPECT_EQ(rows[0].pointer, format_pointer(a));
  EXPECT_EQ(rows[0].pointer, hex(reinterpret_cast<std::uintptr_t>(a)));
  EXPECT_EQ(rows[0].size, "37632");
  EXPECT_EQ(rows[0].stream, "0x0");
  EXPECT_EQ(rows[1].action, "allocate");
  EXPECT_EQ(rows[1].pointer, format_pointer(b));
  EXPECT_EQ(rows[1].size, "1");
  EXPECT_EQ(rows[1].stream, hex(reinterpret_cast<std::uintptr_t>(stream.get())));
  EXPECT_NE(rows[1].stream, "0x0");
  EXPECT_EQ(rows[2].action, "free");
  EXPECT_EQ(rows[2].pointer, format_pointer(a));
  EXPECT_EQ(rows[2].size, "37632");
  EXPECT_EQ(rows[3].action, "free");
  EXPECT_EQ(rows[3].pointer, format_pointer(b));
  EXPECT_EQ(rows[3].stream, rows[1].stream);
  // Times never go backwards down the file.
  for (std::size_t i = 1; i < rows.size(); ++i) {
    double const before = seconds_of_day(rows[i - 1].time);
    double const after = seconds_of_day(rows[i].time);
    EXPECT_TRUE(before <= after || before - after > 86'000.0) << rows[i - 1].time << " then " << rows[i].time;
  }
  EXPECT_EQ(upstream.allocation_count(), 0U);
  EXPECT_EQ(upstream.invalid_deallocations(), 0U);
}

TEST(logging_resource_adaptor, special_streams_log_their_handle_values)
{
  mr::simulated_memory_resource upstream;
  std::ostringstream out;
  mr::logging_resource_adaptor log{&upstream, out};
  void* p = log.allocate(256, cuda_stream_per_thread);
  log.deallocate(p, 256, cuda_stream_legacy);
  log.flush();
  std::vector<row> const rows = parse_log(out.str());
  ASSERT_EQ(rows.size(), 2U);
  EXPECT_EQ(rows[0].stream, "0x2");  // cudaStreamPerThread
  EXPECT_EQ(rows[1].stream, "0x1");  // cudaStreamLegacy
}

TEST(logging_resource_adaptor, upstream_failure_writes_an_allocate_failure_row_and_rethrows)
{
  mr::simulated_memory_resource upstream{1 << 20};
  std::ostringstream out;
  mr::logging_resource_adaptor log{&upstream, out};
  EXPECT_THROW((void)log.allocate(2 << 20), out_of_memory);
  void* p = log.allocate(4096);  // the adaptor still works
  log.deallocate(p, 4096);
  log.flush();
  std::vector<row> const rows = parse_log(out.str());
  ASSERT_EQ(rows.size(), 3U) << out.str();
  EXPECT_EQ(rows[0].action, "allocate failure");
  EXPECT_EQ(rows[0].pointer, "0x0");
  EXPECT_EQ(rows[0].size, std::to_string(2 << 20));
  EXPECT_EQ(rows[0].stream, "0x0");
  EXPECT_EQ(rows[1].action, "allocate");
  EXPECT_EQ(rows[2].action, "free");
}

/// A stream buffer that keeps what it is given and counts the flushes (sync) it sees.
class counting_buffer final : public std::stringbuf {
 public:
  [[nodiscard]] int syncs() const { return syncs_; }

 protected:
  int sync() override
  {
    ++syncs_;
    return std::stringbuf::sync();
  }

 private:
  int syncs_{0};
};

TEST(logging_resource_adaptor, a_stream_gets_each_row_as_it_is_logged_and_auto_flush_flushes_it)
{
  mr::simulated_memory_resource upstream;
  counting_buffer lazy_buffer;
  std::ostream lazy_out{&lazy_buffer};
  mr::logging_resource_adaptor lazy{&upstream, lazy_out};
  void* p = lazy.allocate(512);
  EXPECT_EQ(parse_log(lazy_buffer.str()).size(), 1U) << "the row waits in the adaptor";
  EXPECT_EQ(lazy_buffer.syncs(), 0) << "without auto_flush the stream is flushed only by flush()";
  lazy.deallocate(p, 512);
  EXPECT_EQ(parse_log(lazy_buffer.str()).size(), 2U);
  lazy.flush();
  EXPECT_EQ(lazy_buffer.syncs(), 1);
  counting_buffer scoped_buffer;
  std::ostream scoped_out{&scoped_buffer};
  { mr::logging_resource_adaptor scoped{&upstream, scoped_out}; }
  EXPECT_EQ(scoped_buffer.syncs(), 1) << "destruction flushes the stream";

  counting_buffer eager_buffer;
  std::ostream eager_out{&eager_buffer};
  mr::logging_resource_adaptor eager{&upstream, eager_out, /*auto_flush=*/true};
  EXPECT_EQ(eager_buffer.str(), "Thread,Time,Action,Pointer,Size,Stream\n");
  void* q = eager.allocate(512);
  EXPECT_EQ(parse_log(eager_buffer.str()).size(), 1U);
  eager.deallocate(q, 512);
  EXPECT_EQ(parse_log(eager_buffer.str()).size(), 2U);
  EXPECT_GE(eager_buffer.syncs(), 2) << "auto_flush flushes the stream after every row";
}

TEST(logging_resource_adaptor, rows_reach_a_file_without_flush_within_a_bounded_delay)
{
  auto const path = temp_path("logging_delay");
  mr::simulated_memory_resource upstream;
  {
    mr::logging_resource_adaptor log{&upstream, path.string()};
    void* p = log.allocate(4096);
    log.deallocate(p, 4096);
    // No flush, the adaptor alive: the writer gets the two rows into the file by itself.
    EXPECT_TRUE(eventually([&] { return line_count(path) == 3; }))
      << "long after flush_interval the file holds: " << read_file(path);
  }
  EXPECT_EQ(parse_log(read_file(path)).size(), 2U) << "destruction writes nothing twice";
  std::filesystem::remove(path);
}

TEST(logging_resource_adaptor, logs_to_a_named_file)
{
  auto const path = temp_path("logging_file");
  mr::simulated_memory_resource upstream;
  {
    mr::logging_resource_adaptor log{&upstream, path.string()};
    void* p = log.allocate(1000);
    log.deallocate(p, 1000);
  }  // the destructor flushes
  std::vector<row> const rows = parse_log(read_file(path));
  ASSERT_EQ(rows.size(), 2U);
  EXPECT_EQ(rows[0].size, "1000");
  std::filesystem::remove(path);
}

TEST(logging_resource_adaptor, logs_to_the_file_named_by_the_environment)
{
  auto const path = temp_path("logging_env");
  mr::simulated_memory_resource upstream;
  ASSERT_EQ(::setenv("GPUMEM_LOG_FILE", path.c_str(), 1), 0);
  {
    mr::logging_resource_adaptor log{&upstream};
    void* p = log.allocate(77);
    log.deallocate(p, 77);
  }
  ASSERT_EQ(::unsetenv("GPUMEM_LOG_FILE"), 0);
  std::vector<row> const rows = parse_log(read_file(path));
  ASSERT_EQ(rows.size(), 2U);
  EXPECT_EQ(rows[1].action, "free");
  EXPECT_EQ(rows[1].size, "77");
  std::filesystem::remove(path);
}

TEST(logging_resource_adaptor, construction_errors_are_logic_errors)
{
  mr::simulated_memory_resource upstream;
  std::ostringstream out;
  ASSERT_EQ(::unsetenv("GPUMEM_LOG_FILE"), 0);
  try {
    mr::logging_resource_adaptor log{&upstream};
    FAIL() << "no destination was given";
  } catch (logic_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("GPUMEM_LOG_FILE"), std::string::npos) << e.what();
  }
  EXPECT_THROW(mr::logging_resource_adaptor(nullptr, out), logic_error);
  EXPECT_THROW(mr::logging_resource_adaptor(nullptr, temp_path("never").string()), logic_error);
  try {
    mr::logging_resource_adaptor log{&upstream, std::string{"/nonexistent-directory/gpumem.csv"}};
    FAIL() << "the file cannot be opened";
  } catch (logic_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("/nonexistent-directory/gpumem.csv"), std::string::npos) << e.what();
  }
}

TEST(logging_resource_adaptor, equal_over_equal_upstreams)
{
  mr::simulated_memory_resource upstream;
  mr::simulated_memory_resource other;
  std::ostringstream out;
  mr::logging_resource_adaptor a{&upstream, out};
  mr::logging_resource_adaptor b{&upstream, out};
  mr::logging_resource_adaptor c{&other, out};
  EXPECT_TRUE(a.is_equal(b));
  EXPECT_FALSE(a.is_equal(c));
  EXPECT_FALSE(a.is_equal(upstream));
}

TEST(logging_resource_adaptor, eight_threads_write_whole_rows_in_order)
{
  constexpr int threads = 8;
  constexpr int pairs = 2000;
  mr::simulated_memory_resource upstream;
  std::ostringstream out;
  {
    mr::logging_resource_adaptor log{&upstream, out};
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&log, t] {
        for (int i = 0; i < pairs; ++i) {
          std::size_t const bytes = static_cast<std::size_t>(t * 1000 + i % 100 + 1);
          void* p = log.allocate(bytes);
          log.deallocate(p, bytes);
        }
      });
    }
    for (auto& worker : workers) { worker.join(); }
  }
  std::vector<row> const rows = parse_log(out.str());
  ASSERT_EQ(rows.size(), static_cast<std::size_t>(2 * threads * pairs));
  std::map<std::string, std::size_t> rows_per_thread;
  std::map<std::string, std::string> last_action;  // by pointer: allocate and free must alternate
  for (row const& r : rows) {
    ++rows_per_thread[r.thread];
    std::string& last = last_action[r.pointer];
    if (r.action == "allocate") {
      EXPECT_NE(last, "allocate") << r.pointer << " allocated twice without a free in between";
    } else {
      EXPECT_EQ(r.action, "free");
      EXPECT_EQ(last, "allocate") << r.pointer << " freed before it was allocated";
    }
    last = r.action;
  }
  EXPECT_EQ(rows_per_thread.size(), static_cast<std::size_t>(threads));
  for (auto const& [thread, count] : rows_per_thread) { EXPECT_EQ(count, static_cast<std::size_t>(2 * pairs)); }
  EXPECT_EQ(upstream.invalid_deallocations(), 0U);
}

// ---- a crash of the process --------------------------------------------------------------------------------
// Each test's process logs to a file through an adaptor it never destroys, then dies; the test reads the
// file. The "threadsafe" death-test style runs the dying code in a fresh process of the test binary, which
// finds the file's name in the environment (its own pid would give another name).

/// The file of the crash test `name`: made up by the test, inherited by its death-test process.
std::filesystem::path crash_log_path(std::string const& name)
{
  std::string const variable = "GPUMEM_TEST_CRASH_LOG_" + name;
  if (char const* const inherited = std::getenv(variable.c_str())) { return inherited; }
  std::filesystem::path const path = temp_path("crash_" + name);
  EXPECT_EQ(::setenv(variable.c_str(), path.c_str(), 1), 0);
  return path;
}

/// Logs `pairs` allocate/free pairs of 1000 + i bytes through a new adaptor on `path` that is never destroyed.
void log_pairs_and_leak_the_adaptor(std::filesystem::path const& path, int pairs)
{
  static mr::simulated_memory_resource upstream;
  auto* const log = new mr::logging_resource_adaptor{&upstream, path.string()};  // NOLINT: never destroyed
  for (int i = 0; i < pairs; ++i) {
    std::size_t const bytes = 1000 + static_cast<std::size_t>(i);
    void* p = log->allocate(bytes);
    log->deallocate(p, bytes);
  }
}

/// The file holds the header and the rows of `pairs` pairs, each once and in order.
void expect_pairs_in(std::filesystem::path const& path, int pairs)
{
  std::vector<row> const rows = parse_log(read_file(path));
  ASSERT_EQ(rows.size(), static_cast<std::size_t>(2 * pairs)) << read_file(path);
  for (int i = 0; i < pairs; ++i) {
    EXPECT_EQ(rows[static_cast<std::size_t>(2 * i)].action, "allocate");
    EXPECT_EQ(rows[static_cast<std::size_t>(2 * i + 1)].size, std::to_string(1000 + i));
  }
}

constexpr int crash_pairs = 500;

TEST(logging_resource_adaptor_crash, rows_logged_before_an_abort_or_a_fatal_signal_are_in_the_file)
{
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (int const signal : {SIGABRT, SIGTERM, SIGHUP}) {
    auto const path = crash_log_path("signal_" + std::to_string(signal));
    EXPECT_EXIT(
      {
        log_pairs_and_leak_the_adaptor(path, crash_pairs);
        if (signal == SIGABRT) { std::abort(); }  // as std::terminate does
        std::raise(signal);
      },
      ::testing::KilledBySignal(signal), "");
    expect_pairs_in(path, crash_pairs);
    std::filesystem::remove(path);
  }
}

TEST(logging_resource_adaptor_crash, rows_reach_the_file_by_themselves_so_a_sigkill_loses_none)
{
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto const path = crash_log_path("sigkill");
  EXPECT_EXIT(
    {
      log_pairs_and_leak_the_adaptor(path, crash_pairs);
      // Nothing is flushed: the rows must get into the file while the process lives, or never.
      if (!eventually([&] { return line_count(path) == 1 + 2 * crash_pairs; }, std::chrono::seconds{20})) {
        std::_Exit(3);
      }
      std::raise(SIGKILL);
    },
    ::testing::KilledBySignal(SIGKILL), "");
  expect_pairs_in(path, crash_pairs);
  std::filesystem::remove(path);
}

/// Set by the program's own SIGTERM handler in the test below.
volatile std::sig_atomic_t program_saw_sigterm = 0;

TEST(logging_resource_adaptor_crash, a_handled_signal_reaches_the_programs_handler_and_no_row_is_written_twice)
{
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto const path = crash_log_path("handled");
  EXPECT_EXIT(
    {
      struct sigaction handler{};
      handler.sa_handler = [](int) { program_saw_sigterm = 1; };
      sigemptyset(&handler.sa_mask);
      ::sigaction(SIGTERM, &handler, nullptr);  // before the first log file: the adaptor's handler chains to it
      log_pairs_and_leak_the_adaptor(path, crash_pairs);
      std::raise(SIGTERM);  // the program goes on
      bool const rows_written = line_count(path) == 1 + 2 * crash_pairs;
      std::_Exit(program_saw_sigterm == 1 && rows_written ? 0 : 1);  // at _Exit nothing more is written
    },
    ::testing::ExitedWithCode(0), "");
  expect_pairs_in(path, crash_pairs);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace gpumem::test
