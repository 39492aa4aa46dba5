"""gpumem.cuda's device memory API with CuPy's names: Memory, ManagedMemory, MemoryAsync, UnownedMemory,
MemoryPointer (arithmetic, copies, fills), MemoryPool, MemoryAsyncPool, the current allocator (alloc,
set_allocator, using_allocator), PythonFunctionAllocator, CFunctionAllocator and asnumpy.

Runs on the host backend (device memory is host memory there, so contents are checked through copies, as on a
GPU) and on the cuda backend.
"""

import ctypes
import gc
import os
import sys
import threading
import weakref

import gpumem
import gpumem.cuda as cuda
import gpumem.mr as mr
import pytest

numpy = pytest.importorskip("numpy")

WAIT = 10.0  # seconds: a generous limit for things that should happen at once


def gate(stream):
    """Holds `stream` back until the returned threading.Event is set (a callback that waits). Garbage is
    collected first: a resource collected while the gate is closed would free (and so synchronise the device)
    with the GIL held, which the gate's callback waits for."""
    gc.collect()
    opened = threading.Event()
    stream.add_callback(lambda s, status, arg: arg.wait(WAIT), opened)
    return opened


def open_later(opened, seconds=0.3):
    timer = threading.Timer(seconds, opened.set)
    timer.start()
    return timer


def upload(pointer, array):
    pointer.copy_from_host(array, array.nbytes)


