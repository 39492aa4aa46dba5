"""gpumem.mr from Python: every resource allocates and frees, the adaptors add what they say, lifetimes hold
(an adaptor keeps its upstream, the current resource is kept while it is set), and errors are the
documented ones. Runs on the host backend and on a GPU alike."""

import gc
import weakref

import gpumem
import pytest
from gpumem import mr

MiB = 1 << 20


@pytest.fixture(autouse=True)
def default_resource_afterwards():
    """Every test leaves the default resource current, whatever it set."""
    yield
    mr.set_current_device_resource(None)


def _cuda_async():
    try:
        return mr.CudaAsyncMemoryResource()
    except gpumem.CUDARuntimeError as error:  # a device without memory pools
        pytest.skip(f"no memory pools here: {error}")


RESOURCES = {
    "cuda": lambda: mr.CudaMemoryResource(),
    "managed": lambda: mr.ManagedMemoryResource(),
    "pinned_host": lambda: mr.PinnedHostMemoryResource(),
    "cuda_async": _cuda_async,
    "pool": lambda: mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size=4 * MiB),
    "pool_capped": lambda: mr.PoolMemoryResource(mr.CudaMemoryResource(), 0, 64 * MiB),
    "arena": lambda: mr.ArenaMemoryResource(mr.CudaMemoryResource(), arena_size=16 * MiB),
    "fixed_size": lambda: mr.FixedSizeMemoryResource(mr.CudaMemoryResource(), block_size=2 * MiB, blocks_to_preallocate=4),
    "binning": lambda: mr.BinningMemoryResource(mr.CudaMemoryResource(), 8, 16),
    "logging": None,  # needs a file: built in the test from tmp_path
    "statistics": lambda: mr.StatisticsResourceAdaptor(mr.CudaMemoryResource()),
    "tracking": lambda: mr.TrackingResourceAdaptor(mr.CudaMemoryResource()),
    "limiting": lambda: mr.LimitingResourceAdaptor(mr.CudaMemoryResource(), 64 * MiB),
    "failure_callback": lambda: mr.FailureCallbackResourceAdaptor(mr.CudaMemoryResource(), lambda nbytes: False),
}


@pytest.mark.parametrize("name", sorted(RESOURCES))
def test_every_resource_allocates_aligned_distinct_memory_and_frees_it(name, tmp_path):
    if name == "logging":
        resource = mr.LoggingResourceAdaptor(mr.CudaMemoryResource(), str(tmp_path / "log.csv"))
    else:
        resource = RESOURCES[name]()
    assert isinstance(resource, mr.DeviceMemoryResource)
    sizes = [1, 255, 256, 1000, 4096, MiB + 1] if name != "fixed_size" else [1, 256, 4096, 2 * MiB]
    pointers = [resource.allocate(size) for size in sizes]
    assert all(isinstance(p, int) and p != 0 and p % 256 == 0 for p in pointers)
    assert len(set(pointers)) == len(pointers)
    # The memory is real: a buffer from this resource round-trips bytes.
    buffer = gpumem._gpumem.DeviceBuffer.to_device(bytes(range(256)) * 5, mr=resource)
    assert buffer.tobytes() == bytes(range(256)) * 5
    del buffer
    for p, size in zip(pointers, sizes):
        resource.deallocate(p, size)
    assert resource.allocate(0) == 0
    resource.deallocate(0, 0)
    assert resource.is_equal(resource)


def test_allocate_and_deallocate_take_a_stream():
    resource = mr.PoolMemoryResource(mr.CudaMemoryResource())
    p = resource.allocate(1000, stream=0)
    resource.deallocate(p, 1000, stream=None)
    with pytest.raises(TypeError):
        resource.allocate(16, stream="not a stream")


def test_the_base_class_is_not_constructible_and_a_null_upstream_is_a_type_error_naming_it():
    with pytest.raises(TypeError):
        mr.DeviceMemoryResource()
    with pytest.raises(TypeError, match="upstream must be a DeviceMemoryResource, not NoneType"):
        mr.PoolMemoryResource(None)
    with pytest.raises(TypeError, match="upstream must be a DeviceMemoryResource, not NoneType"):
        mr.StatisticsResourceAdaptor(None)


