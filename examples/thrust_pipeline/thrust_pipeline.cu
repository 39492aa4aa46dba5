// thrust_pipeline: a real GPU program whose allocations gpumem records. It aggregates a stream of batches
// of (key, value) rows, as an analytics job does: per batch, generate rows on the device, sort them by key,
// sum the values per key (reduce_by_key), keep the keys whose sum is large (copy_if); the last results stay
// alive for a while and are merged every few batches into a running result. Batch sizes vary (64 Ki to
// 4 Mi rows), two streams take turns, and every temporary buffer of Thrust comes from gpumem through
// exec_policy, so the log shows the mix of sizes and lifetimes of a real program.
//
//   thrust_pipeline LOG.csv [BATCHES] [SEED]     (defaults: 400 batches, seed 7)
//
// Every device allocation goes through logging_resource_adaptor (RMM's CSV format) over
// cuda_async_memory_resource; LOG.csv is that log (gzip it to bundle it: data/logs/). Each batch's sum is
// checked against the host's, so a wrong result fails the run (exit 1). Needs a CUDA device: exits 77 (the
// ctest skip code) on the host backend.
#include <gpumem/device.hpp>
#include <gpumem/buffer/device_uvector.hpp>
#include <gpumem/cuda_stream.hpp>
#include <gpumem/mr/cuda_async_memory_resource.hpp>
#include <gpumem/mr/exec_policy.hpp>
#include <gpumem/mr/logging_resource_adaptor.hpp>
#include <gpumem/mr/per_device_resource.hpp>

#include <thrust/copy.h>
#include <thrust/execution_policy.h>
#include <thrust/iterator/zip_iterator.h>
#include <thrust/merge.h>
#include <thrust/reduce.h>
#include <thrust/sort.h>
#include <thrust/tabulate.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <random>
#include <string>

