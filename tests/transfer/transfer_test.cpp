// transfer: copy_to_device / copy_to_host (transfer.hpp) from and to pageable and pinned host memory: every
// size class round trips (each direction checked on its own against data written or read by the plain
// backend copy, so that two mirrored bugs cannot cancel out); a staged copy to the device leaves its source
// reusable on return; copies are ordered on the stream (held back by a gate); staging memory goes back to the
// pinned pool and is reused; the configuration is validated; many threads copy at once. Also the worker pool
// under the staged copies (src/transfer/copy_workers.hpp), and the plain stream-ordered memcpy_async and
// memset_async. Device memory is only touched through the backend, so the tests run on both backends.
#include "support/gate.hpp"
#include "support/memory_checks.hpp"
#include "transfer/copy_workers.hpp"
#include "transfer/staged_copy.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/error.hpp>
#include <gpumem/graph.hpp>
#include <gpumem/mr/pinned_memory_pool.hpp>
#include <gpumem/transfer.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace gpumem::test {
namespace {

constexpr std::size_t kib = 1024;
constexpr std::size_t mib = 1024 * kib;

/// Small chunks so that the multi-chunk paths run quickly: 64 KiB chunks, 4 threads, parallel from 256 KiB.
constexpr transfer_config small_chunks{64 * kib, 4, 256 * kib};

[[nodiscard]] detail::backend& backend() { return detail::get_backend(); }

/// Device memory from the backend (malloc_device on the current device), freed on destruction.
class device_memory {
 public:
  explicit device_memory(std::size_t bytes) : ptr_{backend().malloc_device(bytes)}
  {
    if (bytes > 0 && ptr_ == nullptr) { throw std::runtime_error("no device memory for the test"); }
  }
  ~device_memory() { backend().free_device(ptr_); }
  device_memory(device_memory const&) = delete;
  device_memory& operator=(device_memory const&) = delete;
  device_memory(device_memory&&) = delete;
  device_memory& operator=(device_memory&&) = delete;

  [[nodiscard]] std::byte* get() const noexcept { return static_cast<std::byte*>(ptr_); }

 private:
  void* ptr_;
};

/// A block of the default pinned pool.
class pinned_memory {
 public:
  explicit pinned_memory(std::size_t bytes)
    : bytes_{bytes}, ptr_{static_cast<std::uint8_t*>(mr::get_default_pinned_pool().allocate(bytes))}
  {
  }
  ~pinned_memory() { mr::get_default_pinned_pool().deallocate(ptr_, bytes_); }
  pinned_memory(pinned_memory const&) = delete;
  pinned_memory& operator=(pinned_memory const&) = delete;
  pinned_memory(pinned_memory&&) = delete;
  pinned_memory& operator=(pinned_memory&&) = delete;

  [[nodiscard]] std::uint8_t* get() const noexcept { return ptr_; }

 private:
  std::size_t bytes_;
  std::uint8_t* ptr_;
};

constexpr std::size_t guard_bytes = 256;
constexpr std::uint8_t guard_value = 0xA5;

void fill_pattern(std::uint8_t* host, std::size_t bytes, std::uint32_t seed)
{
  for (std::size_t i = 0; i < bytes; ++i) { host[i] = pattern_byte(seed, i); }
}

[[nodiscard]] std::vector<std::uint8_t> pattern(std::size_t bytes, std::uint32_t seed)
{
  std::vector<std::uint8_t> host(bytes);
  fill_pattern(host.data(), bytes, seed);
  return host;
}

/// Success when host[0, bytes) holds pattern `seed`; names the first wrong byte.
[[nodiscard]] ::testing::AssertionResult host_has_pattern(std::uint8_t const* host, std::size_t bytes,
                                                          std::uint32_t seed)
{
  for (std::size_t i = 0; i < bytes; ++i) {
    if (host[i] != pattern_byte(seed, i)) {
      return ::testing::AssertionFailure() << "pattern " << seed << " over " << bytes << " bytes: byte " << i
                                           << " is " << static_cast<unsigned>(host[i]) << ", expected "
                                           << static_cast<unsigned>(pattern_byte(seed, i));
    }
  }
  return ::testing::AssertionSuccess();
}

/// Success when host[0, bytes) are all `value`.
[[nodiscard]] ::testing::AssertionResult host_filled_with(std::uint8_t const* host, std::size_t bytes,
                                                          std::uint8_t value)
{
  for (std::size_t i = 0; i < bytes; ++i) {
    if (host[i] != value) {
      return ::testing::AssertionFailure() << "byte " << i << " of " << bytes << " is "
                                           << static_cast<unsigned>(host[i]) << ", expected "
                                           << static_cast<unsigned>(value);
    }
  }
  return ::testing::AssertionSuccess();
}

/// Runs `fn` on a thread of its own, so that a test can look at whether it has returned; the thread's
/// exception (if any) is kept for the test to check.
class background_call {
 public:
  template <class Fn>
  explicit background_call(Fn fn)
    : thread_{[this, fn]() mutable {
        try {
          fn();
        } catch (...) {
          error_ = std::current_exception();
        }
        returned_.store(true);
      }}
  {
  }
  ~background_call()
  {
    if (thread_.joinable()) { thread_.join(); }
  }
  background_call(background_call const&) = delete;
  background_call& operator=(background_call const&) = delete;
  background_call(background_call&&) = delete;
  background_call& operator=(background_call&&) = delete;