def test_pool_statistics_follow_allocations():
    pool = mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size=MiB, maximum_pool_size=8 * MiB)
    assert pool.maximum_pool_size == 8 * MiB
    assert pool.pool_size() == MiB
    assert pool.used_bytes() == 0
    assert pool.chunk_count() == 1
    a = pool.allocate(1000)  # a 1024-byte block
    b = pool.allocate(3000)  # 3072
    assert pool.used_bytes() == 1024 + 3072
    assert pool.used_bytes() + pool.cached_bytes() == pool.pool_size()
    big = pool.allocate(2 * MiB)  # grows the pool
    assert pool.pool_size() > MiB
    pool.deallocate(big, 2 * MiB)
    pool.deallocate(a, 1000)
    pool.deallocate(b, 3000)
    assert pool.used_bytes() == 0
    assert pool.cached_bytes() == pool.pool_size()
    assert pool.largest_free_block() > 0 and pool.free_block_count() >= 1


def test_pool_beyond_its_maximum_is_out_of_memory_and_a_bad_maximum_is_a_value_error():
    pool = mr.PoolMemoryResource(mr.CudaMemoryResource(), maximum_pool_size=2 * MiB)
    with pytest.raises(gpumem.OutOfMemoryError):
        pool.allocate(4 * MiB)
    with pytest.raises(ValueError):
        mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size=4 * MiB, maximum_pool_size=MiB)


def test_an_adaptor_keeps_its_upstream_alive():
    upstream = mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size=MiB)
    upstream_ref = weakref.ref(upstream)
    stats = mr.StatisticsResourceAdaptor(upstream)
    assert stats.upstream_mr is upstream and stats.get_upstream() is upstream
    del upstream
    gc.collect()
    assert upstream_ref() is not None  # held by the adaptor
    # A chain built of temporaries works: each level keeps the one below.
    chain = mr.LimitingResourceAdaptor(
        mr.TrackingResourceAdaptor(mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size=MiB)), 16 * MiB
    )
    gc.collect()
    p = stats.allocate(4096)
    q = chain.allocate(4096)
    assert stats.allocation_counts.current_bytes == 4096
    assert chain.upstream_mr.get_allocated_bytes() == 4096
    stats.deallocate(p, 4096)
    chain.deallocate(q, 4096)
    del stats
    gc.collect()
    assert upstream_ref() is None  # released with the adaptor


def test_set_and_get_current_resource_keeps_it_alive_while_set():
    default = mr.get_current_device_resource()
    assert isinstance(default, mr.CudaMemoryResource)
    pool = mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size=MiB)
    pool_ref = weakref.ref(pool)
    previous = mr.set_current_device_resource(pool)
    assert isinstance(previous, mr.CudaMemoryResource)
    assert mr.get_current_device_resource() is pool
    del pool
    gc.collect()
    assert pool_ref() is not None  # the per-device table holds it
    p = gpumem.alloc(1000)  # the plain API uses the current resource
    assert mr.get_current_device_resource().used_bytes() == 1024
    gpumem.free(p)
    assert mr.set_current_device_resource(None) is pool_ref()
    gc.collect()
    assert pool_ref() is None  # no longer set: dropped
    assert isinstance(mr.get_current_device_resource(), mr.CudaMemoryResource)


def test_per_device_resource_and_invalid_devices():
    stats = mr.StatisticsResourceAdaptor(mr.CudaMemoryResource())
    mr.set_per_device_resource(0, stats)
    try:
        assert mr.get_per_device_resource(0) is stats
        if gpumem._gpumem.mr.get_current_device_resource() is stats:  # device 0 is current
            buffer = gpumem._gpumem.DeviceBuffer(100)
            assert buffer.mr is stats
            assert stats.allocation_counts.current_bytes == 100
    finally:
        mr.set_per_device_resource(0, None)
    with pytest.raises(ValueError):
        mr.get_per_device_resource(1 << 20)
    with pytest.raises(ValueError):
        mr.set_per_device_resource(-1, stats)


def test_limiting_adaptor_out_of_memory_names_the_size():
    limiting = mr.LimitingResourceAdaptor(mr.CudaMemoryResource(), allocation_limit=MiB)
    assert limiting.get_allocation_limit() == MiB
    p = limiting.allocate(1000)
    assert limiting.get_allocated_bytes() == 1024
    with pytest.raises(gpumem.OutOfMemoryError) as raised:
        limiting.allocate(2 * MiB + 1)
    assert isinstance(raised.value, MemoryError)
    assert str(2 * MiB + 1) in str(raised.value)
    limiting.deallocate(p, 1000)
    assert limiting.get_allocated_bytes() == 0


