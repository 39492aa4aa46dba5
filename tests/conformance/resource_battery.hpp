// The conformance battery (DESIGN.md, "Tests"): the contract of device_memory_resource, as a typed test
// suite that every resource instantiates with one line:
//
//     struct my_factory {
//       static std::unique_ptr<gpumem::mr::device_memory_resource> make();   // a fresh resource
//       static constexpr char const* name = "my_resource";                    // as its OOM message names it
//       static constexpr bool oversubscription_safe = true;                   // see below
//       // optional: static std::size_t oom_request_bytes();                  // default: 2 x device total
//       // optional: static std::string unsupported();                        // non-empty: skip, saying why
//     };
//     INSTANTIATE_TYPED_TEST_SUITE_P(my, resource_battery, my_factory);
//
// oversubscription_safe must be false for resources whose oversized requests may not fail cleanly on a real
// GPU (managed memory: a cudaMallocManaged beyond the free memory can page until the GPU stalls): their
// out-of-memory test runs on the host backend only.
//
// Every test reads and writes memory through the backend (memcpy_async + stream_synchronize), so the same
// battery runs on the host backend and on a GPU.
#pragma once

#include "support/memory_checks.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace gpumem::test {

/// A request the resource cannot serve: the factory's own, or twice the current device's total memory.
template <class Factory>
std::size_t oom_request_bytes()
{
  if constexpr (requires { Factory::oom_request_bytes(); }) {
    return Factory::oom_request_bytes();
  } else {
    detail::backend& backend = detail::get_backend();
    return backend.mem_info(backend.current_device()).total * 2;
  }
}

/// Log-uniform in [1, 2^max_log2]: small sizes as often as large ones, as real workloads allocate.
inline std::size_t log_uniform_size(std::mt19937_64& rng, double max_log2)
{
  double const unit = static_cast<double>(rng() >> 11U) * 0x1.0p-53;
  return std::max<std::size_t>(1, static_cast<std::size_t>(std::exp2(unit * max_log2)));
}

template <class Factory>
class resource_battery : public ::testing::Test {
 protected:
  void SetUp() override
  {
    // optional: static std::optional<std::string> unsupported(); a reason skips the battery (a resource the
    // device cannot have, e.g. system memory without HMM/ATS).
    if constexpr (requires { Factory::unsupported(); }) {
      if (auto const reason = Factory::unsupported()) { GTEST_SKIP() << *reason; }
    }
    resource_ = Factory::make();
    ASSERT_NE(resource_, nullptr);
  }

  [[nodiscard]] mr::device_memory_resource& resource() { return *resource_; }

 private:
  std::unique_ptr<mr::device_memory_resource> resource_;
};

TYPED_TEST_SUITE_P(resource_battery);

TYPED_TEST_P(resource_battery, zero_bytes_give_nullptr_and_null_deallocation_is_a_no_op)
{
  auto& r = this->resource();
  backend_stream stream;
  EXPECT_EQ(r.allocate(0), nullptr);
  EXPECT_EQ(r.allocate(0, cuda_stream_view{stream.get()}), nullptr);
  EXPECT_EQ(r.allocate_async(0, 256, cuda_stream_view{stream.get()}), nullptr);
  EXPECT_EQ(r.allocate(0, std::size_t{64}), nullptr);
  r.deallocate(nullptr, 0);
  r.deallocate(nullptr, 4096, cuda_stream_view{stream.get()});
  r.deallocate_async(nullptr, 4096, 256, cuda_stream_view{stream.get()});
  // The resource still serves real requests afterwards.
  void* p = r.allocate(1);
  EXPECT_NE(p, nullptr);
  r.deallocate(p, 1);
}

