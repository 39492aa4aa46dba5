// Peer access to the VMM pool: a kernel on device 1 reads and writes memory of a vmm_pool_memory_resource of
// device 0 made with peer_devices = {1} (cuMemSetAccess grants device 1 access to every piece the pool maps),
// every element checked afterwards; and what that access runs at against cudaMemcpyPeerAsync of the same
// bytes, in the same run. Needs two CUDA devices that can access each other; exits 77 (skipped) otherwise.
//
//     peer_access [MiB per buffer, default 256] [repeats, default 10]
#include <gpumem/cuda_stream.hpp>
#include <gpumem/mr/vmm_pool_memory_resource.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

#define CHECK(call)                                                                             \
  do {                                                                                          \
    cudaError_t const status_ = (call);                                                         \
    if (status_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s failed: %s (line %d)\n", #call, cudaGetErrorString(status_), __LINE__); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

__global__ void fill(std::uint32_t* x, std::size_t n)
{
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    x[i] = static_cast<std::uint32_t>(i * 2654435761U);
  }
}

/// Reads and writes every element: x[i] = 2 x[i] + 1.
__global__ void update(std::uint32_t* x, std::size_t n)
{
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    x[i] = 2 * x[i] + 1;
  }
}

/// Reads every element (the sum keeps the reads).
__global__ void read_all(std::uint32_t const* x, std::size_t n, unsigned long long* sum)
{
  unsigned long long local = 0;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    local += x[i];
  }
  atomicAdd(sum, local);
}

/// Milliseconds of `launch()` on `stream` (events), the median of `repeats` after one warm-up.
template <class Launch>
float median_ms(cudaStream_t stream, int repeats, Launch&& launch)
{
  cudaEvent_t start{}, stop{};
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  launch();
  std::vector<float> times;
  for (int r = 0; r < repeats; ++r) {
    CHECK(cudaEventRecord(start, stream));
    launch();
    CHECK(cudaEventRecord(stop, stream));
    CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv)
{
  std::size_t const mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 256;
  int const repeats = argc > 2 ? std::atoi(argv[2]) : 10;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 2) {
    std::printf("peer_access: needs two CUDA devices (found %d); skipped\n", count);
    return 77;
  }
  int can = 0;
  CHECK(cudaDeviceCanAccessPeer(&can, 1, 0));
  if (can == 0) {
    std::printf("peer_access: device 1 cannot access device 0's memory; skipped\n");
    return 77;
  }
  std::size_t const bytes = mib << 20;
  std::size_t const n = bytes / sizeof(std::uint32_t);
  int const grid = 1024, block = 256;

  CHECK(cudaSetDevice(0));
  gpumem::mr::vmm_pool_options options;
  options.peer_devices = {1};
  gpumem::mr::vmm_pool_memory_resource pool{options};
  auto* const x = static_cast<std::uint32_t*>(pool.allocate(bytes));
  fill<<<grid, block>>>(x, n);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());

  // Device 1 reads and writes device 0's pool memory.
  CHECK(cudaSetDevice(1));
  gpumem::cuda_stream stream1;
  update<<<grid, block, 0, stream1.value()>>>(x, n);
  CHECK(cudaGetLastError());
  CHECK(cudaStreamSynchronize(stream1.value()));
  std::vector<std::uint32_t> host(n);
  CHECK(cudaMemcpy(host.data(), x, bytes, cudaMemcpyDefault));
  for (std::size_t i = 0; i < n; ++i) {
    if (host[i] != 2 * static_cast<std::uint32_t>(i * 2654435761U) + 1) {
      std::printf("peer_access: element %zu is %u after device 1's update, expected %u\n", i, host[i],
                  2 * static_cast<std::uint32_t>(i * 2654435761U) + 1);
      return 1;
    }
  }
  std::printf("device 1 updated all %zu elements of device 0's VMM pool memory: every element verified\n", n);

  unsigned long long* sum = nullptr;
  CHECK(cudaMalloc(&sum, sizeof *sum));
  float const update_ms = median_ms(stream1.value(), repeats, [&] { update<<<grid, block, 0, stream1.value()>>>(x, n); });
  float const read_ms = median_ms(stream1.value(), repeats, [&] { read_all<<<grid, block, 0, stream1.value()>>>(x, n, sum); });

  // The peer: cudaMemcpyPeerAsync of the same bytes from a cudaMalloc buffer of device 0 to one of device 1.
  void* target = nullptr;
  CHECK(cudaMalloc(&target, bytes));
  CHECK(cudaDeviceEnablePeerAccess(0, 0));
  CHECK(cudaSetDevice(0));
  void* source = nullptr;
  CHECK(cudaMalloc(&source, bytes));
  CHECK(cudaSetDevice(1));
  float const copy_ms = median_ms(stream1.value(), repeats, [&] {
    CHECK(cudaMemcpyPeerAsync(target, 1, source, 0, bytes, stream1.value()));
  });
  // And the local ceiling: the same update on device 1's own memory.
  float const local_ms = median_ms(stream1.value(), repeats, [&] {
    update<<<grid, block, 0, stream1.value()>>>(static_cast<std::uint32_t*>(target), n);
  });

  auto const gbps = [&](double moved, float ms) { return moved / (ms * 1e6); };
  std::string const title = "on device 1, " + std::to_string(mib) + " MiB";
  std::printf("%-58s %10s %10s\n", title.c_str(), "ms", "GB/s");
  std::printf("%-58s %10.3f %10.1f\n", "kernel reads + writes the VMM pool's memory (peer)", update_ms, gbps(2.0 * bytes, update_ms));
  std::printf("%-58s %10.3f %10.1f\n", "kernel reads the VMM pool's memory (peer)", read_ms, gbps(1.0 * bytes, read_ms));
  std::printf("%-58s %10.3f %10.1f\n", "cudaMemcpyPeerAsync device 0 -> device 1 (cudaMalloc)", copy_ms, gbps(1.0 * bytes, copy_ms));
  std::printf("%-58s %10.3f %10.1f\n", "kernel reads + writes device 1's own memory (local)", local_ms, gbps(2.0 * bytes, local_ms));

  CHECK(cudaFree(target));
  CHECK(cudaFree(sum));
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(source));
  pool.deallocate(x, bytes);
  std::printf("peer_access passed\n");
  return 0;
}
