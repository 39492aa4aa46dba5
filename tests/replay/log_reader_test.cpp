// allocation_log_reader and log_source on input that can be read only once: a pipe named by /dev/fd/N (what
// `<(zcat log.gz)` gives), a FIFO, standard input as "-"; plain and gzip alike. log_source's copy lets such
// input be read again; without one, or before the first pass ended, a second pass is refused.
#include "replay/log_files.hpp"

#include <gpumem/replay/allocation_log.hpp>
#include <gpumem/replay/log_reader.hpp>
#include <gpumem/replay/log_source.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gpumem::test {
namespace {

/// A log of `rows` rows (pairs of allocate and free), as text.
std::string log_text(std::size_t rows)
{
  std::string text{"Thread,Time,Action,Pointer,Size,Stream\n"};
  for (std::size_t i = 0; i < rows; ++i) {
    std::string const pointer = "0x" + std::to_string(100000 + i / 2) + "00";
    text += "1,10:00:00." + std::to_string(100000 + i) + (i % 2 == 0 ? ",allocate," : ",free,") + pointer +
            ",4096,0x0\n";
  }
  return text;
}

std::vector<log_event> events_of(allocation_log_reader reader)
{
  std::vector<log_event> events;
  while (std::optional<log_event> const e = reader.next()) { events.push_back(*e); }
  return events;
}

/// Writes `bytes` to `fd` (blocking) and closes it; a closed reader ends the writing (EPIPE, SIGPIPE ignored).
void write_and_close(int fd, std::string const& bytes)
{
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t const n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) { continue; }
    if (n <= 0) { break; }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
}

/// A pipe whose write end a thread of its own fills with `bytes`; the read end is named by /dev/fd/N.
class pipe_feeder {
 public:
  explicit pipe_feeder(std::string bytes)
  {
    std::signal(SIGPIPE, SIG_IGN);
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    read_fd_ = fds[0];
    writer_ = std::thread{[fd = fds[1], bytes = std::move(bytes)] { write_and_close(fd, bytes); }};
  }
  ~pipe_feeder()
  {
    ::close(read_fd_);  // a writer still writing gets EPIPE
    writer_.join();
  }
  pipe_feeder(pipe_feeder const&) = delete;
  pipe_feeder& operator=(pipe_feeder const&) = delete;

  [[nodiscard]] int read_fd() const noexcept { return read_fd_; }
  [[nodiscard]] std::filesystem::path path() const { return "/dev/fd/" + std::to_string(read_fd_); }

 private:
  int read_fd_{-1};
  std::thread writer_;
};

/// A FIFO in `dir` that a thread of its own opens for writing once a reader has it open, then fills.
class fifo_feeder {
 public:
  fifo_feeder(scratch_dir const& dir, std::string bytes) : path_{dir.path() / "log.fifo"}
  {
    std::signal(SIGPIPE, SIG_IGN);
    EXPECT_EQ(::mkfifo(path_.c_str(), 0600), 0);
    writer_ = std::thread{[this, bytes = std::move(bytes)] {
      // Non-blocking open fails (ENXIO) until a reader has the FIFO open: poll, so that a test that never
      // opens it does not hang here.
      auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds{30};
      int fd = -1;
      while (!stop_ && std::chrono::steady_clock::now() < deadline) {
        fd = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK);
        if (fd >= 0) { break; }
        std::this_thread::sleep_for(std::chrono::milliseconds{1});
      }
      if (fd < 0) { return; }
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      write_and_close(fd, bytes);
    }};
  }
  ~fifo_feeder()
  {
    stop_ = true;
    writer_.join();
  }
  fifo_feeder(fifo_feeder const&) = delete;
  fifo_feeder& operator=(fifo_feeder const&) = delete;

  [[nodiscard]] std::filesystem::path const& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
  std::atomic<bool> stop_{false};
  std::thread writer_;
};

/// Standard input replaced by a pipe fed with `bytes` for the object's life.
class stdin_feeder {
 public:
  explicit stdin_feeder(std::string bytes) : pipe_{std::move(bytes)}, saved_{::dup(STDIN_FILENO)}
  {
    EXPECT_GE(::dup2(pipe_.read_fd(), STDIN_FILENO), 0);
  }
  ~stdin_feeder()
  {
    ::dup2(saved_, STDIN_FILENO);
    ::close(saved_);
  }
  stdin_feeder(stdin_feeder const&) = delete;
  stdin_feeder& operator=(stdin_feeder const&) = delete;

 private:
  pipe_feeder pipe_;
  int saved_;
};

TEST(log_reader, reads_a_pipe_named_by_dev_fd_as_process_substitution_gives_it)
{
  std::string const text = log_text(5000);  // several of the reader's chunks
  std::vector<log_event> const expected = parse_allocation_log(text, "text").events;
  ASSERT_EQ(expected.size(), 5000U);
  for (bool const gzip : {false, true}) {
    SCOPED_TRACE(gzip ? "gzip" : "plain");
    pipe_feeder pipe{gzip ? gzip_stored(text) : text};
    allocation_log_reader reader{pipe.path()};
    EXPECT_FALSE(reader.fraction_read().has_value()) << "a pipe's size is not known";
    EXPECT_EQ(events_of(std::move(reader)), expected);
  }
}

