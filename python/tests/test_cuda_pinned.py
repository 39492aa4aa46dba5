"""gpumem.cuda's pinned host memory with CuPy's names: PinnedMemory, PinnedMemoryPointer (a Python buffer:
numpy.frombuffer works), PinnedMemoryPool, alloc_pinned_memory / set_pinned_memory_allocator, copies between
pinned and device memory, and asnumpy into pinned memory (blocking=False).

Runs on the host backend (pinned memory is emulated page-locked host memory there) and on the cuda backend.
"""

import gc
import threading
import time
import weakref

import gpumem
import gpumem.cuda as cuda
import pytest

numpy = pytest.importorskip("numpy")

WAIT = 10.0  # seconds: a generous limit for things that should happen at once
HELD = 0.3  # seconds a gated stream is held back


def gate(stream):
    """Holds `stream` back until the returned threading.Event is set (a callback that waits). Garbage is
    collected first: a resource collected while the gate is closed would free (and so synchronise the device)
    with the GIL held, which the gate's callback waits for."""
    gc.collect()
    opened = threading.Event()
    stream.add_callback(lambda s, status, arg: arg.wait(WAIT), opened)
    return opened


def open_later(opened, seconds=HELD):
    timer = threading.Timer(seconds, opened.set)
    timer.start()
    return timer


@pytest.fixture
def restore_pinned_allocator():
    yield
    cuda.set_pinned_memory_allocator(cuda.get_default_pinned_memory_pool().malloc)


# ---- PinnedMemory and PinnedMemoryPointer ----------------------------------------------------------------


def test_pinned_memory_basics():
    memory = cuda.PinnedMemory(1000)
    assert memory.ptr != 0 and memory.size == 1000 and int(memory) == memory.ptr
    assert "PinnedMemory" in repr(memory)
    assert cuda.PinnedMemory(0).ptr == 0
    assert cuda.PinnedMemory(64, flags=1).size == 64  # cudaHostAllocPortable
    assert cuda.PinnedMemory(64, flags=3).size == 64  # portable | mapped
    with pytest.raises(ValueError, match="WriteCombined"):
        cuda.PinnedMemory(64, flags=4)
    with pytest.raises(ValueError, match="size must be >= 0"):
        cuda.PinnedMemory(-1)


def test_pinned_pointer_is_a_buffer_numpy_can_view():
    memory = cuda.PinnedMemory(1024)
    pointer = cuda.PinnedMemoryPointer(memory, 0)
    view = numpy.frombuffer(pointer, numpy.float32, 256)
    view[:] = numpy.arange(256, dtype=numpy.float32)
    later = cuda.PinnedMemoryPointer(memory, 512)  # the same bytes, seen from another pointer
    assert numpy.array_equal(numpy.frombuffer(later, numpy.float32, 128), numpy.arange(128, 256, dtype=numpy.float32))
    assert memoryview(pointer).nbytes == 1024 and not memoryview(pointer).readonly
    assert memoryview(later).nbytes == 512 == later.size()
    assert bytes(memoryview(cuda.PinnedMemoryPointer(memory, 1024))) == b""


def test_numpy_view_keeps_pinned_memory_alive():
    pointer = cuda.alloc_pinned_memory(4096)
    view = numpy.frombuffer(pointer, numpy.uint8, 4096)
    view[:] = 42
    alive = weakref.ref(pointer.mem)
    del pointer
    gc.collect()
    assert alive() is not None and (view == 42).all()
    del view
    gc.collect()
    assert alive() is None


def test_pinned_pointer_offsets_and_arithmetic():
    memory = cuda.PinnedMemory(512)
    pointer = cuda.PinnedMemoryPointer(memory, 0)
    assert pointer.ptr == memory.ptr == int(pointer) and pointer.mem is memory and pointer.size() == 512
    assert (pointer + 100).ptr == memory.ptr + 100 and (100 + pointer).offset == 100 and (pointer + 100 - 50).offset == 50
    assert "PinnedMemoryPointer" in repr(pointer)
    alias = pointer
    pointer += 256
    assert alias is pointer and alias.offset == 256 and alias.size() == 256
    pointer -= 56
    assert alias.offset == 200
    with pytest.raises(ValueError, match="outside the memory of 512 bytes"):
        pointer + 313
    with pytest.raises(ValueError):
        pointer - 201
    alive = weakref.ref(pointer)
    del pointer, alias
    gc.collect()
    assert alive() is None  # in-place arithmetic leaves no reference behind
    with pytest.raises(ValueError):
        cuda.PinnedMemoryPointer(memory, 513)
    with pytest.raises(ValueError):
        cuda.PinnedMemoryPointer(memory, -1)
    with pytest.raises(TypeError):
        cuda.PinnedMemoryPointer(42, 0)