  [[nodiscard]] bool returned() const { return returned_.load(); }
  /// Joins; then rethrows the call's exception.
  void join()
  {
    thread_.join();
    if (error_) { std::rethrow_exception(error_); }
  }

 private:
  std::atomic<bool> returned_{false};
  std::exception_ptr error_;
  std::thread thread_;  // last: starts once the members above exist
};

/// Every test starts from and restores the configuration in effect before it.
class transfer : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = get_transfer_config(); }
  void TearDown() override { set_transfer_config(saved_); }

  /// Copies `bytes` of pattern `seed` from pageable memory to the device and back, checking each direction
  /// against the plain backend copy and that nothing outside [0, bytes) is written on either side.
  void round_trip_pageable(std::size_t bytes, std::uint32_t seed) { round_trip_pageable(bytes, seed, stream_.get()); }
  static void round_trip_pageable(std::size_t bytes, std::uint32_t seed, cudaStream_t stream)
  {
    SCOPED_TRACE(::testing::Message() << bytes << " bytes on stream " << static_cast<void*>(stream));
    device_memory device{bytes + guard_bytes};
    backend().memset_async(device.get(), guard_value, bytes + guard_bytes, stream);
    backend().stream_synchronize(stream);

    std::vector<std::uint8_t> source = pattern(bytes, seed);
    copy_to_device(device.get(), source.data(), bytes, stream);
    EXPECT_TRUE(has_pattern(device.get(), bytes, seed, stream)) << "copy_to_device";
    EXPECT_TRUE(is_filled_with(device.get() + bytes, guard_bytes, guard_value, stream))
      << "copy_to_device wrote past the end";

    write_pattern(device.get(), bytes, seed + 1, stream);  // what copy_to_host must bring back
    std::vector<std::uint8_t> target(bytes + guard_bytes, guard_value);
    copy_to_host(target.data(), device.get(), bytes, stream);
    EXPECT_TRUE(host_has_pattern(target.data(), bytes, seed + 1)) << "copy_to_host";
    EXPECT_TRUE(host_filled_with(target.data() + bytes, guard_bytes, guard_value)) << "copy_to_host wrote past the end";
  }

  transfer_config saved_{};
  backend_stream stream_;
};

// ---- round trips -------------------------------------------------------------------------------------

TEST_F(transfer, pageable_round_trip_of_every_size_class)
{
  set_transfer_config(small_chunks);
  ASSERT_EQ(get_transfer_config().chunk_bytes, small_chunks.chunk_bytes);
  std::size_t const chunk = small_chunks.chunk_bytes;
  std::size_t const threshold = small_chunks.parallel_threshold;
  for (std::size_t const bytes : {std::size_t{1}, std::size_t{255}, 4 * kib + 3, chunk - 1, chunk, chunk + 1,
                                  threshold - 1,                  // the calling thread alone, four chunks
                                  threshold, threshold + 1,       // parallel, the last chunk 1 byte
                                  13 * chunk + 777,               // every lane several chunks, ragged tail
                                  16 * chunk}) {                  // every lane exactly four chunks
    round_trip_pageable(bytes, static_cast<std::uint32_t>(bytes % 251));
  }
}

