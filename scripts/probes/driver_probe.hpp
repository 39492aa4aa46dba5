// What the driver-call probes (vmm_costs.cpp, vmm_parallel.cpp) share: a check that stops the probe with the
// driver's message on any failure, and microseconds between two clock readings.
#pragma once
#include <cuda.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char* s; cuGetErrorString(r_, &s); \
  std::printf("FAIL %s: %s\n", #x, s); std::exit(1); } } while (0)

using clk = std::chrono::steady_clock;
static double us(clk::time_point a, clk::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); }
