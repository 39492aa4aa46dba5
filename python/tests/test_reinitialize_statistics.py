"""gpumem.reinitialize and gpumem.statistics: RMM's rmm.reinitialize and rmm.statistics."""

import os

import pytest

import gpumem
from gpumem import mr, statistics


@pytest.fixture(autouse=True)
def restore_default_resource():
    yield
    mr.set_current_device_resource(None)


def test_reinitialize_defaults_to_cudamalloc():
    gpumem.reinitialize()
    assert isinstance(mr.get_current_device_resource(), mr.CudaMemoryResource)


def test_reinitialize_builds_a_pool_with_its_sizes():
    gpumem.reinitialize(pool_allocator=True, initial_pool_size=1 << 20, maximum_pool_size=4 << 20)
    pool = mr.get_current_device_resource()
    assert isinstance(pool, mr.PoolMemoryResource)
    assert pool.pool_size() == 1 << 20 and pool.maximum_pool_size == 4 << 20
    assert isinstance(pool.upstream_mr, mr.CudaMemoryResource)
    p = gpumem.alloc(1000)
    assert pool.used_bytes() >= 1000
    gpumem.free(p)
    with pytest.raises(gpumem.OutOfMemoryError):
        gpumem.alloc(8 << 20)


def test_reinitialize_managed_and_logging(tmp_path):
    log = tmp_path / "alloc.csv"
    gpumem.reinitialize(managed_memory=True, logging=True, log_file_name=str(log))
    logger = mr.get_current_device_resource()
    assert isinstance(logger, mr.LoggingResourceAdaptor)
    assert isinstance(logger.get_upstream(), mr.ManagedMemoryResource)
    assert logger.get_file_name() == str(tmp_path / "alloc.dev0.csv")
    gpumem.free(gpumem.alloc(4096))
    logger.flush()
    rows = (tmp_path / "alloc.dev0.csv").read_text().splitlines()
    assert rows[0] == "Thread,Time,Action,Pointer,Size,Stream"
    assert [r.split(",")[2] for r in rows[1:]] == ["allocate", "free"]


def test_reinitialize_rejects_bad_arguments_and_changes_nothing():
    before = mr.get_current_device_resource()
    with pytest.raises(ValueError, match="initial_pool_size"):
        gpumem.reinitialize(pool_allocator=True, initial_pool_size="lots")
    with pytest.raises(ValueError, match="devices names 999, which is not a device"):
        gpumem.reinitialize(devices=[0, 999])
    with pytest.raises(ValueError, match="is empty"):
        gpumem.reinitialize(devices=[])
    old = os.environ.pop("GPUMEM_LOG_FILE", None)
    try:
        with pytest.raises(ValueError, match="needs log_file_name"):
            gpumem.reinitialize(logging=True)
    finally:
        if old is not None:
            os.environ["GPUMEM_LOG_FILE"] = old
    with pytest.raises(ValueError):
        gpumem.reinitialize(pool_allocator=True, initial_pool_size=8 << 20, maximum_pool_size=1 << 20)
    assert mr.get_current_device_resource() is before


def test_memory_from_a_replaced_resource_can_still_be_freed():
    gpumem.reinitialize(pool_allocator=True, initial_pool_size=1 << 20)
    p = gpumem.alloc(4096)
    gpumem.reinitialize()  # the pool is kept alive: p returns to it
    gpumem.free(p)
    assert gpumem.live_allocation_count() == 0


def test_statistics_context_counts_the_block_and_restores_the_resource():
    before = mr.get_current_device_resource()
    assert statistics.get_statistics() is None
    with statistics.statistics():
        assert isinstance(mr.get_current_device_resource(), mr.StatisticsResourceAdaptor)
        buffers = [gpumem.DeviceBuffer(1000) for _ in range(3)]
        stats = statistics.get_statistics()
        assert stats.current_count == 3 and stats.current_bytes == 3000
        del buffers[0]
        stats = statistics.get_statistics()
        assert stats.current_count == 2 and stats.peak_count == 3 and stats.total_count == 3
    assert mr.get_current_device_resource() is before
    del buffers  # returned through the retired adaptor


def test_nested_statistics_push_and_pop_scopes():
    statistics.enable_statistics()
    adaptor = mr.get_current_device_resource()
    statistics.enable_statistics()  # idempotent
    assert mr.get_current_device_resource() is adaptor
    outer = gpumem.DeviceBuffer(100)
    with statistics.statistics():
        inner = gpumem.DeviceBuffer(50)
        assert statistics.get_statistics().current_bytes == 50
    assert statistics.get_statistics().current_bytes == 150
    assert mr.get_current_device_resource() is adaptor
    assert statistics.push_statistics().current_bytes == 150
    assert statistics.pop_statistics().current_bytes == 0
    with pytest.raises(IndexError, match="cannot pop the last counter pair"):  # as RMM
        statistics.pop_statistics()
    del outer, inner


def test_push_and_pop_do_nothing_without_statistics():
    assert statistics.push_statistics() is None
    assert statistics.pop_statistics() is None
