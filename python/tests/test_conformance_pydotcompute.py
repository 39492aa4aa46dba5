"""Programs written for PyDotCompute's unified buffer, memory pool and accelerator, run on gpumem.

Each test is written as a PyDotCompute user writes code (its documentation's examples, its transition table,
the calls its users make), with only the import changed, and checks the behaviour PyDotCompute documents.
Where gpumem deliberately differs, the test checks gpumem's behaviour and names the row of the table in
docs/python.md ("Programs written for the peers", PyDotCompute) that gives the reason.

Device copies are read and written through gpumem's own copy functions (gpumem.cuda.MemoryPointer), so
every test runs on the host backend and on the cuda backend alike; the few that need a real GPU skip on the
host backend.
"""

import asyncio

import numpy as np
import pytest

import gpumem
from gpumem import (
    Accelerator,
    BufferNotAllocatedError,
    BufferState,
    UnifiedBuffer,
    cuda_available,
    get_accelerator,
    get_memory_pool,
)
from gpumem.unified import DeviceType

needs_gpu = pytest.mark.skipif(gpumem.cuda.get_backend() != "cuda", reason="needs a GPU (the cuda backend)")


@pytest.fixture(params=[False, True], ids=["pageable", "pinned"])
def pinned(request):
    return request.param


def _pointer(view, nbytes):
    address = view.__cuda_array_interface__["data"][0]
    return gpumem.cuda.MemoryPointer(gpumem.cuda.UnownedMemory(address, nbytes, view), 0)


def read_device(buf):
    """The device copy's contents, read through gpumem's copy functions (never through the buffer's state)."""
    out = np.empty(buf.shape, dtype=buf.dtype)
    _pointer(buf.device, buf.nbytes).copy_to_host(out.ctypes.data, buf.nbytes)
    return out


def kernel_writes(buf, values):
    """What a kernel does: writes the device copy behind the buffer's back (then the user marks it dirty)."""
    values = np.ascontiguousarray(np.broadcast_to(np.asarray(values, dtype=buf.dtype), buf.shape))
    _pointer(buf.device, buf.nbytes).copy_from_host(values.ctypes.data, buf.nbytes)


# ---- the specification's examples ---------------------------------------------------------------------------

def test_state_tracking_example(pinned):
    buf = UnifiedBuffer((100,), dtype=np.float32, pinned=pinned)
    assert buf.state == BufferState.UNINITIALIZED
    buf.host[:] = 1.0
    assert buf.state == BufferState.HOST_DIRTY
    buf.sync_to_device()
    assert buf.state == BufferState.SYNCHRONIZED
    np.testing.assert_array_equal(read_device(buf), np.ones(100, dtype=np.float32))


def test_lazy_synchronization_example(pinned):
    data = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
    buf = UnifiedBuffer((1000,), dtype=np.float32, pinned=pinned)
    buf.host[:] = data
    assert buf.state == BufferState.HOST_DIRTY  # no sync yet
    device_data = buf.device  # access device: triggers the sync
    assert buf.state == BufferState.SYNCHRONIZED
    assert device_data.__cuda_array_interface__["shape"] == (1000,)
    np.testing.assert_array_equal(read_device(buf), data)


def test_explicit_synchronization_example(pinned):
    data = np.arange(1000, dtype=np.float32)
    buf = UnifiedBuffer((1000,), dtype=np.float32, pinned=pinned)
    buf.host[:] = data
    buf.sync_to_device()
    kernel_writes(buf, data * 2)  # "my_kernel(buf.device)"
    buf.mark_device_dirty()
    assert buf.state == BufferState.DEVICE_DIRTY
    buf.sync_to_host()
    assert buf.state == BufferState.SYNCHRONIZED
    np.testing.assert_array_equal(buf.host[:], data * 2)