TEST_F(transfer, zero_bytes_is_a_no_op)
{
  std::vector<std::uint8_t> host{1, 2, 3};
  device_memory device{256};
  copy_to_device(device.get(), host.data(), 0, stream_.get());
  copy_to_host(host.data(), device.get(), 0, stream_.get());
  copy_to_device(nullptr, nullptr, 0, stream_.get());
  copy_to_host(nullptr, nullptr, 0, stream_.get());
  EXPECT_EQ(host, (std::vector<std::uint8_t>{1, 2, 3}));
}

TEST_F(transfer, pageable_round_trip_with_the_default_configuration)
{
  transfer_config const defaults{};
  set_transfer_config(defaults);
  // Three chunks of the default size over three threads; then one just under the parallel threshold.
  round_trip_pageable(2 * defaults.chunk_bytes + 12345, 7);
  round_trip_pageable(defaults.parallel_threshold - 3, 8);
}

TEST_F(transfer, one_thread_stages_every_chunk_itself)
{
  set_transfer_config({64 * kib, 1, 0});
  round_trip_pageable(5 * 64 * kib + 99, 31);
}

TEST_F(transfer, default_streams_work_from_every_thread)
{
  // Workers must copy on the caller's device's legacy stream; the caller's per-thread stream cannot be named
  // by another thread, so copies on it are staged by the caller alone.
  set_transfer_config(small_chunks);
  round_trip_pageable(9 * small_chunks.chunk_bytes + 1, 71, cuda_stream_default.value());
  round_trip_pageable(9 * small_chunks.chunk_bytes + 1, 72, cuda_stream_per_thread.value());
}

TEST_F(transfer, copies_on_a_stream_of_another_device_run_on_that_device)
{
  // Runs with two emulated devices in ctest's host.two_devices. The staging events must be made on the
  // stream's device, not the caller's, and the caller's current device stays as it was.
  if (backend().device_count() < 2) { GTEST_SKIP() << "needs two devices"; }
  set_transfer_config(small_chunks);
  std::size_t const bytes = 9 * small_chunks.chunk_bytes + 1;
  int const caller_device = backend().current_device();
  int const other = caller_device == 0 ? 1 : 0;
  backend().set_current_device(other);
  auto stream = std::make_unique<backend_stream>();
  auto device = std::make_unique<device_memory>(bytes);
  backend().set_current_device(caller_device);

  std::vector<std::uint8_t> source = pattern(bytes, 75);
  std::vector<std::uint8_t> target(bytes, 0);
  copy_to_device(device->get(), source.data(), bytes, stream->get());
  copy_to_host(target.data(), device->get(), bytes, stream->get());
  EXPECT_EQ(backend().current_device(), caller_device);
  EXPECT_TRUE(host_has_pattern(target.data(), bytes, 75));

  backend().set_current_device(other);
  EXPECT_TRUE(has_pattern(device->get(), bytes, 75, stream->get()));
  device.reset();
  stream.reset();
  backend().set_current_device(caller_device);
}

TEST_F(transfer, pinned_round_trip_and_mixed_kinds)
{
  set_transfer_config(small_chunks);
  for (std::size_t const bytes : {std::size_t{1}, 4 * kib + 3, 5 * small_chunks.chunk_bytes + 17}) {
    SCOPED_TRACE(::testing::Message() << bytes << " bytes");
    auto const seed = static_cast<std::uint32_t>(bytes % 97);
    device_memory device{bytes};
    pinned_memory source{bytes};
    pinned_memory target{bytes};
    ASSERT_TRUE(backend().is_pinned_host(source.get()));
    fill_pattern(source.get(), bytes, seed);
    std::memset(target.get(), 0, bytes);
    copy_to_device(device.get(), source.get(), bytes, stream_.get());
    EXPECT_TRUE(has_pattern(device.get(), bytes, seed, stream_.get())) << "pinned -> device";

    write_pattern(device.get(), bytes, seed + 1, stream_.get());
    copy_to_host(target.get(), device.get(), bytes, stream_.get());
    backend().stream_synchronize(stream_.get());  // a copy to pinned memory is asynchronous
    EXPECT_TRUE(host_has_pattern(target.get(), bytes, seed + 1)) << "device -> pinned";

    // Pinned on one side, pageable on the other.
    std::vector<std::uint8_t> pageable(bytes, 0);
    copy_to_host(pageable.data(), device.get(), bytes, stream_.get());
    EXPECT_TRUE(host_has_pattern(pageable.data(), bytes, seed + 1)) << "device -> pageable";
    copy_to_device(device.get(), source.get(), bytes, stream_.get());
    copy_to_host(pageable.data(), device.get(), bytes, stream_.get());
    EXPECT_TRUE(host_has_pattern(pageable.data(), bytes, seed)) << "pinned -> device -> pageable";
    backend().stream_synchronize(stream_.get());  // before the pinned blocks go back to the pool
  }
}

