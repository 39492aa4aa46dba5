"""Unified buffers from Python: DLPack of the device copy, the buffer pool, the spill budget, the accelerator."""

import gc

import numpy as np
import pytest

import gpumem

S = gpumem.BufferState
HOST_BACKEND = gpumem.cuda.get_backend() == "host"


# ---- the device view's DLPack ------------------------------------------------------------------------------

@pytest.mark.skipif(not HOST_BACKEND, reason="numpy can only import host (kDLCPU) DLPack tensors")
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8, np.complex64, np.bool_])
def test_device_view_dlpack_carries_shape_dtype_and_data(dtype):
    if dtype is np.bool_ and tuple(int(x) for x in np.__version__.split(".")[:2]) < (1, 25):
        pytest.skip("numpy < 1.25 cannot import boolean DLPack tensors")
    b = gpumem.UnifiedBuffer((4, 6), dtype)
    expected = (np.arange(24).reshape(4, 6) % 2).astype(dtype)
    b.host[:] = expected
    view = b.device
    assert view.__dlpack_device__() == (1, 0)
    imported = np.from_dlpack(view)
    assert imported.shape == (4, 6) and imported.dtype == dtype
    np.testing.assert_array_equal(imported, expected)
    assert imported.ctypes.data == view.ptr


def test_device_view_dlpack_rejects_dtypes_dlpack_cannot_carry():
    b = gpumem.UnifiedBuffer(4, np.dtype([("a", np.int32), ("b", np.float32)]))
    with pytest.raises(TypeError, match="DLPack cannot carry the dtype"):
        b.device.__dlpack__()


@pytest.mark.skipif(not HOST_BACKEND, reason="host backend: kDLCPU")
def test_a_cpu_consumer_may_not_pass_a_stream():
    b = gpumem.UnifiedBuffer(4, np.float32)
    b.zeros()
    with pytest.raises(ValueError, match="stream must be None"):
        b.device.__dlpack__(stream=5)


def test_a_dlpack_capsule_keeps_the_buffer_alive_and_counted():
    b = gpumem.UnifiedBuffer(8, np.float32)
    b.zeros()
    capsule = b.device.__dlpack__()
    gc.collect()
    assert b.exports == 1
    del capsule
    gc.collect()
    assert b.exports == 0


def test_exports_count_arrays_and_views():
    b = gpumem.UnifiedBuffer(8, np.float32)
    h = b.host
    v = b.host_view
    d = b.device
    assert b.exports == 3
    del h, v
    assert b.exports == 1
    del d
    assert b.exports == 0


# ---- UnifiedBufferPool ------------------------------------------------------------------------------------

def test_the_pool_reuses_released_memory_and_counts_hits():
    pool = gpumem.UnifiedBufferPool()
    a = pool.acquire((256, 4), np.float32)
    assert a.state == S.UNINITIALIZED and a.shape == (256, 4) and a.nbytes == 4096
    a.host[:] = 3.0
    ptr = a.device.ptr
    pool.release(a)
    assert a.released
    b = pool.acquire(1024, np.int32)  # same byte size: the same memory
    assert b.state == S.UNINITIALIZED
    assert b.device.ptr == ptr
    stats = pool.statistics()
    assert stats["hits"] == 1 and stats["misses"] == 1 and stats["cached_buffers"] == 0


def test_a_released_buffer_cannot_be_used_or_released_again():
    pool = gpumem.UnifiedBufferPool()
    a = pool.acquire(16, np.uint8)
    pool.release(a)
    with pytest.raises(ValueError, match="released to a pool"):
        _ = a.host
    with pytest.raises(ValueError, match="released to a pool"):
        a.sync_to_device()
    with pytest.raises(ValueError, match="released to a pool"):
        pool.release(a)
    assert "released" in repr(a)


def test_a_buffer_with_live_arrays_is_not_taken_back():
    pool = gpumem.UnifiedBufferPool()
    a = pool.acquire(16, np.uint8)
    h = a.host
    with pytest.raises(ValueError, match="still use this buffer"):
        pool.release(a)
    h[:] = 1  # still valid memory
    del h
    pool.release(a)
    assert pool.statistics()["cached_buffers"] == 1


def test_a_pool_refuses_buffers_made_with_other_options():
    pool = gpumem.UnifiedBufferPool(pinned=True)
    with pytest.raises(ValueError, match="other options"):
        pool.release(gpumem.UnifiedBuffer(16, np.uint8))
    pinned = pool.acquire(16, np.uint8)
    assert pinned.pinned
    pool.release(pinned)


def test_max_cached_bytes_frees_the_oldest_and_clear_frees_all():
    pool = gpumem.UnifiedBufferPool(max_cached_bytes=3000)
    buffers = [pool.acquire(1024, np.uint8) for _ in range(3)]
    for b in buffers:
        b.zeros()
        pool.release(b)
    stats = pool.statistics()
    assert stats["cached_buffers"] == 2 and stats["cached_bytes"] <= 3000
    pool.clear()
    assert pool.statistics()["cached_buffers"] == 0