TYPED_TEST_P(resource_battery, every_allocation_is_256_byte_aligned)
{
  auto& r = this->resource();
  std::vector<std::size_t> const sizes{1,    2,    7,    8,    255,  256,         257,         511,
                                       512,  1000, 4095, 4096, 4097, 65535,       65536,       (1U << 20) - 1,
                                       1U << 20, (1U << 20) + 1, (4U << 20) + 3, (16U << 20) + 17};
  std::vector<block> live;
  for (std::size_t const bytes : sizes) {
    void* p = r.allocate(bytes);
    ASSERT_NE(p, nullptr) << bytes << " bytes";
    EXPECT_TRUE(detail::is_aligned(p, detail::allocation_alignment)) << bytes << " bytes at " << format_pointer(p);
    live.push_back({p, bytes});
  }
  // CCCL-style requests with any alignment up to 256 are 256-aligned too.
  for (std::size_t alignment = 1; alignment <= detail::allocation_alignment; alignment *= 2) {
    void* p = r.allocate(100, alignment);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(detail::is_aligned(p, detail::allocation_alignment)) << "alignment " << alignment;
    live.push_back({p, 100});
  }
  EXPECT_TRUE(do_not_overlap(live));
  for (auto const& b : live) { r.deallocate(const_cast<void*>(b.ptr), b.bytes); }
}

TYPED_TEST_P(resource_battery, allocations_are_distinct_and_keep_their_own_contents)
{
  auto& r = this->resource();
  backend_stream stream;
  cuda_stream_view const s{stream.get()};
  std::vector<block> live;
  for (std::uint32_t i = 0; i < 64; ++i) {
    std::size_t const bytes = 1 + (std::size_t{i} * 7919U) % 200'000U;
    void* p = r.allocate(bytes, s);
    ASSERT_NE(p, nullptr);
    live.push_back({p, bytes});
  }
  ASSERT_TRUE(do_not_overlap(live));
  // Write every allocation first, then check every one: an allocation that aliases another (or memory that
  // is not really there) shows up as a foreign or missing pattern.
  for (std::uint32_t i = 0; i < live.size(); ++i) {
    write_pattern(const_cast<void*>(live[i].ptr), live[i].bytes, i, s);
  }
  for (std::uint32_t i = 0; i < live.size(); ++i) { EXPECT_TRUE(has_pattern(live[i].ptr, live[i].bytes, i, s)); }
  for (auto const& b : live) { r.deallocate(const_cast<void*>(b.ptr), b.bytes, s); }
}

TYPED_TEST_P(resource_battery, random_allocate_and_deallocate_sequence)
{
  auto& r = this->resource();
  backend_stream stream;
  cuda_stream_view const s{stream.get()};
  std::mt19937_64 rng{20240601};
  struct live_block {
    void* ptr;
    std::size_t bytes;
    std::uint32_t seed;  // 0: no pattern written (only a sample is checked, to keep the test fast)
  };
  std::vector<live_block> live;
  std::uint32_t next_seed = 1;
  std::size_t checked = 0;
  auto release = [&](std::size_t index) {
    live_block const b = live[index];
    if (b.seed != 0) {
      EXPECT_TRUE(has_pattern(b.ptr, b.bytes, b.seed, s));
      ++checked;
    }
    r.deallocate(b.ptr, b.bytes, s);
    live[index] = live.back();
    live.pop_back();
  };
  for (int op = 0; op < 3000; ++op) {
    bool const allocate = live.empty() || (live.size() < 200 && rng() % 100 < 55);
    if (allocate) {
      std::size_t const bytes = log_uniform_size(rng, 22.0);  // 1 B .. 4 MiB
      void* p = r.allocate(bytes, s);
      ASSERT_NE(p, nullptr);
      ASSERT_TRUE(detail::is_aligned(p, detail::allocation_alignment));
      std::uint32_t seed = 0;
      if (rng() % 8 == 0) {
        seed = next_seed++;
        write_pattern(p, bytes, seed, s);
      }
      live.push_back({p, bytes, seed});
    } else {
      release(static_cast<std::size_t>(rng() % live.size()));
    }
  }
  std::vector<block> blocks;
  for (auto const& b : live) { blocks.push_back({b.ptr, b.bytes}); }
  EXPECT_TRUE(do_not_overlap(blocks));
  while (!live.empty()) { release(live.size() - 1); }
  EXPECT_GT(checked, 100U) << "the sample of checked patterns is too small to mean anything";
}

