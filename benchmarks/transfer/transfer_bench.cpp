// gpumem_bench_transfer: host<->device copies of 1 GiB (--smoke: 8 MiB), the CUDA call against gpumem's
// staged copies (transfer.hpp), from and to pinned and pageable host memory, in the same run:
//
//   transfer/<dir>_<kind>/cudaMemcpyAsync   the backend's memcpy_async (cudaMemcpyAsync) + stream sync; from
//                                           pageable memory CUDA stages through its own small buffer
//   transfer/<dir>_<kind>/gpumem            gpumem::copy_to_device / copy_to_host + stream sync, with the
//                                           process's transfer_config (defaults, or GPUMEM_STAGING_CHUNK /
//                                           GPUMEM_COPY_THREADS)
//       <dir> h2d or d2h, <kind> pinned or pageable
//   transfer/<dir>_pageable/gpumem/threads:<T>/chunk:<C>MiB
//                                           the staged copies with T threads (4 8 12 16) and C MiB chunks
//                                           (1 2 4 8), to choose the defaults on the GPU machine
//   transfer/<dir>_<kind>/unified_buffer    a unified_buffer<std::byte> of the same size (pinned or pageable host
//                                           copy), SYNCHRONIZED: mark the source copy dirty, then
//                                           sync_to_device / sync_to_host + stream sync (d2h: and host_view(),
//                                           which waits for the copy): what a user of unified buffers gets
//   zeros/<size>/cudaMemsetAsync            the backend's memset_async on a device buffer + stream sync
//   zeros/<size>/gpumem                     gpumem::zeros + stream sync + gpumem::free (plain.hpp), on the
//                                           current device resource (named in the context; warmed once)
//   zeros/<size>/gpumem_pool                the same with a pool_memory_resource (over cudaMalloc) as the current
//                                           device resource: the allocation is a cached block
//   zeros/<size>/unified_buffer             unified_buffer<std::byte>::zeros(stream) + stream sync (its device
//                                           copy allocated once)
// Figures: GB/s (10^9 bytes per wall second, the stream synchronised inside the timed region so that every
// copy is complete), bytes_per_second, ns_per_op (wall ns per whole copy).
//
// Method. The buffers (one device buffer, one pinned buffer from the backend, one pageable new[] buffer, all
// of the full size) are made once and every byte of them written before any timing (no first-touch page
// faults are measured); host buffers and the device buffer hold the same byte pattern, so every copy leaves
// it in place. Before its first timed iteration each benchmark verifies its operation once, untimed: the
// destination's sample positions (the first and last byte, each side of every 4/8/16 MiB boundary, and
// spread positions) are spoiled, the operation runs, and the samples are read back through the plain backend
// copy and compared; a mismatch or an exception fails the run (non-zero exit). Iterations: 5 per call for the
// full size (50 for the zeros rows; 3 with --smoke) unless --min-time is given; --benchmark_repetitions is
// honoured.
//
// Flags: those of bench_support.hpp (--smoke, --min-time, --timeout; --resource and --list do not apply
// here), and --selftest=short_copy, which makes every gpumem copy leave out its last byte, so that ctest can
// prove the verification fails the run.

#include "../common/bench_support.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/buffer/unified_buffer.hpp>
#include <gpumem/cuda_stream.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/device.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/per_device_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/plain.hpp>
#include <gpumem/transfer.hpp>

#include <benchmark/benchmark.h>

#include <cxxabi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

