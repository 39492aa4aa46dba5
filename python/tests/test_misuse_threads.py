"""The same gpumem objects used from several threads at once, racing where a program could race.

Nothing may crash or deadlock, every error must be a clear Python exception, and the counts must add up
afterwards: double frees racing free exactly once, buffers and streams shared by threads stay usable, the
current resource swapped under allocating threads keeps each pointer's resource alive.
"""

import threading

import numpy as np
import pytest

import gpumem
import gpumem.cuda as cuda
from gpumem import mr

THREADS = 8
WAIT = 60.0


def run_threads(work, count=THREADS):
    """Runs work(index) on `count` threads started together; re-raises the first error any raised."""
    errors = []
    start = threading.Barrier(count)

    def body(index):
        try:
            start.wait(WAIT)
            work(index)
        except BaseException as error:  # noqa: B036: reported below
            errors.append(error)

    threads = [threading.Thread(target=body, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive(), "a thread hung"
    if errors:
        raise errors[0]


def test_racing_double_frees_free_once_and_the_others_get_value_errors():
    for _ in range(50):
        p = gpumem.alloc(4096)
        outcomes = []

        def free(_index):
            try:
                gpumem.free(p)
                outcomes.append("freed")
            except ValueError as error:
                assert "already freed" in str(error) or "not allocated" in str(error), error
                outcomes.append("refused")

        run_threads(free, 4)
        assert sorted(outcomes) == ["freed", "refused", "refused", "refused"]
    assert gpumem.live_allocation_count() == 0


def test_resources_swapped_while_threads_allocate_and_free(current_resource):
    stop = threading.Event()

    def swap():
        while not stop.is_set():
            mr.set_current_device_resource(mr.PoolMemoryResource(mr.CudaMemoryResource()))
            mr.set_current_device_resource(mr.StatisticsResourceAdaptor(mr.CudaMemoryResource()))

    swapper = threading.Thread(target=swap)
    swapper.start()
    try:
        def work(index):
            live = []
            for i in range(300):
                live.append(gpumem.alloc(256 + 64 * ((i + index) % 7)))
                if len(live) > 8:
                    gpumem.free(live.pop(0))
            for p in live:
                gpumem.free(p)

        run_threads(work)
    finally:
        stop.set()
        swapper.join(WAIT)
    assert gpumem.live_allocation_count() == 0


def test_one_device_buffer_copied_to_and_from_by_many_threads():
    buffer = gpumem.DeviceBuffer.to_device(np.arange(1024, dtype=np.uint8))

    def work(index):
        stream = cuda.Stream()
        for _ in range(20):
            assert buffer.copy_to_host(stream=stream).sum() == np.arange(1024, dtype=np.uint8).sum()
            copy = buffer.copy(stream=stream)
            stream.synchronize()
            assert copy.tobytes() == buffer.tobytes()
            with pytest.raises(TypeError):
                buffer.copy_from_host(np.array([object()] * 4))

    run_threads(work)


def test_streams_entered_and_used_on_many_threads_stay_per_thread():
    shared = cuda.Stream()

    def work(index):
        own = cuda.Stream()
        for _ in range(200):
            with own:
                assert cuda.get_current_stream() is own
                with shared:
                    assert cuda.get_current_stream() is shared
                    cuda.Event().record()
                assert cuda.get_current_stream() is own
            assert cuda.get_current_stream() == cuda.Stream.null
        own.synchronize()

    run_threads(work)
    shared.synchronize()


def test_memory_pools_and_unified_buffers_shared_by_threads():
    pool = cuda.MemoryPool()
    unified_pool = gpumem.UnifiedBufferPool(max_cached_bytes=1 << 20)

    def work(index):
        stream = cuda.Stream()
        with stream:
            for i in range(100):
                pointer = pool.malloc(512 * (1 + i % 5))
                pointer.memset_async(index, 512)
                buffer = unified_pool.acquire((64,), "int32")
                buffer.copy_from(np.full(64, index, np.int32), stream)
                assert (buffer.to_numpy() == index).all()
                unified_pool.release(buffer)
                del pointer
        stream.synchronize()

    run_threads(work)
    unified_pool.clear()


def test_bad_arguments_from_many_threads_are_clear_errors():
    def work(index):
        for _ in range(200):
            with pytest.raises(ValueError, match="size must be >= 0"):
                gpumem.DeviceBuffer(-1)
            with pytest.raises(TypeError, match="mr must be a DeviceMemoryResource"):
                mr.set_current_device_resource("abc")
            with pytest.raises(ValueError, match="stream must be >= 0"):
                gpumem.alloc(16, stream=-1)

    run_threads(work)