TYPED_TEST_P(resource_battery, many_threads_allocate_write_read_and_free)
{
  auto& r = this->resource();
  constexpr int thread_count = 8;
  constexpr int iterations = 100;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([&r, &failures, t] {
      backend_stream stream;
      cuda_stream_view const s{stream.get()};
      std::mt19937_64 rng{static_cast<std::uint64_t>(t) + 1};
      for (int i = 0; i < iterations; ++i) {
        std::size_t const bytes = log_uniform_size(rng, 16.0);
        void* p = r.allocate(bytes, s);
        auto const seed = static_cast<std::uint32_t>(t * 1000 + i);
        write_pattern(p, bytes, seed, s);
        auto const ok = has_pattern(p, bytes, seed, s);
        if (!ok) {
          failures.fetch_add(1);
          ADD_FAILURE() << "thread " << t << ", iteration " << i << ": " << ok.message();
        }
        r.deallocate(p, bytes, s);
      }
    });
  }
  for (auto& thread : threads) { thread.join(); }
  EXPECT_EQ(failures.load(), 0);
}

TYPED_TEST_P(resource_battery, allocate_on_one_stream_deallocate_on_another)
{
  auto& r = this->resource();
  backend_stream a;
  backend_stream b;
  cuda_stream_view const sa{a.get()};
  cuda_stream_view const sb{b.get()};
  constexpr std::size_t bytes = (1U << 20) + 100;

  // Allocated for A, used on A; A is synchronised (write_pattern), so B may take it over.
  void* p = r.allocate(bytes, sa);
  write_pattern(p, bytes, 11, sa);
  EXPECT_TRUE(has_pattern(p, bytes, 11, sa));
  r.deallocate(p, bytes, sb);

  // Interleaved: allocations alternate between the streams, each used on its own stream and returned on
  // the other one.
  std::vector<void*> blocks;
  for (std::uint32_t i = 0; i < 16; ++i) {
    cuda_stream_view const s = i % 2 == 0 ? sa : sb;
    void* q = r.allocate(bytes, s);
    write_pattern(q, bytes, 100 + i, s);
    blocks.push_back(q);
  }
  for (std::uint32_t i = 0; i < 16; ++i) {
    cuda_stream_view const s = i % 2 == 0 ? sa : sb;
    EXPECT_TRUE(has_pattern(blocks[i], bytes, 100 + i, s));
    r.deallocate(blocks[i], bytes, i % 2 == 0 ? sb : sa);
  }

  // The two default streams.
  void* d = r.allocate(4096, cuda_stream_per_thread);
  write_pattern(d, 4096, 7, cuda_stream_per_thread);
  EXPECT_TRUE(has_pattern(d, 4096, 7, cuda_stream_per_thread));
  r.deallocate(d, 4096, cuda_stream_default);
}

/// Allocates, writes, checks and frees blocks of several sizes on `stream`; every block is freed on it.
inline void use_and_free_on(mr::device_memory_resource& r, cuda_stream_view stream, std::uint32_t seed)
{
  for (std::size_t const bytes : {std::size_t{256}, std::size_t{4096}, std::size_t{65536}, std::size_t{1} << 20}) {
    void* p = r.allocate(bytes, stream);
    write_pattern(p, bytes, seed, stream.value());
    EXPECT_TRUE(has_pattern(p, bytes, seed, stream.value()));
    r.deallocate(p, bytes, stream);
    r.deallocate(r.allocate(bytes + 256, stream), bytes + 256, stream);
  }
}

