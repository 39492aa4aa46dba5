// set_log_handler (debug_log.hpp): the lines that pass the level go to the handler, not to the file; an empty
// handler sends them to the file again; a handler that throws changes nothing for the caller. What the
// `gpumem` command uses to count the library's warnings instead of printing each one.
#include <gpumem/debug_log.hpp>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

namespace gpumem::test {
namespace {

TEST(debug_log_handler, receives_the_lines_that_pass_the_level_instead_of_the_file)
{
  auto const file = std::filesystem::temp_directory_path() / ("gpumem_log_handler_" + std::to_string(::getpid()));
  std::filesystem::remove(file);
  set_log_file(file.string());
  set_log_level(log_level::warn);

  std::vector<std::pair<log_level, std::string>> lines;
  set_log_handler([&](log_level level, std::string_view message) { lines.emplace_back(level, message); });
  detail::log(log_level::warn, "to the handler");
  detail::log(log_level::debug, "below the level: nowhere");
  detail::log(log_level::error, [] { return std::string{"built only when enabled"}; });
  set_log_handler([](log_level, std::string_view) { throw std::runtime_error{"a handler that throws"}; });
  detail::log(log_level::warn, "swallowed with the handler's exception");
  set_log_handler({});
  detail::log(log_level::warn, "to the file again");
  set_log_file("");

  EXPECT_EQ(lines, (std::vector<std::pair<log_level, std::string>>{{log_level::warn, "to the handler"},
                                                                  {log_level::error, "built only when enabled"}}));
  std::ifstream in{file};
  std::ostringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str().find("to the handler"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("[warn] to the file again"), std::string::npos) << text.str();
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace gpumem::test
