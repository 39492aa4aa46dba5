// Probe: where the time of one gpumem::alloc + gpumem::free pair goes (issue 6's 300 ns target for the
// Python pair sits on top of it): the pool alone, the current-device lookups, the plain API, and
// cudaGetDevice. Build (next to a build of gpumem in BUILD):
//   g++ -O2 -std=c++20 -DGPUMEM_STATIC_DEFINE -Iinclude -I/usr/local/cuda/include scripts/probes/plain_costs.cpp \
//       BUILD/libgpumem.a -L/usr/local/cuda/lib64 -lcudart_static -lz -ldl -lrt -lpthread -o plain_costs
#include <gpumem/backend/backend.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>
#include <gpumem/mr/per_device_resource.hpp>
#include <gpumem/mr/pool_memory_resource.hpp>
#include <gpumem/plain.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace {
using clk = std::chrono::steady_clock;

template <class F>
double ns_per(F&& f, int n)
{
  std::vector<double> samples;
  for (int r = 0; r < 7; ++r) {
    auto const t0 = clk::now();
    for (int i = 0; i < n; ++i) { f(); }
    samples.push_back(std::chrono::duration<double, std::nano>(clk::now() - t0).count() / n);
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}
}  // namespace

int main()
{
  int const n = 200000;
  gpumem::mr::cuda_memory_resource cuda;
  gpumem::mr::pool_memory_resource pool{&cuda, std::size_t{64} << 20};
  auto* const previous = gpumem::mr::set_current_device_resource(&pool);
  std::printf("backend: %s\n", std::string{gpumem::to_string(gpumem::detail::get_backend().kind())}.c_str());
  for (std::size_t const size : {std::size_t{256}, std::size_t{1} << 20}) {
    double const direct = ns_per([&] { pool.deallocate(pool.allocate(size), size); }, n);
    double const plain = ns_per([&] { gpumem::free(gpumem::alloc(size)); }, n);
    std::printf("%7zu B: pool allocate+deallocate %.1f ns, gpumem::alloc+free %.1f ns\n", size, direct, plain);
  }
  int device = 0;
  double const get_device = ns_per([&] { (void)cudaGetDevice(&device); }, n);
  double const current = ns_per([&] { (void)gpumem::detail::get_backend().current_device(); }, n);
  double const per_device = ns_per([&] { (void)gpumem::mr::get_current_device_resource(); }, n);
  std::printf("cudaGetDevice %.1f ns, backend current_device %.1f ns, get_current_device_resource %.1f ns\n",
              get_device, current, per_device);
  gpumem::mr::set_current_device_resource(previous);
  return 0;
}