// Streams belong to the program (before_stream_destroy.hpp): CuPy, PyTorch and raw CUDA destroy streams
// without telling gpumem, and a call on a destroyed stream crashes a GPU program. The host backend aborts on
// one, so a resource that keeps using a stream after the call that passed it fails here.
TYPED_TEST_P(resource_battery, streams_destroyed_after_their_frees_are_never_used_again)
{
  auto& r = this->resource();
  detail::backend& backend = detail::get_backend();
  for (std::uint32_t round = 0; round < 24; ++round) {
    cudaStream_t const foreign = backend.stream_create(round % 2 == 0 ? cudaStreamNonBlocking : 0U, 0);
    use_and_free_on(r, cuda_stream_view{foreign}, round);
    backend.stream_synchronize(foreign);
    backend.stream_destroy(foreign);  // no before_stream_destroy: gpumem is not told
    use_and_free_on(r, cuda_stream_default, 1000 + round);
  }
  // A thread that frees on its own streams, destroys them and exits (its caches are emptied at exit).
  std::thread worker{[&r] {
    for (std::uint32_t round = 0; round < 12; ++round) {
      backend_stream foreign;
      use_and_free_on(r, cuda_stream_view{foreign.get()}, 2000 + round);
      detail::get_backend().stream_synchronize(foreign.get());
    }
  }};
  worker.join();
  // The memory those streams freed serves the default stream and a new stream.
  backend_stream fresh;
  std::vector<void*> blocks;
  for (std::uint32_t i = 0; i < 64; ++i) { blocks.push_back(r.allocate(4096, cuda_stream_view{fresh.get()})); }
  for (void* p : blocks) { r.deallocate(p, 4096, cuda_stream_view{fresh.get()}); }
  use_and_free_on(r, cuda_stream_default, 3000);
}

TYPED_TEST_P(resource_battery, out_of_memory_names_the_request_and_leaves_the_resource_usable)
{
  if (!TypeParam::oversubscription_safe && detail::get_backend().kind() == backend_kind::cuda) {
    GTEST_SKIP() << TypeParam::name << " is not oversubscription-safe on a real GPU";
  }
  auto& r = this->resource();
  std::size_t const request = oom_request_bytes<TypeParam>();
  try {
    void* p = r.allocate(request);
    r.deallocate(p, request);
    FAIL() << TypeParam::name << " served an impossible request of " << request << " bytes";
  } catch (out_of_memory const& e) {
    std::string const what = e.what();
    EXPECT_NE(what.find(std::to_string(request)), std::string::npos) << what;
    EXPECT_NE(what.find(TypeParam::name), std::string::npos) << what;
    EXPECT_NE(what.find("free"), std::string::npos) << what;
    EXPECT_NE(what.find("total"), std::string::npos) << what;
  }
  backend_stream stream;
  cuda_stream_view const s{stream.get()};
  void* p = r.allocate(1U << 20, s);
  write_pattern(p, 1U << 20, 5, s);
  EXPECT_TRUE(has_pattern(p, 1U << 20, 5, s));
  r.deallocate(p, 1U << 20, s);
}

TYPED_TEST_P(resource_battery, equality_and_resource_ref_interop)
{
  auto& r = this->resource();
  EXPECT_TRUE(r.is_equal(r));
  EXPECT_TRUE(r == r);
  EXPECT_FALSE(r != r);
  // No real resource can free simulated addresses (or the reverse).
  mr::simulated_memory_resource simulated;
  EXPECT_FALSE(r.is_equal(simulated));
  EXPECT_FALSE(simulated.is_equal(r));

#ifdef GPUMEM_HAS_CUDA_MR
  backend_stream stream;
  cuda::mr::async_resource_ref<cuda::mr::device_accessible> ref{r};
  cuda::mr::async_resource_ref<cuda::mr::device_accessible> same{r};
  EXPECT_TRUE(ref == same);
  void* p = ref.allocate_async(5000, 256, cuda::stream_ref{stream.get()});
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(detail::is_aligned(p, 256));
  write_pattern(p, 5000, 3, stream.get());
  EXPECT_TRUE(has_pattern(p, 5000, 3, stream.get()));
  ref.deallocate_async(p, 5000, 256, cuda::stream_ref{stream.get()});
  void* q = ref.allocate(300, 64);
  ASSERT_NE(q, nullptr);
  EXPECT_TRUE(detail::is_aligned(q, 256));
  ref.deallocate(q, 300, 64);
#endif
}