def test_read_modify_write_pattern(pinned):
    buf = UnifiedBuffer((1000,), dtype=np.float32, pinned=pinned)
    buf.host[:] = np.full(1000, 3.0, dtype=np.float32)
    assert buf.state == BufferState.HOST_DIRTY
    kernel_writes(buf, 4.0)  # gpu_kernel(buf.device): syncs first
    assert buf.state == BufferState.SYNCHRONIZED
    buf.mark_device_dirty()
    assert buf.state == BufferState.DEVICE_DIRTY
    result = buf.to_numpy()  # syncs back
    np.testing.assert_array_equal(result, np.full(1000, 4.0, dtype=np.float32))
    assert buf.state == BufferState.SYNCHRONIZED


def test_docstring_example_allocate_write_mark_then_device(pinned):
    buffer = UnifiedBuffer((1000,), dtype=np.float32, pinned=pinned)
    assert buffer.allocate() is buffer
    data = np.random.default_rng(2).standard_normal(1000)
    buffer.host[:] = data
    buffer.mark_host_dirty()
    assert buffer.state == BufferState.HOST_DIRTY
    _ = buffer.device  # triggers the sync
    assert buffer.state == BufferState.SYNCHRONIZED
    np.testing.assert_array_equal(read_device(buffer), data.astype(np.float32))


# ---- the transition table --------------------------------------------------------------------------------

def test_table_uninitialized_host_access_is_host_only_when_it_reads():
    # The table's ".host access" of a new buffer gives HOST_ONLY; gpumem's `.host` is a write access (the
    # examples write through it), so a read access is host_view (see the table's `.host` row).
    buf = UnifiedBuffer(8, np.int32)
    _ = buf.host_view
    assert buf.state == BufferState.HOST_ONLY


def test_table_host_only_then_device_access_is_synchronized(pinned):
    buf = UnifiedBuffer(8, np.int32, pinned=pinned).allocate(device=False)
    assert buf.state == BufferState.HOST_ONLY
    buf.host[:] = np.arange(8)  # HOST_DIRTY: a host write
    buf.mark_host_dirty()
    _ = buf.device
    assert buf.state == BufferState.SYNCHRONIZED
    np.testing.assert_array_equal(read_device(buf), np.arange(8, dtype=np.int32))


def test_mark_host_dirty_on_host_only_gives_host_dirty(pinned):
    buf = UnifiedBuffer(8, np.int32, pinned=pinned).allocate(host=True, device=False)
    assert buf.state == BufferState.HOST_ONLY
    buf.mark_host_dirty()
    assert buf.state == BufferState.HOST_DIRTY


def test_table_synchronized_host_or_device_modified(pinned):
    buf = UnifiedBuffer(8, np.int32, pinned=pinned)
    buf.host[:] = 5
    buf.sync_to_device()
    buf[0] = 6  # host modified
    assert buf.state == BufferState.HOST_DIRTY
    _ = buf.device
    assert buf.state == BufferState.SYNCHRONIZED
    kernel_writes(buf, 7)
    buf.mark_device_dirty()  # device modified
    assert buf.state == BufferState.DEVICE_DIRTY


def test_table_device_dirty_then_host_read_is_synchronized(pinned):
    buf = UnifiedBuffer(8, np.int32, pinned=pinned).allocate()
    kernel_writes(buf, 9)
    buf.mark_device_dirty()
    assert buf[3] == 9  # a host read access syncs
    assert buf.state == BufferState.SYNCHRONIZED


def test_mark_dirty_on_a_buffer_without_data_is_buffer_not_allocated():
    buf = UnifiedBuffer(8, np.float32)
    with pytest.raises(BufferNotAllocatedError):
        buf.mark_host_dirty()
    with pytest.raises(BufferNotAllocatedError):
        buf.mark_device_dirty()
    assert issubclass(BufferNotAllocatedError, ValueError)