namespace gpumem::bench {
namespace {

using clock_type = std::chrono::steady_clock;

constexpr std::size_t mib = std::size_t{1} << 20U;
constexpr std::size_t full_bytes = std::size_t{1} << 30U;  // 1 GiB
constexpr std::size_t smoke_bytes = 8 * mib;
constexpr std::array<unsigned, 4> sweep_threads{4, 8, 12, 16};
constexpr std::array<std::size_t, 4> sweep_chunk_mib{1, 2, 4, 8};

options g_options;
bool g_short_copy = false;  // --selftest=short_copy: the gpumem copies leave out their last byte

[[nodiscard]] std::size_t copy_bytes() { return g_options.smoke ? smoke_bytes : full_bytes; }

[[nodiscard]] std::string size_label(std::size_t bytes)
{
  return bytes % (mib * 1024) == 0 ? std::to_string(bytes / (mib * 1024)) + "GiB" : std::to_string(bytes / mib) + "MiB";
}

/// The byte every buffer holds at offset `i`: not periodic in any power of two up to 2^20, so a chunk copied
/// to the wrong place shows.
[[nodiscard]] constexpr std::uint8_t pattern_at(std::size_t i) noexcept
{
  auto const x = static_cast<std::uint64_t>(i);
  return static_cast<std::uint8_t>(x * 131U + (x >> 8U) * 7U + (x >> 16U) * 3U + (x >> 24U));
}

// ---- buffers --------------------------------------------------------------------------------------------

/** @brief The buffers every benchmark shares, made on first use, written through before any timing. */
class transfer_buffers {
 public:
  explicit transfer_buffers(std::size_t bytes) : bytes_{bytes}, stream_{cuda_stream::flags::non_blocking}
  {
    auto& backend = detail::get_backend();
    device_ = static_cast<std::byte*>(backend.malloc_device(bytes));
    pinned_ = static_cast<std::byte*>(backend.malloc_pinned(bytes));
    samples_ = sample_positions(bytes);
    scratch_ = static_cast<std::uint8_t*>(backend.malloc_pinned(samples_.size()));
    if (device_ == nullptr || pinned_ == nullptr || scratch_ == nullptr) {
      release();
      throw out_of_memory("gpumem_bench_transfer: no memory for the " + format_bytes(bytes) + " buffers");
    }
    pageable_ = std::make_unique<std::byte[]>(bytes);  // value-initialised: every page written
    for (std::size_t i = 0; i < bytes; ++i) { pinned_[i] = static_cast<std::byte>(pattern_at(i)); }
    std::memcpy(pageable_.get(), pinned_, bytes);
    backend.memcpy_async(device_, pinned_, bytes, stream_.value());
    stream_.synchronize();
  }
  ~transfer_buffers() { release(); }
  transfer_buffers(transfer_buffers const&) = delete;
  transfer_buffers& operator=(transfer_buffers const&) = delete;
  transfer_buffers(transfer_buffers&&) = delete;
  transfer_buffers& operator=(transfer_buffers&&) = delete;

  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  [[nodiscard]] std::byte* device() const noexcept { return device_; }
  [[nodiscard]] std::byte* pinned() const noexcept { return pinned_; }
  [[nodiscard]] std::byte* pageable() const noexcept { return pageable_.get(); }
  [[nodiscard]] cuda_stream_view stream() const noexcept { return stream_.view(); }

  /// A second device buffer for the memset benchmark (which would spoil the pattern of the first).
  [[nodiscard]] std::byte* memset_target()
  {
    if (memset_target_ == nullptr) {
      memset_target_ = static_cast<std::byte*>(detail::get_backend().malloc_device(bytes_));
      if (memset_target_ == nullptr) { throw out_of_memory("gpumem_bench_transfer: no device memory to memset"); }
    }
    return memset_target_;
  }

  /// Writes a byte other than `expected(p)` at every sample position p of device memory `ptr`.
  template <class Expected>
  void spoil_device(std::byte* ptr, Expected expected)
  {
    auto& backend = detail::get_backend();
    for (std::size_t k = 0; k < samples_.size(); ++k) {
      scratch_[k] = static_cast<std::uint8_t>(~expected(samples_[k]));
      backend.memcpy_async(ptr + samples_[k], scratch_ + k, 1, stream_.value());
    }
    stream_.synchronize();
  }