def test_pinned_pointer_over_foreign_memory():
    backing = cuda.PinnedMemory(256)

    class Foreign:
        ptr = backing.ptr
        size = 256

    foreign = Foreign()
    pointer = cuda.PinnedMemoryPointer(foreign, 16)
    assert pointer.mem is foreign and pointer.ptr == backing.ptr + 16 and pointer.size() == 240
    numpy.frombuffer(pointer, numpy.uint8)[:] = 1
    assert (numpy.frombuffer(cuda.PinnedMemoryPointer(backing, 16), numpy.uint8) == 1).all()


# ---- copies with pinned memory ---------------------------------------------------------------------------


def test_copies_between_pinned_and_device_memory():
    stream = cuda.Stream(non_blocking=True)
    source = cuda.alloc_pinned_memory(4096)
    numpy.frombuffer(source, numpy.uint8)[:] = numpy.arange(4096, dtype=numpy.uint16).astype(numpy.uint8)
    device = cuda.alloc(4096)
    device.copy_from_host_async(source, 4096, stream)
    destination = cuda.alloc_pinned_memory(4096)
    device.copy_to_host_async(destination, 4096, stream)
    stream.synchronize()
    assert numpy.array_equal(numpy.frombuffer(destination, numpy.uint8), numpy.frombuffer(source, numpy.uint8))
    device.memset(0, 4096)
    device.copy_from_host(source.mem, 4096)  # a PinnedMemory names its whole extent
    device.copy_to_host(destination + 2048, 2048)
    assert numpy.array_equal(numpy.frombuffer(destination + 2048, numpy.uint8), numpy.frombuffer(source, numpy.uint8)[:2048])
    with pytest.raises(ValueError, match="exceeds the host buffer's 2048 bytes"):
        device.copy_to_host(destination + 2048, 4096)


def test_freed_pinned_block_is_reused_only_after_its_copy():
    pool = cuda.PinnedMemoryPool()
    stream = cuda.Stream(non_blocking=True)
    device = cuda.alloc(8192)
    device.memset(9, 8192)
    block = pool.malloc(8192)
    numpy.frombuffer(block, numpy.uint8)[:] = 0
    address = block.ptr
    opened = gate(stream)
    device.copy_to_host_async(block, 8192, stream)  # runs after the gate opens
    del block  # back in the free list, with the copy still to run
    timer = open_later(opened)
    start = time.perf_counter()
    again = pool.malloc(8192)
    waited = time.perf_counter() - start
    timer.join()
    assert again.ptr == address  # the same block, handed out once the copy had run
    assert waited >= HELD / 2
    assert (numpy.frombuffer(again, numpy.uint8) == 9).all()


def test_dropping_pinned_memory_waits_for_its_copy():
    stream = cuda.Stream(non_blocking=True)
    device = cuda.alloc(4096)
    device.memset(4, 4096)
    pinned = cuda.PinnedMemoryPointer(cuda.PinnedMemory(4096), 0)
    opened = gate(stream)
    device.copy_to_host_async(pinned, 4096, stream)
    timer = open_later(opened)
    start = time.perf_counter()
    del pinned
    gc.collect()
    waited = time.perf_counter() - start
    timer.join()
    assert waited >= HELD / 2  # the memory was not freed under the pending copy
    stream.synchronize()


# ---- PinnedMemoryPool ------------------------------------------------------------------------------------


def test_pinned_pool_accounting():
    pool = cuda.PinnedMemoryPool()
    assert pool.used_bytes() == pool.total_bytes() == pool.free_bytes() == pool.n_free_blocks() == 0
    a = pool.malloc(100)
    b = pool.malloc(1000)
    assert isinstance(a.mem, cuda.PooledPinnedMemory) and a.mem.size == 512 and b.mem.size == 1024
    assert pool.used_bytes() == 1536 == pool.total_bytes() and pool.n_free_blocks() == 0
    first = a.ptr
    del a
    assert pool.used_bytes() == 1024 and pool.free_bytes() == 512 and pool.n_free_blocks() == 1
    assert pool.total_bytes() == 1536
    assert pool.malloc(200).ptr == first  # the free block of that size, reused (and freed again at once)
    b.mem.free()  # early, as CuPy's PooledPinnedMemory.free()
    assert b.mem.ptr == 0 and pool.used_bytes() == 0 and pool.n_free_blocks() == 2
    b.mem.free()
    pool.free_all_blocks()
    assert pool.n_free_blocks() == 0 and pool.total_bytes() == 0
    empty = pool.malloc(0)
    assert empty.ptr == 0 and empty.size() == 0
    with pytest.raises(ValueError, match="size must be >= 0"):
        pool.malloc(-1)