def test_a_dirty_mark_that_would_lose_a_write_is_refused():
    # Differs (see the table's mark_*_dirty rows): PyDotCompute would drop the other side's write.
    buf = UnifiedBuffer(8, np.float32)
    buf.host[:] = 1.0  # HOST_DIRTY
    with pytest.raises(ValueError, match="HOST_DIRTY"):
        buf.mark_device_dirty()
    buf.copy_from(np.full(8, 2.0, np.float32))  # DEVICE_DIRTY
    with pytest.raises(ValueError, match="DEVICE_DIRTY"):
        buf.mark_host_dirty()
    np.testing.assert_array_equal(buf.to_numpy(), np.full(8, 2.0, np.float32))


# ---- allocate, free, is_allocated -------------------------------------------------------------------------

def test_allocate_and_is_allocated(pinned):
    buf = UnifiedBuffer((4, 4), dtype=np.float64, pinned=pinned)
    assert not buf.is_allocated
    assert buf.allocate() is buf
    assert buf.is_allocated
    assert buf.state == BufferState.SYNCHRONIZED  # both copies (gpumem always has a device: see the table)
    device_only = UnifiedBuffer(4, np.float32).allocate(host=False, device=True)
    assert device_only.state == BufferState.DEVICE_ONLY and device_only.is_allocated
    with pytest.raises(ValueError, match="neither"):
        UnifiedBuffer(4, np.float32).allocate(host=False, device=False)


def test_allocate_keeps_the_data_of_an_allocated_buffer():
    buf = UnifiedBuffer(6, np.int16)
    buf.host[:] = np.arange(6)
    buf.allocate()
    assert buf.state == BufferState.HOST_DIRTY
    np.testing.assert_array_equal(buf.to_numpy(), np.arange(6, dtype=np.int16))


def test_free_returns_to_uninitialized_and_the_next_write_allocates_again(pinned):
    buf = UnifiedBuffer(16, np.float32, pinned=pinned)
    buf.host[:] = 1.0
    buf.sync_to_device()
    buf.free()
    assert buf.state == BufferState.UNINITIALIZED and not buf.is_allocated
    with pytest.raises(BufferNotAllocatedError):
        buf.to_numpy()
    buf.host[:] = 2.0
    np.testing.assert_array_equal(read_device(buf), np.full(16, 2.0, np.float32))


def test_free_while_an_array_of_the_buffer_lives_is_refused():
    buf = UnifiedBuffer(16, np.float32)
    view = buf.host
    with pytest.raises(ValueError, match="drop them first"):
        buf.free()
    del view
    buf.free()
    assert buf.state == BufferState.UNINITIALIZED


# ---- copy_from, copy_to, fill, zeros, to_numpy -------------------------------------------------------------

def test_copy_from_then_device_sees_the_data(pinned):
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    buf = UnifiedBuffer((3, 4), np.float32, pinned=pinned)
    buf.copy_from(data)
    assert buf.is_allocated
    assert buf.state == BufferState.DEVICE_ONLY  # written on the device (see the table's copy_from row)
    np.testing.assert_array_equal(read_device(buf), data)
    np.testing.assert_array_equal(buf.to_numpy(), data)


def test_copy_from_converts_as_numpy_copyto():
    buf = UnifiedBuffer(5, np.float32)
    buf.copy_from(np.arange(5, dtype=np.int64))  # converted, not reinterpreted
    np.testing.assert_array_equal(buf.to_numpy(), np.arange(5, dtype=np.float32))
    buf.copy_from(7)  # broadcast
    np.testing.assert_array_equal(buf.to_numpy(), np.full(5, 7, np.float32))
    ints = UnifiedBuffer(5, np.int32)
    with pytest.raises(TypeError):
        ints.copy_from(np.ones(5, dtype=np.float64))  # not same_kind
    with pytest.raises(ValueError):
        buf.copy_from(np.ones(6, dtype=np.float64))  # does not broadcast