def test_failure_callback_is_called_with_the_size_and_the_request_retried():
    limiting = mr.LimitingResourceAdaptor(mr.CudaMemoryResource(), allocation_limit=MiB)
    held = [limiting.allocate(MiB)]  # the limit is used up
    calls = []

    def free_something(nbytes):
        calls.append(nbytes)
        if held:
            limiting.deallocate(held.pop(), MiB)  # frees memory (re-entering the bindings), then retry
            return True
        return False

    adaptor = mr.FailureCallbackResourceAdaptor(limiting, free_something)
    p = adaptor.allocate(512 * 1024)
    assert calls == [512 * 1024]  # failed once, callback freed, the retry succeeded
    with pytest.raises(gpumem.OutOfMemoryError):
        adaptor.allocate(2 * MiB)  # nothing left to free: the callback gives up
    assert calls == [512 * 1024, 2 * MiB]
    adaptor.deallocate(p, 512 * 1024)


def test_failure_callback_exception_propagates_and_the_callback_is_kept_alive():
    def raising(nbytes):
        raise KeyError(f"no memory for {nbytes}")

    adaptor = mr.FailureCallbackResourceAdaptor(mr.LimitingResourceAdaptor(mr.CudaMemoryResource(), MiB), raising)
    del raising
    gc.collect()
    with pytest.raises(KeyError, match=str(2 * MiB)):
        adaptor.allocate(2 * MiB)


def test_statistics_counts_and_scopes():
    stats = mr.StatisticsResourceAdaptor(mr.CudaMemoryResource())
    a = stats.allocate(1000)
    b = stats.allocate(3000)
    counts = stats.allocation_counts
    assert isinstance(counts, mr.Statistics)
    assert (counts.current_bytes, counts.current_count) == (4000, 2)
    assert (counts.peak_bytes, counts.peak_count, counts.total_bytes, counts.total_count) == (4000, 2, 4000, 2)
    stats.deallocate(b, 3000)
    counts = stats.allocation_counts
    assert (counts.current_bytes, counts.current_count, counts.peak_bytes, counts.total_bytes) == (1000, 1, 4000, 4000)
    outer = stats.push_counters()
    assert outer.current_bytes == 1000
    c = stats.allocate(500)
    assert stats.allocation_counts.current_bytes == 500  # the new scope starts at zero
    stats.deallocate(c, 500)
    inner = stats.pop_counters()
    assert (inner.total_bytes, inner.total_count, inner.current_bytes) == (500, 1, 0)
    assert stats.allocation_counts.total_bytes == 4500
    with pytest.raises(IndexError):  # as RMM
        stats.pop_counters()
    stats.deallocate(a, 1000)


def test_tracking_reports_outstanding_allocations():
    tracking = mr.TrackingResourceAdaptor(mr.CudaMemoryResource())
    p = tracking.allocate(1000)
    assert tracking.get_allocated_bytes() == 1000
    assert tracking.outstanding_count == 1
    assert hex(p)[2:] in tracking.get_outstanding_allocations_str().lower()
    tracking.deallocate(p, 1000)
    assert tracking.get_allocated_bytes() == 0 and tracking.outstanding_count == 0
    with pytest.raises(ValueError, match="invalid deallocation"):
        tracking.deallocate(p, 1000)  # unknown now: counted, not forwarded, reported
    assert tracking.invalid_deallocations == 1


def test_logging_writes_csv_rows(tmp_path):
    path = tmp_path / "log.csv"
    logging = mr.LoggingResourceAdaptor(mr.CudaMemoryResource(), str(path))
    assert logging.get_file_name() == str(path)
    p = logging.allocate(1000)
    logging.deallocate(p, 1000)
    logging.flush()
    lines = path.read_text().splitlines()
    assert lines[0] == "Thread,Time,Action,Pointer,Size,Stream"
    assert len(lines) == 3
    assert "allocate" in lines[1] and "1000" in lines[1]
    assert "free" in lines[2]
    with pytest.raises(ValueError):
        mr.LoggingResourceAdaptor(mr.CudaMemoryResource(), str(tmp_path / "no such dir" / "log.csv"))


