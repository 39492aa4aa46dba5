"""Misuse of every public function and class of gpumem: nothing may crash, and errors speak the caller's terms.

Each public callable has one valid call in CASES (what it is called with); a sweep then replaces each
argument in turn by wrong types ("abc", 1.5, object(), a list, bytes, None) and bad integers (-1, 2**64-1,
2**64, -2**63-1). Every call must return or raise ValueError, TypeError, a MemoryError or a gpumem error;
never pybind11's "incompatible function arguments" or "Unable to cast", and a TypeError for a wrong type, or
a ValueError for a negative int, names the argument. A completeness test keeps CASES covering the package.

Object dtypes, foreign, freed and doubly freed pointers are in test_misuse_memory.py (the cases that would
end the process if they failed run in a subprocess there); use from several threads in test_misuse_threads.py.
"""

import asyncio
import gc
import inspect
import os
import types

import numpy as np
import pytest

import gpumem
import gpumem.allocators
import gpumem.cuda as cuda
import gpumem.statistics
from gpumem import mr

ALLOWED = (ValueError, TypeError, MemoryError, gpumem.CUDARuntimeError)
INTERNALS = ("incompatible function arguments", "incompatible constructor arguments", "Unable to cast",
             "cast_error", "pybind11")
WRONG_TYPES = ["abc", 1.5, object(), [1, 2], b"\x00"]
BAD_INTS = [-1, 2**64 - 1, 2**64, -(2**63) - 1]
NEGATIVE = -1


class Case:
    """One public callable: make() returns (callable, valid keyword arguments). Options per argument name:
    raw: an address gpumem must trust (only values that cannot be one are tried); free: what to call on a
    successful result; allowed: extra exception types this callable documents; names: other words its
    messages may use for an argument."""

    def __init__(self, make, raw=(), free=None, allowed=(), names=None):
        self.make, self.raw, self.free, self.allowed, self.names = make, set(raw), free, tuple(allowed), names or {}


CASES = {}


def case(name, **options):
    def register(make):
        CASES[name] = Case(make, **options)
        return make

    return register


def restoring(setter, restore):
    """A call of `setter` that restores the previous setting afterwards, with restore()."""

    def call(**arguments):
        try:
            return setter(**arguments)
        finally:
            restore()

    return call


def free_pointer(p):
    if isinstance(p, int) and p:
        gpumem.free(p)


# ---- gpumem ------------------------------------------------------------------------------------------------

case("gpumem.alloc", free=free_pointer)(lambda: (gpumem.alloc, dict(size=256, stream=None)))
case("gpumem.zeros", free=free_pointer)(lambda: (gpumem.zeros, dict(size=256, stream=None)))


@case("gpumem.free")
def _():
    p = gpumem.alloc(256)

    def call(ptr, stream):
        try:
            gpumem.free(ptr, stream)
        finally:
            if gpumem.live_allocation_count() > 0:  # the call failed: p is still live
                gpumem.free(p)

    return call, dict(ptr=p, stream=None)


@case("gpumem.allocation_size")
def _():
    p = gpumem.alloc(256)
    return (lambda ptr: _then_free(p, gpumem.allocation_size, ptr)), dict(ptr=p)


def _then_free(p, function, *args):
    try:
        return function(*args)
    finally:
        gpumem.free(p)


case("gpumem.live_allocation_count")(lambda: (gpumem.live_allocation_count, {}))
case("gpumem.DeviceBuffer", raw={"ptr"})(lambda: (gpumem.DeviceBuffer, dict(size=64, stream=None, mr=None, ptr=None)))
case("gpumem.DeviceBuffer.to_device")(lambda: (gpumem.DeviceBuffer.to_device, dict(data=b"abcd", stream=None, mr=None)))
case("gpumem.DeviceBuffer.tobytes")(lambda: (gpumem.DeviceBuffer(8).tobytes, dict(stream=None)))
case("gpumem.DeviceBuffer.copy_to_host")(lambda: (gpumem.DeviceBuffer(8).copy_to_host, dict(out=bytearray(8), stream=None)))
case("gpumem.DeviceBuffer.copy_from_host")(lambda: (gpumem.DeviceBuffer(8).copy_from_host, dict(data=b"12345678", stream=None)))
case("gpumem.DeviceBuffer.copy")(lambda: (gpumem.DeviceBuffer(8).copy, dict(stream=None)))
case("gpumem.DeviceBuffer.resize")(lambda: (gpumem.DeviceBuffer(8).resize, dict(new_size=16, stream=None)))
case("gpumem.DeviceBuffer.reserve")(lambda: (gpumem.DeviceBuffer(8).reserve, dict(new_capacity=16, stream=None)))
case("gpumem.DeviceBuffer.shrink_to_fit")(lambda: (gpumem.DeviceBuffer(8).shrink_to_fit, dict(stream=None)))
case("gpumem.DeviceBuffer.__dlpack__")(lambda: (gpumem.DeviceBuffer(8).__dlpack__, dict(stream=None)))
_IPC_POOL = []


def _exported_buffer():
    """A DeviceBuffer of a VMM pool (kept for the module's life: exports are withdrawn when buffers go)."""
    if not _IPC_POOL:
        _IPC_POOL.append(mr.VmmPoolMemoryResource(slab_size=2 << 20, reservation_size=64 << 20))
    buffer = gpumem.DeviceBuffer(4096, mr=_IPC_POOL[0])
    _IPC_POOL.append(buffer)
    return buffer


def _imported_buffer():
    return gpumem.import_buffer(_exported_buffer().export())


case("gpumem.DeviceBuffer.export")(lambda: (_exported_buffer().export, {}))
case("gpumem.IpcHandle.from_bytes")(lambda: (gpumem.IpcHandle.from_bytes, dict(data=_exported_buffer().export().to_bytes())))
case("gpumem.IpcHandle.to_bytes")(lambda: (_exported_buffer().export().to_bytes, {}))
case("gpumem.import_buffer", free=lambda imported: imported.close())(
    lambda: (gpumem.import_buffer, dict(handle=_exported_buffer().export(), peers=None)))