def test_copy_to_fills_the_destination(pinned):
    buf = UnifiedBuffer(10, np.float32, pinned=pinned)
    buf.host[:] = np.arange(10)
    out = np.empty(10, dtype=np.float32)
    buf.copy_to(out)
    np.testing.assert_array_equal(out, np.arange(10, dtype=np.float32))
    wide = np.empty(10, dtype=np.float64)
    buf.copy_to(wide)
    np.testing.assert_array_equal(wide, np.arange(10, dtype=np.float64))
    kernel_writes(buf, 3.0)
    buf.mark_device_dirty()
    buf.copy_to(out)
    np.testing.assert_array_equal(out, np.full(10, 3.0, np.float32))
    assert buf.state == BufferState.DEVICE_DIRTY  # read without a host copy (see the table's copy_to row)
    with pytest.raises(BufferNotAllocatedError):
        UnifiedBuffer(10, np.float32).copy_to(out)
    with pytest.raises(TypeError):
        buf.copy_to([0.0] * 10)


def test_fill_and_zeros(pinned):
    buf = UnifiedBuffer((3, 3), np.int32, pinned=pinned)
    assert buf.fill(7) is buf
    np.testing.assert_array_equal(buf.to_numpy(), np.full((3, 3), 7, np.int32))
    np.testing.assert_array_equal(read_device(buf), np.full((3, 3), 7, np.int32))
    floats = UnifiedBuffer(1000, np.float64).fill(0.25)  # not byte-uniform: no memset
    np.testing.assert_array_equal(floats.to_numpy(), np.full(1000, 0.25))
    assert floats.state == BufferState.SYNCHRONIZED
    assert buf.zeros() is buf
    np.testing.assert_array_equal(buf.to_numpy(), np.zeros((3, 3), np.int32))
    with pytest.raises(TypeError, match="scalar"):
        buf.fill([1, 2])


def test_fill_then_a_host_read_then_a_host_write(pinned):
    buf = UnifiedBuffer(4, np.uint16, pinned=pinned).fill(3)
    assert buf.state == BufferState.DEVICE_ONLY
    assert buf[1] == 3
    assert buf.state == BufferState.SYNCHRONIZED
    buf[1] = 4
    assert buf.state == BufferState.HOST_DIRTY
    np.testing.assert_array_equal(read_device(buf), [3, 4, 3, 3])


# ---- synchronize, ensure_on_host, ensure_on_device ----------------------------------------------------------

def test_synchronize_in_both_directions(pinned):
    buf = UnifiedBuffer(32, np.int64, pinned=pinned)
    buf.synchronize()
    assert buf.state == BufferState.UNINITIALIZED
    buf.host[:] = np.arange(32)
    buf.synchronize()
    assert buf.state == BufferState.SYNCHRONIZED
    np.testing.assert_array_equal(read_device(buf), np.arange(32))
    kernel_writes(buf, -1)
    buf.mark_device_dirty()
    buf.synchronize()
    assert buf.state == BufferState.SYNCHRONIZED
    np.testing.assert_array_equal(buf.host_view, np.full(32, -1))
    buf.synchronize()  # nothing to do
    assert buf.state == BufferState.SYNCHRONIZED


def test_ensure_on_device_and_on_host_are_awaitable(pinned):
    buf = UnifiedBuffer(64, np.float32, pinned=pinned)
    buf.host[:] = 1.5

    async def pipeline():
        await buf.ensure_on_device()
        assert buf.state == BufferState.SYNCHRONIZED
        kernel_writes(buf, 2.5)
        buf.mark_device_dirty()
        await buf.ensure_on_host()
        assert buf.state == BufferState.SYNCHRONIZED

    asyncio.run(pipeline())
    np.testing.assert_array_equal(buf.host_view, np.full(64, 2.5, np.float32))


def test_ensure_on_a_buffer_without_data_is_buffer_not_allocated():
    buf = UnifiedBuffer(4, np.float32)
    with pytest.raises(BufferNotAllocatedError):
        asyncio.run(buf.ensure_on_device())
    with pytest.raises(BufferNotAllocatedError):
        asyncio.run(buf.ensure_on_host())