// ---- the source is reusable, and the stream orders the copies -----------------------------------------

TEST_F(transfer, staged_copy_to_device_leaves_the_source_reusable_on_return)
{
  set_transfer_config(small_chunks);
  for (std::size_t const bytes : {3 * kib, 3 * small_chunks.chunk_bytes + 5, 11 * small_chunks.chunk_bytes + 5}) {
    SCOPED_TRACE(::testing::Message() << bytes << " bytes");
    device_memory device{bytes};
    std::vector<std::uint8_t> source = pattern(bytes, 41);
    copy_to_device(device.get(), source.data(), bytes, stream_.get());
    std::memset(source.data(), 0, bytes);  // at once: the copy must have read every byte already
    EXPECT_TRUE(has_pattern(device.get(), bytes, 41, stream_.get())) << "the overwritten source was copied";
  }
}

TEST_F(transfer, staged_copy_to_device_is_ordered_on_the_held_stream)
{
  // Two chunks on the calling thread: both DMAs can be enqueued without waiting for either, so the call
  // returns while the stream is held, having read the whole source; the device sees the data only once the
  // stream reaches the copies, and work submitted after the call sees it.
  set_transfer_config(small_chunks);
  std::size_t const bytes = small_chunks.chunk_bytes + 1000;
  device_memory device{bytes};
  backend().memset_async(device.get(), 0, bytes, stream_.get());
  backend().stream_synchronize(stream_.get());
  std::vector<std::uint8_t> source = pattern(bytes, 43);
  pinned_memory readback{bytes};
  std::memset(readback.get(), 0, bytes);

  gate g;
  g.hold(stream_.get());
  background_call copy{[&] { copy_to_device(device.get(), source.data(), bytes, stream_.get()); }};
  bool const returned_while_held = eventually([&] { return copy.returned(); });
  EXPECT_TRUE(returned_while_held) << "a two-chunk staged copy waited for the held stream";
  if (returned_while_held) {
    source.assign(bytes, 0);  // reusable on return
    backend_stream other;
    EXPECT_TRUE(is_filled_with(device.get(), bytes, 0, other.get()))
      << "the device was written before the stream reached the copy";
    backend().memcpy_async(readback.get(), device.get(), bytes, stream_.get());  // work after the call
  }
  g.release();
  copy.join();
  if (!returned_while_held) { backend().memcpy_async(readback.get(), device.get(), bytes, stream_.get()); }
  backend().stream_synchronize(stream_.get());
  EXPECT_TRUE(host_has_pattern(readback.get(), bytes, 43)) << "later work on the stream does not see the copy";
}

TEST_F(transfer, copy_to_device_from_pinned_memory_returns_while_the_stream_is_held)
{
  std::size_t const bytes = 300 * kib;
  device_memory device{bytes};
  pinned_memory source{bytes};
  fill_pattern(source.get(), bytes, 45);
  gate g;
  g.hold(stream_.get());
  background_call copy{[&] { copy_to_device(device.get(), source.get(), bytes, stream_.get()); }};
  EXPECT_TRUE(eventually([&] { return copy.returned(); })) << "a copy from pinned memory waited for the stream";
  g.release();
  copy.join();
  EXPECT_TRUE(has_pattern(device.get(), bytes, 45, stream_.get()));
  backend().stream_synchronize(stream_.get());
}

