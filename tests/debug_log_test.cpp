// The debug log: level names, the level filter, the line format, the two environment variables, and the
// pool's growth, return and failure messages. Each test captures the log in a temporary file and restores
// the defaults (warn, stderr) afterwards.
#include "support/sub_allocator_checks.hpp"

#include <gpumem/debug_log.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace gpumem::test {
namespace {

class debug_log : public ::testing::Test {
 protected:
  void SetUp() override
  {
    path_ = std::filesystem::temp_directory_path() / ("gpumem_debug_log_" + std::to_string(::getpid()) + ".log");
    std::filesystem::remove(path_);
    set_log_file(path_.string());
  }
  void TearDown() override
  {
    ::unsetenv("GPUMEM_LOG_LEVEL");
    ::unsetenv("GPUMEM_DEBUG_LOG_FILE");
    set_log_level(log_level::warn);
    set_log_file("");
    std::filesystem::remove(path_);
  }

  [[nodiscard]] std::vector<std::string> lines() const
  {
    std::ifstream in{path_};
    std::vector<std::string> result;
    std::string line;
    while (std::getline(in, line)) { result.push_back(line); }
    return result;
  }

  std::filesystem::path path_;
};

TEST_F(debug_log, level_names_round_trip)
{
  for (log_level const level : {log_level::trace, log_level::debug, log_level::info, log_level::warn,
                                log_level::error, log_level::off}) {
    EXPECT_EQ(parse_log_level(to_string(level)), level);
  }
  EXPECT_EQ(parse_log_level("WARNING"), log_level::warn);
  EXPECT_EQ(parse_log_level("Info"), log_level::info);
  EXPECT_EQ(parse_log_level("verbose"), std::nullopt);
  EXPECT_EQ(parse_log_level(""), std::nullopt);
}

TEST_F(debug_log, only_messages_at_or_above_the_level_are_written)
{
  set_log_level(log_level::info);
  EXPECT_EQ(get_log_level(), log_level::info);
  detail::log(log_level::trace, "trace message");
  detail::log(log_level::debug, "debug message");
  detail::log(log_level::info, "info message");
  detail::log(log_level::warn, std::string{"warn message"});
  detail::log(log_level::error, "error message");
  bool built = false;
  detail::log(log_level::debug, [&built] {
    built = true;
    return std::string{"lazy debug"};
  });
  EXPECT_FALSE(built) << "a disabled message must not be built";
  detail::log(log_level::info, [] { return std::string{"lazy info"}; });
  std::vector<std::string> const written = lines();
  ASSERT_EQ(written.size(), 4U);
  std::regex const format{R"(\[gpumem \d\d:\d\d:\d\d\.\d{6}\] \[(info|warn|error)\] .*)"};
  for (std::string const& line : written) { EXPECT_TRUE(std::regex_match(line, format)) << line; }
  EXPECT_TRUE(written[0].ends_with("[info] info message"));
  EXPECT_TRUE(written[1].ends_with("[warn] warn message"));
  EXPECT_TRUE(written[2].ends_with("[error] error message"));
  EXPECT_TRUE(written[3].ends_with("[info] lazy info"));

  set_log_level(log_level::off);
  detail::log(log_level::error, "dropped");
  EXPECT_EQ(lines().size(), 4U);
  set_log_level(log_level::trace);
  detail::log(log_level::trace, "kept");
  EXPECT_EQ(lines().size(), 5U);
}

TEST_F(debug_log, the_default_level_is_warn)
{
  configure_log_from_environment();  // nothing set: defaults, stderr
  EXPECT_EQ(get_log_level(), log_level::warn);
  set_log_file(path_.string());
  detail::log(log_level::info, "hidden");
  detail::log(log_level::warn, "shown");
  std::vector<std::string> const written = lines();
  ASSERT_EQ(written.size(), 1U);
  EXPECT_TRUE(written[0].ends_with("[warn] shown"));
}

TEST_F(debug_log, level_and_file_come_from_the_environment)
{
  auto const other = std::filesystem::path{path_.string() + ".env"};
  std::filesystem::remove(other);
  ASSERT_EQ(::setenv("GPUMEM_LOG_LEVEL", "debug", 1), 0);
  ASSERT_EQ(::setenv("GPUMEM_DEBUG_LOG_FILE", other.c_str(), 1), 0);
  configure_log_from_environment();
  EXPECT_EQ(get_log_level(), log_level::debug);
  detail::log(log_level::debug, "from the environment");
  detail::log(log_level::trace, "not at debug");
  std::ifstream in{other};
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("[debug] from the environment"), std::string::npos) << text.str();
  EXPECT_EQ(text.str().find("not at debug"), std::string::npos) << text.str();