  /// Reads device memory `ptr` at every sample position. @return the first mismatch, or an empty string.
  template <class Expected>
  [[nodiscard]] std::string check_device(std::byte const* ptr, Expected expected)
  {
    auto& backend = detail::get_backend();
    for (std::size_t k = 0; k < samples_.size(); ++k) {
      scratch_[k] = static_cast<std::uint8_t>(~expected(samples_[k]));
      backend.memcpy_async(scratch_ + k, ptr + samples_[k], 1, stream_.value());
    }
    stream_.synchronize();
    for (std::size_t k = 0; k < samples_.size(); ++k) {
      if (scratch_[k] != expected(samples_[k])) {
        return mismatch("device", samples_[k], scratch_[k], expected(samples_[k]));
      }
    }
    return {};
  }

  /// Writes a byte other than the pattern at every sample position of host memory `ptr`.
  void spoil_host(std::byte* ptr) const
  {
    for (std::size_t const p : samples_) { ptr[p] = static_cast<std::byte>(~pattern_at(p)); }
  }

  /// @return the first sample position of host memory `ptr` without the pattern, or an empty string.
  [[nodiscard]] std::string check_host(std::byte const* ptr) const
  {
    for (std::size_t const p : samples_) {
      auto const got = static_cast<std::uint8_t>(ptr[p]);
      if (got != pattern_at(p)) { return mismatch("host", p, got, pattern_at(p)); }
    }
    return {};
  }

 private:
  [[nodiscard]] static std::vector<std::size_t> sample_positions(std::size_t bytes)
  {
    std::set<std::size_t> positions{0, 1, bytes - 2, bytes - 1};
    for (std::size_t const chunk : {4 * mib, 8 * mib, 16 * mib}) {
      for (std::size_t boundary = chunk; boundary < bytes; boundary += chunk) {
        if (boundary / chunk > 8 && boundary + 8 * chunk < bytes) { continue; }  // the first and last few
        positions.insert({boundary - 1, boundary});
      }
    }
    constexpr std::size_t spread = 64;
    std::size_t const stride = bytes / spread;
    for (std::size_t k = 0; k < spread; ++k) { positions.insert(stride * k + (k * 7919U) % stride); }
    return {positions.begin(), positions.end()};
  }

  [[nodiscard]] static std::string mismatch(char const* where, std::size_t position, unsigned got, unsigned expected)
  {
    return std::string{where} + " byte " + std::to_string(position) + " is " + std::to_string(got) + ", expected " +
           std::to_string(expected);
  }

  void release() noexcept
  {
    auto& backend = detail::get_backend();
    (void)stream_.view().synchronize_no_throw();
    backend.free_device(device_);
    backend.free_device(memset_target_);
    backend.free_pinned(pinned_);
    backend.free_pinned(scratch_);
    device_ = memset_target_ = pinned_ = nullptr;
    scratch_ = nullptr;
  }

  std::size_t bytes_;
  cuda_stream stream_;
  std::byte* device_{};
  std::byte* memset_target_{};
  std::byte* pinned_{};
  std::unique_ptr<std::byte[]> pageable_;
  std::vector<std::size_t> samples_;
  std::uint8_t* scratch_{};  // pinned, one byte per sample
};

std::unique_ptr<transfer_buffers> g_buffers;
std::set<std::string> g_verified;  // benchmarks whose untimed verification passed

[[nodiscard]] transfer_buffers& buffers()
{
  if (!g_buffers) { g_buffers = std::make_unique<transfer_buffers>(copy_bytes()); }
  return *g_buffers;
}

/** @brief Sets the transfer configuration for one scope (when given) and restores the previous one. */
class config_scope {
 public:
  explicit config_scope(std::optional<transfer_config> const& config) : saved_{get_transfer_config()}
  {
    if (config) {
      set_transfer_config(*config);
      changed_ = true;
    }
  }
  ~config_scope()
  {
    if (changed_) { set_transfer_config(saved_); }
  }
  config_scope(config_scope const&) = delete;
  config_scope& operator=(config_scope const&) = delete;

 private:
  transfer_config saved_;
  bool changed_{false};
};

void set_copy_counters(benchmark::State& state, std::size_t bytes, double seconds)
{
  auto const copies = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes));
  state.counters["GB/s"] = copies * static_cast<double>(bytes) / seconds / 1e9;
  state.counters["ns_per_op"] = seconds * 1e9 / copies;
  state.counters["bytes"] = static_cast<double>(bytes);
}