TEST_F(transfer, pageable_copy_to_host_returns_only_after_the_stream_reaches_it)
{
  set_transfer_config(small_chunks);
  for (std::size_t const bytes : {small_chunks.chunk_bytes + 3,          // the calling thread alone
                                  9 * small_chunks.chunk_bytes + 3}) {   // every worker
    SCOPED_TRACE(::testing::Message() << bytes << " bytes");
    device_memory device{bytes};
    write_pattern(device.get(), bytes, 50, stream_.get());
    pinned_memory newer{bytes};
    fill_pattern(newer.get(), bytes, 51);
    std::vector<std::uint8_t> target(bytes, 0);

    gate g;
    g.hold(stream_.get());
    // Work submitted before the copy: it must see this data, not what the device holds now.
    backend().memcpy_async(device.get(), newer.get(), bytes, stream_.get());
    background_call copy{[&] { copy_to_host(target.data(), device.get(), bytes, stream_.get()); }};
    bool const early = eventually([&] { return copy.returned(); }, std::chrono::milliseconds{200});
    EXPECT_FALSE(early) << "copy_to_host returned while the stream was held";
    g.release();
    copy.join();
    EXPECT_TRUE(copy.returned());
    EXPECT_TRUE(host_has_pattern(target.data(), bytes, 51)) << "the copy did not follow the earlier work";
  }
}

// ---- staging memory ----------------------------------------------------------------------------------

TEST_F(transfer, back_to_back_copies_to_the_device_wait_for_a_lagging_stream)
{
  // Copies of two chunks never wait for their own DMAs; with the stream held, only the bound on staging
  // memory in flight per stream (2 * threads * chunk_bytes) stops them from pinning ever more memory.
  set_transfer_config(small_chunks);
  std::size_t const bytes = 2 * small_chunks.chunk_bytes;
  constexpr int copies = 20;
  device_memory device{bytes};
  std::vector<std::vector<std::uint8_t>> sources;
  for (int i = 0; i < copies; ++i) { sources.push_back(pattern(bytes, static_cast<std::uint32_t>(80 + i))); }
  auto& pool = mr::get_default_pinned_pool();
  pool.wait_pending();
  std::size_t const pending_before = pool.usage().pending;

  gate g;
  g.hold(stream_.get());
  std::atomic<int> done{0};
  background_call run{[&] {
    for (auto const& source : sources) {
      copy_to_device(device.get(), source.data(), bytes, stream_.get());
      done.fetch_add(1);
    }
  }};
  bool const first_returned = eventually([&] { return done.load() >= 1; });
  (void)eventually([&] { return done.load() == copies; }, std::chrono::milliseconds{300});
  int const while_held = done.load();
  std::size_t const pending_while_held = pool.usage().pending - pending_before;
  g.release();
  run.join();
  EXPECT_TRUE(first_returned) << "the first copy waited for the held stream";
  EXPECT_LT(while_held, copies) << "every copy returned while the stream was held: nothing bounds the "
                                   "pinned memory left in flight";
  EXPECT_LE(pending_while_held, 2 * small_chunks.threads * small_chunks.chunk_bytes + bytes);
  EXPECT_TRUE(has_pattern(device.get(), bytes, 80 + copies - 1, stream_.get())) << "copies out of order";
}

TEST_F(transfer, staging_memory_returns_to_the_pinned_pool_and_is_reused)
{
  set_transfer_config(small_chunks);
  auto& pool = mr::get_default_pinned_pool();
  pool.wait_pending();
  mr::pinned_pool_usage const before = pool.usage();

  std::size_t const large = 13 * small_chunks.chunk_bytes + 5;
  std::size_t const small = small_chunks.chunk_bytes + 5;
  device_memory device{large};
  std::vector<std::uint8_t> host = pattern(large, 60);
  auto const copies = [&] {
    copy_to_device(device.get(), host.data(), large, stream_.get());
    copy_to_host(host.data(), device.get(), large, stream_.get());
    copy_to_device(device.get(), host.data(), small, stream_.get());
    copy_to_host(host.data(), device.get(), small, stream_.get());
    backend().stream_synchronize(stream_.get());
    pool.wait_pending();
  };
  copies();
  mr::pinned_pool_usage const after_first = pool.usage();
  EXPECT_EQ(after_first.in_use, before.in_use) << "staging buffers were not given back";
  EXPECT_EQ(after_first.pending, 0U);
  EXPECT_TRUE(host_has_pattern(host.data(), large, 60));

  copies();
  copies();
  mr::pinned_pool_usage const after_more = pool.usage();
  EXPECT_EQ(after_more.in_use, before.in_use);
  EXPECT_EQ(after_more.reserved, after_first.reserved) << "the same copies again took new pinned memory";
}