def download(pointer, nbytes, dtype=numpy.uint8):
    out = numpy.empty(nbytes // numpy.dtype(dtype).itemsize, dtype)
    pointer.copy_to_host(out, out.nbytes)
    return out


@pytest.fixture
def restore_allocator():
    previous = cuda.get_allocator()
    yield
    cuda.set_allocator(previous)


# ---- the memory classes ----------------------------------------------------------------------------------


def test_memory_owns_device_memory():
    memory = cuda.Memory(1000)
    assert isinstance(memory, cuda.BaseMemory)
    assert memory.ptr != 0 and memory.ptr % 256 == 0 and int(memory) == memory.ptr
    assert memory.size == 1000 and memory.device_id == cuda.get_device_id()
    assert memory.device == cuda.Device(memory.device_id)
    assert "Memory" in repr(memory) and hex(memory.ptr) in repr(memory)
    pointer = cuda.MemoryPointer(memory, 0)
    data = numpy.arange(1000, dtype=numpy.uint16).astype(numpy.uint8)
    upload(pointer, data)
    assert numpy.array_equal(download(pointer, 1000), data)
    empty = cuda.Memory(0)
    assert empty.ptr == 0 and empty.size == 0


def test_memory_errors():
    with pytest.raises(ValueError, match="size must be >= 0"):
        cuda.Memory(-1)
    with pytest.raises(gpumem.OutOfMemoryError):
        cuda.Memory(1 << 60)


def test_memory_comes_from_the_current_device_resource():
    statistics = mr.StatisticsResourceAdaptor(mr.CudaMemoryResource())
    previous = mr.set_current_device_resource(statistics)
    try:
        memory = cuda.Memory(512)
        assert statistics.allocation_counts.current_bytes == 512
    finally:
        mr.set_current_device_resource(previous)
    del memory  # freed to the resource that allocated it, though it is no longer current
    gc.collect()
    assert statistics.allocation_counts.current_bytes == 0


def test_managed_memory():
    memory = cuda.ManagedMemory(4096)
    assert isinstance(memory, cuda.BaseMemory) and memory.size == 4096 and memory.ptr % 256 == 0
    memory.prefetch()
    memory.prefetch(cuda.Stream())
    pointer = cuda.MemoryPointer(memory, 0)
    data = numpy.full(4096, 3, numpy.uint8)
    upload(pointer, data)
    assert numpy.array_equal(download(pointer, 4096), data)
    with pytest.raises(ValueError):
        cuda.ManagedMemory(-5)
    assert cuda.ManagedMemory(0).ptr == 0


def test_memory_async_is_freed_on_its_stream_which_it_keeps_alive():
    stream = cuda.Stream()
    memory = cuda.MemoryAsync(1024, stream)
    assert memory.stream == stream.ptr and memory.size == 1024 and memory.ptr != 0
    pointer = cuda.MemoryPointer(memory, 0)
    pointer.memset_async(9, 1024, stream)
    stream.synchronize()
    assert (download(pointer, 1024) == 9).all()
    alive = weakref.ref(stream)
    del stream
    gc.collect()
    assert alive() is not None  # the memory will be freed on it
    del memory, pointer
    gc.collect()
    assert alive() is None
    assert cuda.MemoryAsync(100, 0).stream == 0  # a stream given as an int handle
    assert cuda.MemoryAsync(0, cuda.Stream.null).ptr == 0
    with pytest.raises(TypeError):
        cuda.MemoryAsync(100, None)
    with pytest.raises(ValueError):
        cuda.MemoryAsync(-1, 0)


def test_unowned_memory_keeps_its_owner():
    class Owner:
        pass

    owner = Owner()
    backing = cuda.Memory(256)
    owner.memory = backing
    alive = weakref.ref(owner)
    unowned = cuda.UnownedMemory(backing.ptr, 256, owner)
    assert unowned.ptr == backing.ptr and unowned.size == 256 and unowned.owner is owner
    assert unowned.device_id == cuda.get_device_id()
    assert cuda.UnownedMemory(backing.ptr, 256, None, device_id=0).device_id == 0
    del owner, backing
    gc.collect()
    assert alive() is not None
    upload(cuda.MemoryPointer(unowned, 0), numpy.ones(256, numpy.uint8))
    del unowned
    gc.collect()
    assert alive() is None
    with pytest.raises(ValueError):
        cuda.UnownedMemory(0, -1, None)
    with pytest.raises(ValueError):
        cuda.UnownedMemory(0, 0, None, device_id=cuda.get_device_count())


# ---- MemoryPointer ---------------------------------------------------------------------------------------


def test_memory_pointer_offsets_and_arithmetic():
    memory = cuda.Memory(1024)
    pointer = cuda.MemoryPointer(memory, 100)
    assert pointer.ptr == memory.ptr + 100 == int(pointer) and pointer.offset == 100
    assert pointer.mem is memory and pointer.device_id == memory.device_id and pointer.device == memory.device
    assert "MemoryPointer" in repr(pointer)
    assert (pointer + 24).ptr == memory.ptr + 124 and (24 + pointer).offset == 124 and (pointer - 100).ptr == memory.ptr
    assert (pointer + 924).offset == 1024  # the end of the memory is a valid place
    alias = pointer
    pointer += 8  # in place, as CuPy: every reference sees it
    assert alias is pointer and alias.offset == 108
    pointer -= 108
    assert alias.ptr == memory.ptr
    with pytest.raises(ValueError, match="outside the memory of 1024 bytes"):
        pointer + 1025
    with pytest.raises(ValueError):
        pointer - 1
    with pytest.raises(ValueError):
        pointer += 2000
    assert pointer.offset == 0  # unchanged by the failed move
    alive = weakref.ref(pointer)
    del pointer, alias
    gc.collect()
    assert alive() is None  # in-place arithmetic leaves no reference behind
    pointer = cuda.MemoryPointer(memory, 0)
    with pytest.raises(ValueError):
        cuda.MemoryPointer(memory, -1)
    with pytest.raises(ValueError):
        cuda.MemoryPointer(memory, 1025)
    with pytest.raises(ValueError):
        cuda.MemoryPointer(cuda.Memory(0), 1)
    with pytest.raises(TypeError):
        cuda.MemoryPointer(object(), 0)
    with pytest.raises(TypeError):
        pointer + "a"


def test_memory_pointer_keeps_its_memory_alive():
    pointer = cuda.MemoryPointer(cuda.Memory(512), 0)
    gc.collect()
    upload(pointer, numpy.full(512, 4, numpy.uint8))
    assert (download(pointer, 512) == 4).all()
    moved = pointer + 256
    del pointer
    gc.collect()
    assert (download(moved, 256) == 4).all()


def test_memory_pointer_over_foreign_memory():
    backing = cuda.Memory(512)

    class Foreign:
        ptr = backing.ptr
        size = 512
        device_id = backing.device_id

    foreign = Foreign()
    pointer = cuda.MemoryPointer(foreign, 256)
    assert pointer.mem is foreign and pointer.ptr == backing.ptr + 256 and pointer.device_id == backing.device_id
    with pytest.raises(ValueError):
        cuda.MemoryPointer(foreign, 513)


def test_copies_between_host_and_device():
    pointer = cuda.alloc(1024)
    data = numpy.arange(256, dtype=numpy.float32)
    pointer.copy_from_host(data, data.nbytes)
    out = numpy.zeros_like(data)
    pointer.copy_to_host(out, out.nbytes)
    assert numpy.array_equal(out, data)
    # an int address, a ctypes.c_void_p, a ctypes pointer
    reversed_data = data[::-1].copy()
    pointer.copy_from_host(reversed_data.ctypes.data, reversed_data.nbytes)
    pointer.copy_to_host(ctypes.c_void_p(out.ctypes.data), out.nbytes)
    assert numpy.array_equal(out, reversed_data)
    pointer.copy_from(ctypes.cast(data.ctypes.data, ctypes.POINTER(ctypes.c_float)), data.nbytes)
    pointer.copy_to_host(out, out.nbytes)
    assert numpy.array_equal(out, data)
    # at an offset, partial sizes; bytes objects are read-only sources
    (pointer + 512).copy_from_host(bytes(range(16)), 16)
    assert list(download(pointer + 512, 16)) == list(range(16))


def test_copy_size_errors():
    pointer = cuda.alloc(256)
    small = numpy.zeros(16, numpy.uint8)
    with pytest.raises(ValueError, match="exceeds the host buffer's 16 bytes"):
        pointer.copy_to_host(small, 17)
    with pytest.raises(ValueError, match="exceeds the host buffer"):
        pointer.copy_from_host(small, 64)
    with pytest.raises(ValueError, match="exceeds the 128 bytes from the pointer"):
        (pointer + 128).copy_from_host(numpy.zeros(256, numpy.uint8), 129)
    with pytest.raises(ValueError, match="size must be >= 0"):
        pointer.copy_to_host(small, -1)
    with pytest.raises(ValueError, match="contiguous"):
        pointer.copy_to_host(numpy.zeros((8, 8), numpy.uint8)[:, ::2], 16)
    with pytest.raises(ValueError, match="writable"):
        pointer.copy_to_host(b"0123456789abcdef", 16)
    with pytest.raises(ValueError, match="null"):
        pointer.copy_from_host(0, 16)
    with pytest.raises(ValueError, match="null"):
        pointer.copy_to_host(ctypes.c_void_p(), 16)
    with pytest.raises(TypeError, match="host memory must be"):
        pointer.copy_from_host("text", 4)
    with pytest.raises(ValueError, match="exceeds"):
        pointer.copy_from_device(cuda.MemoryPointer(cuda.Memory(64), 0), 128)
    with pytest.raises(ValueError, match="exceeds"):
        pointer.memset(0, 257)
    pointer.copy_from_host(0, 0)  # nothing to copy: no check of the address
    pointer.copy_to_host(small, 0)


def test_device_copies_fills_and_copy_from():
    a, b = cuda.alloc(512), cuda.alloc(512)
    upload(a, numpy.arange(512, dtype=numpy.uint16).astype(numpy.uint8))
    b.copy_from_device(a, 512)
    assert numpy.array_equal(download(b, 512), download(a, 512))
    (b + 256).copy_from(a, 128)  # a MemoryPointer: a device copy
    assert numpy.array_equal(download(b + 256, 128), download(a, 128))
    b.memset(0xAB, 100)
    result = download(b, 512)
    assert (result[:100] == 0xAB).all() and result[100] == 100
    b.memset(-1, 4)  # the low byte, as cudaMemset
    assert (download(b, 4) == 0xFF).all()


def test_async_copies_use_the_given_or_current_stream():
    stream = cuda.Stream(non_blocking=True)
    pointer = cuda.alloc(1024)
    out = numpy.zeros(1024, numpy.uint8)
    opened = gate(stream)
    pointer.memset_async(7, 1024, stream)  # waits behind the gate
    timer = open_later(opened)
    pointer.copy_to_host_async(out, 1024, stream=stream)  # pageable: returns with the data, after the gate
    assert (out == 7).all()
    timer.join()
    with stream:  # the current stream
        pointer.copy_from_async(numpy.full(1024, 2, numpy.uint8), 1024)
        pointer.memset_async(5, 10)
        other = cuda.alloc(1024)
        other.copy_from_device_async(pointer, 1024)
        other.copy_from_async(pointer, 20)
        other.copy_from_host_async(numpy.full(4, 6, numpy.uint8), 4)
    stream.synchronize()
    result = download(other, 1024)
    assert (result[:4] == 6).all() and (result[4:10] == 5).all() and (result[10:] == 2).all()


# ---- MemoryPool ------------------------------------------------------------------------------------------


def test_memory_pool_accounting():
    pool = cuda.MemoryPool()
    assert pool.used_bytes() == pool.total_bytes() == pool.free_bytes() == pool.n_free_blocks() == 0
    pointer = pool.malloc(1000)
    assert isinstance(pointer.mem, cuda.PooledMemory) and pointer.mem.size == 1024 and pointer.ptr % 256 == 0
    assert pool.used_bytes() == 1024 and pool.total_bytes() >= 1024
    assert pool.free_bytes() == pool.total_bytes() - pool.used_bytes()
    first = pointer.ptr
    del pointer
    assert pool.used_bytes() == 0 and pool.free_bytes() == pool.total_bytes() and pool.n_free_blocks() >= 1
    again = pool.malloc(size=1000)
    assert again.ptr == first  # reused
    second = pool.malloc(3000)
    assert pool.used_bytes() == 1024 + 3072
    second.mem.free()  # early, as CuPy's PooledMemory.free()
    assert second.mem.ptr == 0 and pool.used_bytes() == 1024
    second.mem.free()  # a second free does nothing
    del again, second
    pool.free_all_blocks()
    assert pool.total_bytes() == 0 and pool.n_free_blocks() == 0
    empty = pool.malloc(0)
    assert empty.ptr == 0 and empty.mem.size == 0 and pool.used_bytes() == 0
    with pytest.raises(ValueError, match="size must be >= 0"):
        pool.malloc(-1)
    with pytest.raises(TypeError):
        pool.malloc("1")
    with pytest.raises(TypeError):
        pool.malloc()


def test_memory_pool_contents_and_free_all_free():
    pool = cuda.MemoryPool()
    pointers = [pool.malloc(4096) for _ in range(4)]
    for i, pointer in enumerate(pointers):
        pointer.memset(i + 1, 4096)
    for i, pointer in enumerate(pointers):
        assert (download(pointer, 4096) == i + 1).all()
    del pointers, pointer
    with pytest.warns(DeprecationWarning):
        pool.free_all_free()
    assert pool.total_bytes() == 0
    pool.free_all_blocks(stream=cuda.Stream.null)
    with pytest.raises(TypeError):
        pool.free_all_blocks(stream="not a stream")


def test_memory_pool_limit():
    pool = cuda.MemoryPool()
    assert pool.get_limit() == 0
    pool.set_limit(size=4096)
    assert pool.get_limit() == 4096
    kept = pool.malloc(3000)
    with pytest.raises(gpumem.OutOfMemoryError, match=r"allocating 2,048 bytes .*limit set to: 4,096 bytes"):
        pool.malloc(2048)
    del kept
    pointer = pool.malloc(4096)  # fits once the first block is free
    del pointer
    pool.set_limit()
    assert pool.get_limit() == 0
    pool.malloc(8192)
    total = cuda.Device().mem_info[1]
    pool.set_limit(fraction=0.5)
    assert pool.get_limit() == int(0.5 * total)
    with pytest.raises(ValueError, match="cannot be specified at one time"):
        pool.set_limit(size=1, fraction=0.1)
    with pytest.raises(ValueError, match="fraction out of range"):
        pool.set_limit(fraction=1.5)
    with pytest.raises(ValueError, match="size out of range"):
        pool.set_limit(size=-1)


def test_memory_pool_out_of_memory_without_a_limit():
    pool = cuda.MemoryPool()
    with pytest.raises(gpumem.OutOfMemoryError):
        pool.malloc(1 << 60)
    assert pool.used_bytes() == 0


def test_memory_pool_over_a_device_memory_resource():
    upstream = mr.StatisticsResourceAdaptor(mr.CudaMemoryResource())
    pool = cuda.MemoryPool(upstream)
    pointer = pool.malloc(1 << 16)
    assert upstream.allocation_counts.current_bytes >= 1 << 16
    del upstream
    gc.collect()  # the pool keeps its upstream alive
    del pointer
    pool.free_all_blocks()
    assert pool.total_bytes() == 0


def test_memory_pool_over_a_python_allocator():
    calls = []

    def allocator(size):
        calls.append(size)
        return cuda.MemoryPointer(cuda.Memory(size), 0)

    pool = cuda.MemoryPool(allocator)
    pointer = pool.malloc(1000)
    assert calls and calls[0] >= 1024
    upload(pointer, numpy.full(1000, 8, numpy.uint8))
    assert (download(pointer, 1000) == 8).all()
    count = len(calls)
    del pointer
    pool.malloc(1000)  # from the pool: no new call
    assert len(calls) == count


def test_memory_pool_python_allocator_errors():
    def exhausted(size):
        raise MemoryError("no more")

    with pytest.raises(gpumem.OutOfMemoryError, match="no more"):
        cuda.MemoryPool(exhausted).malloc(256)

    def broken(size):
        raise RuntimeError("broken allocator")

    with pytest.raises(RuntimeError, match="broken allocator"):
        cuda.MemoryPool(broken).malloc(256)
    with pytest.raises(ValueError, match="must return a gpumem.cuda.MemoryPointer"):
        cuda.MemoryPool(lambda size: 42).malloc(256)
    with pytest.raises(ValueError, match="returned 256 bytes"):
        cuda.MemoryPool(lambda size: cuda.MemoryPointer(cuda.Memory(256), 0)).malloc(1024)
    with pytest.raises(TypeError, match="allocator"):
        cuda.MemoryPool(42)


def test_memory_pool_lifetimes():
    pool = cuda.MemoryPool()
    alive = weakref.ref(pool)
    pointer = pool.malloc(2048)
    pointer.memset(3, 2048)
    del pool
    gc.collect()
    assert alive() is None  # the Python object is gone; the device pool lives on in the block
    assert (download(pointer, 2048) == 3).all()
    del pointer  # returns the block to the orphaned pool, which then goes
    gc.collect()


def test_memory_pool_frees_on_the_malloc_stream_and_keeps_it_alive():
    pool = cuda.MemoryPool()
    stream = cuda.Stream()
    with stream:
        pointer = pool.malloc(4096)
    alive = weakref.ref(stream)
    del stream
    gc.collect()
    assert alive() is not None
    del pointer
    gc.collect()
    assert alive() is None
    assert pool.used_bytes() == 0


def test_memory_pool_reuses_a_block_on_its_malloc_stream():
    pool = cuda.MemoryPool()
    first, second = cuda.Stream(non_blocking=True), cuda.Stream(non_blocking=True)
    with first:
        pointer = pool.malloc(4096)
    address = pointer.ptr
    del pointer  # freed on `first`: reusable at once there, not on `second` without an event wait
    with second:
        other = pool.malloc(4096)
    with first:
        again = pool.malloc(4096)
    assert other.ptr != address and again.ptr == address
    del other, again
    first.synchronize()
    second.synchronize()


def test_memory_pool_per_thread_stream_block_freed_on_another_thread():
    pool = cuda.MemoryPool()
    with cuda.Stream.ptds:
        pointer = pool.malloc(4096)
    pointer.memset_async(1, 4096, cuda.Stream.ptds)
    done = []

    def drop(box):
        box.pop()  # the last reference goes on this thread: freed on the legacy default stream
        done.append(True)

    box = [pointer]
    del pointer
    thread = threading.Thread(target=drop, args=(box,))
    thread.start()
    thread.join()
    assert done == [True] and pool.used_bytes() == 0
    cuda.Stream.ptds.synchronize()
    pool.free_all_blocks()
    assert pool.total_bytes() == 0


def test_memory_pool_from_threads():
    pool = cuda.MemoryPool()
    errors = []

    def work(value):
        try:
            for _ in range(50):
                pointer = pool.malloc(512 * value)
                pointer.memset(value, 512 * value)
                if not (download(pointer, 512 * value) == value).all():
                    errors.append(value)
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(v,)) for v in (1, 2, 3, 4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert pool.used_bytes() == 0


def test_default_memory_pool():
    pool = cuda.get_default_memory_pool()
    assert pool is cuda.get_default_memory_pool()
    used = pool.used_bytes()
    pointer = cuda.alloc(4096)
    assert isinstance(pointer.mem, cuda.PooledMemory)
    assert pool.used_bytes() == used + 4096


def test_per_device_pools(run_on_two_host_devices):
    run_on_two_host_devices("""
        import gpumem.cuda as cuda
        pool = cuda.MemoryPool()
        a = pool.malloc(1024)
        with cuda.Device(1):
            b = pool.malloc(4096)
            assert b.device_id == 1 and b.mem.device_id == 1
            assert pool.used_bytes() == 4096
            pool.set_limit(size=8192)
            assert pool.get_limit() == 8192
        assert a.device_id == 0 and pool.used_bytes() == 1024 and pool.get_limit() == 0
        b.copy_from_device(a, 1024)  # across devices
        print("ok")
    """, timeout=120)


# ---- MemoryAsyncPool -------------------------------------------------------------------------------------


def test_memory_async_pool():
    pool = cuda.MemoryAsyncPool()
    stream = cuda.Stream()
    with stream:
        pointer = pool.malloc(1000)
    assert isinstance(pointer.mem, cuda.MemoryAsync) and pointer.mem.stream == stream.ptr
    assert pointer.mem.size == 1024
    used = pool.used_bytes()
    assert used >= 1024 and pool.total_bytes() >= used and pool.free_bytes() == pool.total_bytes() - used
    pointer.memset_async(1, 1000, stream)
    stream.synchronize()
    assert (download(pointer, 1000) == 1).all()
    del pointer
    pool.free_all_blocks(stream)
    assert pool.used_bytes() == used - 1024
    assert pool.malloc(0).ptr == 0
    with pytest.raises(ValueError):
        pool.malloc(-3)


def test_memory_async_pool_limit():
    pool = cuda.MemoryAsyncPool("current")
    base = pool.used_bytes()
    pool.set_limit(size=base + 4096)
    assert pool.get_limit() == base + 4096
    kept = pool.malloc(4096)
    with pytest.raises(gpumem.OutOfMemoryError, match=r"allocating 256 bytes .*limit set to"):
        pool.malloc(1)
    del kept
    pool.free_all_blocks()
    pool.malloc(4096)
    pool.set_limit()
    assert pool.get_limit() == 2**64 - 1  # no limit, as CuPy reports it
    with pytest.raises(ValueError):
        pool.set_limit(size=1, fraction=0.5)
    with pytest.raises(ValueError):
        pool.set_limit(fraction=-0.1)
    pool.set_limit(fraction=0.25)
    assert pool.get_limit() == int(0.25 * cuda.Device().mem_info[1])


def test_memory_async_pool_handles():
    default = cuda.MemoryAsyncPool("default")
    pointer = default.malloc(2048)
    assert default.used_bytes() >= 2048
    del pointer
    per_device = cuda.MemoryAsyncPool(["current"] * cuda.get_device_count())
    assert per_device.malloc(256).mem.size == 256
    with pytest.raises(ValueError, match="pool handle"):
        cuda.MemoryAsyncPool("create")
    with pytest.raises(ValueError, match="entries"):
        cuda.MemoryAsyncPool(["current"] * (cuda.get_device_count() + 1))


# ---- allocators ------------------------------------------------------------------------------------------


def test_alloc_uses_the_current_allocator(restore_allocator):
    assert cuda.get_allocator() == cuda.get_default_memory_pool().malloc
    cuda.set_allocator(None)  # the raw allocator
    raw = cuda.alloc(512)
    assert type(raw.mem) is cuda.Memory
    cuda.set_allocator(cuda.malloc_managed)
    assert type(cuda.alloc(512).mem) is cuda.ManagedMemory
    pool = cuda.MemoryPool()
    cuda.set_allocator(pool.malloc)
    kept = cuda.alloc(512)
    assert pool.used_bytes() == 512 and type(kept.mem) is cuda.PooledMemory
    with pytest.raises(TypeError, match="callable"):
        cuda.set_allocator(42)


def test_using_allocator_nests_and_restores(restore_allocator):
    outer = cuda.get_allocator()
    with cuda.using_allocator(cuda.malloc_managed):
        assert cuda.get_allocator() is cuda.malloc_managed
        with cuda.using_allocator():  # None: the raw allocator
            assert type(cuda.alloc(256).mem) is cuda.Memory
        assert type(cuda.alloc(256).mem) is cuda.ManagedMemory
        with pytest.raises(ValueError, match="using_allocator"):
            cuda.set_allocator(None)
    assert cuda.get_allocator() == outer
    with pytest.raises(RuntimeError):
        with cuda.using_allocator(cuda.malloc_managed):
            raise RuntimeError("inside")
    assert cuda.get_allocator() == outer
    with pytest.raises(TypeError):
        with cuda.using_allocator("not callable"):
            pass


def test_using_allocator_is_thread_local():
    inside, release = threading.Event(), threading.Event()
    seen = {}

    def worker():
        with cuda.using_allocator(cuda.malloc_managed):
            seen["worker"] = type(cuda.alloc(256).mem)
            inside.set()
            release.wait(WAIT)
            seen["worker_after"] = type(cuda.alloc(256).mem)

    thread = threading.Thread(target=worker)
    thread.start()
    assert inside.wait(WAIT)
    seen["main"] = type(cuda.alloc(256).mem)  # the process's allocator, while the worker is in its block
    release.set()
    thread.join()
    assert seen == {"worker": cuda.ManagedMemory, "worker_after": cuda.ManagedMemory, "main": cuda.PooledMemory}


def test_malloc_managed_and_malloc_async():
    managed = cuda.malloc_managed(1000)
    assert type(managed.mem) is cuda.ManagedMemory and managed.mem.size == 1000
    stream = cuda.Stream()
    with stream:
        pointer = cuda.malloc_async(1000)
    assert type(pointer.mem) is cuda.MemoryAsync and pointer.mem.stream == stream.ptr
    with pytest.raises(ValueError):
        cuda.malloc_managed(-1)


def test_python_function_allocator():
    log = []

    def malloc_func(size, device_id):
        log.append(("malloc", size, device_id))
        return gpumem.alloc(size)

    def free_func(ptr, device_id):
        log.append(("free", ptr, device_id))
        gpumem.free(ptr)

    allocator = cuda.PythonFunctionAllocator(malloc_func, free_func)
    pointer = allocator(1000)
    address = pointer.ptr
    assert log == [("malloc", 1000, cuda.get_device_id())] and pointer.mem.size == 1000
    upload(pointer, numpy.full(1000, 5, numpy.uint8))
    assert (download(pointer, 1000) == 5).all()
    del pointer
    gc.collect()
    assert log[-1] == ("free", address, cuda.get_device_id())
    empty = allocator.malloc(0)
    assert empty.ptr == 0 and len(log) == 2
    with cuda.using_allocator(allocator):
        assert cuda.alloc(256).mem.size == 256
    with pytest.raises(gpumem.OutOfMemoryError):
        cuda.PythonFunctionAllocator(lambda size, device: 0, free_func)(256)
    with pytest.raises(TypeError):
        cuda.PythonFunctionAllocator(None, free_func)


def test_python_function_allocator_free_errors_are_unraisable(monkeypatch):
    reported = []
    monkeypatch.setattr(sys, "unraisablehook", lambda info: reported.append(info.exc_value))
    allocator = cuda.PythonFunctionAllocator(lambda size, device: gpumem.alloc(size), lambda ptr, device: 1 / 0)
    pointer = allocator(256)
    address = pointer.ptr
    del pointer
    gc.collect()
    assert len(reported) == 1 and isinstance(reported[0], ZeroDivisionError)
    gpumem.free(address)


MALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)