// ---- transfer/<dir>_<kind>/<impl> -----------------------------------------------------------------------

enum class direction : std::uint8_t { h2d, d2h };
enum class host_kind : std::uint8_t { pinned, pageable };
enum class method : std::uint8_t { cuda, gpumem };

void bm_copy(benchmark::State& state, std::string const& id, direction dir, host_kind kind, method how,
             std::optional<transfer_config> const& config)
{
  watchdog_scope const watch{id};
  try {
    transfer_buffers& b = buffers();
    config_scope const scope{config};
    std::size_t const bytes = b.bytes();
    std::byte* const host = kind == host_kind::pinned ? b.pinned() : b.pageable();
    cuda_stream_view const stream = b.stream();
    auto& backend = detail::get_backend();
    std::size_t const gpumem_bytes = g_short_copy ? bytes - 1 : bytes;
    auto const copy_once = [&] {
      if (dir == direction::h2d) {
        if (how == method::cuda) {
          backend.memcpy_async(b.device(), host, bytes, stream.value());
        } else {
          copy_to_device(b.device(), host, gpumem_bytes, stream);
        }
      } else {
        if (how == method::cuda) {
          backend.memcpy_async(host, b.device(), bytes, stream.value());
        } else {
          copy_to_host(host, b.device(), gpumem_bytes, stream);
        }
      }
      stream.synchronize();  // inside the timed region: the copy is complete
    };
    if (!g_verified.contains(id)) {
      std::string error;
      if (dir == direction::h2d) {
        b.spoil_device(b.device(), pattern_at);
        copy_once();
        error = b.check_device(b.device(), pattern_at);
      } else {
        b.spoil_host(host);
        copy_once();
        error = b.check_host(host);
      }
      if (!error.empty()) {
        record_failure(state, id + " (untimed verification pass): " + error);
        return;
      }
      g_verified.insert(id);
    }
    auto const start = clock_type::now();
    for (auto _ : state) { copy_once(); }
    auto const stop = clock_type::now();
    set_copy_counters(state, bytes, std::chrono::duration<double>(stop - start).count());
    if (config) {
      state.counters["threads"] = config->threads;
      state.counters["chunk_bytes"] = static_cast<double>(config->chunk_bytes);
    }
  } catch (std::exception const& e) {
    record_failure(state, id + ": " + e.what());
  }
}

// ---- zeros/<size>/<impl> --------------------------------------------------------------------------------

void bm_memset(benchmark::State& state, std::string const& id)
{
  watchdog_scope const watch{id};
  try {
    transfer_buffers& b = buffers();
    std::byte* const target = b.memset_target();
    auto& backend = detail::get_backend();
    auto const zero = [](std::size_t) -> std::uint8_t { return 0; };
    auto const memset_once = [&] {
      backend.memset_async(target, 0, b.bytes(), b.stream().value());
      b.stream().synchronize();
    };
    if (!g_verified.contains(id)) {
      b.spoil_device(target, zero);
      memset_once();
      if (std::string const error = b.check_device(target, zero); !error.empty()) {
        record_failure(state, id + " (untimed verification pass): " + error);
        return;
      }
      g_verified.insert(id);
    }
    auto const start = clock_type::now();
    for (auto _ : state) { memset_once(); }
    auto const stop = clock_type::now();
    set_copy_counters(state, b.bytes(), std::chrono::duration<double>(stop - start).count());
  } catch (std::exception const& e) {
    record_failure(state, id + ": " + e.what());
  }
}