// ---- configuration and misuse ------------------------------------------------------------------------

TEST_F(transfer, set_transfer_config_rejects_bad_values)
{
  transfer_config const good{512 * kib, 3, 2 * mib};
  set_transfer_config(good);
  EXPECT_EQ(get_transfer_config().chunk_bytes, good.chunk_bytes);
  EXPECT_EQ(get_transfer_config().threads, good.threads);
  EXPECT_EQ(get_transfer_config().parallel_threshold, good.parallel_threshold);

  EXPECT_THROW(set_transfer_config({0, 4, 0}), logic_error);
  EXPECT_THROW(set_transfer_config({1000, 4, 0}), logic_error) << "not a multiple of 256";
  EXPECT_THROW(set_transfer_config({64 * kib, 0, 0}), logic_error);
  EXPECT_THROW(set_transfer_config({64 * kib, 65, 0}), logic_error);
  try {
    set_transfer_config({64 * kib, 65, 0});
  } catch (logic_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("65"), std::string::npos) << e.what();
  }
  EXPECT_EQ(get_transfer_config().chunk_bytes, good.chunk_bytes) << "a rejected configuration was applied";
  EXPECT_EQ(get_transfer_config().threads, good.threads);

  set_transfer_config({256, 64, 0});  // the extremes are valid
  EXPECT_EQ(get_transfer_config().threads, 64U);
}