def test_binning_sends_sizes_to_bins_and_keeps_added_bins_alive():
    binning = mr.BinningMemoryResource(mr.CudaMemoryResource(), 10, 12)
    assert binning.bin_sizes == [1024, 2048, 4096]
    custom = mr.BinningMemoryResource(mr.CudaMemoryResource())
    bin_resource = mr.StatisticsResourceAdaptor(mr.CudaMemoryResource())
    bin_ref = weakref.ref(bin_resource)
    custom.add_bin(4096, bin_resource)
    del bin_resource
    gc.collect()
    assert bin_ref() is not None
    p = custom.allocate(3000)
    assert bin_ref().allocation_counts.current_bytes == 3000
    q = custom.allocate(MiB)  # larger than every bin: the upstream
    assert bin_ref().allocation_counts.current_count == 1
    custom.deallocate(p, 3000)
    custom.deallocate(q, MiB)
    with pytest.raises(ValueError):
        custom.add_bin(8192)  # refused once the resource has served requests


def test_arena_and_fixed_size_report_their_geometry():
    arena = mr.ArenaMemoryResource(mr.CudaMemoryResource(), arena_size=8 * MiB)
    assert arena.arena_size == 8 * MiB
    p = arena.allocate(1000)
    arena.deallocate(p, 1000)
    fixed = mr.FixedSizeMemoryResource(mr.CudaMemoryResource(), block_size=1000, blocks_to_preallocate=4)
    assert fixed.block_size == 1024
    assert fixed.pool_size() == 4 * 1024
    with pytest.raises(ValueError):
        mr.ArenaMemoryResource(mr.CudaMemoryResource(), arena_size=1024)  # under 1 MiB


def test_allocation_releases_the_gil():
    import threading

    pool = mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size=4 * MiB)
    errors = []

    def work():
        try:
            for _ in range(200):
                p = pool.allocate(4096)
                pool.deallocate(p, 4096)
        except Exception as error:  # noqa: BLE001  (reported below)
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert pool.used_bytes() == 0


def test_vmm_pool_counts_the_blocks_a_stream_takes_from_another_streams_frees():
    pool = mr.VmmPoolMemoryResource(slab_size=2 << 20)
    first, second = gpumem.cuda.Stream(non_blocking=True), gpumem.cuda.Stream(non_blocking=True)
    ptr = pool.allocate(4096, first)
    pool.deallocate(ptr, 4096, first)
    assert pool.cross_stream_takes == 0
    again = pool.allocate(4096, first)  # its own free: no wait
    assert pool.cross_stream_takes == 0
    pool.deallocate(again, 4096, first)
    other = pool.allocate(4096, second)  # the block first freed: second waits for first's work
    assert other == ptr and pool.cross_stream_takes == 1 and pool.cross_stream_waits == 1
    pool.deallocate(other, 4096, second)


def test_vmm_pool_grows_coalesces_and_gives_memory_back():
    pool = mr.VmmPoolMemoryResource(slab_size=4 << 20)
    assert pool.slab_size == 4 << 20
    assert pool.physical_bytes == 0
    blocks = [pool.allocate(6 << 20) for _ in range(4)]  # several growths
    assert pool.bytes_in_use == 4 * (6 << 20)
    assert pool.physical_bytes >= pool.bytes_in_use
    created = pool.slabs_created
    for ptr in blocks:
        pool.deallocate(ptr, 6 << 20)
    # The free ranges coalesced across the growths: one block of the whole size needs no new slab.
    whole = pool.allocate(4 * (6 << 20))
    assert pool.slabs_created == created
    pool.deallocate(whole, 4 * (6 << 20))
    released = pool.release_unused()
    assert released > 0 and pool.physical_bytes == 0 and pool.slabs_released >= 1
    assert pool.peak_physical_bytes >= 4 * (6 << 20)


def test_vmm_pool_as_current_resource_and_bad_options():
    pool = mr.VmmPoolMemoryResource(slab_size=2 << 20)
    previous = mr.get_current_device_resource()
    mr.set_current_device_resource(pool)
    try:
        buf = gpumem.DeviceBuffer.to_device(b"vmm" * 1000)
        assert buf.tobytes() == b"vmm" * 1000
        del buf
    finally:
        mr.set_current_device_resource(previous)
    with pytest.raises(ValueError, match="slab_size"):
        mr.VmmPoolMemoryResource(slab_size=0)
    with pytest.raises(gpumem.OutOfMemoryError, match="maximum_physical_size"):
        capped = mr.VmmPoolMemoryResource(slab_size=2 << 20, maximum_physical_size=4 << 20)
        capped.allocate(8 << 20)