void bm_zeros(benchmark::State& state, std::string const& id)
{
  watchdog_scope const watch{id};
  try {
    transfer_buffers& b = buffers();
    std::size_t const bytes = b.bytes();
    cuda_stream_view const stream = b.stream();
    auto const zero = [](std::size_t) -> std::uint8_t { return 0; };
    if (!g_verified.contains(id)) {
      // Dirty memory first (a pool hands the same block back), then zeros() must clear it. This also warms
      // a pooled resource, so the timed region sees its steady state.
      void* const dirty = gpumem::alloc(bytes, stream);
      detail::get_backend().memset_async(dirty, 0x5A, bytes, stream.value());
      stream.synchronize();
      gpumem::free(dirty, stream);
      auto* const p = static_cast<std::byte*>(gpumem::zeros(bytes, stream));
      stream.synchronize();
      std::string const error = b.check_device(p, zero);
      gpumem::free(p, stream);
      stream.synchronize();
      if (!error.empty()) {
        record_failure(state, id + " (untimed verification pass): " + error);
        return;
      }
      g_verified.insert(id);
    }
    auto const start = clock_type::now();
    for (auto _ : state) {
      void* const p = gpumem::zeros(bytes, stream);
      stream.synchronize();  // the zeros are written
      gpumem::free(p, stream);
    }
    stream.synchronize();
    auto const stop = clock_type::now();
    set_copy_counters(state, bytes, std::chrono::duration<double>(stop - start).count());
  } catch (std::exception const& e) {
    record_failure(state, id + ": " + e.what());
  }
}

// ---- transfer/<dir>_<kind>/unified_buffer, zeros/<size>/unified_buffer ----------------------------------

/** @brief The unified buffer of the benchmarks that use one: one at a time (1 GiB host + 1 GiB device). */
std::unique_ptr<unified_buffer<std::byte>> g_unified;

[[nodiscard]] unified_buffer<std::byte>& unified(bool pinned)
{
  if (!g_unified || g_unified->is_pinned() != pinned) {
    g_unified.reset();
    unified_options options;
    options.pinned = pinned;
    g_unified = std::make_unique<unified_buffer<std::byte>>(buffers().bytes(), options);
  }
  return *g_unified;
}

void bm_unified(benchmark::State& state, std::string const& id, direction dir, host_kind kind)
{
  watchdog_scope const watch{id};
  try {
    transfer_buffers& b = buffers();
    std::size_t const bytes = b.bytes();
    cuda_stream_view const stream = b.stream();
    unified_buffer<std::byte>& buffer = unified(kind == host_kind::pinned);
    // Both copies hold the pattern, state SYNCHRONIZED, before verification and timing.
    auto const prepare = [&] {
      std::memcpy(buffer.host().data(), b.pageable(), bytes);
      buffer.sync_to_device(stream);
      stream.synchronize();
    };
    auto const sync_once = [&] {
      if (dir == direction::h2d) {
        buffer.mark_host_dirty();
        buffer.sync_to_device(stream);
        stream.synchronize();
      } else {
        buffer.mark_device_dirty();
        buffer.sync_to_host(stream);
        static_cast<void>(buffer.host_view());  // waits for an asynchronous (pinned) copy
        stream.synchronize();
      }
    };
    if (!g_verified.contains(id)) {
      prepare();
      std::string error;
      if (dir == direction::h2d) {
        auto* const device = const_cast<std::byte*>(buffer.device_view(stream));  // NOLINT: spoiled on purpose
        b.spoil_device(device, pattern_at);
        sync_once();
        error = b.check_device(device, pattern_at);
      } else {
        b.spoil_host(buffer.host().data());  // HOST_DIRTY with spoiled bytes; the device copy keeps the pattern
        buffer.copy_from(std::span<std::byte const>{b.pageable(), bytes}, stream);  // DEVICE_DIRTY
        buffer.sync_to_host(stream);
        error = b.check_host(buffer.host_view().data());
        if (error.empty()) { sync_once(); }
        if (error.empty()) { error = b.check_host(buffer.host_view().data()); }
      }
      if (error.empty() && buffer.state() != buffer_state::SYNCHRONIZED) {
        error = std::string{"the buffer is "} + std::string{to_string(buffer.state())} + ", not SYNCHRONIZED";
      }
      if (!error.empty()) {
        record_failure(state, id + " (untimed verification pass): " + error);
        return;
      }
      g_verified.insert(id);
    } else {
      prepare();
    }
    auto const start = clock_type::now();
    for (auto _ : state) { sync_once(); }
    auto const stop = clock_type::now();
    set_copy_counters(state, bytes, std::chrono::duration<double>(stop - start).count());
  } catch (std::exception const& e) {
    record_failure(state, id + ": " + e.what());
  }
}