case("gpumem.ImportedBuffer.close")(lambda: (_imported_buffer().close, {}))
case("gpumem.ImportedBuffer.__enter__")(lambda: (_imported_buffer().__enter__, {}))
case("gpumem.ImportedBuffer.__exit__")(lambda: (_imported_buffer().__exit__, {}))
case("gpumem.ImportedBuffer.tobytes")(lambda: (_imported_buffer().tobytes, {}))
case("gpumem.ImportedBuffer.copy_to_host")(lambda: (_imported_buffer().copy_to_host, {}))
case("gpumem.ImportedBuffer.copy_from_host")(lambda: (_imported_buffer().copy_from_host, dict(data=b"1234")))
case("gpumem.SpillManager")(lambda: (gpumem.SpillManager, dict(budget_bytes=1 << 20, upstream=None)))
case("gpumem.SpillManager.statistics")(lambda: (gpumem.SpillManager(1 << 20).statistics, {}))
case("gpumem.SpillManager.spill")(lambda: (gpumem.SpillManager(1 << 20).spill, dict(bytes=256)))
case("gpumem.UnifiedBuffer")(lambda: (gpumem.UnifiedBuffer, dict(shape=(2, 3), dtype="float32", pinned=False, spill=None)))
case("gpumem.UnifiedBuffer.device_for")(lambda: (gpumem.UnifiedBuffer(4).device_for, dict(stream=None)))
case("gpumem.UnifiedBuffer.to_numpy")(lambda: (_unified_with_both_copies().to_numpy, {}))
case("gpumem.UnifiedBuffer.sync_to_device")(lambda: (gpumem.UnifiedBuffer(4).sync_to_device, dict(stream=None)))
case("gpumem.UnifiedBuffer.sync_to_host")(lambda: (gpumem.UnifiedBuffer(4).sync_to_host, dict(stream=None)))
case("gpumem.UnifiedBuffer.mark_host_dirty")(lambda: (_unified_with_both_copies().mark_host_dirty, {}))
case("gpumem.UnifiedBuffer.mark_device_dirty")(lambda: (_unified_with_both_copies().mark_device_dirty, {}))


def _unified_with_both_copies():
    buffer = gpumem.UnifiedBuffer(4)
    buffer.zeros()
    buffer.sync_to_host()
    return buffer


case("gpumem.UnifiedBuffer.copy_from")(
    lambda: (gpumem.UnifiedBuffer(4, "int32").copy_from, dict(source=np.arange(4, dtype=np.int32), stream=None)))
case("gpumem.UnifiedBuffer.zeros")(lambda: (gpumem.UnifiedBuffer(4).zeros, dict(stream=None)))
case("gpumem.UnifiedBufferPool")(lambda: (gpumem.UnifiedBufferPool, dict(pinned=False, spill=None, max_cached_bytes=0)))
case("gpumem.UnifiedBufferPool.acquire")(lambda: (gpumem.UnifiedBufferPool().acquire, dict(shape=4, dtype="float32")))


@case("gpumem.UnifiedBufferPool.release")
def _():
    pool = gpumem.UnifiedBufferPool()
    return pool.release, dict(buffer=pool.acquire(4))


case("gpumem.UnifiedBufferPool.clear")(lambda: (gpumem.UnifiedBufferPool().clear, {}))
case("gpumem.UnifiedBufferPool.statistics")(lambda: (gpumem.UnifiedBufferPool().statistics, {}))
case("gpumem.UnifiedDeviceView.__dlpack__")(lambda: (gpumem.UnifiedBuffer(4).device.__dlpack__, dict(stream=None)))
case("gpumem.Accelerator")(lambda: (gpumem.Accelerator, dict(device_id=0)))
case("gpumem.Accelerator.device_name")(lambda: (gpumem.Accelerator(0).device_name, {}))
case("gpumem.Accelerator.get_memory_info")(lambda: (gpumem.Accelerator(0).get_memory_info, {}))
case("gpumem.Accelerator.synchronize")(lambda: (gpumem.Accelerator(0).synchronize, {}))
case("gpumem.Accelerator.get_device")(lambda: (gpumem.Accelerator(0).get_device, dict(device_id=0)))
case("gpumem.Accelerator.set_device")(lambda: (gpumem.Accelerator(0).set_device, dict(device_id=0)))
case("gpumem.Accelerator.select_device")(lambda: (gpumem.Accelerator(0).select_device, dict(device_id=0)))
case("gpumem.cuda_available")(lambda: (gpumem.cuda_available, {}))
case("gpumem.UnifiedBuffer.allocate")(lambda: (gpumem.UnifiedBuffer(4).allocate, dict(host=True, device=True, stream=None)))
case("gpumem.UnifiedBuffer.free")(lambda: (gpumem.UnifiedBuffer(4).free, {}))
case("gpumem.UnifiedBuffer.synchronize")(lambda: (_unified_with_both_copies().synchronize, dict(stream=None)))
case("gpumem.UnifiedBuffer.fill")(lambda: (gpumem.UnifiedBuffer(4).fill, dict(value=1.5, stream=None)))
case("gpumem.UnifiedBuffer.copy_to")(lambda: (
    _unified_with_both_copies().copy_to, dict(destination=np.empty(4, np.float32), stream=None)))
case("gpumem.UnifiedBuffer.ensure_on_device")(lambda: (
    lambda stream=None: asyncio.run(_unified_with_both_copies().ensure_on_device(stream)), dict(stream=None)))
case("gpumem.UnifiedBuffer.ensure_on_host")(lambda: (
    lambda stream=None: asyncio.run(_unified_with_both_copies().ensure_on_host(stream)), dict(stream=None)))
