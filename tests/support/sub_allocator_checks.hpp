// Test helpers shared by the stream-ordered sub-allocators' tests (pool, fixed_size): a random
// allocate/deallocate driver over a simulated upstream that checks, as it goes, that live blocks never
// overlap, lie inside the upstream's live allocations and are 256-byte aligned, that the resource's books
// balance, and its invariants (every `check_every` steps).
#pragma once

#include "conformance/resource_battery.hpp"
#include "support/gate.hpp"
#include "support/memory_checks.hpp"

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/simulated_memory_resource.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace gpumem::test {

inline constexpr std::size_t KiB = std::size_t{1} << 10;
inline constexpr std::size_t MiB = std::size_t{1} << 20;
inline constexpr std::size_t GiB = std::size_t{1} << 30;

/// The cuda_memory_resource that the sub-allocator tests grow from (one for the whole process).
inline mr::cuda_memory_resource& cuda_upstream()
{
  static mr::cuda_memory_resource upstream;
  return upstream;
}

/**
 * Memory freed on stream A while A's work on it (a memset held back by a gate) is pending must reach
 * stream B only after that work: B's own work waits, and B's value is the one that stays.
 * The freed block first goes to the freeing thread's cache; `after_free` (if given) runs after the
 * deallocation on A, e.g. to flush the caches; without it, B's allocation must find the block itself.
 * With `free_on_another_thread`, A's allocation, work and deallocation run on a thread that has ended
 * (its cache emptied at exit) before B asks.
 * @pre `r` can hold exactly one block of `bytes`, so that B can only get A's block.
 */
inline void expect_block_reaches_another_stream_only_after_pending_work(mr::device_memory_resource& r,
                                                                       std::size_t bytes,
                                                                       std::function<void()> const& after_free = {},
                                                                       bool free_on_another_thread = false)
{
  detail::backend& backend = detail::get_backend();
  backend_stream a;
  backend_stream b;
  gate held;
  void* p = nullptr;
  auto use_and_free_on_a = [&] {
    p = r.allocate(bytes, a.get());
    held.hold(a.get());
    backend.memset_async(p, 0xAA, bytes, a.get());
    r.deallocate(p, bytes, a.get());
  };
  if (free_on_another_thread) {
    std::thread{use_and_free_on_a}.join();
  } else {
    use_and_free_on_a();
  }
  if (after_free) { after_free(); }
  void* q = r.allocate(bytes, b.get());
  if (q != p) { held.release(); }  // let A's work finish before the streams are destroyed
  ASSERT_EQ(q, p) << "the test needs B to receive A's block";
  backend.memset_async(q, 0xBB, bytes, b.get());
  std::atomic<bool> b_ran{false};
  auto mark = [&b_ran] { b_ran.store(true); };
  on_stream(b.get(), mark);
  std::this_thread::sleep_for(std::chrono::milliseconds{50});
  EXPECT_FALSE(b_ran.load()) << "B's work ran while A's work on the same memory was still held back";
  held.release();
  backend.stream_synchronize(b.get());
  backend.stream_synchronize(a.get());
  EXPECT_TRUE(is_filled_with(q, bytes, 0xBB, b.get())) << "A's pending memset ran after B's";
  r.deallocate(q, bytes, b.get());
}

/** @brief What run_random_sequence does. */
struct random_sequence_options {
  std::uint64_t seed{1};
  int operations{10'000};
  int check_every{1};                     // check_invariants() every this many steps
  double max_log2_size{20.0};             // request sizes are log-uniform in [1, 2^max_log2_size]
  std::size_t max_live{200};              // allocate only while fewer blocks are live
  std::vector<cuda_stream_view> streams;  // allocate and deallocate on streams drawn from these
  bool failures_expected{false};          // out_of_memory is an accepted outcome (failure injection)
  std::function<std::size_t(std::size_t)> block_bytes;  // the bytes a request of n bytes occupies
};

/** @brief What a run saw. */
struct random_sequence_result {
  std::size_t allocations{};
  std::size_t failures{};
};

/// One live block of the driver: address -> {requested bytes, occupied bytes}.
struct live_block {
  std::size_t bytes;
  std::size_t occupied;
};

/// Frees every block in `live` (on its own stream list entry's first stream) and empties it.
template <class Resource>
void free_all(Resource& r, std::map<std::uintptr_t, live_block>& live, cuda_stream_view stream)
{
  for (auto const& [address, b] : live) { r.deallocate(reinterpret_cast<void*>(address), b.bytes, stream); }  // NOLINT
  live.clear();
}

/**
 * @brief Runs a random sequence against `r` (whose upstream is `upstream`) and leaves the live blocks in
 * `live` for the caller to check and free. Fatal failures return at once (check HasFatalFailure()).
 */
template <class Resource>
void run_random_sequence(Resource& r, mr::simulated_memory_resource& upstream, random_sequence_options const& options,
                         std::map<std::uintptr_t, live_block>& live, random_sequence_result& result)
{
  std::mt19937_64 rng{options.seed};
  std::size_t occupied_total = 0;
  for (auto const& [address, b] : live) { occupied_total += b.occupied; }
  auto pick_stream = [&] { return options.streams[rng() % options.streams.size()]; };
  for (int step = 0; step < options.operations; ++step) {
    bool const allocate = live.empty() || (live.size() < options.max_live && rng() % 100 < 55);
    if (allocate) {
      std::size_t const bytes = log_uniform_size(rng, options.max_log2_size);
      void* p = nullptr;
      try {
        p = r.allocate(bytes, pick_stream());
      } catch (out_of_memory const& e) {
        if (!options.failures_expected) {
          FAIL() << "seed " << options.seed << ", step " << step << ": " << e.what();
        }
        ++result.failures;
      }
      if (p != nullptr) {
        ++result.allocations;
        auto const address = reinterpret_cast<std::uintptr_t>(p);
        std::size_t const occupied = options.block_bytes(bytes);
        EXPECT_TRUE(detail::is_aligned(p, detail::allocation_alignment)) << format_pointer(p);
        EXPECT_TRUE(upstream.owns(p) && upstream.owns(reinterpret_cast<void*>(address + occupied - 1)))  // NOLINT
          << "seed " << options.seed << ", step " << step << ": block " << format_pointer(p) << " (+" << occupied
          << ") is not inside memory the resource holds from its upstream";
        auto const next = live.lower_bound(address);
        if (next != live.end()) {
          ASSERT_LE(address + occupied, next->first) << "seed " << options.seed << ", step " << step
                                                     << ": a new block overlaps a live one";
        }
        if (next != live.begin()) {
          auto const prev = std::prev(next);
          ASSERT_LE(prev->first + prev->second.occupied, address)
            << "seed " << options.seed << ", step " << step << ": a new block overlaps a live one";
        }
        live.emplace(address, live_block{bytes, occupied});
        occupied_total += occupied;
      }
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<std::ptrdiff_t>(rng() % live.size()));
      r.deallocate(reinterpret_cast<void*>(it->first), it->second.bytes, pick_stream());  // NOLINT
      occupied_total -= it->second.occupied;
      live.erase(it);
    }
    if (step % options.check_every == 0 || step + 1 == options.operations) {
      ASSERT_NO_THROW(r.check_invariants()) << "seed " << options.seed << ", step " << step;
      ASSERT_EQ(r.bytes_in_use(), occupied_total) << "seed " << options.seed << ", step " << step;
      ASSERT_EQ(r.pool_size(), upstream.bytes_in_use())
        << "seed " << options.seed << ", step " << step << ": the resource's chunks and its upstream disagree";
    }
  }
}

/**
 * 16-thread style stress with cross-thread frees: `thread_count` threads (every fourth on its per-thread
 * default stream, the others on streams of their own) allocate `iterations` blocks of `next_size(rng)`
 * bytes, write a pattern into every fourth block (write_pattern synchronises the stream, so the block is
 * idle when handed on), free half of them themselves and post the rest to a random thread, which checks
 * the pattern and frees them on its own stream. Blocks posted after their receiver's last look are freed
 * on the legacy default stream at the end.
 * @return the number of blocks whose contents were corrupted (each also reported with ADD_FAILURE).
 */
template <class NextSize>
int run_cross_thread_stress(mr::device_memory_resource& resource, int thread_count, int iterations,
                            std::uint64_t seed_base, NextSize next_size)
{
  struct handed_block {
    void* ptr;
    std::size_t bytes;
    std::uint32_t seed;
  };
  std::mutex mailbox_mutex;
  std::vector<std::vector<handed_block>> mailboxes(static_cast<std::size_t>(thread_count));
  std::atomic<int> failures{0};
  std::atomic<int> done{0};
  auto worker = [&](int t) {
    std::unique_ptr<backend_stream> own;
    cuda_stream_view stream = cuda_stream_per_thread;
    if (t % 4 != 0) {
      own = std::make_unique<backend_stream>();
      stream = own->get();
    }
    std::mt19937_64 rng{static_cast<std::uint64_t>(t) + seed_base};
    auto drain = [&] {
      std::vector<handed_block> mine;
      {
        std::lock_guard lock{mailbox_mutex};
        mine.swap(mailboxes[static_cast<std::size_t>(t)]);
      }
      for (handed_block const& b : mine) {
        if (b.seed % 4 == 0) {
          auto const ok = has_pattern(b.ptr, b.bytes, b.seed, stream);
          if (!ok) {
            failures.fetch_add(1);
            ADD_FAILURE() << ok.message();
          }
        }
        resource.deallocate(b.ptr, b.bytes, stream);
      }
    };
    for (int i = 0; i < iterations; ++i) {
      std::size_t const bytes = next_size(rng);
      void* p = resource.allocate(bytes, stream);
      auto const seed = static_cast<std::uint32_t>(t * 10'000 + i);
      if (seed % 4 == 0) { write_pattern(p, bytes, seed, stream); }
      if (rng() % 2 == 0) {
        resource.deallocate(p, bytes, stream);
      } else {
        auto const target = static_cast<std::size_t>(rng() % static_cast<std::uint64_t>(thread_count));
        std::lock_guard lock{mailbox_mutex};
        mailboxes[target].push_back({p, bytes, seed});
      }
      if (i % 8 == 0) { drain(); }
    }
    done.fetch_add(1);
    while (done.load() < thread_count) {
      drain();
      std::this_thread::sleep_for(std::chrono::microseconds{200});
    }
    drain();
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) { threads.emplace_back(worker, t); }
  for (auto& thread : threads) { thread.join(); }
  for (auto const& mailbox : mailboxes) {
    for (handed_block const& b : mailbox) { resource.deallocate(b.ptr, b.bytes, cuda_stream_default); }
  }
  return failures.load();
}

}  // namespace gpumem::test