void bm_unified_zeros(benchmark::State& state, std::string const& id)
{
  watchdog_scope const watch{id};
  try {
    transfer_buffers& b = buffers();
    cuda_stream_view const stream = b.stream();
    unified_buffer<std::byte>& buffer = unified(true);
    auto const zeros_once = [&] {
      buffer.zeros(stream);
      stream.synchronize();
    };
    if (!g_verified.contains(id)) {
      auto const zero = [](std::size_t) -> std::uint8_t { return 0; };
      buffer.fill(std::byte{0x5A}, stream);
      auto* const device = const_cast<std::byte*>(buffer.device_view(stream));  // NOLINT: read back only
      zeros_once();
      if (std::string const error = b.check_device(device, zero); !error.empty()) {
        record_failure(state, id + " (untimed verification pass): " + error);
        return;
      }
      g_verified.insert(id);
    }
    auto const start = clock_type::now();
    for (auto _ : state) { zeros_once(); }
    auto const stop = clock_type::now();
    set_copy_counters(state, b.bytes(), std::chrono::duration<double>(stop - start).count());
  } catch (std::exception const& e) {
    record_failure(state, id + ": " + e.what());
  }
}

/** @brief bm_zeros with a pool as the current device resource (restored afterwards). */
void bm_zeros_pool(benchmark::State& state, std::string const& id)
{
  mr::device_memory_resource* const upstream = mr::get_current_device_resource();
  mr::pool_memory_resource pool{upstream};
  mr::device_memory_resource* const previous = mr::set_current_device_resource(&pool);
  bm_zeros(state, id);
  buffers().stream().synchronize();
  mr::set_current_device_resource(previous);
}

// ---- registration ---------------------------------------------------------------------------------------

void configure(benchmark::internal::Benchmark* b, int full_iterations = 5)
{
  b->UseRealTime()->Unit(benchmark::kMillisecond);
  if (!g_options.min_time) { b->Iterations(g_options.smoke ? 3 : full_iterations); }
  apply_common(b, g_options);
}

/// A 1 GiB memset runs at the device's memory bandwidth, well under a millisecond: 50 of them per
/// measurement, or one hiccup of the host decides the figure.
constexpr int zeros_iterations = 50;

void register_benchmarks()
{
  struct copy_row {
    direction dir;
    host_kind kind;
    char const* name;
  };
  constexpr std::array<copy_row, 4> rows{{{direction::h2d, host_kind::pinned, "h2d_pinned"},
                                          {direction::h2d, host_kind::pageable, "h2d_pageable"},
                                          {direction::d2h, host_kind::pinned, "d2h_pinned"},
                                          {direction::d2h, host_kind::pageable, "d2h_pageable"}}};
  for (copy_row const& row : rows) {
    for (method const how : {method::cuda, method::gpumem}) {
      std::string const id =
        std::string{"transfer/"} + row.name + (how == method::cuda ? "/cudaMemcpyAsync" : "/gpumem");
      configure(benchmark::RegisterBenchmark(id.c_str(), bm_copy, id, row.dir, row.kind, how,
                                             std::optional<transfer_config>{}));
    }
    std::string const unified_id = std::string{"transfer/"} + row.name + "/unified_buffer";
    configure(benchmark::RegisterBenchmark(unified_id.c_str(), bm_unified, unified_id, row.dir, row.kind));
  }
  // The zeros rows: gpumem's two fast paths first, the cudaMemsetAsync peer right after them, and last the
  // plain API over cudaMalloc, whose 1 GiB cudaMalloc/cudaFree per iteration disturbs what follows (registered
  // after it, the pool and unified_buffer rows ran slower than registered first, where they match the peer).
  std::string const size = size_label(copy_bytes());
  std::string const unified_zeros_id = "zeros/" + size + "/unified_buffer";
  configure(benchmark::RegisterBenchmark(unified_zeros_id.c_str(), bm_unified_zeros, unified_zeros_id), zeros_iterations);
  std::string const zeros_pool_id = "zeros/" + size + "/gpumem_pool";
  configure(benchmark::RegisterBenchmark(zeros_pool_id.c_str(), bm_zeros_pool, zeros_pool_id), zeros_iterations);
  std::string const memset_id = "zeros/" + size + "/cudaMemsetAsync";
  configure(benchmark::RegisterBenchmark(memset_id.c_str(), bm_memset, memset_id), zeros_iterations);
  std::string const zeros_id = "zeros/" + size + "/gpumem";
  configure(benchmark::RegisterBenchmark(zeros_id.c_str(), bm_zeros, zeros_id), zeros_iterations);

  for (copy_row const& row : rows) {
    if (row.kind != host_kind::pageable) { continue; }
    for (unsigned const threads : sweep_threads) {
      for (std::size_t const chunk : sweep_chunk_mib) {
        transfer_config config{};
        config.threads = threads;
        config.chunk_bytes = chunk * mib;
        std::string const id = std::string{"transfer/"} + row.name + "/gpumem/threads:" + std::to_string(threads) +
                               "/chunk:" + std::to_string(chunk) + "MiB";
        configure(benchmark::RegisterBenchmark(id.c_str(), bm_copy, id, row.dir, row.kind, method::gpumem,
                                               std::optional<transfer_config>{config}));
      }
    }
  }
}