case("gpumem.UnifiedBufferPool.get_stats")(lambda: (gpumem.UnifiedBufferPool().get_stats, {}))
case("gpumem.UnifiedBufferPool.stats")(lambda: (gpumem.UnifiedBufferPool().stats, {}))
case("gpumem.UnifiedBufferPool.set_limit")(lambda: (gpumem.UnifiedBufferPool().set_limit, dict(size_mb=1)))
case("gpumem.UnifiedBufferPool.free_all_blocks")(lambda: (gpumem.UnifiedBufferPool().free_all_blocks, {}))
case("gpumem.get_accelerator")(lambda: (gpumem.get_accelerator, dict(device_id=None)))
case("gpumem.get_memory_pool")(lambda: (gpumem.get_memory_pool, {}))
case("gpumem.set_memory_pool")(lambda p=gpumem.get_memory_pool(): (
    restoring(gpumem.set_memory_pool, lambda: gpumem.set_memory_pool(p)), dict(pool=p)))


case("gpumem.reinitialize")(lambda previous=mr.get_current_device_resource(): (
    restoring(gpumem.reinitialize, lambda: mr.set_current_device_resource(previous)),
    dict(pool_allocator=False, managed_memory=False, initial_pool_size=None, maximum_pool_size=None, devices=0,
         logging=False, log_file_name=None)))


# ---- gpumem.cuda -------------------------------------------------------------------------------------------

case("gpumem.cuda.Device")(lambda: (cuda.Device, dict(device=0)))
case("gpumem.cuda.Device.use")(lambda: (cuda.Device(0).use, {}))
case("gpumem.cuda.Device.synchronize")(lambda: (cuda.Device(0).synchronize, {}))
case("gpumem.cuda.Device.__enter__")(lambda: (_enter_and_exit(cuda.Device(0)), {}))
case("gpumem.cuda.Device.__exit__")(lambda: (_enter_and_exit(cuda.Device(0)), {}))
case("gpumem.cuda.Event")(lambda: (cuda.Event, dict(block=False, disable_timing=False, interprocess=False)))
case("gpumem.cuda.Event.record")(lambda: (cuda.Event().record, dict(stream=None)))
case("gpumem.cuda.Event.synchronize")(lambda: (cuda.Event().synchronize, {}))
case("gpumem.cuda.Event.query")(lambda: (cuda.Event().query, {}))
case("gpumem.cuda.ExternalStream", raw={"ptr"})(lambda: (cuda.ExternalStream, dict(ptr=0, device_id=-1)))
case("gpumem.cuda.Stream")(lambda: (cuda.Stream, dict(null=False, non_blocking=False, ptds=False, priority=0)))
case("gpumem.cuda.Stream.synchronize")(lambda: (cuda.Stream().synchronize, {}))
case("gpumem.cuda.Stream.query")(lambda: (cuda.Stream().query, {}))
case("gpumem.cuda.Stream.record")(lambda: (cuda.Stream().record, dict(event=None)))
case("gpumem.cuda.Stream.wait_event")(lambda: (cuda.Stream().wait_event, dict(event=cuda.Event())))
case("gpumem.cuda.Stream.add_callback")(
    lambda: (_synchronized(cuda.Stream(), "add_callback"), dict(callback=lambda s, status, arg: None, arg=None)))
case("gpumem.cuda.Stream.begin_capture")(lambda: (_capture_and_end(cuda.Stream(non_blocking=True)), dict(mode=None)))
case("gpumem.cuda.Stream.end_capture")(lambda: (_capture_and_end(cuda.Stream(non_blocking=True)), dict(mode=None)))
case("gpumem.cuda.Stream.is_capturing")(lambda: (cuda.Stream().is_capturing, {}))
case("gpumem.cuda.Stream.use")(lambda: (_use_and_restore(cuda.Stream()), {}))
case("gpumem.cuda.Stream.__enter__")(lambda: (_enter_and_exit(cuda.Stream()), {}))
case("gpumem.cuda.Stream.__exit__")(lambda: (_enter_and_exit(cuda.Stream()), {}))


@case("gpumem.cuda.Graph.launch")
def _():
    stream = cuda.Stream(non_blocking=True)
    stream.begin_capture()
    graph = stream.end_capture()
    return _synchronized(graph, "launch", stream), dict(stream=None)


def _enter_and_exit(manager):
    def call():
        with manager:
            pass

    return call


def _use_and_restore(stream):
    def call():
        previous = cuda.get_current_stream()
        stream.use()
        previous.use()

    return call


def _synchronized(owner, method, stream=None):
    def call(**arguments):
        try:
            return getattr(owner, method)(**arguments)
        finally:
            (stream or owner).synchronize()

    return call


def _capture_and_end(stream):
    def call(**arguments):
        stream.begin_capture(**arguments)
        return stream.end_capture()

    return call


# No device at that id (and no cuBLAS under the host backend): CUDARuntimeError, as documented.
case("gpumem.cuda.Device.from_pci_bus_id", allowed=(gpumem.CUDARuntimeError,))(
    lambda: (cuda.Device.from_pci_bus_id, dict(pci_bus_id="0000:00:00.0")))
case("gpumem.cuda.Stream.launch_host_func")(
    lambda: (_synchronized(cuda.Stream(), "launch_host_func"), dict(callback=lambda arg: None, arg=None)))
case("gpumem.cuda.Stream.from_external", allowed=(AttributeError,))(  # CuPy's error without __cuda_stream__
    lambda: (cuda.Stream.from_external, dict(obj=cuda.Stream())))
