// `gpumem demo`: one stream-ordered round trip through the current device resource, each step timed with
// events: allocate two device_uvector<int32_t>, fill one from the host, memset the other, copy both back,
// verify every element, deallocate. Exit status 1 on any mismatch.
#include "commands.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/buffer/device_uvector.hpp>
#include <gpumem/cuda_stream.hpp>
#include <gpumem/device.hpp>
#include <gpumem/error.hpp>
#include <gpumem/event.hpp>
#include <gpumem/mr/per_device_resource.hpp>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

namespace gpumem::cli {
namespace {

constexpr std::size_t default_elements = std::size_t{1} << 22;  // 4 Mi int32 = 16 MiB per buffer
constexpr unsigned char fill_byte = 0x5a;
constexpr std::int32_t fill_value = 0x5a5a5a5a;

/// The host pattern: distinct neighbours, every bit position used, cheap to recompute when verifying.
constexpr std::int32_t pattern(std::size_t i) noexcept
{
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(i) * 2654435761U);
}

std::size_t parse_elements(std::span<std::string_view const> args)
{
  std::size_t elements = default_elements;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--elements" && i + 1 < args.size()) {
      std::string_view const text = args[++i];
      auto const [end, error] = std::from_chars(text.data(), text.data() + text.size(), elements);
      if (error != std::errc{} || end != text.data() + text.size() || elements == 0) {
        throw usage_error("--elements needs a positive integer, not '" + std::string{text} + "'");
      }
    } else {
      throw usage_error("demo: unexpected argument '" + std::string{args[i]} + "'");
    }
  }
  return elements;
}

/// Times one step on `stream` with a pair of events and prints "  <what> ... <ms> ms [<GB/s>]".
class step_timer {
 public:
  step_timer(cuda_stream_view stream, std::ostream& out) : stream_{stream}, out_{out} {}

  template <class Step>
  void operator()(std::string const& what, std::size_t bytes_moved, Step&& step)
  {
    start_.record(stream_);
    step();
    end_.record(stream_);
    end_.synchronize();
    float const ms = event::elapsed_time(start_, end_);
    char line[160];
    if (bytes_moved != 0 && ms > 0.0F) {
      double const gb_per_s = static_cast<double>(bytes_moved) / (static_cast<double>(ms) * 1e6);
      std::snprintf(line, sizeof line, "%9.3f ms  %8.2f GB/s", static_cast<double>(ms), gb_per_s);
    } else {
      std::snprintf(line, sizeof line, "%9.3f ms", static_cast<double>(ms));
    }
    out_ << "  " << what << std::string(what.size() < 52 ? 52 - what.size() : 1, ' ') << line << '\n';
  }

 private:
  cuda_stream_view stream_;
  std::ostream& out_;
  event start_;
  event end_;
};

/// Index of the first element of `got` that differs from expected(i), or nullopt.
template <class Expected>
std::optional<std::size_t> first_mismatch(std::vector<std::int32_t> const& got, Expected expected)
{
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != expected(i)) { return i; }
  }
  return std::nullopt;
}

}  // namespace

int run_demo(std::span<std::string_view const> args, std::ostream& out)
{
  std::size_t const elements = parse_elements(args);
  std::size_t const bytes = elements * sizeof(std::int32_t);
  auto& backend = detail::get_backend();
  mr::device_memory_resource* const resource = mr::get_current_device_resource();
  cuda_device_id const device = get_current_cuda_device();

  out << "gpumem demo\n"
      << "backend: " << to_string(backend.kind()) << ", device " << device.value() << " ("
      << get_device_properties(device).name << ")\n"
      << "buffers: 2 x " << elements << " int32 = 2 x " << format_bytes(bytes) << '\n'
      << "device memory free before: " << format_bytes(available_device_memory(device).free) << '\n';

  cuda_stream stream;
  step_timer timed{stream.view(), out};
  std::vector<std::int32_t> host(elements);
  for (std::size_t i = 0; i < elements; ++i) { host[i] = pattern(i); }

  std::optional<device_uvector<std::int32_t>> a;
  std::optional<device_uvector<std::int32_t>> b;
  timed("allocate a (" + std::to_string(elements) + " x int32)", 0,
        [&] { a.emplace(elements, stream.view(), resource); });
  timed("allocate b (" + std::to_string(elements) + " x int32)", 0,
        [&] { b.emplace(elements, stream.view(), resource); });
  out << "device memory free after allocating: " << format_bytes(available_device_memory(device).free) << '\n';

  timed("copy host -> a", bytes,
        [&] { backend.memcpy_async(a->data(), host.data(), bytes, stream.value()); });
  timed("memset b to 0x5a bytes", bytes, [&] { backend.memset_async(b->data(), fill_byte, bytes, stream.value()); });

  std::vector<std::int32_t> a_back(elements);
  std::vector<std::int32_t> b_back(elements);
  timed("copy a -> host", bytes, [&] { backend.memcpy_async(a_back.data(), a->data(), bytes, stream.value()); });
  timed("copy b -> host", bytes, [&] { backend.memcpy_async(b_back.data(), b->data(), bytes, stream.value()); });

  timed("deallocate a and b", 0, [&] {
    a.reset();
    b.reset();
  });
  stream.synchronize();
  out << "device memory free after deallocating: " << format_bytes(available_device_memory(device).free) << '\n';

  bool ok = true;
  if (auto const bad = first_mismatch(a_back, pattern)) {
    out << "MISMATCH in a at element " << *bad << ": got " << a_back[*bad] << ", expected " << pattern(*bad) << '\n';
    ok = false;
  }
  if (auto const bad = first_mismatch(b_back, [](std::size_t) { return fill_value; })) {
    out << "MISMATCH in b at element " << *bad << ": got " << b_back[*bad] << ", expected " << fill_value << '\n';
    ok = false;
  }
  if (!ok) {
    out << "demo FAILED\n";
    return 1;
  }
  out << "verified " << 2 * elements << " elements (" << elements << " in a, " << elements << " in b)\n"
      << "demo passed\n";
  return 0;
}

}  // namespace gpumem::cli