/// Sets an environment variable for one scope and restores the previous value.
class scoped_env {
 public:
  scoped_env(char const* name, char const* value) : name_{name}
  {
    if (char const* old = std::getenv(name)) { old_ = old; }
    ::setenv(name, value, 1);
  }
  ~scoped_env()
  {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  scoped_env(scoped_env const&) = delete;
  scoped_env& operator=(scoped_env const&) = delete;
  scoped_env(scoped_env&&) = delete;
  scoped_env& operator=(scoped_env&&) = delete;

 private:
  char const* name_;
  std::optional<std::string> old_;
};

/// Success when reading the environment throws a logic_error that names `variable` and `value`.
[[nodiscard]] ::testing::AssertionResult rejects(char const* variable, char const* value)
{
  scoped_env const env{variable, value};
  try {
    (void)detail::transfer_config_from_environment();
  } catch (logic_error const& e) {
    std::string const what = e.what();
    if (what.find(variable) == std::string::npos || what.find(std::string{'"'} + value + '"') == std::string::npos) {
      return ::testing::AssertionFailure() << "the message does not name " << variable << " and \"" << value
                                           << "\": " << what;
    }
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << variable << "=" << value << " was accepted";
}

TEST_F(transfer, environment_variables_are_parsed_and_checked)
{
  {
    scoped_env const chunk{"GPUMEM_STAGING_CHUNK", "16MiB"};
    scoped_env const threads{"GPUMEM_COPY_THREADS", "12"};
    transfer_config const c = detail::transfer_config_from_environment();
    EXPECT_EQ(c.chunk_bytes, 16 * mib);
    EXPECT_EQ(c.threads, 12U);
    EXPECT_EQ(c.parallel_threshold, transfer_config{}.parallel_threshold);
  }
  {
    scoped_env const chunk{"GPUMEM_STAGING_CHUNK", "4096"};
    EXPECT_EQ(detail::transfer_config_from_environment().chunk_bytes, 4096U);
  }
  {
    scoped_env const chunk{"GPUMEM_STAGING_CHUNK", ""};  // empty: the default
    EXPECT_EQ(detail::transfer_config_from_environment().chunk_bytes, transfer_config{}.chunk_bytes);
  }
  EXPECT_TRUE(rejects("GPUMEM_STAGING_CHUNK", "0"));
  EXPECT_TRUE(rejects("GPUMEM_STAGING_CHUNK", "1000"));
  EXPECT_TRUE(rejects("GPUMEM_STAGING_CHUNK", "8 MiB"));
  EXPECT_TRUE(rejects("GPUMEM_STAGING_CHUNK", "lots"));
  EXPECT_TRUE(rejects("GPUMEM_COPY_THREADS", "0"));
  EXPECT_TRUE(rejects("GPUMEM_COPY_THREADS", "65"));
  EXPECT_TRUE(rejects("GPUMEM_COPY_THREADS", "-2"));
  EXPECT_TRUE(rejects("GPUMEM_COPY_THREADS", "4x"));
}

TEST_F(transfer, null_pointers_are_logic_errors_naming_the_argument)
{
  std::vector<std::uint8_t> host(16);
  device_memory device{256};
  auto const names = [](auto call, char const* argument) -> ::testing::AssertionResult {
    try {
      call();
    } catch (logic_error const& e) {
      if (std::string{e.what()}.find(argument) == std::string::npos) {
        return ::testing::AssertionFailure() << "the message does not name " << argument << ": " << e.what();
      }
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "no logic_error";
  };
  EXPECT_TRUE(names([&] { copy_to_device(nullptr, host.data(), 16, stream_.get()); }, "dst"));
  EXPECT_TRUE(names([&] { copy_to_device(device.get(), nullptr, 16, stream_.get()); }, "src"));
  EXPECT_TRUE(names([&] { copy_to_host(nullptr, device.get(), 16, stream_.get()); }, "dst"));
  EXPECT_TRUE(names([&] { copy_to_host(host.data(), nullptr, 16, stream_.get()); }, "src"));
}

TEST_F(transfer, a_staged_copy_cannot_be_captured_into_a_graph)
{
  std::size_t const bytes = 4 * kib;
  device_memory device{bytes};
  std::vector<std::uint8_t> host(bytes);
  graph g;
  g.capture_begin(stream_.get(), capture_mode::relaxed);
  EXPECT_THROW(copy_to_device(device.get(), host.data(), bytes, stream_.get()), logic_error);
  EXPECT_THROW(copy_to_host(host.data(), device.get(), bytes, stream_.get()), logic_error);
  g.capture_end();
}

// ---- concurrency -------------------------------------------------------------------------------------

TEST_F(transfer, many_threads_copy_distinct_data_on_their_own_streams)
{
  set_transfer_config(small_chunks);
  constexpr int threads = 6;
  constexpr int rounds = 3;
  std::vector<std::string> errors(threads);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([t, &errors] {
      try {
        backend_stream stream;
        // Every other thread copies below the parallel threshold, the others over every worker.
        std::size_t const bytes = (t % 2 == 0 ? 5 * small_chunks.chunk_bytes : small_chunks.chunk_bytes) +
                                  static_cast<std::size_t>(t) * 1001;
        device_memory device{bytes};
        for (int r = 0; r < rounds; ++r) {
          auto const seed = static_cast<std::uint32_t>(t * 16 + r);
          std::vector<std::uint8_t> source = pattern(bytes, seed);
          copy_to_device(device.get(), source.data(), bytes, stream.get());
          std::vector<std::uint8_t> target(bytes, 0);
          copy_to_host(target.data(), device.get(), bytes, stream.get());
          if (auto const ok = host_has_pattern(target.data(), bytes, seed); !ok) {
            errors[static_cast<std::size_t>(t)] = ok.message();
            return;
          }
        }
      } catch (std::exception const& e) {
        errors[static_cast<std::size_t>(t)] = e.what();
      }
    });
  }
  for (auto& w : workers) { w.join(); }
  for (int t = 0; t < threads; ++t) { EXPECT_EQ(errors[static_cast<std::size_t>(t)], "") << "thread " << t; }
}

// ---- the worker pool ---------------------------------------------------------------------------------

// ---- memcpy_async and memset_async: one stream-ordered call each ------------------------------------------

TEST_F(transfer, memcpy_async_and_memset_async_return_at_once_and_run_in_stream_order)
{
  std::size_t const bytes = 4 * kib + 3;
  device_memory a{bytes};
  device_memory b{bytes + guard_bytes};
  pinned_memory host{bytes};
  fill_pattern(host.get(), bytes, 11);
  backend().memset_async(b.get(), guard_value, bytes + guard_bytes, stream_.get());
  gate g;
  g.hold(stream_.get());
  background_call calls{[&] {
    memcpy_async(a.get(), host.get(), bytes, stream_.get());  // pinned -> device
    memcpy_async(b.get(), a.get(), bytes, stream_.get());     // device -> device, after the first
    memset_async(a.get(), 0x3c, bytes, stream_.get());        // after the copy that reads it
  }};
  EXPECT_TRUE(eventually([&] { return calls.returned(); })) << "memcpy_async or memset_async waited for the stream";
  g.release();
  calls.join();
  EXPECT_TRUE(has_pattern(b.get(), bytes, 11, stream_.get())) << "device -> device";
  EXPECT_TRUE(is_filled_with(b.get() + bytes, guard_bytes, guard_value, stream_.get())) << "copied past the end";
  EXPECT_TRUE(is_filled_with(a.get(), bytes, 0x3c, stream_.get())) << "memset_async";
  memcpy_async(host.get(), b.get(), bytes, stream_.get());  // device -> pinned
  backend().stream_synchronize(stream_.get());
  EXPECT_TRUE(host_has_pattern(host.get(), bytes, 11)) << "device -> pinned";
}

TEST_F(transfer, memcpy_async_and_memset_async_check_their_pointers)
{
  device_memory device{256};
  memcpy_async(nullptr, nullptr, 0, stream_.get());  // nothing to copy: null is fine
  memset_async(nullptr, 0, 0, stream_.get());
  EXPECT_THROW(memcpy_async(nullptr, device.get(), 16, stream_.get()), logic_error);
  EXPECT_THROW(memcpy_async(device.get(), nullptr, 16, stream_.get()), logic_error);
  EXPECT_THROW(memset_async(nullptr, 0, 16, stream_.get()), logic_error);
  backend().stream_synchronize(stream_.get());
}

TEST(transfer_copy_workers, runs_every_task_exactly_once)
{
  detail::copy_workers workers;
  for (std::size_t const count : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{7}, std::size_t{100}}) {
    std::vector<std::atomic<int>> calls(count);
    workers.run(count, [&calls](std::size_t i) { calls[i].fetch_add(1); });
    for (std::size_t i = 0; i < count; ++i) { EXPECT_EQ(calls[i].load(), 1) << "task " << i << " of " << count; }
  }
  EXPECT_LE(workers.thread_count(), detail::copy_workers::max_threads);
}

TEST(transfer_copy_workers, a_task_exception_reaches_the_caller_after_every_task_returned)
{
  detail::copy_workers workers;
  std::atomic<int> finished{0};
  try {
    workers.run(8, [&finished](std::size_t i) {
      std::this_thread::sleep_for(std::chrono::milliseconds{i % 3});
      finished.fetch_add(1);
      if (i == 5) { throw std::runtime_error("task 5 failed"); }
    });
    FAIL() << "the exception was lost";
  } catch (std::runtime_error const& e) {
    EXPECT_EQ(std::string{e.what()}, "task 5 failed");
  }
  EXPECT_EQ(finished.load(), 8) << "run() returned before every task had";
  // The pool is still usable.
  std::atomic<int> again{0};
  workers.run(4, [&again](std::size_t) { again.fetch_add(1); });
  EXPECT_EQ(again.load(), 4);
}

TEST(transfer_copy_workers, a_task_may_run_a_job_itself_and_callers_may_share_the_pool)
{
  detail::copy_workers workers;
  std::atomic<int> inner{0};
  workers.run(3, [&](std::size_t) { workers.run(3, [&inner](std::size_t) { inner.fetch_add(1); }); });
  EXPECT_EQ(inner.load(), 9);

  std::atomic<long> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 6; ++c) {
    callers.emplace_back([&workers, &total] {
      for (int r = 0; r < 40; ++r) {
        workers.run(5, [&total](std::size_t i) { total.fetch_add(static_cast<long>(i) + 1); });
      }
    });
  }
  for (auto& c : callers) { c.join(); }
  EXPECT_EQ(total.load(), 6L * 40 * 15);
}

}  // namespace
}  // namespace gpumem::test
