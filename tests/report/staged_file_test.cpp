// staged_file (and write_html_report over it): a write that fails part way leaves the file that was there;
// an unwritable destination fails when the object is made; a link is followed, permissions are kept, and a
// destination that is not a regular file is written directly.
#include "replay/log_files.hpp"

#include <gpumem/error.hpp>
#include <gpumem/report/html_report.hpp>
#include <gpumem/report/staged_file.hpp>

#include <gtest/gtest.h>

#include <csignal>
#include <fstream>
#include <sstream>
#include <string>

#include <sys/resource.h>
#include <sys/stat.h>

namespace gpumem::test {
namespace {

std::string read_file(std::filesystem::path const& path)
{
  std::ifstream in{path, std::ios::binary};
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// Only the file `name` in `dir`: no temporary file was left behind.
void expect_only(scratch_dir const& dir, std::string const& name)
{
  std::vector<std::string> names;
  for (auto const& entry : std::filesystem::directory_iterator{dir.path()}) {
    names.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(names, std::vector<std::string>{name});
}

/// Files larger than `bytes` cannot be written while this lives (RLIMIT_FSIZE; SIGXFSZ ignored, so that
/// write(2) fails with EFBIG instead of the signal ending the process).
class file_size_limit {
 public:
  explicit file_size_limit(rlim_t bytes)
  {
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    ::getrlimit(RLIMIT_FSIZE, &old_);
    rlimit limit = old_;
    limit.rlim_cur = bytes;
    EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  }
  ~file_size_limit()
  {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, old_handler_);
  }
  file_size_limit(file_size_limit const&) = delete;
  file_size_limit& operator=(file_size_limit const&) = delete;

 private:
  rlimit old_{};
  void (*old_handler_)(int){};
};

TEST(staged_file, a_write_failing_part_way_leaves_the_old_file_whole)
{
  scratch_dir dir;
  std::string const old_text(270'000, 'o');
  auto const file = dir.write("report.html", old_text);
  std::string const new_text(100'000, 'n');
  {
    file_size_limit const limit{8192};
    staged_file staged{file};
    try {
      staged.write(new_text);
      staged.commit();
      ADD_FAILURE() << "a write past the file size limit succeeded";
    } catch (logic_error const& e) {
      EXPECT_NE(std::string{e.what()}.find("cannot write '" + file.string() + "': File too large"), std::string::npos)
        << e.what();
    }
  }
  EXPECT_EQ(read_file(file), old_text) << "the old file is untouched";
  expect_only(dir, "report.html");
}

TEST(staged_file, write_html_report_failing_part_way_leaves_the_old_report)
{
  scratch_dir dir;
  std::string const old_text(270'000, 'o');
  auto const file = dir.write("report.html", old_text);
  report_input input;
  input.title = std::string(100'000, 't');  // a page well over the limit
  {
    file_size_limit const limit{8192};
    EXPECT_THROW(write_html_report(file, input), logic_error);
  }
  EXPECT_EQ(read_file(file), old_text);
  expect_only(dir, "report.html");
}

TEST(staged_file, an_unwritable_destination_fails_at_once_naming_it)
{
  scratch_dir dir;
  auto const missing = dir.path() / "no-such-folder" / "report.html";
  try {
    staged_file staged{missing};
    FAIL() << "made a file in a folder that does not exist";
  } catch (logic_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("cannot write '" + missing.string() + "': No such file or directory"),
              std::string::npos)
      << e.what();
  }
  EXPECT_THROW(staged_file{dir.path()}, logic_error) << "a folder is not a file";
}

TEST(staged_file, replaces_on_commit_only_and_removes_its_temporary_file_otherwise)
{
  scratch_dir dir;
  auto const file = dir.write("out.txt", "old");
  {
    staged_file staged{file};
    staged.write("new, never committed");
  }
  EXPECT_EQ(read_file(file), "old");
  expect_only(dir, "out.txt");
  {
    staged_file staged{file};
    staged.write("new");
    EXPECT_EQ(read_file(file), "old") << "not before commit";
    staged.commit();
  }
  EXPECT_EQ(read_file(file), "new");
  expect_only(dir, "out.txt");
}

TEST(staged_file, keeps_permissions_and_follows_a_link)
{
  scratch_dir dir;
  auto const file = dir.write("target.txt", "old");
  std::filesystem::permissions(file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write |
                                       std::filesystem::perms::group_read);
  auto const link = dir.path() / "link.txt";
  std::filesystem::create_symlink(file, link);
  staged_file staged{link};
  staged.write("new");
  staged.commit();
  EXPECT_TRUE(std::filesystem::is_symlink(link)) << "the link stays a link";
  EXPECT_EQ(read_file(file), "new");
  EXPECT_EQ(std::filesystem::status(file).permissions(),
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write | std::filesystem::perms::group_read);
}

TEST(staged_file, writes_a_destination_that_is_not_a_regular_file_directly)
{
  staged_file staged{"/dev/null"};
  staged.write("discarded");
  staged.commit();
  EXPECT_TRUE(std::filesystem::is_character_file("/dev/null")) << "/dev/null was not replaced";
}

}  // namespace
}  // namespace gpumem::test
