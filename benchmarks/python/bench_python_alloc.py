"""Python-level cost of one allocation + free pair: gpumem against its peers, side by side in one process.

    PYTHONPATH=<build>/python python3 benchmarks/python/bench_python_alloc.py [--json OUT.json] [--quick]

Rows (each for 256 B and 1 MiB; a row whose library is missing is reported as skipped):
- gpumem.alloc + gpumem.free over each current resource: PoolMemoryResource(CudaMemoryResource) (the
  target), CudaAsyncMemoryResource (cudaMallocAsync), CudaMemoryResource (cudaMalloc);
- gpumem.cuda.MemoryPool.malloc + dropping the pointer (CuPy's API on gpumem's pool), when present;
- gpumem.DeviceBuffer(size) + del, on the pool;
- cupy.cuda.MemoryPool().malloc + dropping the pointer (CuPy's own pool), when CuPy and a GPU are present;
- torch.empty(size, dtype=uint8, device="cuda") + del (PyTorch's caching allocator), when present;
- a Python no-op call (`f()` of an empty function): the floor any Python API pays, loop included.

Method: each row runs `pairs` pairs in a plain `for` loop of its own, with the callables in local variables
(the loop's overhead, about 10 ns, is in every row, as in the no-op row), after a warm-up, `repeats` times; the median and the minimum ns per pair are reported. Before timing,
each row checks that it really allocates: distinct live pointers, sizes as asked, memory accounted by the
pool where it has one. A failed check stops the run with a non-zero exit.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional

import gpumem
from gpumem import mr

SIZES = {"256B": 256, "1MiB": 1 << 20}


def measure(loop: Callable[[int], None], pairs: int, repeats: int) -> Dict[str, float]:
    """ns per pair: median and minimum over `repeats` timed calls of loop(pairs), which runs `pairs` pairs."""
    loop(max(1, pairs // 10))  # warm-up
    samples: List[float] = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            start = time.perf_counter_ns()
            loop(pairs)
            samples.append((time.perf_counter_ns() - start) / pairs)
    finally:
        if gc_was_enabled:
            gc.enable()
    return {"median_ns": statistics.median(samples), "min_ns": min(samples), "repeats": repeats, "pairs": pairs}


def check(condition: bool, what: str) -> None:
    if not condition:
        raise SystemExit(f"bench_python_alloc: check failed: {what}")


# ---- the rows -------------------------------------------------------------------------------------------------

def gpumem_plain_row(resource_name: str, make: Callable[[], mr.DeviceMemoryResource]):
    def setup(size: int):
        resource = make()
        previous = mr.set_current_device_resource(resource)
        ptrs = [gpumem.alloc(size) for _ in range(4)]
        check(len(set(ptrs)) == 4 and all(p % 256 == 0 and p != 0 for p in ptrs), f"{resource_name}: distinct pointers")
        check(all(gpumem.allocation_size(p) == size for p in ptrs), f"{resource_name}: sizes recorded")
        if hasattr(resource, "used_bytes"):
            check(resource.used_bytes() >= 4 * size, f"{resource_name}: the pool accounts the memory")
        for p in ptrs:
            gpumem.free(p)
        alloc, free = gpumem.alloc, gpumem.free

        def loop(n):
            for _ in range(n):
                free(alloc(size))

        def teardown():
            mr.set_current_device_resource(previous)
        return loop, teardown
    return setup


def gpumem_cuda_pool_row(size: int):
    pool_type = getattr(gpumem.cuda, "MemoryPool", None)
    if pool_type is None:
        return None
    pool = pool_type()
    held = [pool.malloc(size) for _ in range(4)]
    check(len({int(p) for p in held}) == 4, "gpumem.cuda.MemoryPool: distinct pointers")
    check(pool.used_bytes() >= 4 * size, "gpumem.cuda.MemoryPool: used_bytes accounts the memory")
    del held
    malloc = pool.malloc

    def loop(n):
        for _ in range(n):
            malloc(size)  # the MemoryPointer is dropped at once: its memory returns to the pool
    return loop, pool.free_all_blocks


def device_buffer_row(size: int):
    pool = mr.PoolMemoryResource(mr.CudaMemoryResource())
    previous = mr.set_current_device_resource(pool)
    held = [gpumem.DeviceBuffer(size) for _ in range(4)]
    check(len({b.ptr for b in held}) == 4 and all(b.size == size for b in held), "DeviceBuffer: distinct buffers")
    del held
    buffer = gpumem.DeviceBuffer

    def loop(n):
        for _ in range(n):
            buffer(size)

    def teardown():
        mr.set_current_device_resource(previous)
    return loop, teardown


def cupy_row(size: int):
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() == 0:
            return None
    except Exception:  # noqa: BLE001: no CuPy, or no usable GPU
        return None
    pool = cupy.cuda.MemoryPool()
    held = [pool.malloc(size) for _ in range(4)]
    check(len({int(p) for p in held}) == 4 and pool.used_bytes() >= 4 * size, "cupy MemoryPool: real allocations")
    del held
    malloc = pool.malloc

    def loop(n):
        for _ in range(n):
            malloc(size)
    return loop, pool.free_all_blocks


def torch_row(size: int):
    try:
        import torch
        if not torch.cuda.is_available():
            return None
    except Exception:  # noqa: BLE001
        return None
    held = [torch.empty(size, dtype=torch.uint8, device="cuda") for _ in range(4)]
    check(len({t.data_ptr() for t in held}) == 4, "torch.empty: distinct tensors")
    del held
    empty, uint8 = torch.empty, torch.uint8

    def loop(n):
        for _ in range(n):
            empty(size, dtype=uint8, device="cuda")
    return loop, lambda: None


def noop_row(size: int):
    def f():
        pass

    def loop(n):
        for _ in range(n):
            f()
    return loop, lambda: None


# ---- main -----------------------------------------------------------------------------------------------------

def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the results here as JSON")
    parser.add_argument("--quick", action="store_true", help="fewer pairs and repeats (smoke run)")
    args = parser.parse_args(argv)
    repeats = 3 if args.quick else 11
    pairs_fast = 2_000 if args.quick else 200_000
    pairs_slow = 50 if args.quick else 2_000  # cudaMalloc/cudaFree of 1 MiB take tens of microseconds

    rows = [
        ("gpumem.alloc+free (pool)", gpumem_plain_row("pool", lambda: mr.PoolMemoryResource(mr.CudaMemoryResource())), True),
        ("gpumem.alloc+free (cudaMallocAsync)", gpumem_plain_row("cuda_async", mr.CudaAsyncMemoryResource), True),
        ("gpumem.alloc+free (cudaMalloc)", gpumem_plain_row("cuda", mr.CudaMemoryResource), False),
        ("gpumem.cuda.MemoryPool.malloc+release", gpumem_cuda_pool_row, True),
        ("gpumem.DeviceBuffer+del (pool)", device_buffer_row, True),
        ("cupy.cuda.MemoryPool.malloc+release", cupy_row, True),
        ("torch.empty+del", torch_row, True),
        ("python no-op call", noop_row, True),
    ]
    results = []
    print(f"backend: {gpumem.cuda.get_backend()}  python {platform.python_version()}")
    print(f"{'workload':42} {'size':>6} {'median ns/pair':>15} {'min ns/pair':>12}")
    for name, setup, fast in rows:
        for size_name, size in SIZES.items():
            made = setup(size)
            if made is None:
                print(f"{name:42} {size_name:>6} {'skipped (not available)':>28}")
                results.append({"name": name, "size": size, "skipped": True})
                continue
            loop, teardown = made
            try:
                m = measure(loop, pairs_fast if fast else pairs_slow, repeats)
            finally:
                teardown()
            print(f"{name:42} {size_name:>6} {m['median_ns']:15.1f} {m['min_ns']:12.1f}")
            results.append({"name": name, "size": size, **m})
    check(gpumem.live_allocation_count() == 0, "nothing left allocated")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"backend": gpumem.cuda.get_backend(), "python": platform.python_version(),
                       "results": results}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