TEST(log_reader, reads_a_fifo)
{
  std::string const text = log_text(300);
  std::vector<log_event> const expected = parse_allocation_log(text, "text").events;
  for (bool const gzip : {false, true}) {
    SCOPED_TRACE(gzip ? "gzip" : "plain");
    scratch_dir dir;
    fifo_feeder fifo{dir, gzip ? gzip_stored(text) : text};
    EXPECT_EQ(events_of(allocation_log_reader{fifo.path()}), expected);
  }
}

TEST(log_reader, a_dash_reads_standard_input)
{
  std::string const text = log_text(300);
  stdin_feeder input{gzip_stored(text)};
  allocation_log_reader reader{"-"};
  EXPECT_EQ(reader.source(), "standard input");
  EXPECT_EQ(events_of(std::move(reader)), parse_allocation_log(text, "text").events);
}

TEST(log_reader, reads_in_batches_and_knows_how_far_it_is_in_a_file)
{
  std::string const text = log_text(1000);
  scratch_dir dir;
  allocation_log_reader reader{dir.write("log.csv.gz", gzip_stored(text))};
  std::vector<log_event> events(300);
  std::vector<log_event> all;
  std::size_t n = 0;
  double last = 0.0;
  while ((n = reader.read(events)) > 0) {
    all.insert(all.end(), events.begin(), events.begin() + static_cast<std::ptrdiff_t>(n));
    ASSERT_TRUE(reader.fraction_read().has_value());
    EXPECT_GE(*reader.fraction_read(), last);
    last = *reader.fraction_read();
    if (n < events.size()) { break; }
  }
  EXPECT_EQ(all, parse_allocation_log(text, "text").events);
  EXPECT_DOUBLE_EQ(last, 1.0);
  EXPECT_EQ(reader.read(events), 0U) << "the end stays the end";
}

TEST(log_source, reads_input_that_can_be_read_once_again_through_its_copy)
{
  std::string const text = log_text(5000);
  std::vector<log_event> const expected = parse_allocation_log(text, "text").events;
  for (bool const gzip : {false, true}) {  // the copy is compressed (plain) or kept as it is (gzip)
    SCOPED_TRACE(gzip ? "gzip" : "plain");
    pipe_feeder pipe{gzip ? gzip_stored(text) : text};
    log_source source{pipe.path()};
    for (int pass = 0; pass < 3; ++pass) {
      SCOPED_TRACE(pass);
      allocation_log_reader reader = source.open();
      EXPECT_EQ(reader.fraction_read().has_value(), pass > 0) << "the copy's size is known";
      EXPECT_EQ(events_of(std::move(reader)), expected);
    }
  }
}

TEST(log_source, reopens_a_regular_file_for_each_pass)
{
  std::string const text = log_text(100);
  scratch_dir dir;
  log_source source{dir.write("log.csv", text), log_passes::one};
  EXPECT_EQ(events_of(source.open()), parse_allocation_log(text, "text").events);
  EXPECT_EQ(events_of(source.open()), parse_allocation_log(text, "text").events);
}

TEST(log_source, refuses_a_second_pass_it_cannot_give)
{
  std::string const text = log_text(100);
  {
    pipe_feeder pipe{text};
    log_source source{pipe.path(), log_passes::one};
    (void)events_of(source.open());
    EXPECT_THROW((void)source.open(), log_format_error) << "log_passes::one keeps no copy";
  }
  {
    pipe_feeder pipe{text};
    log_source source{pipe.path()};
    {
      allocation_log_reader first = source.open();
      ASSERT_TRUE(first.next().has_value());
    }  // stopped before the end
    try {
      (void)source.open();
      FAIL() << "a second pass of a copy that is not whole";
    } catch (log_format_error const& e) {
      EXPECT_NE(std::string{e.what()}.find("first pass stopped before the end"), std::string::npos) << e.what();
    }
  }
}

TEST(log_source, names_the_temporary_folder_when_the_copy_cannot_be_made)
{
  pipe_feeder pipe{log_text(10)};
  char const* const old = std::getenv("TMPDIR");
  std::string const saved = old == nullptr ? "" : old;
  ::setenv("TMPDIR", "/nonexistent/gpumem-tmp", 1);
  log_source source{pipe.path()};
  try {
    (void)source.open();
    ADD_FAILURE() << "no error without a temporary folder";
  } catch (log_format_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("cannot keep a copy of the log (it can be read only once) in "
                                         "/nonexistent/gpumem-tmp (TMPDIR): No such file or directory"),
              std::string::npos)
      << e.what();
  }
  if (old == nullptr) {
    ::unsetenv("TMPDIR");
  } else {
    ::setenv("TMPDIR", saved.c_str(), 1);
  }
}

}  // namespace
}  // namespace gpumem::test
