// Probe: do CUDA's virtual memory calls run in parallel from several host threads? (For the VMM pool's
// growth: a growth of n slabs costs n x (cuMemCreate + cuMemMap + cuMemSetAccess) when done in one thread.)
// Build: nvcc -O2 -std=c++17 vmm_parallel.cpp -lcuda -o vmm_parallel
#include "driver_probe.hpp"

#include <cuda.h>
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

int main() {
  cudaFree(nullptr);
  CUcontext ctx; CK(cuCtxGetCurrent(&ctx));
  CUdevice dev; CK(cuCtxGetDevice(&dev));
  CUmemAllocationProp prop{}; prop.type = CU_MEM_ALLOCATION_TYPE_PINNED; prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE; prop.location.id = dev;
  CUmemAccessDesc acc{}; acc.location = prop.location; acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUdeviceptr va; size_t const vsz = size_t{1} << 40; CK(cuMemAddressReserve(&va, vsz, 0, 0, 0));
  size_t const slab = size_t{32} << 20;
  int const slabs = 64;
  for (int round = 0; round < 2; ++round) {
    for (int threads : {1, 2, 4, 8}) {
      std::vector<CUmemGenericAllocationHandle> hs(slabs);
      auto t0 = clk::now();
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
          CK(cuCtxSetCurrent(ctx));
          for (int i = t; i < slabs; i += threads) {
            CK(cuMemCreate(&hs[i], slab, &prop, 0));
            CK(cuMemMap(va + i * slab, slab, 0, hs[i], 0));
            CK(cuMemSetAccess(va + i * slab, slab, &acc, 1));
          }
        });
      }
      for (auto& th : pool) th.join();
      auto t1 = clk::now();
      CK(cuMemsetD8(va, 1, slabs * slab)); CK(cuCtxSynchronize());
      auto t2 = clk::now();
      pool.clear();
      for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
          CK(cuCtxSetCurrent(ctx));
          for (int i = t; i < slabs; i += threads) { CK(cuMemUnmap(va + i * slab, slab)); CK(cuMemRelease(hs[i])); }
        });
      }
      for (auto& th : pool) th.join();
      auto t3 = clk::now();
      std::printf("round %d, %d threads: %d slabs of 32 MiB create+map+access %.1f us (%.1f us/slab), unmap+release %.1f us\n",
                  round, threads, slabs, us(t0, t1), us(t0, t1) / slabs, us(t2, t3));
    }
  }
  // The same, split: create in parallel, then map + access in one thread, and the reverse.
  for (int threads : {1, 4}) {
    std::vector<CUmemGenericAllocationHandle> hs(slabs);
    auto t0 = clk::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] { CK(cuCtxSetCurrent(ctx)); for (int i = t; i < slabs; i += threads) CK(cuMemCreate(&hs[i], slab, &prop, 0)); });
    for (auto& th : pool) th.join();
    auto t1 = clk::now();
    pool.clear();
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] { CK(cuCtxSetCurrent(ctx)); for (int i = t; i < slabs; i += threads) { CK(cuMemMap(va + i * slab, slab, 0, hs[i], 0)); } });
    for (auto& th : pool) th.join();
    auto t2 = clk::now();
    pool.clear();
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] { CK(cuCtxSetCurrent(ctx)); for (int i = t; i < slabs; i += threads) CK(cuMemSetAccess(va + i * slab, slab, &acc, 1)); });
    for (auto& th : pool) th.join();
    auto t3 = clk::now();
    for (int i = 0; i < slabs; ++i) { CK(cuMemUnmap(va + i * slab, slab)); CK(cuMemRelease(hs[i])); }
    std::printf("%d threads, phase by phase: create %.1f us, map %.1f us, access %.1f us (per slab: %.1f / %.1f / %.1f)\n", threads,
                us(t0, t1), us(t1, t2), us(t2, t3), us(t0, t1) / slabs, us(t1, t2) / slabs, us(t2, t3) / slabs);
  }
  CK(cuMemAddressFree(va, vsz));
  return 0;
}
