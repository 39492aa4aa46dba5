"""Device memory shared between processes: what an export, an import and a read of another process's buffer cost.

    PYTHONPATH=<build>/python python3 benchmarks/python/bench_ipc.py [--json OUT.json] [--quick]

A producer process (multiprocessing, spawn) allocates buffers, writes them, exports them and sends the handles;
this process imports them. Rows, each for every size:
- `vmm`: a buffer of gpumem's VMM pool (VmmPoolMemoryResource, default options), shared as its physical pieces
  (file descriptors over a Unix socket; memfds on the host backend);
- `cuda_ipc`: a buffer of gpumem's pool over cudaMalloc (PoolMemoryResource(CudaMemoryResource)), shared
  through CUDA IPC (cuda backend only);
- `cupy_cuda_ipc`: the peer: a CuPy array, shared with cupy.cuda.runtime.ipcGetMemHandle / ipcOpenMemHandle,
  CuPy's own use of CUDA IPC (when CuPy and a GPU are present);
- `local`: a buffer of this process (no sharing): the read's ceiling.
Columns: `export_us` (the producer's export of one buffer: median), `import_touch_us` (import, then a 256-byte
device-to-device copy from its first byte, waited for: the first use; median over the buffers),
`close_us` (median), `read_gbps` (the consumer copying the whole imported buffer device-to-device into its own
buffer, repeated, waited for: GB/s, median of the repeats).
Every row checks the bytes it read against what the producer wrote before it is timed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import statistics
import sys
import time

import numpy as np

import gpumem
from gpumem import mr

MiB = 1 << 20


def fill(size, seed):
    return ((np.arange(size // 8, dtype=np.uint64) * 0x9E3779B97F4A7C15 + seed)).view(np.uint8)


def make_resource(mechanism):
    if mechanism == "vmm":
        return mr.VmmPoolMemoryResource()
    return mr.PoolMemoryResource(mr.CudaMemoryResource())


def producer(mechanism, sizes, count, handles, done):
    """Allocates `count` buffers of each size, writes them, exports them; sends (size, handle, export ns)."""
    try:
        if mechanism == "cupy_cuda_ipc":
            import cupy

            keep = []
            for size in sizes:
                for i in range(count):
                    array = cupy.asarray(fill(size, i))
                    cupy.cuda.runtime.deviceSynchronize()
                    start = time.perf_counter_ns()
                    handle = cupy.cuda.runtime.ipcGetMemHandle(array.data.ptr)
                    handles.put((size, i, handle, time.perf_counter_ns() - start))
                    keep.append(array)
        else:
            resource = make_resource(mechanism)
            keep = []
            for size in sizes:
                for i in range(count):
                    buffer = gpumem.DeviceBuffer.to_device(fill(size, i).tobytes(), mr=resource)
                    start = time.perf_counter_ns()
                    handle = buffer.export()
                    handles.put((size, i, handle.to_bytes(), time.perf_counter_ns() - start))
                    keep.append(buffer)
        handles.put(None)
        done.wait(600)
    except Exception as error:  # the consumer reports it
        handles.put(("error", f"{type(error).__name__}: {error}"))


class Imported:
    """An imported buffer, by either API: ptr, close()."""

    def __init__(self, mechanism, payload):
        self.mechanism = mechanism
        if mechanism == "cupy_cuda_ipc":
            import cupy

            self.ptr = cupy.cuda.runtime.ipcOpenMemHandle(payload)
            self.buffer = None
        else:
            self.buffer = gpumem.import_buffer(payload)
            self.ptr = self.buffer.ptr

    def close(self):
        if self.mechanism == "cupy_cuda_ipc":
            import cupy

            cupy.cuda.runtime.deviceSynchronize()
            cupy.cuda.runtime.ipcCloseMemHandle(self.ptr)
        else:
            self.buffer.close()


def touch(ptr, size):
    """A device-to-device copy of the first min(256, size) bytes, waited for: the first use of the memory."""
    copy = gpumem.DeviceBuffer(size=min(256, size), ptr=ptr)
    copy.stream.synchronize()
    return copy


class DeviceBytes:
    """`size` bytes of device memory at `ptr`, as a CUDA Array Interface (a 1-d uint8 array)."""

    def __init__(self, ptr, size):
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (ptr, False), "version": 3,
                                         "strides": None, "stream": 1}


def read_bandwidth(ptr, size, repeats):
    """GB/s of copying `size` bytes at `ptr` into a buffer of this process allocated beforehand (one
    device-to-device copy, waited for), median of `repeats` copies after one warm-up."""
    rates = []
    target = gpumem.DeviceBuffer(size=size)
    source = DeviceBytes(ptr, size)
    stream = gpumem.cuda.Stream.null
    for _ in range(repeats + 1):
        start = time.perf_counter_ns()
        target.copy_from_device(source, stream)
        stream.synchronize()
        rates.append(size / (time.perf_counter_ns() - start))
    del target
    return statistics.median(rates[1:])  # bytes per ns = GB/s


def run_row(mechanism, sizes, count, repeats):
    ctx = multiprocessing.get_context("spawn")
    handles, done = ctx.Queue(), ctx.Event()
    process = ctx.Process(target=producer, args=(mechanism, sizes, count, handles, done))
    process.start()
    received = []
    while True:
        item = handles.get(timeout=600)
        if item is None:
            break
        if item[0] == "error":
            raise RuntimeError(f"{mechanism} producer: {item[1]}")
        received.append(item)
    rows = []
    try:
        for size in sizes:
            export_ns, import_ns, close_ns = [], [], []
            ours = [r for r in received if r[0] == size]
            for _, seed, payload, exported in ours:
                export_ns.append(exported)
                start = time.perf_counter_ns()
                imported = Imported(mechanism, payload)
                first = touch(imported.ptr, size)
                import_ns.append(time.perf_counter_ns() - start)
                if seed == 0:  # check the bytes, then the bandwidth, on the first buffer of each size
                    whole = gpumem.DeviceBuffer(size=size, ptr=imported.ptr)
                    if not np.array_equal(whole.copy_to_host(), fill(size, 0)):
                        raise RuntimeError(f"{mechanism} {size}: the imported bytes differ from the producer's")
                    del whole
                    rate = read_bandwidth(imported.ptr, size, repeats)
                del first
                start = time.perf_counter_ns()
                imported.close()
                close_ns.append(time.perf_counter_ns() - start)
            rows.append({"name": mechanism, "size": size, "buffers": len(ours),
                         "export_us": statistics.median(export_ns) / 1e3,
                         "import_touch_us": statistics.median(import_ns) / 1e3,
                         "close_us": statistics.median(close_ns) / 1e3, "read_gbps": rate})
    finally:
        done.set()
        process.join(120)
    return rows


def local_row(sizes, repeats):
    rows = []
    for size in sizes:
        source = gpumem.DeviceBuffer.to_device(fill(size, 0).tobytes(), mr=mr.VmmPoolMemoryResource())
        rows.append({"name": "local", "size": size, "buffers": 1, "export_us": None, "import_touch_us": None,
                     "close_us": None, "read_gbps": read_bandwidth(source.ptr, size, repeats)})
        del source
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--quick", action="store_true", help="fewer buffers and smaller sizes")
    args = parser.parse_args(argv)
    on_gpu = gpumem.cuda.get_backend() == "cuda"
    sizes = [2 * MiB, 64 * MiB] if args.quick or not on_gpu else [2 * MiB, 64 * MiB, 512 * MiB]
    count = 5 if args.quick else 20
    repeats = 5 if args.quick else 20
    mechanisms = ["vmm"]
    if on_gpu:
        mechanisms.append("cuda_ipc")
        try:
            import cupy  # noqa: F401

            mechanisms.append("cupy_cuda_ipc")
        except ImportError:
            print("cupy_cuda_ipc: skipped (CuPy is not importable)")
    rows = []
    for mechanism in mechanisms:
        rows += run_row(mechanism, sizes, count, repeats)
    rows += local_row(sizes, repeats)
    print(f"{'row':15} {'size':>10} {'export us':>10} {'import+touch us':>16} {'close us':>9} {'read GB/s':>10}")
    for r in rows:
        def cell(v, width):
            return f"{v:{width}.1f}" if v is not None else f"{'-':>{width}}"
        print(f"{r['name']:15} {r['size']:>10} {cell(r['export_us'], 10)} {cell(r['import_touch_us'], 16)} "
              f"{cell(r['close_us'], 9)} {cell(r['read_gbps'], 10)}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"backend": gpumem.cuda.get_backend(), "python": platform.python_version(), "results": rows},
                      out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
