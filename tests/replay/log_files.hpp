// Test helpers for allocation logs: a scratch directory, files written into it (plain, or gzip made here
// with stored deflate blocks so the tests need neither zlib nor a gzip program), and where the shared
// traces are.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <unistd.h>

namespace gpumem::test {

/// A directory of its own per test, removed at the end.
class scratch_dir {
 public:
  scratch_dir()
  {
    auto const* const info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string const name = info == nullptr ? std::string{"none"}
                                             : std::string{info->test_suite_name()} + "." + info->name();
    path_ = std::filesystem::temp_directory_path() / ("gpumem-" + std::to_string(::getpid()) + "-" + name);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~scratch_dir()
  {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  scratch_dir(scratch_dir const&) = delete;
  scratch_dir& operator=(scratch_dir const&) = delete;

  [[nodiscard]] std::filesystem::path const& path() const noexcept { return path_; }

  /// Writes `bytes` to a file named `name` in the directory. @return its path.
  std::filesystem::path write(std::string const& name, std::string_view bytes) const
  {
    std::filesystem::path const file = path_ / name;
    std::ofstream out{file, std::ios::binary};
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return file;
  }

 private:
  std::filesystem::path path_;
};

/// CRC-32 (IEEE 802.3), as gzip's trailer needs it.
inline std::uint32_t crc32(std::string_view data)
{
  std::uint32_t crc = 0xFFFFFFFFU;
  for (char const c : data) {
    crc ^= static_cast<unsigned char>(c);
    for (int bit = 0; bit < 8; ++bit) { crc = (crc >> 1) ^ (0xEDB88320U & (0U - (crc & 1U))); }
  }
  return ~crc;
}

/// `text` as a valid gzip file (RFC 1952) whose deflate data are stored (uncompressed) blocks (RFC 1951).
inline std::string gzip_stored(std::string_view text)
{
  std::string out{"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff", 10};
  auto const put16 = [&](std::size_t v) {
    out += static_cast<char>(v & 0xFF);
    out += static_cast<char>((v >> 8) & 0xFF);
  };
  auto const put32 = [&](std::uint32_t v) {
    for (int i = 0; i < 4; ++i) { out += static_cast<char>((v >> (8 * i)) & 0xFF); }
  };
  std::string_view rest = text;
  do {
    std::size_t const n = std::min<std::size_t>(rest.size(), 65535);
    bool const last = n == rest.size();
    out += static_cast<char>(last ? 1 : 0);  // BFINAL, BTYPE = 00 (stored)
    put16(n);
    put16(~n & 0xFFFF);
    out.append(rest.substr(0, n));
    rest.remove_prefix(n);
  } while (!rest.empty());
  put32(crc32(text));
  put32(static_cast<std::uint32_t>(text.size() & 0xFFFFFFFFU));
  return out;
}

/// The shared traces' directory: $GPUMEM_TRACES_DIR, else what the build says (tests/CMakeLists.txt).
inline std::filesystem::path traces_dir()
{
  if (char const* const env = std::getenv("GPUMEM_TRACES_DIR"); env != nullptr && *env != '\0') { return env; }
#ifdef GPUMEM_TRACES_DIR
  return GPUMEM_TRACES_DIR;
#else
  return {};
#endif
}

/// The ResNet-50 training trace, or an empty path when this checkout has no shared traces.
inline std::filesystem::path resnet50_trace()
{
  std::filesystem::path const file = traces_dir() / "pytorch_resnet50_train.csv.gz";
  return traces_dir().empty() || !std::filesystem::exists(file) ? std::filesystem::path{} : file;
}

}  // namespace gpumem::test