TYPED_TEST_P(resource_battery, bad_alignment_is_a_logic_error)
{
  auto& r = this->resource();
  backend_stream stream;
  for (std::size_t const alignment : {std::size_t{0}, std::size_t{3}, std::size_t{100}, std::size_t{512},
                                      std::size_t{4096}}) {
    try {
      void* p = r.allocate(64, alignment);
      r.deallocate(p, 64, alignment);
      ADD_FAILURE() << "alignment " << alignment << " was accepted";
    } catch (logic_error const& e) {
      EXPECT_NE(std::string{e.what()}.find(std::to_string(alignment)), std::string::npos) << e.what();
    }
    EXPECT_THROW((void)r.allocate_async(64, alignment, cuda_stream_view{stream.get()}), logic_error)
      << "alignment " << alignment;
  }
  try {
    (void)r.allocate(64, std::size_t{512});
  } catch (logic_error const& e) {
    EXPECT_NE(std::string{e.what()}.find("aligned_resource_adaptor"), std::string::npos) << e.what();
  }
}

TYPED_TEST_P(resource_battery, size_overflow_is_bad_alloc_not_out_of_memory)
{
  auto& r = this->resource();
  std::size_t const max = std::numeric_limits<std::size_t>::max();
  for (std::size_t const bytes : {max, max - 1, max - 254}) {
    try {
      void* p = r.allocate(bytes);
      r.deallocate(p, bytes);
      ADD_FAILURE() << bytes << " bytes were served";
    } catch (out_of_memory const& e) {
      ADD_FAILURE() << "an overflowing size must be bad_alloc, not out_of_memory: " << e.what();
    } catch (bad_alloc const& e) {
      EXPECT_NE(std::string{e.what()}.find(std::to_string(bytes)), std::string::npos) << e.what();
    }
  }
}

// The largest request that passes the interface's check: a resource that rounds it further (to slabs,
// superblocks, chunks, bins) must refuse it cleanly, not wrap around.
TYPED_TEST_P(resource_battery, the_largest_request_that_rounds_to_256_is_refused_cleanly)
{
  auto& r = this->resource();
  std::size_t const bytes = std::numeric_limits<std::size_t>::max() - 255;
  try {
    void* p = r.allocate(bytes);
    r.deallocate(p, bytes);
    ADD_FAILURE() << bytes << " bytes were served";
  } catch (bad_alloc const& e) {  // out_of_memory included: the memory is not there
    EXPECT_NE(std::string{e.what()}.find(std::to_string(bytes)), std::string::npos) << e.what();
  }
  void* p = r.allocate(1000);
  r.deallocate(p, 1000);
}

REGISTER_TYPED_TEST_SUITE_P(resource_battery, zero_bytes_give_nullptr_and_null_deallocation_is_a_no_op,
                            every_allocation_is_256_byte_aligned, allocations_are_distinct_and_keep_their_own_contents,
                            random_allocate_and_deallocate_sequence, many_threads_allocate_write_read_and_free,
                            allocate_on_one_stream_deallocate_on_another,
                            streams_destroyed_after_their_frees_are_never_used_again,
                            out_of_memory_names_the_request_and_leaves_the_resource_usable,
                            equality_and_resource_ref_interop, bad_alignment_is_a_logic_error,
                            size_overflow_is_bad_alloc_not_out_of_memory,
                            the_largest_request_that_rounds_to_256_is_refused_cleanly);

}  // namespace gpumem::test
