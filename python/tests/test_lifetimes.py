"""What gpumem keeps alive for the caller, so that dropping Python objects in any order is safe.

- A pointer from gpumem.alloc/zeros (and from the C API, which the allocator plug-ins use) keeps the
  resource that served it alive until it is freed, also after the resource was replaced and dropped.
- Memory freed on a stream after the call that gave the stream keeps that stream's Python object alive:
  a DeviceBuffer (its stream, also one set later by resize/reserve/shrink_to_fit), a UnifiedBuffer and its
  device views (the stream of the latest device access), a UnifiedBufferPool (the streams of the buffers
  it caches), and the CuPy allocator plug-in (CuPy's current stream at allocation).

On the host backend a stream handle that outlives its stream is an error, so each test also frees after
dropping the stream; the weak reference shows that the stream object was still alive at the free.
"""

import ctypes
import gc
import sys
import types
import weakref

import numpy as np
import pytest

import gpumem
import gpumem.allocators
import gpumem.cuda as cuda
from gpumem import mr


def dropped(watch):
    gc.collect()
    return watch() is None


# ---- resources held by the plain API's pointers -----------------------------------------------------------


@pytest.mark.parametrize("allocate", [gpumem.alloc, gpumem.zeros])
def test_a_pointer_keeps_its_replaced_resource_alive_until_it_is_freed(current_resource, allocate):
    pool = mr.PoolMemoryResource(mr.CudaMemoryResource())
    mr.set_current_device_resource(pool)
    p = allocate(1000)
    mr.set_current_device_resource(mr.CudaMemoryResource())
    watch = weakref.ref(pool)
    del pool
    assert not dropped(watch), "the live pointer must hold the pool"
    assert gpumem.allocation_size(p) == 1000
    gpumem.free(p)
    assert dropped(watch), "freeing the last pointer lets the pool go"


def test_a_resource_set_per_device_lives_while_any_of_its_pointers_lives(current_resource):
    stats = mr.StatisticsResourceAdaptor(mr.CudaMemoryResource())
    mr.set_per_device_resource(cuda.get_device_id(), stats)
    pointers = [gpumem.alloc(256 * (i + 1)) for i in range(3)]
    watch = weakref.ref(stats)
    mr.set_per_device_resource(cuda.get_device_id(), None)
    del stats
    for p in pointers[:-1]:
        gpumem.free(p)
        assert not dropped(watch)
    assert watch().allocation_counts.current_count == 1, "every free went to the replaced adaptor"
    gpumem.free(pointers[-1])
    assert dropped(watch)


def test_a_pointer_from_the_c_api_keeps_its_resource_alive(current_resource):
    alloc_async = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p,
                                   ctypes.POINTER(ctypes.c_void_p))
    free_async = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)

    class Hooks(ctypes.Structure):
        _fields_ = [("alloc_async", alloc_async), ("free_async", free_async), ("last_error", ctypes.c_void_p)]

    hooks = Hooks.from_address(gpumem._gpumem._allocator_hooks_address())
    pool = mr.PoolMemoryResource(mr.CudaMemoryResource())
    mr.set_current_device_resource(pool)
    out = ctypes.c_void_p()
    assert hooks.alloc_async(4096, -1, None, ctypes.byref(out)) == 0
    mr.set_current_device_resource(None)
    watch = weakref.ref(pool)
    del pool
    assert not dropped(watch)
    assert hooks.free_async(out.value, None) == 0
    assert dropped(watch)


# ---- streams held by buffers ------------------------------------------------------------------------------


def test_a_device_buffer_keeps_its_stream_alive_until_its_memory_is_freed():
    stream = cuda.Stream()
    watch = weakref.ref(stream)
    buffer = gpumem.DeviceBuffer(1000, stream=stream)
    del stream
    assert not dropped(watch), "the buffer frees its memory on that stream: it must hold it"
    del buffer
    assert dropped(watch)


def test_a_device_buffer_holds_the_stream_that_resize_moved_it_to():
    first, second = cuda.Stream(), cuda.Stream()
    watch_first, watch_second = weakref.ref(first), weakref.ref(second)
    buffer = gpumem.DeviceBuffer(1000, stream=first)
    copy = buffer.copy(stream=second)
    buffer.resize(5000, stream=second)
    del first, second
    assert dropped(watch_first), "the buffer is on `second` now"
    assert not dropped(watch_second)
    del buffer
    assert not dropped(watch_second), "the copy was made on `second` too"
    del copy
    assert dropped(watch_second)