case("gpumem.cuda.Graph.capture_begin")(lambda: (_graph_capture, dict(stream=cuda.Stream(non_blocking=True), mode=None)))
case("gpumem.cuda.Graph.capture_end")(lambda: (_graph_capture_end(cuda.Stream(non_blocking=True)), dict(stream=None)))
case("gpumem.cuda.ManagedMemory.advise")(lambda: (cuda.ManagedMemory(256).advise, dict(advise=1, dev=cuda.Device(0))))
case("gpumem.cuda.get_array_module")(lambda: (cuda.get_array_module, {}))
case("gpumem.cuda.get_cublas_handle", allowed=(gpumem.CUDARuntimeError,))(lambda: (cuda.get_cublas_handle, {}))
case("gpumem.cuda.MemoryHook")(lambda: (cuda.MemoryHook, {}))
case("gpumem.cuda.MemoryHook.__enter__")(lambda: (_enter_and_exit(cuda.MemoryHook()), {}))
case("gpumem.cuda.MemoryHook.__exit__")(lambda: (_enter_and_exit(cuda.MemoryHook()), {}))
for _name in ("alloc_preprocess", "alloc_postprocess", "malloc_preprocess", "malloc_postprocess", "free_preprocess",
              "free_postprocess"):
    case(f"gpumem.cuda.MemoryHook.{_name}")(lambda n=_name: (getattr(cuda.MemoryHook(), n), dict(device_id=0, mem_size=256)))


def _graph_capture(**arguments):
    graph = cuda.Graph()
    graph.capture_begin(**arguments)
    graph.capture_end()


def _graph_capture_end(stream):
    def call(**arguments):
        graph = cuda.Graph()
        graph.capture_begin(stream)
        try:
            graph.capture_end(**arguments)
        finally:
            if stream.is_capturing():
                graph.capture_end()

    return call


case("gpumem.cuda.get_backend")(lambda: (cuda.get_backend, {}))
case("gpumem.cuda.get_current_stream")(lambda: (cuda.get_current_stream, dict(device_id=None)))
case("gpumem.cuda.get_device_count")(lambda: (cuda.get_device_count, {}))
case("gpumem.cuda.get_device_id")(lambda: (cuda.get_device_id, {}))
case("gpumem.cuda.get_driver_version")(lambda: (cuda.get_driver_version, {}))
case("gpumem.cuda.get_local_runtime_version")(lambda: (cuda.get_local_runtime_version, {}))
case("gpumem.cuda.is_available")(lambda: (cuda.is_available, {}))


@case("gpumem.cuda.get_elapsed_time")
def _():
    start, end = cuda.Event(), cuda.Event()
    start.record()
    end.record()
    end.synchronize()
    return cuda.get_elapsed_time, dict(start_event=start, end_event=end)


def _c_functions():
    """A C malloc/free pair for CFunctionAllocator: libc's, through ctypes (param ignored)."""
    import ctypes

    libc = ctypes.CDLL(None)
    return ctypes.cast(libc.malloc, ctypes.c_void_p).value, ctypes.cast(libc.free, ctypes.c_void_p).value


case("gpumem.cuda.CFunctionAllocator", raw={"param", "malloc_func", "free_func"})(
    lambda: (cuda.CFunctionAllocator, dict(param=0, malloc_func=1, free_func=1, owner=None)))
case("gpumem.cuda.ManagedMemory")(lambda: (cuda.ManagedMemory, dict(size=256)))
case("gpumem.cuda.ManagedMemory.prefetch")(lambda: (cuda.ManagedMemory(256).prefetch, dict(stream=None)))
case("gpumem.cuda.Memory")(lambda: (cuda.Memory, dict(size=256)))
case("gpumem.cuda.MemoryAsync")(lambda: (cuda.MemoryAsync, dict(size=256, stream=cuda.Stream.null)))
case("gpumem.cuda.MemoryAsyncPool", raw={"pool_handles"})(lambda: (cuda.MemoryAsyncPool, dict(pool_handles="current")))
for _method, _arguments in [("malloc", dict(size=256)), ("free_all_blocks", dict(stream=None)), ("used_bytes", {}),
                            ("total_bytes", {}), ("free_bytes", {}), ("set_limit", dict(size=None, fraction=None)),
                            ("get_limit", {})]:
    case(f"gpumem.cuda.MemoryAsyncPool.{_method}")(
        lambda m=_method, a=_arguments: (getattr(cuda.MemoryAsyncPool(), m), dict(a)))
    case(f"gpumem.cuda.MemoryPool.{_method}")(lambda m=_method, a=_arguments: (getattr(cuda.MemoryPool(), m), dict(a)))
case("gpumem.cuda.MemoryPool")(lambda: (cuda.MemoryPool, dict(allocator=None)))
case("gpumem.cuda.MemoryPool.free_all_free")(lambda: (_quietly(cuda.MemoryPool().free_all_free), {}))
case("gpumem.cuda.MemoryPool.n_free_blocks")(lambda: (cuda.MemoryPool().n_free_blocks, {}))


def _quietly(function):
    def call(**arguments):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return function(**arguments)

    return call


case("gpumem.cuda.MemoryPointer")(lambda: (cuda.MemoryPointer, dict(mem=cuda.Memory(512), offset=0)))
for _method, _arguments in [("memset", dict(value=0, size=256)), ("memset_async", dict(value=0, size=256, stream=None)),
                            ("copy_from_host", dict(mem=bytes(256), size=256)),
                            ("copy_from_host_async", dict(mem=bytes(256), size=256, stream=None)),
                            ("copy_to_host", dict(mem=bytearray(256), size=256)),
                            ("copy_to_host_async", dict(mem=bytearray(256), size=256, stream=None)),
                            ("copy_from", dict(mem=bytes(256), size=256)),
                            ("copy_from_async", dict(mem=bytes(256), size=256, stream=None))]:
    case(f"gpumem.cuda.MemoryPointer.{_method}", raw={"mem"})(
        lambda m=_method, a=_arguments: (_synchronized_pointer(m), dict(a)))
for _method in ("copy_from_device", "copy_from_device_async"):
    case(f"gpumem.cuda.MemoryPointer.{_method}")(
        lambda m=_method: (_synchronized_pointer(m), dict(src=cuda.alloc(256), size=256)))


def _synchronized_pointer(method):
    pointer = cuda.alloc(512)

    def call(**arguments):
        try:
            return getattr(pointer, method)(**arguments)
        finally:
            cuda.Device().synchronize()

    return call