# ---- indexing and the descriptive properties -----------------------------------------------------------------

def test_indexing_goes_through_the_host_copy(pinned):
    buf = UnifiedBuffer((10,), dtype=np.int32, pinned=pinned)
    with pytest.raises(BufferNotAllocatedError):
        _ = buf[0]
    buf[:] = np.arange(10)
    assert buf.state == BufferState.HOST_DIRTY
    assert buf[3] == 3
    np.testing.assert_array_equal(buf[2:5], [2, 3, 4])
    _ = buf.device
    buf[2:5] = [20, 30, 40]
    assert buf.state == BufferState.HOST_DIRTY
    np.testing.assert_array_equal(read_device(buf), [0, 1, 20, 30, 40, 5, 6, 7, 8, 9])
    assert len(buf) == 10


def test_shape_dtype_size_nbytes_and_repr():
    buf = UnifiedBuffer((2, 3), dtype=np.float64)
    assert buf.shape == (2, 3) and buf.dtype == np.float64 and buf.size == 6 and buf.nbytes == 48
    assert UnifiedBuffer(5).shape == (5,) and UnifiedBuffer(5).dtype == np.float32  # int shape, float32 default
    assert "UNINITIALIZED" in repr(buf)
    assert len(BufferState.__members__) == 6


# ---- the memory pool -------------------------------------------------------------------------------------

@pytest.fixture
def fresh_pool():
    """A new default pool for the test (get_memory_pool() is process-wide); the previous one comes back after."""
    previous = gpumem.set_memory_pool(gpumem.UnifiedBufferPool())
    yield get_memory_pool()
    gpumem.set_memory_pool(previous)


def test_the_global_pool_is_one_object(fresh_pool):
    assert get_memory_pool() is get_memory_pool() is fresh_pool


def test_basic_pooling_reuses_the_buffer(fresh_pool):
    pool = get_memory_pool()
    buf1 = pool.acquire((1000,), dtype=np.float32)
    buf1.host[:] = np.random.default_rng(3).standard_normal(1000)
    pool.release(buf1)
    assert pool.pool_size == 1 and pool.total_bytes == 4000
    buf2 = pool.acquire((1000,), dtype=np.float32)
    buf2.host[:] = 1.0
    assert buf2.state == BufferState.HOST_DIRTY
    stats = pool.stats()
    assert stats["cache_hits"] == 1 and stats["cache_misses"] == 1
    assert stats["total_acquired"] == 2 and stats["total_released"] == 1 and stats["pool_size"] == 0
    pool.release(buf2)


def test_monitoring_pool_usage(fresh_pool):
    pool = get_memory_pool()
    for _ in range(100):
        buf = pool.acquire((1000,), dtype=np.float32)
        buf.fill(1.0)
        pool.release(buf)
    stats = pool.stats()
    assert stats["cache_hits"] / stats["total_acquired"] == pytest.approx(0.99)
    s = pool.get_stats()
    assert (s.hits, s.misses, s.cached_buffers, s.cached_bytes) == (99, 1, 1, 4000)
    assert s.n_free_blocks == 1 and s.free_bytes == 4000 and s.releases == 100


def test_context_manager_pattern(fresh_pool):
    from contextlib import contextmanager

    @contextmanager
    def pooled_buffer(shape, dtype=np.float32):
        pool = get_memory_pool()
        buffer = pool.acquire(shape, dtype)
        try:
            yield buffer
        finally:
            pool.release(buffer)

    with pooled_buffer((64, 64)) as buf:
        buf.host[:] = 2.0
        np.testing.assert_array_equal(read_device(buf), np.full((64, 64), 2.0, np.float32))
    assert get_memory_pool().pool_size == 1