def zeroed_unified_buffer(stream):
    buffer = gpumem.UnifiedBuffer(64, "int32")
    buffer.zeros(stream)
    return buffer


MOVES = {  # a buffer made on one stream, and a call that moves it to another
    "DeviceBuffer.reserve": (lambda s: gpumem.DeviceBuffer(1000, stream=s), lambda b, s: b.reserve(4000, stream=s)),
    "DeviceBuffer.shrink_to_fit": (lambda s: gpumem.DeviceBuffer(1000, stream=s), lambda b, s: b.shrink_to_fit(stream=s)),
    "UnifiedBuffer.sync_to_host": (zeroed_unified_buffer, lambda b, s: b.sync_to_host(s)),
    "UnifiedBuffer.device_for": (zeroed_unified_buffer, lambda b, s: b.device_for(s)),
}


@pytest.mark.parametrize("move", sorted(MOVES))
def test_a_buffer_lets_its_old_stream_go_once_it_moved_to_another(move):
    make, move_to = MOVES[move]
    first, second = cuda.Stream(), cuda.Stream()
    watch_first, watch_second = weakref.ref(first), weakref.ref(second)
    buffer = make(first)
    move_to(buffer, second)
    del first, second
    assert dropped(watch_first) and not dropped(watch_second)
    del buffer
    assert dropped(watch_second)


def test_a_unified_buffer_and_its_device_view_keep_their_stream_alive():
    stream = cuda.Stream()
    watch = weakref.ref(stream)
    buffer = gpumem.UnifiedBuffer(256, "float32")
    buffer.host[:] = 3.0
    view = buffer.device_for(stream)
    del stream
    assert not dropped(watch)
    del view
    assert not dropped(watch), "the buffer's device copy is on that stream"
    np.testing.assert_array_equal(buffer.to_numpy(), np.full(256, 3.0, np.float32))
    del buffer
    assert dropped(watch)


def test_a_unified_buffer_pool_keeps_the_streams_of_its_cached_buffers_alive():
    pool = gpumem.UnifiedBufferPool()
    stream = cuda.Stream()
    watch = weakref.ref(stream)
    buffer = pool.acquire(1024, "uint8")
    buffer.zeros(stream)
    pool.release(buffer)
    del stream
    assert not dropped(watch), "the cached buffer's device copy is freed on that stream later"
    again = pool.acquire(1024, "uint8")  # the same buffer, still on that stream
    assert not dropped(watch)
    pool.release(again)
    del again
    pool.clear()
    assert dropped(watch)


# ---- the CuPy allocator plug-in ------------------------------------------------------------------------------


class FakeCupyStream:
    """What cupy.cuda.get_current_stream() returns: an object with .ptr, owning a stream (here gpumem's)."""

    def __init__(self):
        self._stream = cuda.Stream()
        self.ptr = self._stream.ptr


@pytest.fixture
def fake_cupy(monkeypatch):
    """A stand-in for the parts of CuPy the plug-in uses, on the host backend (which it otherwise refuses)."""
    current = {"stream": FakeCupyStream()}
    memory_type = types.SimpleNamespace
    fake = types.ModuleType("cupy")
    fake.cuda = types.SimpleNamespace(
        get_current_stream=lambda: current["stream"],
        runtime=types.SimpleNamespace(getDevice=lambda: 0),
        UnownedMemory=lambda ptr, size, owner, device_id: memory_type(ptr=ptr, size=size, owner=owner),
        MemoryPointer=lambda mem, offset: memory_type(mem=mem, ptr=mem.ptr + offset),
    )
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(gpumem.allocators, "_require_cuda_backend", lambda client: None)
    return current


def test_the_cupy_allocator_keeps_cupys_current_stream_alive_until_the_memory_is_freed(fake_cupy):
    watch = weakref.ref(fake_cupy["stream"])
    pointer = gpumem.allocators.cupy_allocator(4096)
    fake_cupy["stream"] = FakeCupyStream()  # CuPy moves on to another stream and drops the first
    assert not dropped(watch), "the memory is freed on that stream: it must be held"
    assert pointer.ptr % 256 == 0
    del pointer
    assert dropped(watch)