case("gpumem.cuda.PinnedMemory")(lambda: (cuda.PinnedMemory, dict(size=256, flags=0)))
case("gpumem.cuda.PinnedMemoryPointer")(lambda: (cuda.PinnedMemoryPointer, dict(mem=cuda.PinnedMemory(256), offset=0)))
case("gpumem.cuda.PinnedMemoryPointer.size")(lambda: (cuda.alloc_pinned_memory(256).size, {}))
case("gpumem.cuda.PinnedMemoryPool")(lambda: (cuda.PinnedMemoryPool, dict(allocator=None)))
for _method, _arguments in [("malloc", dict(size=256)), ("free_all_blocks", {}), ("n_free_blocks", {}),
                            ("used_bytes", {}), ("free_bytes", {}), ("total_bytes", {})]:
    case(f"gpumem.cuda.PinnedMemoryPool.{_method}")(
        lambda m=_method, a=_arguments: (getattr(cuda.PinnedMemoryPool(), m), dict(a)))
case("gpumem.cuda.PooledMemory.free")(lambda: (cuda.MemoryPool().malloc(256).mem.free, {}))
case("gpumem.cuda.PooledPinnedMemory.free")(lambda: (cuda.PinnedMemoryPool().malloc(256).mem.free, {}))
case("gpumem.cuda.PythonFunctionAllocator")(
    lambda: (cuda.PythonFunctionAllocator, dict(malloc_func=lambda size, device: 0, free_func=lambda p, d: None)))
for _method in ("malloc", "__call__"):
    case(f"gpumem.cuda.PythonFunctionAllocator.{_method}")(
        lambda m=_method: (getattr(cuda.PythonFunctionAllocator(lambda size, device: 0, lambda p, d: None), m),
                           dict(size=0)))
    case(f"gpumem.cuda.CFunctionAllocator.{_method}")(
        lambda m=_method: (getattr(cuda.CFunctionAllocator(0, *_c_functions(), None), m), dict(size=0)))
case("gpumem.cuda.UnownedMemory", raw={"ptr"}, allowed=(RuntimeError,))(  # CuPy's error for ptr 0 without device_id
    lambda: (cuda.UnownedMemory, dict(ptr=0, size=0, owner=None, device_id=0)))
case("gpumem.cuda.alloc")(lambda: (cuda.alloc, dict(size=256)))
case("gpumem.cuda.alloc_pinned_memory")(lambda: (cuda.alloc_pinned_memory, dict(size=256)))
case("gpumem.cuda.asnumpy")(lambda: (cuda.asnumpy, dict(a=gpumem.DeviceBuffer(16), stream=None, out=None, blocking=True)))
case("gpumem.cuda.get_allocator")(lambda: (cuda.get_allocator, {}))
case("gpumem.cuda.get_default_memory_pool")(lambda: (cuda.get_default_memory_pool, {}))
case("gpumem.cuda.get_default_pinned_memory_pool")(lambda: (cuda.get_default_pinned_memory_pool, {}))
case("gpumem.cuda.malloc_async")(lambda: (cuda.malloc_async, dict(size=256)))
case("gpumem.cuda.malloc_managed")(lambda: (cuda.malloc_managed, dict(size=256)))


case("gpumem.cuda.set_allocator")(lambda previous=cuda.get_allocator(): (
    restoring(cuda.set_allocator, lambda: cuda.set_allocator(previous)), dict(allocator=None)))
case("gpumem.cuda.set_pinned_memory_allocator")(lambda: (restoring(
    cuda.set_pinned_memory_allocator,
    lambda: cuda.set_pinned_memory_allocator(cuda.get_default_pinned_memory_pool().malloc)), dict(allocator=None)))


@case("gpumem.cuda.using_allocator")
def _():
    def call(allocator):
        with cuda.using_allocator(allocator):
            pass

    return call, dict(allocator=None)


# ---- gpumem.mr ---------------------------------------------------------------------------------------------

for _name in ("CudaMemoryResource", "ManagedMemoryResource", "PinnedHostMemoryResource"):
    case(f"gpumem.mr.{_name}")(lambda n=_name: (getattr(mr, n), {}))
case("gpumem.mr.CudaAsyncMemoryResource")(lambda: (mr.CudaAsyncMemoryResource, dict(
    initial_pool_size=None, release_threshold=None, enable_ipc=False, maximum_pool_size=None)))
case("gpumem.mr.CudaAsyncMemoryResource.trim")(lambda: (mr.CudaAsyncMemoryResource().trim, dict(keep_bytes=0)))
case("gpumem.mr.PoolMemoryResource")(lambda: (mr.PoolMemoryResource, dict(
    upstream=mr.CudaMemoryResource(), initial_pool_size=None, maximum_pool_size=None)))
case("gpumem.mr.VmmPoolMemoryResource")(lambda: (mr.VmmPoolMemoryResource, dict(
    slab_size=2 << 20, reservation_size=64 << 20, maximum_physical_size=None, peer_devices=[], release_threshold=None,
    max_mapping_size=None, mapping_divisor=64)))
case("gpumem.mr.VmmPoolMemoryResource.release_unused")(
    lambda: (mr.VmmPoolMemoryResource(2 << 20, reservation_size=64 << 20).release_unused, {}))
case("gpumem.mr.VmmPoolMemoryResource.set_maximum_physical_size")(
    lambda: (mr.VmmPoolMemoryResource(2 << 20, reservation_size=64 << 20).set_maximum_physical_size, dict(bytes=None)))
case("gpumem.mr.VmmPoolMemoryResource.flush_thread_caches")(
    lambda: (mr.VmmPoolMemoryResource(2 << 20, reservation_size=64 << 20, thread_cache_limit=64 << 10).flush_thread_caches, {}))
case("gpumem.mr.VmmPoolMemoryResource.reset_peak_physical_bytes")(
    lambda: (mr.VmmPoolMemoryResource(2 << 20, reservation_size=64 << 20).reset_peak_physical_bytes, {}))
case("gpumem.mr.ArenaMemoryResource")(lambda: (mr.ArenaMemoryResource, dict(
    upstream=mr.CudaMemoryResource(), arena_size=1 << 20, dump_log_on_failure=False)))