def test_pinned_pool_over_a_python_allocator():
    calls = []

    def allocator(size):
        calls.append(size)
        return cuda.PinnedMemoryPointer(cuda.PinnedMemory(size), 0)

    pool = cuda.PinnedMemoryPool(allocator)
    pointer = pool.malloc(600)
    assert calls == [1024] and pointer.mem.size == 1024
    numpy.frombuffer(pointer, numpy.uint8)[:] = 7
    del pointer
    again = pool.malloc(1024)
    assert calls == [1024] and (numpy.frombuffer(again, numpy.uint8) == 7).all()
    del again
    pool.free_all_blocks()
    assert pool.n_free_blocks() == 0
    with pytest.raises(TypeError, match="PinnedMemoryPointer"):
        cuda.PinnedMemoryPool(lambda size: 0).malloc(16)

    def exhausted(size):
        raise MemoryError("no pinned memory left")

    with pytest.raises(gpumem.OutOfMemoryError, match="no pinned memory left"):
        cuda.PinnedMemoryPool(exhausted).malloc(16)
    with pytest.raises(TypeError, match="allocator"):
        cuda.PinnedMemoryPool(42)


def test_pinned_pool_lifetimes():
    pool = cuda.PinnedMemoryPool()
    alive = weakref.ref(pool)
    pointer = pool.malloc(2048)
    numpy.frombuffer(pointer, numpy.uint8)[:] = 3
    del pool
    gc.collect()
    assert alive() is None
    assert (numpy.frombuffer(pointer, numpy.uint8) == 3).all()
    del pointer  # back to the orphaned pool, which then goes
    gc.collect()


def test_default_pinned_pool_and_allocator(restore_pinned_allocator):
    pool = cuda.get_default_pinned_memory_pool()
    assert pool is cuda.get_default_pinned_memory_pool()
    used = pool.used_bytes()
    pointer = cuda.alloc_pinned_memory(1000)
    assert isinstance(pointer.mem, cuda.PooledPinnedMemory) and pool.used_bytes() == used + 1024
    cuda.set_pinned_memory_allocator(None)  # the raw allocator: no pool
    raw = cuda.alloc_pinned_memory(1000)
    assert type(raw.mem) is cuda.PinnedMemory and raw.mem.size == 1000
    own = cuda.PinnedMemoryPool()
    cuda.set_pinned_memory_allocator(own.malloc)
    kept = cuda.alloc_pinned_memory(10)
    assert own.used_bytes() == 512 and kept.size() == 512
    with pytest.raises(TypeError, match="callable"):
        cuda.set_pinned_memory_allocator(3)


# ---- asnumpy into pinned memory --------------------------------------------------------------------------


class DeviceArray:
    """A minimal __cuda_array_interface__ (v3) exporter over a MemoryPointer."""

    def __init__(self, pointer, shape, dtype):
        self.pointer = pointer
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": numpy.dtype(dtype).str,
                                         "data": (pointer.ptr, False), "strides": None, "version": 3, "stream": None}


def test_asnumpy_into_pinned_memory_without_blocking():
    stream = cuda.Stream(non_blocking=True)
    device = cuda.alloc(4096)
    device.memset(5, 4096)
    stream.synchronize()
    out = numpy.frombuffer(cuda.alloc_pinned_memory(4096), numpy.uint8, 4096)
    out[:] = 0
    opened = gate(stream)
    start = time.perf_counter()
    result = cuda.asnumpy(DeviceArray(device, (4096,), numpy.uint8), stream=stream, out=out, blocking=False)
    returned = time.perf_counter() - start
    assert result is out
    assert returned < HELD and (out == 0).all()  # enqueued only: the stream is still held
    opened.set()
    stream.synchronize()
    assert (out == 5).all()


def test_asnumpy_into_pinned_memory_blocking():
    stream = cuda.Stream(non_blocking=True)
    device = cuda.alloc(1024)
    device.memset(8, 1024)
    out = numpy.frombuffer(cuda.alloc_pinned_memory(1024), numpy.float32, 256).reshape(16, 16)
    opened = gate(stream)
    timer = open_later(opened)
    result = cuda.asnumpy(DeviceArray(device, (16, 16), numpy.float32), stream=stream, out=out)
    timer.join()
    expected = numpy.frombuffer(bytes([8] * 1024), numpy.float32).reshape(16, 16)
    assert result is out and numpy.array_equal(out, expected)


def test_copy_into_a_numpy_view_of_pinned_memory_delays_reuse():
    pool = cuda.PinnedMemoryPool()
    stream = cuda.Stream(non_blocking=True)
    device = cuda.alloc(2048)
    device.memset(6, 2048)
    stream.synchronize()
    block = pool.malloc(2048)
    address = block.ptr
    out = numpy.frombuffer(block, numpy.uint8, 2048).reshape(2, 1024)
    opened = gate(stream)
    cuda.asnumpy(DeviceArray(device, (2, 1024), numpy.uint8), stream=stream, out=out, blocking=False)
    del out, block  # the block goes back to the pool while the copy into it waits
    gc.collect()
    timer = open_later(opened)
    start = time.perf_counter()
    again = pool.malloc(2048)
    waited = time.perf_counter() - start
    timer.join()
    assert again.ptr == address and waited >= HELD / 2
    assert (numpy.frombuffer(again, numpy.uint8) == 6).all()
