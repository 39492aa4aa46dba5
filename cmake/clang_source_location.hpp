// Forced into every translation unit by the `thread-safety` preset (-include), and only there.
//
// libstdc++ defines std::source_location only when the compiler has __builtin_source_location, which
// clang gained in version 15; the preset's clang 14 would otherwise reject error.hpp. This stand-in gives
// the same interface from the older builtins. The preset only compiles (its product is its diagnostics),
// so nothing built with this header is ever run or installed.
#pragma once

#include <version>  // libstdc++'s configuration, to test for its own definition below

#if defined(__clang__) && !__has_builtin(__builtin_source_location) && !defined(__cpp_lib_source_location)
#define _GLIBCXX_SRCLOC 1  // libstdc++'s <source_location> then adds nothing
namespace std {
struct source_location {
  static constexpr source_location current(char const* file = __builtin_FILE(),
                                           char const* function = __builtin_FUNCTION(),
                                           unsigned line = __builtin_LINE(), unsigned column = __builtin_COLUMN()) noexcept
  {
    source_location here;
    here.file_ = file;
    here.function_ = function;
    here.line_ = line;
    here.column_ = column;
    return here;
  }
  constexpr source_location() noexcept = default;
  [[nodiscard]] constexpr unsigned line() const noexcept { return line_; }
  [[nodiscard]] constexpr unsigned column() const noexcept { return column_; }
  [[nodiscard]] constexpr char const* file_name() const noexcept { return file_; }
  [[nodiscard]] constexpr char const* function_name() const noexcept { return function_; }

 private:
  char const* file_ = "";
  char const* function_ = "";
  unsigned line_ = 0;
  unsigned column_ = 0;
};
}  // namespace std
#endif