case("gpumem.mr.ArenaMemoryResource.global_free_bytes")(
    lambda: (mr.ArenaMemoryResource(mr.CudaMemoryResource(), 1 << 20).global_free_bytes, {}))
case("gpumem.mr.ArenaMemoryResource.dump_state")(
    lambda: (mr.ArenaMemoryResource(mr.CudaMemoryResource(), 1 << 20).dump_state, {}))
case("gpumem.mr.FixedSizeMemoryResource")(lambda: (mr.FixedSizeMemoryResource, dict(
    upstream=mr.CudaMemoryResource(), block_size=4096, blocks_to_preallocate=4)))
case("gpumem.mr.BinningMemoryResource")(lambda: (mr.BinningMemoryResource, dict(
    upstream=mr.CudaMemoryResource(), min_size_exponent=None, max_size_exponent=None)))
case("gpumem.mr.BinningMemoryResource.add_bin")(
    lambda: (mr.BinningMemoryResource(mr.CudaMemoryResource()).add_bin, dict(allocation_size=4096, bin_resource=None)))
case("gpumem.mr.LoggingResourceAdaptor")(lambda: (mr.LoggingResourceAdaptor, dict(
    upstream=mr.CudaMemoryResource(), log_file_name=os.devnull, auto_flush=False)))
case("gpumem.mr.LoggingResourceAdaptor.flush")(
    lambda: (mr.LoggingResourceAdaptor(mr.CudaMemoryResource(), os.devnull).flush, {}))
case("gpumem.mr.LoggingResourceAdaptor.get_file_name")(
    lambda: (mr.LoggingResourceAdaptor(mr.CudaMemoryResource(), os.devnull).get_file_name, {}))
case("gpumem.mr.StatisticsResourceAdaptor")(lambda: (mr.StatisticsResourceAdaptor, dict(upstream=mr.CudaMemoryResource())))
case("gpumem.mr.StatisticsResourceAdaptor.push_counters")(
    lambda: (mr.StatisticsResourceAdaptor(mr.CudaMemoryResource()).push_counters, {}))
case("gpumem.mr.StatisticsResourceAdaptor.pop_counters")(lambda: (_pushed_statistics().pop_counters, {}))


def _pushed_statistics():
    adaptor = mr.StatisticsResourceAdaptor(mr.CudaMemoryResource())
    adaptor.push_counters()
    return adaptor

case("gpumem.mr.TrackingResourceAdaptor")(lambda: (mr.TrackingResourceAdaptor, dict(
    upstream=mr.CudaMemoryResource(), capture_stacks=False)))
for _method in ("get_allocated_bytes", "get_outstanding_allocations_str", "log_outstanding_allocations"):
    case(f"gpumem.mr.TrackingResourceAdaptor.{_method}")(
        lambda m=_method: (getattr(mr.TrackingResourceAdaptor(mr.CudaMemoryResource()), m), {}))
case("gpumem.mr.LimitingResourceAdaptor")(lambda: (mr.LimitingResourceAdaptor, dict(
    upstream=mr.CudaMemoryResource(), allocation_limit=1 << 20)))
for _method in ("get_allocated_bytes", "get_allocation_limit"):
    case(f"gpumem.mr.LimitingResourceAdaptor.{_method}")(
        lambda m=_method: (getattr(mr.LimitingResourceAdaptor(mr.CudaMemoryResource(), 1 << 20), m), {}))
case("gpumem.mr.FailureCallbackResourceAdaptor")(lambda: (mr.FailureCallbackResourceAdaptor, dict(
    upstream=mr.CudaMemoryResource(), callback=lambda nbytes: False)))
for _class in ("PoolMemoryResource", "FixedSizeMemoryResource"):
    for _method in ("pool_size", "used_bytes", "cached_bytes", "largest_free_block", "free_block_count",
                    "chunk_count", "get_upstream"):
        case(f"gpumem.mr.{_class}.{_method}")(
            lambda c=_class, m=_method: (getattr(getattr(mr, c)(mr.CudaMemoryResource()), m), {}))
for _class in ("ArenaMemoryResource", "BinningMemoryResource", "LoggingResourceAdaptor", "StatisticsResourceAdaptor",
               "TrackingResourceAdaptor", "LimitingResourceAdaptor", "FailureCallbackResourceAdaptor"):
    _extra = {"ArenaMemoryResource": (1 << 20,), "LoggingResourceAdaptor": (os.devnull,),
              "LimitingResourceAdaptor": (1 << 20,), "FailureCallbackResourceAdaptor": (lambda n: False,)}
    case(f"gpumem.mr.{_class}.get_upstream")(
        lambda c=_class, e=_extra.get(_class, ()): (getattr(mr, c)(mr.CudaMemoryResource(), *e).get_upstream, {}))


@case("gpumem.mr.DeviceMemoryResource.allocate")
def _():
    resource = mr.PoolMemoryResource(mr.CudaMemoryResource())

    def call(nbytes, stream):
        resource.deallocate(resource.allocate(nbytes, stream), nbytes)

    return call, dict(nbytes=256, stream=None)


@case("gpumem.mr.DeviceMemoryResource.deallocate", raw={"ptr", "nbytes"})
def _():
    resource = mr.CudaMemoryResource()
    return resource.deallocate, dict(ptr=resource.allocate(256), nbytes=256, stream=None)


case("gpumem.mr.DeviceMemoryResource.is_equal")(
    lambda: (mr.CudaMemoryResource().is_equal, dict(other=mr.CudaMemoryResource())))
case("gpumem.mr.get_current_device_resource")(lambda: (mr.get_current_device_resource, {}))
case("gpumem.mr.get_per_device_resource")(lambda: (mr.get_per_device_resource, dict(device=0)))


case("gpumem.mr.set_current_device_resource")(lambda previous=mr.get_current_device_resource(): (
    restoring(mr.set_current_device_resource, lambda: mr.set_current_device_resource(previous)),
    {"mr": mr.CudaMemoryResource()}))