def test_set_limit_and_free_all_blocks(fresh_pool):
    pool = get_memory_pool()
    buffers = [pool.acquire((256, 1024), dtype=np.float32) for _ in range(3)]  # 1 MiB each
    for b in buffers:
        b.zeros()
    for b in buffers:
        pool.release(b)
    assert pool.get_stats().cached_bytes == 3 << 20
    pool.set_limit(2)  # MiB
    assert pool.get_stats().cached_bytes == 2 << 20 and pool.max_cached_bytes == 2 << 20
    pool.set_limit(None)
    assert pool.max_cached_bytes == 0
    with pytest.raises(ValueError, match="size_mb"):
        pool.set_limit(0)
    pool.free_all_blocks()
    assert pool.pool_size == 0 and pool.get_stats().cached_bytes == 0
    pool.release(pool.acquire(8))
    pool.clear()
    assert pool.pool_size == 0


def test_acquire_with_the_other_kind_of_host_memory_is_refused(fresh_pool):
    pool = get_memory_pool()
    with pytest.raises(ValueError, match="pinned"):
        pool.acquire((8,), np.float32, pinned=True)
    buf = pool.acquire((8,), np.float32, pinned=False)
    assert not buf.pinned
    pool.release(buf)


# ---- the accelerator ---------------------------------------------------------------------------------------

def test_accelerator_without_arguments_is_the_current_device():
    acc = Accelerator()
    assert acc.device_id == gpumem.cuda.get_device_id()
    assert get_accelerator().device_id == acc.device_id
    assert acc.current_device.device_id == acc.device_id


def test_device_listing():
    acc = get_accelerator()
    assert acc.device_count == gpumem.cuda.get_device_count() >= 1
    assert len(acc.devices) == acc.device_count
    for i, device in enumerate(acc.devices):
        assert device.device_id == i and device.name and device.total_memory > 0
        assert device.device_type == (DeviceType.CUDA if cuda_available() else DeviceType.CPU)
        assert device.is_available
    assert acc.get_device(0) == acc.devices[0]
    with pytest.raises(ValueError, match="not a valid device"):
        acc.get_device(acc.device_count)
    acc.set_device(0)
    assert acc.device_id == 0 and gpumem.cuda.get_device_id() == 0
    acc.synchronize()


def test_cuda_available_and_memory_info():
    assert cuda_available() == (gpumem.cuda.get_backend() == "cuda")
    assert get_accelerator().cuda_available == cuda_available()
    free, total = get_accelerator().get_memory_info()
    assert 0 <= free <= total and total > 0
    free0, total0 = get_accelerator().get_memory_info(device_id=0)
    assert 0 <= free0 <= total0 and total0 > 0
    with pytest.raises(ValueError, match="not a valid device"):
        get_accelerator().get_memory_info(device_id=gpumem.cuda.get_device_count())


def test_gpu_memory_monitoring_example():
    acc = get_accelerator()
    free_before, _ = acc.get_memory_info()
    buf = UnifiedBuffer((10_000_000,), dtype=np.float32)
    view = buf.device  # force the device allocation
    free_after, _ = acc.get_memory_info()
    assert free_after <= free_before  # a pool may serve it from memory it holds already
    assert view.ptr != 0 and buf.state == BufferState.DEVICE_ONLY


# ---- what needs a real GPU -------------------------------------------------------------------------------

@needs_gpu
def test_on_a_gpu_the_devices_are_cuda_devices():
    assert cuda_available()
    device = get_accelerator().current_device
    assert device.device_type == DeviceType.CUDA
    assert device.compute_capability is not None and device.compute_capability[0] >= 3
    assert device.compute_capability_str == "{}.{}".format(*device.compute_capability)


@needs_gpu
def test_on_a_gpu_the_device_copy_is_device_memory(pinned):
    buf = UnifiedBuffer(1 << 20, np.float32, pinned=pinned)
    buf.host[:] = 1.0
    view = buf.device
    assert view.__dlpack_device__()[0] == 2  # kDLCUDA
    kernel_writes(buf, 5.0)
    buf.mark_device_dirty()
    np.testing.assert_array_equal(buf.to_numpy(), np.full(1 << 20, 5.0, np.float32))
