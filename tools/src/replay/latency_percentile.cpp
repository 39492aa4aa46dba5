// latency_percentile.hpp: a percentile read off log2 buckets.
#include <gpumem/replay/latency_percentile.hpp>

#include <gpumem/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace gpumem {

std::optional<double> latency_percentile(replay_timeline const& timeline, double q)
{
  expects(q > 0.0 && q <= 1.0, "latency_percentile: q must be in (0, 1]");
  auto const& buckets = timeline.latency_histogram;
  double total = 0.0;  // as double: no sum of counts can overflow
  for (std::size_t const c : buckets) { total += static_cast<double>(c); }
  if (total == 0.0) { return std::nullopt; }
  double const rank = std::max(1.0, std::ceil(q * total - 1e-9));
  double before = 0.0;
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    double const count = static_cast<double>(buckets[b]);
    if (count == 0.0 || before + count < rank) {
      before += count;
      continue;
    }
    if (b == 0) { return 1.0; }
    if (b + 1 == buckets.size()) { return std::ldexp(1.0, static_cast<int>(b)); }
    return std::exp2(static_cast<double>(b) + (rank - before - 0.5) / count);
  }
  return std::ldexp(1.0, static_cast<int>(buckets.size() - 1));  // not reached: rank <= total
}

}  // namespace gpumem
