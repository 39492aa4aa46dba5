// spill_demo: a program whose data do not fit its device budget runs to completion with correct results.
//
//   spill_demo [BUDGET_GIB] [TOTAL_GIB] [BUFFER_MIB] [PASSES] [pinned|pageable]
//              (defaults: 8 12 256 3 pinned: 12 GiB of unified buffers under an 8 GiB budget)
//
// The data are unified_buffer<float>s, all taking part in one spill_manager whose budget is smaller than
// their sum. Each pass runs a kernel over every buffer in turn (x = x * 1 + (pass + 1) + buffer), marks it
// DEVICE_DIRTY, and goes on: when the next buffer's device copy does not fit, the least recently used
// buffers are copied back to their host copies and dropped, and come back on their next use. At the end
// every element of every buffer is checked on the host against the closed form. The run is timed twice:
// once with the budget, once with a budget that holds everything (no spilling), for reference.
//
// Prints the throughput (bytes the kernels touched per second, and the spill traffic) and exits 0 when
// every element is right, 1 on a wrong element or error, 77 (ctest's skip) without a CUDA device.
#include <gpumem/device.hpp>
#include <gpumem/buffer/spill_manager.hpp>
#include <gpumem/buffer/unified_buffer.hpp>
#include <gpumem/cuda_stream.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t gib = std::size_t{1} << 30U;
constexpr std::size_t mib = std::size_t{1} << 20U;

__global__ void add_kernel(float* data, std::size_t n, float value)
{
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    data[i] = data[i] * 1.0F + value;
  }
}

/// The value element `i` of buffer `b` starts with (exact in float: below 2^24).
float initial_value(std::size_t b, std::size_t i) { return static_cast<float>((b * 7 + i) % 1024); }
/// What each pass adds to buffer `b`.
float pass_increment(std::size_t pass, std::size_t b) { return static_cast<float>(pass + 1 + b % 5); }

/// Runs `fn(first, last)` over [0, n) on all cores.
template <class Fn>
void parallel_for(std::size_t n, Fn fn)
{
  unsigned const threads = std::max(1U, std::min(16U, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([=] { fn(n * t / threads, n * (t + 1) / threads); });
  }
  for (auto& th : pool) { th.join(); }
}

struct run_result {
  double seconds{};
  gpumem::spill_statistics spills{};
  bool correct{};
};

run_result run(std::size_t budget, std::size_t total, std::size_t buffer_bytes, std::size_t passes, bool pinned)
{
  gpumem::mr::cuda_memory_resource cuda;
  gpumem::mr::pool_memory_resource pool{&cuda};
  gpumem::spill_manager manager{&pool, budget};
  gpumem::cuda_stream stream;
  std::size_t const count = buffer_bytes / sizeof(float);
  std::size_t const buffers = total / buffer_bytes;

  gpumem::unified_options options;
  options.pinned = pinned;
  options.spill = &manager;
  std::vector<gpumem::unified_buffer<float>> data;
  data.reserve(buffers);
  for (std::size_t b = 0; b < buffers; ++b) {
    data.emplace_back(count, options);
    auto host = data.back().host();
    parallel_for(count, [&](std::size_t first, std::size_t last) {
      for (std::size_t i = first; i < last; ++i) { host[i] = initial_value(b, i); }
    });
  }

  auto const start = std::chrono::steady_clock::now();
  for (std::size_t pass = 0; pass < passes; ++pass) {
    for (std::size_t b = 0; b < buffers; ++b) {
      float* d = data[b].device(stream);  // may spill the least recently used buffers first
      add_kernel<<<1024, 256, 0, stream.value()>>>(d, count, pass_increment(pass, b));
      GPUMEM_CUDA_TRY(cudaGetLastError());
      data[b].mark_device_dirty();
    }
  }
  // The results back on the host (the buffers still on the device copy back; spilled ones already did).
  for (auto& buffer : data) { buffer.sync_to_host(stream); }
  stream.synchronize();
  for (auto& buffer : data) { static_cast<void>(buffer.host_view()); }
  double const seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::atomic<std::size_t> wrong{0};
  for (std::size_t b = 0; b < buffers; ++b) {
    auto host = data[b].host_view();
    float increments = 0;
    for (std::size_t pass = 0; pass < passes; ++pass) { increments += pass_increment(pass, b); }
    parallel_for(count, [&](std::size_t first, std::size_t last) {
      std::size_t bad = 0;
      for (std::size_t i = first; i < last; ++i) { bad += host[i] != initial_value(b, i) + increments ? 1 : 0; }
      wrong += bad;
    });
    if (wrong.load() != 0) {
      std::fprintf(stderr, "spill_demo: buffer %zu holds %zu wrong elements\n", b, wrong.load());
      break;
    }
  }
  return {seconds, manager.statistics(), wrong.load() == 0};
}

std::size_t arg(int argc, char** argv, int i, std::size_t fallback)
{
  return argc > i ? static_cast<std::size_t>(std::strtoull(argv[i], nullptr, 10)) : fallback;
}

}  // namespace

int main(int argc, char** argv)
try {
  if (gpumem::current_backend_kind() != gpumem::backend_kind::cuda) {
    std::puts("spill_demo: needs a CUDA device (the kernels are CUDA kernels); skipped");
    return 77;
  }
  std::size_t const budget = arg(argc, argv, 1, 8) * gib;
  std::size_t const total = arg(argc, argv, 2, 12) * gib;
  std::size_t const buffer_bytes = arg(argc, argv, 3, 256) * mib;
  std::size_t const passes = arg(argc, argv, 4, 3);
  bool const pinned = argc <= 5 || std::string{argv[5]} != "pageable";
  if (budget == 0 || buffer_bytes == 0 || total < buffer_bytes || passes == 0) {
    std::fprintf(stderr, "usage: spill_demo [BUDGET_GIB] [TOTAL_GIB] [BUFFER_MIB] [PASSES] [pinned|pageable]\n");
    return 2;
  }
  std::size_t const touched = (total / buffer_bytes) * buffer_bytes * passes;
  std::printf("spill_demo: %zu buffers of %zu MiB (%.2f GiB, %s host copies), budget %.2f GiB, %zu passes\n",
              total / buffer_bytes, buffer_bytes / mib, static_cast<double>(total) / gib,
              pinned ? "pinned" : "pageable", static_cast<double>(budget) / gib, passes);

  auto const report = [&](char const* label, run_result const& r) {
    std::printf("%-22s %8.3f s  %7.2f GB/s of kernel data  spills %6llu  copied back %8.2f GiB  "
                "dropped %8.2f GiB  %s\n",
                label, r.seconds, static_cast<double>(touched) / r.seconds / 1e9,
                static_cast<unsigned long long>(r.spills.spills),
                static_cast<double>(r.spills.bytes_copied_back) / gib,
                static_cast<double>(r.spills.bytes_spilled - r.spills.bytes_copied_back) / gib,
                r.correct ? "every element verified" : "WRONG RESULTS");
  };
  auto const spilling = run(budget, total, buffer_bytes, passes, pinned);
  report("with the budget:", spilling);
  auto const resident = run(total + gib, total, buffer_bytes, passes, pinned);
  report("everything resident:", resident);
  if (!spilling.correct || !resident.correct) { return 1; }
  if (budget < total && spilling.spills.spills == 0) {
    std::fprintf(stderr, "spill_demo: the working set exceeds the budget but nothing was spilled\n");
    return 1;
  }
  std::puts("spill_demo passed");
  return 0;
} catch (std::exception const& e) {
  std::fprintf(stderr, "spill_demo: %s\n", e.what());
  return 1;
}
