// A deterministic mutation driver for LLVMFuzzerTestOneInput, for compilers without libFuzzer (GCC): the
// same command line as libFuzzer's for what ctest uses,
//
//     gpumem_log_fuzz [-runs=N] [-seed=S] [-max_len=L] CORPUS_DIR_OR_FILE...
//
// runs every corpus file once, then N inputs made from them by a few mutations each (bytes, lines and CSV
// fields; gzip compression, so that corrupt and truncated gzip are tried too), from a std::mt19937_64
// seeded with S, so that a failure reproduces with the same command. A crash or an abort ends the process:
// ctest reports the test as failed. The input that was running is in the file named by
// GPUMEM_FUZZ_LAST_INPUT when that is set (written before each run).
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size);

namespace {

struct options {
  std::size_t runs{1000};
  std::uint64_t seed{1};
  std::size_t max_len{256 * 1024};
  std::vector<std::filesystem::path> corpus;
};

std::string read_file(std::filesystem::path const& path)
{
  std::ifstream in{path, std::ios::binary};
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

options parse(int argc, char** argv)
{
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view const a = argv[i];
    auto const number = [&](std::string_view prefix) { return std::strtoull(a.substr(prefix.size()).data(), nullptr, 10); };
    if (a.starts_with("-runs=")) {
      o.runs = number("-runs=");
    } else if (a.starts_with("-seed=")) {
      o.seed = number("-seed=");
    } else if (a.starts_with("-max_len=")) {
      o.max_len = std::max<std::size_t>(number("-max_len="), 16);
    } else if (a.starts_with("-")) {
      std::fprintf(stderr, "fuzz driver: unknown option '%s' ignored\n", argv[i]);
    } else {
      o.corpus.emplace_back(a);
    }
  }
  return o;
}

std::vector<std::string> load_corpus(std::vector<std::filesystem::path> const& paths)
{
  std::vector<std::filesystem::path> files;
  for (auto const& path : paths) {
    if (std::filesystem::is_directory(path)) {
      for (auto const& entry : std::filesystem::directory_iterator{path}) {
        if (entry.is_regular_file()) { files.push_back(entry.path()); }
      }
    } else {
      files.push_back(path);
    }
  }
  std::sort(files.begin(), files.end());  // the same order everywhere: runs reproduce
  std::vector<std::string> inputs;
  for (auto const& file : files) { inputs.push_back(read_file(file)); }
  return inputs;
}

/// `text` gzip-compressed at `level` (0: stored blocks).
std::string gzip(std::string const& text, int level)
{
  z_stream z{};
  if (deflateInit2(&z, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) { std::abort(); }
  std::string out(deflateBound(&z, static_cast<uLong>(text.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) { std::abort(); }
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

/// What the log's fields are made of, and values at their edges.
constexpr std::array<std::string_view, 30> tokens{
  "0", "1", "-1", "18446744073709551615", "18446744073709551616", "9223372036854775808", "4294967296",
  "0x0", "0x1", "0x2", "0xffffffffffffffff", "0x10000000000000000", "0x", "0X7F", "00:00:00", "23:59:59.999999999",
  "12:00:00.5", "24:00:00", "23:59:60", "allocate", "free", "allocate failure", ",", "\n", "\r\n", " ", "\xEF\xBB\xBF",
  "Thread,Time,Action,Pointer,Size,Stream\n", "\x1f\x8b", "\0"};

class mutator {
 public:
  explicit mutator(std::uint64_t seed) : random_{seed} {}

  std::size_t below(std::size_t n) { return n == 0 ? 0 : std::uniform_int_distribution<std::size_t>{0, n - 1}(random_); }

  void mutate(std::string& s, std::vector<std::string> const& corpus, std::size_t max_len)
  {
    switch (below(12)) {
      case 0:  // flip a bit
        if (!s.empty()) {
          std::size_t const at = below(s.size());
          s[at] = static_cast<char>(s[at] ^ (1 << below(8)));
        }
        break;
      case 1:  // a random byte
        if (!s.empty()) { s[below(s.size())] = static_cast<char>(below(256)); }
        break;
      case 2: {  // delete a range
        std::size_t const at = below(s.size() + 1);
        s.erase(at, below(std::min<std::size_t>(s.size() - at, 64) + 1));
        break;
      }
      case 3: {  // repeat a range in place
        std::size_t const at = below(s.size() + 1);
        std::string const piece = s.substr(at, below(256) + 1);
        s.insert(at, piece.size() > 0 ? piece : std::string{"\n"});
        break;
      }
      case 4: {  // a token anywhere
        std::string_view const token = tokens[below(tokens.size())];
        s.insert(below(s.size() + 1), token.data(), token.size());
        break;
      }
      case 5:  // a CSV field replaced by a token
        replace_field(s);
        break;
      case 6:  // two lines swapped
        swap_lines(s);
        break;
      case 7:  // truncated
        s.resize(below(s.size() + 1));
        break;
      case 8:  // spliced with another input
        if (!corpus.empty()) {
          std::string const& other = corpus[below(corpus.size())];
          s = s.substr(0, below(s.size() + 1)) + other.substr(below(other.size() + 1));
        }
        break;
      case 9:  // gzip-compressed, stored or deflated
        s = gzip(s, below(2) == 0 ? 0 : 6);
        break;
      case 10:  // many rows: the body repeated
        for (std::size_t n = below(8); n > 0 && s.size() * 2 <= max_len; --n) { s += s.substr(s.find('\n') + 1); }
        break;
      default:  // a long line
        s.insert(below(s.size() + 1), std::string(below(70'000), static_cast<char>('0' + below(10))));
        break;
    }
    if (s.size() > max_len) { s.resize(max_len); }
  }

 private:
  void replace_field(std::string& s)
  {
    if (s.empty()) { return; }
    std::size_t const at = below(s.size());
    std::size_t begin = s.find_last_of(",\n", at);
    begin = begin == std::string::npos ? 0 : begin + 1;
    std::size_t end = s.find_first_of(",\n", at);
    if (end == std::string::npos) { end = s.size(); }
    if (begin > end) { return; }
    s.replace(begin, end - begin, tokens[below(tokens.size())]);
  }

  void swap_lines(std::string& s)
  {
    std::vector<std::string> lines;
    std::istringstream in{s};
    for (std::string line; std::getline(in, line);) { lines.push_back(line); }
    if (lines.size() < 2) { return; }
    std::swap(lines[below(lines.size())], lines[below(lines.size())]);
    s.clear();
    for (auto const& line : lines) { s += line + "\n"; }
  }

  std::mt19937_64 random_;
};

void run(std::string const& input)
{
  if (char const* const last = std::getenv("GPUMEM_FUZZ_LAST_INPUT"); last != nullptr && *last != '\0') {
    std::ofstream{last, std::ios::binary}.write(input.data(), static_cast<std::streamsize>(input.size()));
  }
  LLVMFuzzerTestOneInput(reinterpret_cast<std::uint8_t const*>(input.data()), input.size());
}

}  // namespace

int main(int argc, char** argv)
{
  options const o = parse(argc, argv);
  std::vector<std::string> corpus = load_corpus(o.corpus);
  if (corpus.empty()) { corpus.emplace_back("Thread,Time,Action,Pointer,Size,Stream\n"); }
  for (std::string const& input : corpus) { run(input); }
  mutator m{o.seed};
  for (std::size_t i = 0; i < o.runs; ++i) {
    std::string input = corpus[m.below(corpus.size())];
    for (std::size_t n = m.below(4) + 1; n > 0; --n) { m.mutate(input, corpus, o.max_len); }
    run(input);
  }
  std::printf("fuzz driver: %zu corpus inputs and %zu mutated ones (seed %llu), no failure\n", corpus.size(), o.runs,
              static_cast<unsigned long long>(o.seed));
  return 0;
}
