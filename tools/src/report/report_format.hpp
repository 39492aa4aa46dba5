// Text for the report page (html_report.cpp) and its charts (svg_chart.cpp): escaping for HTML and SVG,
// numbers printed without the locale and never as "nan" or "inf", and the units people read on an axis
// ("4 KiB", "1.5k", "2.5 ms", "1.25×"). Internal to the library.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace gpumem::detail {

/** @return `text` with & < > " ' replaced by entities: safe in element content and in quoted attributes. */
[[nodiscard]] std::string xml_escape(std::string_view text);

/**
 * @return `value` with exactly `decimals` decimals ("C" notation whatever the locale, no exponent, no
 * "-0.0"); a non-finite value prints as 0, so that no "nan" or "inf" reaches a page.
 */
[[nodiscard]] std::string fixed(double value, int decimals);

/** @return `value` with at most three significant digits and no trailing zeros: "1.5", "12.3", "250". */
[[nodiscard]] std::string short_number(double value);

/** @return a byte count in the largest binary unit that keeps it at least 1: "256 B", "4 KiB", "1.5 MiB". */
[[nodiscard]] std::string short_bytes(double bytes);

/** @return a count with a decimal suffix above 9999: "950", "1.5k", "12.3M". */
[[nodiscard]] std::string short_count(double count);

/** @return nanoseconds in a decimal unit: "850 ns", "1.2 µs", "3.4 ms", "2.1 s". */
[[nodiscard]] std::string short_duration(double ns);

/** @return a ratio with a times sign: "1.25×", "16.8M×". */
[[nodiscard]] std::string short_ratio(double ratio);

/** @return the label of 2^b bytes, the lower bound of a log2 size bucket: "1 B", "512 B", "4 KiB", "1 GiB". */
[[nodiscard]] std::string pow2_bytes_label(std::size_t b);

/**
 * @return the label of 2^b nanoseconds, the lower bound of a log2 latency bucket, in binary steps of the
 * decimal units: "1 ns", "512 ns", "1 µs" (1024 ns), "2 ms" (2^21 ns), "1 s" (2^30 ns).
 */
[[nodiscard]] std::string pow2_ns_label(std::size_t b);

}  // namespace gpumem::detail