def test_get_memory_pool_is_a_process_default_and_can_be_replaced():
    pool = gpumem.get_memory_pool()
    assert gpumem.get_memory_pool() is pool
    mine = gpumem.UnifiedBufferPool(pinned=True)
    assert gpumem.set_memory_pool(mine) is pool
    try:
        assert gpumem.get_memory_pool() is mine
        assert gpumem.get_memory_pool().acquire(8, np.float64).pinned
    finally:
        gpumem.set_memory_pool(pool)
    with pytest.raises(TypeError):
        gpumem.set_memory_pool("pool")


def test_negative_extents_are_value_errors():
    with pytest.raises(ValueError, match="negative extent"):
        gpumem.get_memory_pool().acquire((4, -1), np.float32)
    with pytest.raises(ValueError, match="negative extent"):
        gpumem.UnifiedBuffer(-3, np.float32)


# ---- SpillManager -----------------------------------------------------------------------------------------

def test_buffers_over_the_budget_spill_and_lose_nothing():
    manager = gpumem.SpillManager(3 * 4096)
    buffers = [gpumem.UnifiedBuffer(1024, np.int32, spill=manager) for _ in range(6)]
    for i, b in enumerate(buffers):
        b.copy_from(np.full(1024, i, dtype=np.int32))  # DEVICE_ONLY: a spill must copy it back first
        assert manager.used_bytes <= manager.budget
    stats = manager.statistics()
    assert stats["spills"] >= 3 and stats["copies_back"] >= 3
    assert manager.resident_buffers <= 3
    for i, b in enumerate(buffers):
        np.testing.assert_array_equal(b.to_numpy(), np.full(1024, i, dtype=np.int32))
    # Device access brings spilled data back.
    for i, b in enumerate(buffers):
        b.sync_to_device()
        assert b.state == S.SYNCHRONIZED


def test_explicit_spill_and_properties():
    manager = gpumem.SpillManager(1 << 20)
    assert manager.budget == 1 << 20 and manager.used_bytes == 0
    b = gpumem.UnifiedBuffer(4096, np.uint8, spill=manager)
    b.copy_from(np.arange(4096, dtype=np.uint8) % 251)
    assert manager.used_bytes >= 4096 and manager.resident_buffers == 1
    assert manager.spill(4096) >= 4096
    assert manager.resident_buffers == 0 and b.state == S.HOST_ONLY
    np.testing.assert_array_equal(b.to_numpy(), np.arange(4096, dtype=np.uint8) % 251)
    assert "SpillManager(budget=1048576" in repr(manager)


def test_a_request_over_the_budget_is_out_of_memory_and_nothing_is_lost():
    manager = gpumem.SpillManager(4096)
    small = gpumem.UnifiedBuffer(1024, np.uint8, spill=manager)
    small.copy_from(np.ones(1024, dtype=np.uint8))
    big = gpumem.UnifiedBuffer(8192, np.uint8, spill=manager)
    with pytest.raises(gpumem.OutOfMemoryError):
        big.zeros()
    assert manager.statistics()["failed_allocations"] == 1
    np.testing.assert_array_equal(small.to_numpy(), np.ones(1024, dtype=np.uint8))


def test_buffers_keep_their_manager_alive():
    manager = gpumem.SpillManager(1 << 16)
    b = gpumem.UnifiedBuffer(256, np.uint8, spill=manager)
    b.zeros()
    del manager
    gc.collect()
    b.copy_from(np.full(256, 9, dtype=np.uint8))
    assert (b.to_numpy() == 9).all()


def test_a_spilling_pool():
    manager = gpumem.SpillManager(2 * 4096)
    pool = gpumem.UnifiedBufferPool(spill=manager)
    assert pool.spill is manager
    buffers = [pool.acquire(4096, np.uint8) for _ in range(4)]
    for i, b in enumerate(buffers):
        b.copy_from(np.full(4096, i, dtype=np.uint8))
    for i, b in enumerate(buffers):
        assert (b.to_numpy() == i).all()
    for b in buffers:
        pool.release(b)
    with pytest.raises(ValueError, match="other options"):
        pool.release(gpumem.UnifiedBuffer(16, np.uint8))


def test_a_zero_budget_is_a_value_error():
    with pytest.raises(ValueError, match="budget_bytes must be > 0"):
        gpumem.SpillManager(0)


# ---- the accelerator ---------------------------------------------------------------------------------------

def test_get_accelerator_reports_the_devices_memory():
    acc = gpumem.get_accelerator()
    free, total = acc.get_memory_info()
    assert 0 < free <= total
    assert total == gpumem.cuda.Device(acc.device_id).mem_info[1]
    assert acc.device_name() == f"cuda:{acc.device_id}"
    acc.synchronize()
    with pytest.raises(ValueError, match="device_id 10000 is not a valid device"):
        gpumem.get_accelerator(10_000)