case("gpumem.mr.set_per_device_resource")(lambda previous=mr.get_per_device_resource(0): (
    restoring(mr.set_per_device_resource, lambda: mr.set_per_device_resource(0, previous)),
    {"device": 0, "mr": mr.CudaMemoryResource()}))


# ---- gpumem.statistics, gpumem.allocators -----------------------------------------------------------------


@case("gpumem.statistics.statistics")
def _():
    def call():
        with gpumem.statistics.statistics():
            pass

    return call, {}


for _name in ("enable_statistics", "get_statistics", "push_statistics", "pop_statistics"):
    case(f"gpumem.statistics.{_name}")(lambda n=_name: (_with_statistics(n), {}))


def _with_statistics(name):
    def call():
        with gpumem.statistics.statistics():
            if name == "pop_statistics":
                gpumem.statistics.push_statistics()
            getattr(gpumem.statistics, name)()

    return call


# ---- RMM's names: gpumem top level, gpumem.mr, gpumem.statistics --------------------------------------------

case("gpumem.is_initialized")(lambda: (gpumem.is_initialized, {}))
case("gpumem.register_reinitialize_hook")(lambda: (restoring(
    gpumem.register_reinitialize_hook, lambda: gpumem.unregister_reinitialize_hook(print)), dict(func=print)))
case("gpumem.unregister_reinitialize_hook")(lambda: (gpumem.unregister_reinitialize_hook, dict(func=print)))
case("gpumem.enable_logging")(lambda: (restoring(gpumem.enable_logging, gpumem.disable_logging),
                                       dict(log_file_name=os.devnull)))
for _name in ("disable_logging", "get_log_filenames", "flush_logger", "get_flush_level", "get_logging_level"):
    case(f"gpumem.{_name}")(lambda n=_name: (getattr(gpumem, n), {}))
case("gpumem.set_logging_level")(lambda previous=gpumem.get_logging_level(): (restoring(
    gpumem.set_logging_level, lambda: gpumem.set_logging_level(previous)), dict(level=gpumem.level_enum.warn)))
case("gpumem.set_flush_level")(lambda previous=gpumem.get_flush_level(): (restoring(
    gpumem.set_flush_level, lambda: gpumem.set_flush_level(previous)), dict(level=gpumem.level_enum.trace)))
case("gpumem.should_log")(lambda: (gpumem.should_log, dict(level=gpumem.level_enum.info)))
case("gpumem.DeviceBuffer.capacity")(lambda: (gpumem.DeviceBuffer(8).capacity, {}))
case("gpumem.DeviceBuffer.copy_from_device")(
    lambda: (gpumem.DeviceBuffer(8).copy_from_device, dict(cuda_ary=gpumem.DeviceBuffer(4), stream=None)))
case("gpumem.DeviceBuffer.prefetch")(lambda: (gpumem.DeviceBuffer(8).prefetch, dict(device=None, stream=None)))
case("gpumem.mr.CallbackMemoryResource")(lambda: (mr.CallbackMemoryResource, dict(
    allocate_func=lambda nbytes, stream: 0, deallocate_func=lambda ptr, nbytes, stream: None)))
case("gpumem.mr.CudaAsyncMemoryResource.pool_handle")(lambda: (mr.CudaAsyncMemoryResource().pool_handle, {}))
case("gpumem.mr.CudaAsyncViewMemoryResource")(
    lambda: (mr.CudaAsyncViewMemoryResource, dict(pool_handle=mr.default_memory_pool())))
case("gpumem.mr.CudaAsyncViewMemoryResource.pool_handle")(
    lambda: (mr.CudaAsyncViewMemoryResource(mr.default_memory_pool()).pool_handle, {}))
case("gpumem.mr.PrefetchResourceAdaptor")(lambda: (mr.PrefetchResourceAdaptor, dict(upstream=mr.ManagedMemoryResource())))
case("gpumem.mr.PrefetchResourceAdaptor.get_upstream")(
    lambda: (mr.PrefetchResourceAdaptor(mr.ManagedMemoryResource()).get_upstream, {}))
case("gpumem.mr.SystemMemoryResource", allowed=(gpumem.CUDARuntimeError,))(lambda: (mr.SystemMemoryResource, {}))
case("gpumem.mr.available_device_memory")(lambda: (mr.available_device_memory, {}))
case("gpumem.mr.get_current_device_resource_type")(lambda: (mr.get_current_device_resource_type, {}))
case("gpumem.mr.get_per_device_resource_type")(lambda: (mr.get_per_device_resource_type, dict(device=0)))
case("gpumem.mr.default_memory_pool")(lambda: (mr.default_memory_pool, dict(device=None)))
case("gpumem.mr.is_system_memory_supported")(lambda: (mr.is_system_memory_supported, dict(device=None)))
case("gpumem.statistics.ProfilerRecords")(lambda: (gpumem.statistics.ProfilerRecords, {}))
case("gpumem.statistics.ProfilerRecords.Data")(lambda: (gpumem.statistics.ProfilerRecords.Data, dict(
    num_calls=1, memory_total=2, memory_peak=2)))
case("gpumem.statistics.ProfilerRecords.add")(lambda: (gpumem.statistics.ProfilerRecords().add, dict(
    name="block", data=mr.Statistics(1, 1, 1, 1, 1, 1))))
case("gpumem.statistics.ProfilerRecords.pretty_print")(
    lambda: (gpumem.statistics.ProfilerRecords().pretty_print, dict(ordered_by="memory_peak")))
case("gpumem.statistics.get_descriptive_name_of_object")(
    lambda: (gpumem.statistics.get_descriptive_name_of_object, dict(obj=public_api)))
case("gpumem.statistics.profiler")(lambda: (gpumem.statistics.profiler, dict(
    records=gpumem.statistics.ProfilerRecords(), name="block")))


# The plug-ins refuse the host backend with a RuntimeError naming it (documented; they would hand host
# memory to a GPU library), after checking nothing else.
case("gpumem.allocators.cupy_allocator", allowed=(RuntimeError,))(
    lambda: (gpumem.allocators.cupy_allocator, dict(nbytes=256)))