def test_c_function_allocator():
    state = ctypes.c_int(0)  # param: counts the live allocations
    log = []

    @MALLOC
    def c_malloc(param, size, device_id):
        ctypes.cast(param, ctypes.POINTER(ctypes.c_int))[0] += 1
        log.append(("malloc", size, device_id))
        return gpumem.alloc(size)

    @FREE
    def c_free(param, ptr, device_id):
        ctypes.cast(param, ctypes.POINTER(ctypes.c_int))[0] -= 1
        log.append(("free", ptr, device_id))
        gpumem.free(ptr)

    owner = (state, c_malloc, c_free)
    allocator = cuda.CFunctionAllocator(ctypes.addressof(state), ctypes.cast(c_malloc, ctypes.c_void_p).value,
                                        ctypes.cast(c_free, ctypes.c_void_p).value, owner)
    pointer = allocator.malloc(4096)
    assert state.value == 1 and log == [("malloc", 4096, cuda.get_device_id())]
    pointer.memset(2, 4096)
    assert (download(pointer, 4096) == 2).all()
    address = pointer.ptr
    del pointer
    gc.collect()
    assert state.value == 0 and log[-1] == ("free", address, cuda.get_device_id())
    assert allocator(0).ptr == 0 and len(log) == 2
    with pytest.raises(ValueError, match="must not be 0"):
        cuda.CFunctionAllocator(0, 0, ctypes.cast(c_free, ctypes.c_void_p).value, None)

    @MALLOC
    def null_malloc(param, size, device_id):
        return None

    with pytest.raises(gpumem.OutOfMemoryError, match="NULL"):
        cuda.CFunctionAllocator(0, ctypes.cast(null_malloc, ctypes.c_void_p).value,
                                ctypes.cast(c_free, ctypes.c_void_p).value, null_malloc)(256)