def test_vmm_pool_release_threshold_gives_memory_back_on_free():
    pool = mr.VmmPoolMemoryResource(slab_size=2 << 20, release_threshold=0)
    ptr = pool.allocate(6 << 20)
    assert pool.physical_bytes == 6 << 20
    pool.deallocate(ptr, 6 << 20)
    assert pool.physical_bytes == 0


def test_vmm_pool_small_blocks_come_from_pages_and_go_through_the_thread_cache():
    assert mr.VmmPoolMemoryResource(slab_size=2 << 20).thread_cache_limit == 0  # caches are off by default
    pool = mr.VmmPoolMemoryResource(slab_size=2 << 20, thread_cache_limit=64 << 10)
    assert (pool.small_block_limit, pool.thread_cache_limit) == (128 << 10, 64 << 10)
    ptr = pool.allocate(1000)
    assert pool.small_page_count == 1 and pool.bytes_in_use == 1024  # the 1 KiB size class
    pool.deallocate(ptr, 1000)
    assert pool.bytes_in_thread_caches == 1024 and pool.bytes_in_use == 0
    assert pool.allocate(1024) == ptr  # back from this thread's cache, on the same (default) stream
    pool.deallocate(ptr, 1024)
    pool.flush_thread_caches()
    assert pool.bytes_in_thread_caches == 0 and pool.small_page_count == 1  # empty, until the next heap operation
    assert pool.release_unused() == 2 << 20 and pool.physical_bytes == 0
    plain = mr.VmmPoolMemoryResource(slab_size=2 << 20, small_block_limit=0, thread_cache_limit=0)
    assert plain.small_block_limit == 0 and plain.small_page_count == 0
    p = plain.allocate(1000)
    assert plain.bytes_in_use == 1024 and plain.small_page_count == 0  # from the heap itself
    plain.deallocate(p, 1000)
    assert mr.VmmPoolMemoryResource(slab_size=2 << 20, release_threshold=0, thread_cache_limit=64 << 10).thread_cache_limit == 0
    with pytest.raises(ValueError, match="small_block_limit"):
        mr.VmmPoolMemoryResource(slab_size=2 << 20, small_block_limit=1000)
    with pytest.raises(ValueError, match="thread_cache_limit"):
        mr.VmmPoolMemoryResource(slab_size=2 << 20, small_block_limit=64 << 10, thread_cache_limit=128 << 10)


def test_vmm_pool_pieces_of_several_slabs():
    pool = mr.VmmPoolMemoryResource(slab_size=2 << 20, max_mapping_size=(6 << 20) + 1, mapping_divisor=0)
    assert pool.max_mapping_size == 6 << 20  # rounded down to whole slabs
    ptr = pool.allocate(14 << 20)  # 7 slabs: pieces of 3, 3 and 1
    assert pool.mapping_count == 3 and pool.slab_count == 7
    pool.deallocate(ptr, 14 << 20)
    assert pool.release_unused() == 14 << 20
    assert pool.mapping_count == 0 and pool.physical_bytes == 0
    assert mr.VmmPoolMemoryResource(slab_size=2 << 20, mapping_divisor=0).max_mapping_size == 2 << 20  # one slab
    default = mr.VmmPoolMemoryResource(slab_size=2 << 20)
    assert default.mapping_divisor == 64 and default.max_mapping_size == default.reservation_size


def test_vmm_pool_pieces_grow_with_the_pool_under_a_mapping_divisor():
    pool = mr.VmmPoolMemoryResource(slab_size=2 << 20, mapping_divisor=2)
    assert pool.mapping_divisor == 2
    first = pool.allocate(8 << 20)  # empty pool: 4 pieces of one slab
    assert pool.mapping_count == 4
    second = pool.allocate(8 << 20)  # 4 slabs held: pieces of 2 slabs
    assert pool.mapping_count == 6 and pool.slab_count == 8
    pool.deallocate(first, 8 << 20)
    pool.deallocate(second, 8 << 20)
    assert pool.release_unused() == 16 << 20