case("gpumem.allocators.torch_allocator", allowed=(RuntimeError, ImportError, FileNotFoundError))(
    lambda: (gpumem.allocators.torch_allocator, {}))
case("gpumem.allocators.torch_allocator_library_path")(lambda: (gpumem.allocators.torch_allocator_library_path, {}))

# Not swept: these take no arguments and return data (enum, exception and record types), or are context
# protocol halves swept together above.
NOT_CALLABLE_API = {"gpumem.BufferState", "gpumem.RMMError", "gpumem.level_enum", "gpumem.CUDARuntimeError", "gpumem.OutOfMemoryError", "gpumem.mr.Statistics",
                    "gpumem.cuda.BaseMemory", "gpumem.cuda.Graph", "gpumem.cuda.PooledMemory",
                    "gpumem.cuda.PooledPinnedMemory", "gpumem.UnifiedDeviceView", "gpumem.mr.DeviceMemoryResource"}
NOT_CALLABLE_API |= {"gpumem.BufferNotAllocatedError", "gpumem.PoolStatistics"}
NOT_CALLABLE_API |= {"gpumem.IpcHandle", "gpumem.ImportedBuffer"}  # made by export() and import_buffer()


# ---- the errors pybind11 used to report in its own terms ----------------------------------------------------


def test_wrong_arguments_are_reported_in_the_callers_terms(current_resource):
    with pytest.raises(ValueError, match="^size must be >= 0, got -1$"):
        gpumem.DeviceBuffer(size=-1)
    with pytest.raises(TypeError, match="^mr must be a DeviceMemoryResource, not str$"):
        mr.set_current_device_resource("abc")
    for call in (lambda: gpumem.DeviceBuffer(16, stream=-1), lambda: gpumem.alloc(16, stream=-1),
                 lambda: cuda.Event().record(stream=-1)):
        with pytest.raises(ValueError, match="^stream must be >= 0, got -1$"):
            call()
    with pytest.raises(ValueError, match="^alloc: size must be at most 18446744073709551615, got 18446744073709551616$"):
        gpumem.alloc(2**64)
    with pytest.raises(TypeError, match="^upstream must be a DeviceMemoryResource, not int$"):
        mr.PoolMemoryResource(3)


def test_a_failure_callback_that_returns_no_bool_is_a_type_error_naming_the_result():
    limited = mr.LimitingResourceAdaptor(mr.CudaMemoryResource(), allocation_limit=1024)
    for result in ("yes", None, 1):
        adaptor = mr.FailureCallbackResourceAdaptor(limited, lambda nbytes, result=result: result)
        with pytest.raises(TypeError, match=f"the callback must return a bool .* not {type(result).__name__}"):
            adaptor.allocate(4096)
    with pytest.raises(TypeError, match="^callback must be callable, not str$"):
        mr.FailureCallbackResourceAdaptor(limited, "not callable")


# ---- the sweep ---------------------------------------------------------------------------------------------


def public_api():
    """Every public function, class and method of the package, by qualified name (methods of base classes
    under the class that defines them)."""
    names, seen = set(), set()
    for module in (gpumem, cuda, mr, gpumem.statistics, gpumem.allocators):
        for name in module.__all__:
            obj = getattr(module, name)
            if isinstance(obj, types.ModuleType) or id(obj) in seen:
                continue
            seen.add(id(obj))
            qualified = f"{module.__name__}.{name}"
            if inspect.isclass(obj):
                names.add(qualified)
                for member, value in vars(obj).items():
                    if isinstance(value, property) or not callable(value) and not isinstance(value, staticmethod):
                        continue
                    if member.startswith("_") and member not in ("__enter__", "__exit__", "__dlpack__", "__call__"):
                        continue
                    names.add(f"{qualified}.{member}")
            elif callable(obj):
                names.add(qualified)
    return names


def test_every_public_callable_has_a_misuse_case():
    missing = sorted(public_api() - set(CASES) - NOT_CALLABLE_API)
    assert not missing, f"add a misuse case (CASES) for: {missing}"


def check_error(error, label, argument, bad, extra_allowed, names):
    assert isinstance(error, ALLOWED + extra_allowed), f"{label}({argument}={bad!r}) raised {type(error).__name__}: {error}"
    text = str(error)
    for internal in INTERNALS:
        assert internal not in text, f"{label}({argument}={bad!r}): pybind11's words instead of the caller's: {text}"
    wrong_type = isinstance(error, TypeError) and any(bad is value for value in WRONG_TYPES)
    negative = isinstance(error, ValueError) and isinstance(bad, int) and bad == NEGATIVE
    if wrong_type or negative:
        words = (argument,) + tuple(names.get(argument, ()))
        assert any(word in text for word in words), f"{label}({argument}={bad!r}): the message does not name it: {text}"


@pytest.mark.parametrize("label", sorted(CASES))
def test_bad_arguments_raise_clear_errors(label, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a log file named "abc" lands here
    entry = CASES[label]
    function, valid = entry.make()
    call_validly(entry, function, valid)
    for argument in valid:
        values = WRONG_TYPES + [None] + (BAD_INTS if argument not in entry.raw else [-1, 2**64])
        for bad in values:
            function, arguments = entry.make()
            arguments[argument] = bad
            try:
                result = function(**arguments)
            except BaseException as error:  # noqa: B036: anything else than ALLOWED fails below
                check_error(error, label, argument, bad, entry.allowed, entry.names)
            else:
                if entry.free is not None:
                    entry.free(result)
            del function, arguments
    gc.collect()


def call_validly(entry, function, arguments):
    try:
        result = function(**arguments)
    except entry.allowed:
        return
    if entry.free is not None:
        entry.free(result)


def test_the_sweep_leaves_no_plain_allocation_behind():
    for label, entry in sorted(CASES.items()):
        call_validly(entry, *entry.make())
    gc.collect()
    assert gpumem.live_allocation_count() == 0