# ---- asnumpy ---------------------------------------------------------------------------------------------


class DeviceArray:
    """A minimal __cuda_array_interface__ (v3) exporter over a MemoryPointer."""

    def __init__(self, pointer, shape, dtype, strides=None, stream=None):
        self.pointer = pointer
        self.__cuda_array_interface__ = {
            "shape": tuple(shape), "typestr": numpy.dtype(dtype).str, "data": (pointer.ptr, False),
            "strides": strides, "version": 3, "stream": stream,
        }


def device_copy(array):
    pointer = cuda.alloc(max(array.nbytes, 1))
    if array.nbytes:
        pointer.copy_from_host(numpy.ascontiguousarray(array), array.nbytes)
    return pointer


def test_asnumpy_contiguous_layouts():
    host = numpy.arange(24, dtype=numpy.float64).reshape(4, 6)
    pointer = device_copy(host)
    c_order = cuda.asnumpy(DeviceArray(pointer, (4, 6), numpy.float64))
    assert c_order.flags.c_contiguous and numpy.array_equal(c_order, host)
    explicit = cuda.asnumpy(DeviceArray(pointer, (4, 6), numpy.float64, strides=(48, 8)))
    assert numpy.array_equal(explicit, host)
    fortran = cuda.asnumpy(DeviceArray(pointer, (6, 4), numpy.float64, strides=(8, 48)))
    assert fortran.flags.f_contiguous and numpy.array_equal(fortran, host.T)
    scalar = cuda.asnumpy(DeviceArray(pointer, (), numpy.float64))
    assert scalar.shape == () and scalar == 0.0
    empty = cuda.asnumpy(DeviceArray(pointer, (0, 3), numpy.int32))
    assert empty.shape == (0, 3) and empty.dtype == numpy.int32