namespace {

using key_type = std::uint32_t;
using value_type = std::uint64_t;

__host__ __device__ inline std::uint32_t mix(std::uint64_t x)
{
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return static_cast<std::uint32_t>(x);
}

struct make_key {
  std::uint64_t salt;
  key_type key_space;
  __host__ __device__ key_type operator()(std::uint64_t i) const { return mix(i * 2 + salt) % key_space; }
};

struct make_value {
  std::uint64_t salt;
  __host__ __device__ value_type operator()(std::uint64_t i) const { return mix(i * 2 + 1 + salt) % 1000; }
};

struct is_heavy {
  value_type threshold;
  __host__ __device__ bool operator()(thrust::tuple<key_type, value_type> const& t) const
  {
    return thrust::get<1>(t) >= threshold;
  }
};

/// A batch's kept result: the heavy keys and their sums, on the stream that made them.
struct result {
  gpumem::device_uvector<key_type> keys;
  gpumem::device_uvector<value_type> sums;
};

/// The host's sum of the values of a batch (the check).
value_type host_sum(std::size_t rows, std::uint64_t salt)
{
  value_type sum = 0;
  make_value const value{salt};
  for (std::size_t i = 0; i < rows; ++i) { sum += value(i); }
  return sum;
}

int run(char const* log_path, int batches, unsigned seed)
{
  if (gpumem::current_backend_kind() != gpumem::backend_kind::cuda) {
    std::puts("thrust_pipeline: needs a CUDA device (backend is host); skipped");
    return 77;
  }
  gpumem::mr::cuda_async_memory_resource upstream;
  gpumem::mr::logging_resource_adaptor logged{&upstream, std::string{log_path}};
  gpumem::mr::set_current_device_resource(&logged);

  std::array<gpumem::cuda_stream, 2> streams;
  std::mt19937 rng{seed};
  std::deque<result> kept;        // the last results, merged every `merge_every` batches
  constexpr std::size_t keep = 6;
  constexpr int merge_every = 8;
  std::size_t running_size = 0;
  gpumem::device_uvector<key_type> running_keys{0, streams[0].view()};
  gpumem::device_uvector<value_type> running_sums{0, streams[0].view()};
  std::size_t total_rows = 0;

  for (int b = 0; b < batches; ++b) {
    gpumem::cuda_stream_view const s = streams[static_cast<std::size_t>(b) % streams.size()].view();
    auto const policy = gpumem::mr::exec_policy(s);
    std::size_t const rows = std::size_t{1} << (16 + rng() % 7);           // 64 Ki .. 4 Mi rows
    std::size_t const jitter = rows / 4 * (rng() % 1000) / 1000;           // not a power of two
    std::size_t const n = rows - jitter;
    key_type const key_space = static_cast<key_type>(std::max<std::size_t>(n / (2 + rng() % 30), 16));
    std::uint64_t const salt = rng();
    total_rows += n;

    gpumem::device_uvector<key_type> keys{n, s};
    gpumem::device_uvector<value_type> values{n, s};
    thrust::tabulate(policy, keys.begin(), keys.end(), make_key{salt, key_space});
    thrust::tabulate(policy, values.begin(), values.end(), make_value{salt});
    thrust::sort_by_key(policy, keys.begin(), keys.end(), values.begin());

    gpumem::device_uvector<key_type> unique_keys{n, s};
    gpumem::device_uvector<value_type> sums{n, s};
    auto const ends = thrust::reduce_by_key(policy, keys.begin(), keys.end(), values.begin(), unique_keys.begin(),
                                            sums.begin());
    auto const groups = static_cast<std::size_t>(ends.first - unique_keys.begin());
    value_type const total = thrust::reduce(policy, sums.begin(), sums.begin() + groups, value_type{0});
    if (total != host_sum(n, salt)) {
      std::fprintf(stderr, "thrust_pipeline: batch %d: device sum %llu != host sum %llu\n", b,
                   static_cast<unsigned long long>(total), static_cast<unsigned long long>(host_sum(n, salt)));
      return 1;
    }

    // Keep the heavy groups (about a fifth) for the next merges.
    value_type const threshold = 1000 * (n / key_space) * 6 / 10;
    result heavy{gpumem::device_uvector<key_type>{groups, s}, gpumem::device_uvector<value_type>{groups, s}};
    auto const in = thrust::make_zip_iterator(thrust::make_tuple(unique_keys.begin(), sums.begin()));
    auto const out = thrust::make_zip_iterator(thrust::make_tuple(heavy.keys.begin(), heavy.sums.begin()));
    auto const out_end = thrust::copy_if(policy, in, in + static_cast<std::ptrdiff_t>(groups), out, is_heavy{threshold});
    std::size_t const heavy_count = static_cast<std::size_t>(out_end - out);
    heavy.keys.resize(heavy_count, s);
    heavy.sums.resize(heavy_count, s);
    kept.push_back(std::move(heavy));
    if (kept.size() > keep) { kept.pop_front(); }

    if ((b + 1) % merge_every == 0) {
      // Merge the kept results into the running result (by key), on this batch's stream.
      for (result& r : kept) {
        streams[0].synchronize();
        streams[1].synchronize();
        std::size_t const merged_size = running_size + r.keys.size();
        gpumem::device_uvector<key_type> merged_keys{merged_size, s};
        gpumem::device_uvector<value_type> merged_sums{merged_size, s};
        thrust::merge_by_key(policy, running_keys.begin(), running_keys.begin() + running_size, r.keys.begin(),
                             r.keys.end(), running_sums.begin(), r.sums.begin(), merged_keys.begin(),
                             merged_sums.begin());
        running_keys = std::move(merged_keys);
        running_sums = std::move(merged_sums);
        running_size = merged_size;
      }
      kept.clear();
      if (running_size > (std::size_t{8} << 20)) {  // the running result is flushed (written out) when large
        running_keys = gpumem::device_uvector<key_type>{0, s};
        running_sums = gpumem::device_uvector<value_type>{0, s};
        running_size = 0;
      }
    }
  }
  for (auto& st : streams) { st.synchronize(); }
  kept.clear();
  running_keys = gpumem::device_uvector<key_type>{0, streams[0].view()};
  running_sums = gpumem::device_uvector<value_type>{0, streams[0].view()};
  for (auto& st : streams) { st.synchronize(); }
  gpumem::mr::set_current_device_resource(nullptr);
  logged.flush();
  std::printf("thrust_pipeline: %d batches, %zu rows, every batch sum verified; log: %s\n", batches, total_rows,
              log_path);
  return 0;
}

}  // namespace

int main(int argc, char** argv)
{
  if (argc < 2 || argc > 4) {
    std::fprintf(stderr, "usage: thrust_pipeline LOG.csv [BATCHES] [SEED]\n");
    return 2;
  }
  int const batches = argc > 2 ? std::atoi(argv[2]) : 400;
  unsigned const seed = argc > 3 ? static_cast<unsigned>(std::strtoul(argv[3], nullptr, 10)) : 7U;
  if (batches <= 0) {
    std::fprintf(stderr, "thrust_pipeline: BATCHES must be a positive integer, not '%s'\n", argv[2]);
    return 2;
  }
  try {
    return run(argv[1], batches, seed);
  } catch (std::exception const& e) {
    std::fprintf(stderr, "thrust_pipeline: error: %s\n", e.what());
    return 1;
  }
}