[[nodiscard]] std::string type_name(void const* object, std::type_info const& type)
{
  if (object == nullptr) { return "none"; }
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> const name{abi::__cxa_demangle(type.name(), nullptr, nullptr, &status),
                                                    std::free};
  return status == 0 && name ? std::string{name.get()} : std::string{type.name()};
}

/// Removes --selftest=... from argv. @return an exit code for a bad value, std::nullopt to go on.
[[nodiscard]] std::optional<int> parse_selftest(int& argc, char** argv, std::string_view program)
{
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    std::string_view const arg{argv[i]};
    if (arg.starts_with("--selftest=")) {
      if (arg.substr(arg.find('=') + 1) != "short_copy") {
        std::cerr << program << ": unknown " << arg << " (known: --selftest=short_copy)\n";
        return 2;
      }
      g_short_copy = true;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  argv[argc] = nullptr;
  return std::nullopt;
}

constexpr std::string_view program = "gpumem_bench_transfer";

}  // namespace
}  // namespace gpumem::bench

int main(int argc, char** argv)
{
  using namespace gpumem::bench;
  if (auto const code = parse_selftest(argc, argv, program)) { return *code; }
  if (auto const code = parse_options(argc, argv, program, g_options)) { return *code; }
  int status = 1;
  try {
    benchmark::AddCustomContext("gpumem_backend", std::string{gpumem::to_string(gpumem::current_backend_kind())});
    benchmark::AddCustomContext("gpumem_device", gpumem::get_device_properties(gpumem::cuda_device_id{0}).name);
    benchmark::AddCustomContext("gpumem_mode", g_options.smoke ? "smoke" : "full");
    benchmark::AddCustomContext("gpumem_copy_bytes", std::to_string(copy_bytes()));
    gpumem::transfer_config const config = gpumem::get_transfer_config();
    benchmark::AddCustomContext("gpumem_transfer_config",
                                "chunk_bytes=" + std::to_string(config.chunk_bytes) +
                                  " threads=" + std::to_string(config.threads) +
                                  " parallel_threshold=" + std::to_string(config.parallel_threshold));
    gpumem::mr::device_memory_resource* const resource = gpumem::mr::get_current_device_resource();
    benchmark::AddCustomContext("gpumem_zeros_resource",
                                resource == nullptr ? "none" : type_name(resource, typeid(*resource)));
    if (g_short_copy) { benchmark::AddCustomContext("gpumem_selftest", "short_copy"); }
    register_benchmarks();
    status = run_benchmarks(argc, argv, g_options.timeout);
  } catch (std::exception const& e) {
    record_failure(std::string{program} + ": " + e.what());
    status = 1;
  }
  g_unified.reset();
  g_buffers.reset();
  return status;
}
