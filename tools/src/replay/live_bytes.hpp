// Byte counts taken from a log's rows (internal to src/replay and src/report). A log may claim any sizes:
// sums of them must neither wrap around past 2^64 nor be undefined behaviour.
#pragma once

#include <cstddef>
#include <limits>

namespace gpumem::detail {

/// @return a + b, or SIZE_MAX when that does not fit.
[[nodiscard]] constexpr std::size_t saturating_add(std::size_t a, std::size_t b) noexcept
{
  return a > std::numeric_limits<std::size_t>::max() - b ? std::numeric_limits<std::size_t>::max() : a + b;
}

/**
 * @brief The bytes a log holds live and their peak, exact however large the rows' sizes (counted in 128
 * bits: 2^64 rows of 2^64 bytes would be needed to wrap); the peak is reported saturated at SIZE_MAX.
 * Invariant: live <= peak.
 */
class live_bytes_meter {
 public:
  void add(std::size_t bytes) noexcept
  {
    live_ += bytes;
    if (live_ > peak_) { peak_ = live_; }
  }
  /// @pre `bytes` was added and not subtracted since.
  void subtract(std::size_t bytes) noexcept { live_ -= bytes; }

  [[nodiscard]] std::size_t peak() const noexcept
  {
    constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
    return peak_ > wide{max} ? max : static_cast<std::size_t>(peak_);
  }

 private:
  __extension__ typedef unsigned __int128 wide;  // NOLINT(modernize-use-using): __extension__ needs typedef
  wide live_{0};
  wide peak_{0};
};

}  // namespace gpumem::detail
