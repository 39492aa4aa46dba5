// Probe: what CUDA's virtual memory management calls cost on this GPU (for the design of the VMM pool).
// Build: nvcc -O2 -std=c++17 vmm_costs.cpp -lcuda -o vmm_costs
#include "driver_probe.hpp"

#include <cuda.h>
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main() {
  cudaFree(nullptr);
  CUdevice dev; CK(cuCtxGetDevice(&dev));
  int vmm = 0; CK(cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
  CUmemAllocationProp prop{}; prop.type = CU_MEM_ALLOCATION_TYPE_PINNED; prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE; prop.location.id = dev;
  size_t gmin = 0, grec = 0;
  CK(cuMemGetAllocationGranularity(&gmin, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CK(cuMemGetAllocationGranularity(&grec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  std::printf("vmm=%d granularity min=%zu recommended=%zu\n", vmm, gmin, grec);
  for (size_t tib : {1, 4, 16, 64}) {
    CUdeviceptr va; auto t0 = clk::now(); CUresult r = cuMemAddressReserve(&va, tib << 40, 0, 0, 0); auto t1 = clk::now();
    std::printf("reserve %zu TiB: %s %.1f us\n", tib, r == CUDA_SUCCESS ? "ok" : "FAIL", us(t0, t1));
    if (r == CUDA_SUCCESS) CK(cuMemAddressFree(va, tib << 40));
  }
  CUdeviceptr va; size_t const vsz = size_t{1} << 40; CK(cuMemAddressReserve(&va, vsz, 0, 0, 0));
  CUmemAccessDesc acc{}; acc.location = prop.location; acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  for (size_t mib : {2, 8, 32, 128, 512, 2048}) {
    size_t sz = mib << 20; int reps = mib >= 512 ? 3 : 20;
    double c = 0, m = 0, a = 0, u = 0, rl = 0, cm = 0, cf = 0;
    for (int i = 0; i < reps; ++i) {
      CUmemGenericAllocationHandle h;
      auto t0 = clk::now(); CK(cuMemCreate(&h, sz, &prop, 0)); auto t1 = clk::now();
      CK(cuMemMap(va, sz, 0, h, 0)); auto t2 = clk::now();
      CK(cuMemSetAccess(va, sz, &acc, 1)); auto t3 = clk::now();
      CK(cuMemUnmap(va, sz)); auto t4 = clk::now();
      CK(cuMemRelease(h)); auto t5 = clk::now();
      void* p; auto t6 = clk::now(); cudaMalloc(&p, sz); auto t7 = clk::now(); cudaFree(p); auto t8 = clk::now();
      c += us(t0, t1); m += us(t1, t2); a += us(t2, t3); u += us(t3, t4); rl += us(t4, t5); cm += us(t6, t7); cf += us(t7, t8);
    }
    std::printf("%5zu MiB: create %.1f map %.1f setaccess %.1f unmap %.1f release %.1f | cudaMalloc %.1f cudaFree %.1f (us, mean of %d)\n",
                mib, c / reps, m / reps, a / reps, u / reps, rl / reps, cm / reps, cf / reps, reps);
  }
  // 256 granules of 2 MiB, each its own handle: map all, one setaccess over the range, vs per-granule setaccess
  for (int per_granule_access : {0, 1}) {
    int n = 256; size_t g = grec; std::vector<CUmemGenericAllocationHandle> hs(n);
    auto t0 = clk::now();
    for (int i = 0; i < n; ++i) CK(cuMemCreate(&hs[i], g, &prop, 0));
    auto t1 = clk::now();
    for (int i = 0; i < n; ++i) { CK(cuMemMap(va + i * g, g, 0, hs[i], 0)); if (per_granule_access) CK(cuMemSetAccess(va + i * g, g, &acc, 1)); }
    auto t2 = clk::now();
    if (!per_granule_access) CK(cuMemSetAccess(va, n * g, &acc, 1));
    auto t3 = clk::now();
    for (int i = 0; i < n; ++i) CK(cuMemUnmap(va + i * g, g));
    auto t4 = clk::now();
    // remap the same handles at another place (reuse without create)
    for (int i = 0; i < n; ++i) CK(cuMemMap(va + (n + i) * g, g, 0, hs[i], 0));
    CK(cuMemSetAccess(va + n * g, n * g, &acc, 1));
    auto t5 = clk::now();
    { CUresult r = cuMemUnmap(va + n * g, n * g); if (r != CUDA_SUCCESS) { std::printf("unmap over many mappings refused (%d), per mapping instead\n", (int)r); for (int i = 0; i < n; ++i) CK(cuMemUnmap(va + (n + i) * g, g)); } }
    auto t6 = clk::now();
    for (int i = 0; i < n; ++i) CK(cuMemRelease(hs[i]));
    auto t7 = clk::now();
    std::printf("256 x 2MiB (per-granule access=%d): create %.1f map(+access) %.1f access-range %.1f unmap %.1f remap+access %.1f unmap-range %.1f release %.1f us total\n",
                per_granule_access, us(t0, t1), us(t1, t2), us(t2, t3), us(t3, t4), us(t4, t5), us(t5, t6), us(t6, t7));
  }
  // One handle of 16 x 32 MiB mapped as 16 mappings (offsets): one setAccess over the range vs 16 handles.
  for (int variant : {0, 1, 2}) {
    size_t const piece = size_t{32} << 20; int const n = 16;
    std::vector<CUmemGenericAllocationHandle> hs(variant == 0 ? 1 : n);
    auto t0 = clk::now();
    if (variant == 0) CK(cuMemCreate(&hs[0], n * piece, &prop, 0)); else for (auto& h : hs) CK(cuMemCreate(&h, piece, &prop, 0));
    auto t1 = clk::now();
    bool refused = false;
    for (int i = 0; i < n && !refused; ++i) {
      CUresult const r = cuMemMap(va + i * piece, piece, variant == 0 ? i * piece : 0, variant == 0 ? hs[0] : hs[i], 0);
      if (r != CUDA_SUCCESS) {  // CUDA documents that the offset must currently be 0
        const char* text; cuGetErrorString(r, &text);
        std::printf("16 x 32 MiB one handle, 16 mappings: cuMemMap with an offset refused: %s\n", text);
        for (int j = 0; j < i; ++j) CK(cuMemUnmap(va + j * piece, piece));
        refused = true;
      }
    }
    if (refused) { for (auto h : hs) CK(cuMemRelease(h)); continue; }
    auto t2 = clk::now();
    if (variant == 2) { for (int i = 0; i < n; ++i) CK(cuMemSetAccess(va + i * piece, piece, &acc, 1)); }
    else CK(cuMemSetAccess(va, n * piece, &acc, 1));
    auto t3 = clk::now();
    CK(cuMemUnmap(va + 3 * piece, piece));  // one slab out of the middle
    CK(cuMemMap(va + (n + 1) * piece, piece, variant == 0 ? 3 * piece : 0, variant == 0 ? hs[0] : hs[3], 0));
    CK(cuMemSetAccess(va + (n + 1) * piece, piece, &acc, 1));
    auto t4 = clk::now();
    for (int i = 0; i < n; ++i) if (i != 3) CK(cuMemUnmap(va + i * piece, piece));
    CK(cuMemUnmap(va + (n + 1) * piece, piece));
    for (auto h : hs) CK(cuMemRelease(h));
    auto t5 = clk::now();
    std::printf("16 x 32 MiB %s: create %.1f map %.1f access %.1f move-one %.1f teardown %.1f us\n",
                variant == 0 ? "one handle, 16 mappings, one access" : variant == 1 ? "16 handles, one access" : "16 handles, 16 accesses",
                us(t0, t1), us(t1, t2), us(t2, t3), us(t3, t4), us(t4, t5));
  }
  size_t fr, tot; cudaMemGetInfo(&fr, &tot); std::printf("free %zu total %zu\n", fr, tot);
  CK(cuMemAddressFree(va, vsz));
  return 0;
}
