/**
 * @file workload.hpp
 * docs/benchmarks.md's allocation workloads as data and loops, so that every measurement runs the same
 * operations: the Google Benchmarks (benchmarks/), `gpumem bench` (cli/) and users' own harnesses.
 *
 *   fixed/<size>       allocate then free one block of <size>, in a loop (fixed_sizes)
 *   random             at most 1000 live blocks; each step allocates (p = 0.5, or when none are live; never
 *                      above the limit) a size log-uniform in [256 B, 4 MiB], else frees a uniformly random
 *                      live block; 200 000 steps, seed 42; the blocks still live are freed at the end
 *   random_mt/<T>      `random` split over T threads (steps and live limit divided; thread t seeded 42 + t),
 *                      each on its own stream
 *   random_streams/<T>x<S>  `random_mt/<T>` with S streams per thread: the block of slot k lives (is allocated
 *                      and freed) on the thread's stream k % S
 *
 * A sequence is generated before it is timed (the generator is not measured): a flat array of steps whose
 * blocks live in numbered slots. run_sequence is the timed loop, one virtual call per step;
 * run_sequence_checked is the verification pass (every block non-null, 256-byte aligned, never overlapping
 * another live block, live bytes metered).
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace gpumem::bench {

inline constexpr std::size_t workload_kib = std::size_t{1} << 10;
inline constexpr std::size_t workload_mib = std::size_t{1} << 20;

/** @brief One size of the `fixed` workload, with its label in benchmark names. */
struct fixed_size {
  std::size_t bytes;
  char const* label;
};
/** @brief The sizes of `fixed/<size>` (docs/benchmarks.md). */
inline constexpr std::array<fixed_size, 5> fixed_sizes{{{256, "256B"},
                                                        {4 * workload_kib, "4KiB"},
                                                        {64 * workload_kib, "64KiB"},
                                                        {1 * workload_mib, "1MiB"},
                                                        {64 * workload_mib, "64MiB"}}};

/** @brief The parameters of the `random` workload. */
struct random_shape {
  std::size_t steps;
  std::size_t max_live;
  std::size_t min_size;
  std::size_t max_size;
  std::uint64_t seed;
};
/** @brief docs/benchmarks.md's `random`. */
inline constexpr random_shape random_full{200'000, 1000, 256, 4 * workload_mib, 42};
/** @brief A tiny `random` for smoke tests (ctest). */
inline constexpr random_shape random_smoke{2'000, 64, 256, 4 * workload_mib, 42};

/** @brief One operation: allocate `size` bytes into `slot`, or free the block in `slot` (of that size). */
struct step {
  std::uint32_t size;
  std::uint16_t slot;
  bool allocate;
};

/** @brief A whole pass of `random`: the steps, then the frees of the blocks still live at the end. */
struct sequence {
  std::vector<step> steps;
  std::size_t slots{};            ///< slot indices are < slots (== the live limit)
  std::size_t allocations{};
  std::size_t bytes_allocated{};  ///< sum of the requested sizes
  std::size_t peak_live_bytes{};
  std::size_t peak_live_blocks{};
};

/**
 * @brief The `random` sequence of `steps` steps with at most `max_live` blocks, sizes from `shape`, seeded
 * with `seed` (std::mt19937_64, so the same on every platform).
 * @throws gpumem::logic_error if max_live is 0 or above 65536, or the sizes are not 0 < min <= max < 2^32.
 */
[[nodiscard]] GPUMEM_EXPORT sequence make_sequence(std::size_t steps, std::size_t max_live, random_shape const& shape,
                                                   std::uint64_t seed);

/**
 * @brief `random` split over `threads` threads: thread t gets steps/threads (+1 for the first steps % threads
 * threads) steps, the live limit split alike, and seed shape.seed + t; so every thread count does the same work.
 * @throws gpumem::logic_error if threads is 0 or above the live limit.
 */
[[nodiscard]] GPUMEM_EXPORT std::vector<sequence> split_random(random_shape const& shape, std::size_t threads);

/** @brief Live blocks as address ranges; reports a null, misaligned or overlapping block. Thread-safe. */
class GPUMEM_EXPORT block_checker {
 public:
  /** @return an empty string, or what is wrong with the new block (then it is not recorded). */
  [[nodiscard]] std::string add(void const* ptr, std::size_t bytes);
  /** @brief Forgets the block at `ptr` (no-op if unknown). */
  void remove(void const* ptr);

 private:
  std::mutex mutex_;
  std::map<std::uintptr_t, std::uintptr_t> live_;  // begin -> end of each live block
};

/** @brief Live bytes across threads, and their peak. Thread-safe. */
struct live_meter {
  std::atomic<std::size_t> live{0};
  std::atomic<std::size_t> peak{0};
  void add(std::size_t bytes) noexcept;
  void sub(std::size_t bytes) noexcept { live.fetch_sub(bytes); }
};

/**
 * @brief The timed loop: runs `seq`'s steps on `resource` and `stream`, blocks kept in `slots`.
 * @pre slots.size() >= seq.slots.
 * @post every block it allocated is freed (also when it throws).
 * @throws what allocate throws.
 */
GPUMEM_EXPORT void run_sequence(mr::device_memory_resource& resource, cuda_stream_view stream, sequence const& seq,
                                std::span<void*> slots);

/**
 * @brief As above, on several streams: the block of slot k is allocated and freed on streams[k % streams.size()]
 * (a thread spreading its work over streams, as `random_streams` does).
 * @throws gpumem::logic_error if streams is empty; what allocate throws.
 */
GPUMEM_EXPORT void run_sequence(mr::device_memory_resource& resource, std::span<cuda_stream_view const> streams,
                                sequence const& seq, std::span<void*> slots);

/**
 * @brief The verification pass: as run_sequence, checking every block with `checker` and metering live bytes.
 * @param out_of_memory when given, set to whether the pass failed with a std::bad_alloc (the resource ran
 *        out of memory) rather than a failed check or another exception.
 * @return an empty string, or the first check or exception that failed (everything is freed either way).
 */
[[nodiscard]] GPUMEM_EXPORT std::string run_sequence_checked(mr::device_memory_resource& resource,
                                                             cuda_stream_view stream, sequence const& seq,
                                                             std::span<void*> slots, block_checker& checker,
                                                             live_meter& meter, bool* out_of_memory = nullptr);

/**
 * @brief The verification pass on several streams, as the multi-stream run_sequence places the blocks.
 * @throws gpumem::logic_error if streams is empty (every other failure is returned, as above).
 */
[[nodiscard]] GPUMEM_EXPORT std::string run_sequence_checked(mr::device_memory_resource& resource,
                                                             std::span<cuda_stream_view const> streams,
                                                             sequence const& seq, std::span<void*> slots,
                                                             block_checker& checker, live_meter& meter,
                                                             bool* out_of_memory = nullptr);

}  // namespace gpumem::bench