def test_asnumpy_arbitrary_strides():
    host = numpy.arange(60, dtype=numpy.int32).reshape(5, 12)
    pointer = device_copy(host)
    every_other = cuda.asnumpy(DeviceArray(pointer, (3, 4), numpy.int32, strides=(96, 12)))
    assert numpy.array_equal(every_other, host[::2, ::3])
    backwards = cuda.asnumpy(DeviceArray(pointer + 44, (5, 12), numpy.int32, strides=(48, -4)))
    assert numpy.array_equal(backwards, host[:, ::-1])
    out = numpy.empty((3, 4), numpy.int32)
    assert cuda.asnumpy(DeviceArray(pointer, (3, 4), numpy.int32, strides=(96, 12)), out=out) is out
    assert numpy.array_equal(out, host[::2, ::3])


def test_asnumpy_out():
    host = numpy.arange(12, dtype=numpy.float32).reshape(3, 4)
    pointer = device_copy(host)
    array = DeviceArray(pointer, (3, 4), numpy.float32)
    out = numpy.zeros((3, 4), numpy.float32)
    assert cuda.asnumpy(array, out=out) is out and numpy.array_equal(out, host)
    fortran_out = numpy.zeros((3, 4), numpy.float32, order="F")
    assert cuda.asnumpy(array, out=fortran_out) is fortran_out and numpy.array_equal(fortran_out, host)
    with pytest.raises(ValueError, match="shape"):
        cuda.asnumpy(array, out=numpy.zeros((4, 3), numpy.float32))
    with pytest.raises(ValueError, match="dtype"):
        cuda.asnumpy(array, out=numpy.zeros((3, 4), numpy.float64))
    with pytest.raises(TypeError):
        cuda.asnumpy(array, out=[0] * 12)
    read_only = numpy.zeros((3, 4), numpy.float32)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        cuda.asnumpy(array, out=read_only)