  ASSERT_EQ(::setenv("GPUMEM_LOG_LEVEL", "nonsense", 1), 0);
  ::testing::internal::CaptureStderr();
  configure_log_from_environment();
  std::string const complaint = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(complaint.find("GPUMEM_LOG_LEVEL"), std::string::npos) << complaint;
  EXPECT_EQ(get_log_level(), log_level::warn);
  set_log_file("");
  std::filesystem::remove(other);
}

TEST_F(debug_log, an_unopenable_file_is_a_logic_error)
{
  EXPECT_THROW(set_log_file("/nonexistent-directory/gpumem.log"), logic_error);
  detail::log(log_level::error, "still to the old file");
  EXPECT_EQ(lines().size(), 1U);
}

TEST_F(debug_log, the_pool_says_when_it_grows_returns_memory_and_fails)
{
  set_log_level(log_level::info);
  mr::simulated_memory_resource upstream{64 * MiB};
  {
    mr::pool_memory_resource pool{&upstream, 0, 32 * MiB};
    void* p = pool.allocate(1 * MiB);
    EXPECT_THROW((void)pool.allocate(48 * MiB), out_of_memory);
    pool.deallocate(p, 1 * MiB);
    pool.release();
  }
  std::string all;
  for (std::string const& line : lines()) { all += line + "\n"; }
  EXPECT_NE(all.find("[info] pool_memory_resource grew by "), std::string::npos) << all;
  EXPECT_NE(all.find("[warn] pool_memory_resource failed to allocate " + format_bytes(48 * MiB)), std::string::npos)
    << all;
  EXPECT_NE(all.find("[info] pool_memory_resource returned "), std::string::npos) << all;
}

TEST_F(debug_log, eight_threads_write_whole_lines)
{
  set_log_level(log_level::info);
  std::vector<std::thread> workers;
  for (int t = 0; t < 8; ++t) {
    workers.emplace_back([t] {
      for (int i = 0; i < 200; ++i) { detail::log(log_level::info, "thread " + std::to_string(t) + " line"); }
    });
  }
  for (auto& worker : workers) { worker.join(); }
  std::vector<std::string> const written = lines();
  ASSERT_EQ(written.size(), 1600U);
  for (std::string const& line : written) { EXPECT_TRUE(line.ends_with(" line")) << line; }
}

TEST_F(debug_log, lines_below_the_flush_level_wait_for_a_flush)
{
  EXPECT_EQ(get_flush_level(), log_level::trace) << "by default every line is flushed as it is written";
  set_log_level(log_level::info);
  set_flush_level(log_level::error);
  detail::log(log_level::info, "buffered line");
  EXPECT_TRUE(lines().empty()) << "an info line below the flush level reached the file at once";
  flush_log();
  ASSERT_EQ(lines().size(), 1U);
  detail::log(log_level::error, "flushed line");
  EXPECT_EQ(lines().size(), 2U) << "a line at the flush level must reach the file at once";
  set_flush_level(log_level::trace);
  EXPECT_EQ(get_flush_level(), log_level::trace);
}

}  // namespace
}  // namespace gpumem::test