def test_asnumpy_of_host_data_is_numpy_asarray():
    host = numpy.arange(6)
    assert cuda.asnumpy(host) is host
    fortran = numpy.asfortranarray(numpy.arange(6).reshape(2, 3))
    copied = cuda.asnumpy(fortran)
    assert copied.flags.c_contiguous and numpy.array_equal(copied, fortran)
    assert numpy.array_equal(cuda.asnumpy([1, 2, 3]), [1, 2, 3])
    out = numpy.zeros(6, host.dtype)
    assert cuda.asnumpy(host, out=out) is out and numpy.array_equal(out, host)
    with pytest.raises(ValueError):
        cuda.asnumpy(host, out=numpy.zeros(5, host.dtype))


def test_asnumpy_waits_for_the_producer_stream():
    producer = cuda.Stream(non_blocking=True)
    consumer = cuda.Stream(non_blocking=True)
    pointer = cuda.alloc(4096)
    pointer.memset(0, 4096)
    opened = gate(producer)
    pointer.memset_async(6, 4096, producer)  # the data are ready only after the gate opens
    timer = open_later(opened)
    result = cuda.asnumpy(DeviceArray(pointer, (4096,), numpy.uint8, stream=producer.ptr), stream=consumer)
    assert (result == 6).all()
    timer.join()
    legacy = cuda.asnumpy(DeviceArray(pointer, (4096,), numpy.uint8, stream=1))  # the legacy default stream
    assert (legacy == 6).all()
    with pytest.raises(ValueError, match="stream 0"):
        cuda.asnumpy(DeviceArray(pointer, (16,), numpy.uint8, stream=0))
    with pytest.raises(TypeError):
        cuda.asnumpy(DeviceArray(pointer, (16,), numpy.uint8), stream="default")


def test_asnumpy_of_a_device_buffer():
    buffer = gpumem.DeviceBuffer.to_device(bytes(range(64)))
    result = cuda.asnumpy(buffer)
    assert result.dtype == numpy.uint8 and list(result) == list(range(64))


def test_malloc_and_its_release_run_no_python_code():
    """MemoryPool.malloc and dropping the pointer stay in C++ (the speed is benchmarks/python's figure):
    no Python function runs on that path, so no slow path in Python can creep in."""
    pool = cuda.MemoryPool()
    malloc = pool.malloc
    malloc(4096)  # the first call may import or build what the pool keeps
    python_calls = []

    def profile(frame, event, arg):
        if event == "call":
            python_calls.append(frame.f_code.co_qualname)

    sys.setprofile(profile)
    try:
        for _ in range(100):
            malloc(4096)  # the MemoryPointer is dropped at once: its memory returns to the pool
    finally:
        sys.setprofile(None)
    assert python_calls == []
