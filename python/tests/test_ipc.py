"""Device memory shared between processes: DeviceBuffer.export(), gpumem.IpcHandle, gpumem.import_buffer().

Real separate processes (multiprocessing with spawn, as data loaders and inference servers use): a producer
writes, a consumer reads and checks every byte, in both directions and for many buffers; a consumer outlives
its producer; handles that are withdrawn, forged, truncated or of a process that is gone give clear errors.
On the host backend the VMM pool's memfd pieces travel as on a GPU; on the cuda backend the same tests run
with cuMemCreate pieces, and cudaMalloc memory is shared through CUDA IPC as well.
"""

import multiprocessing
import os
import pickle

import numpy as np
import pytest

import gpumem

MiB = 1 << 20
def vmm_pool():
    """A VMM pool of 2 MiB pieces, so that a few MiB span several pieces."""
    return gpumem.mr.VmmPoolMemoryResource(slab_size=2 * MiB, mapping_divisor=0, reservation_size=512 * MiB)


def pattern(size, seed):
    return ((np.arange(size, dtype=np.uint64) * 2654435761 + seed) % 251).astype(np.uint8)


def spawn():
    return multiprocessing.get_context("spawn")


# ---- children (module level: spawn imports this module in the child) -------------------------------------

def child_import_check_write(handles, seeds, results):
    """Imports every handle, checks its bytes, writes the next pattern back; reports per handle."""
    try:
        for handle, seed in zip(handles, seeds):
            with gpumem.import_buffer(handle) as imported:
                ok = np.array_equal(imported.copy_to_host(), pattern(imported.size, seed))
                imported.copy_from_host(pattern(imported.size, seed + 1))
            results.put(("ok" if ok else f"bytes differ for seed {seed}", imported.closed))
    except Exception as error:  # reported to the parent, which fails the test with it
        results.put((f"{type(error).__name__}: {error}", None))


def child_export(sizes, handles, done):
    """Exports buffers of `sizes` from a VMM pool, sends their handles, waits for `done`, then exits."""
    pool = vmm_pool()
    buffers = []
    for i, size in enumerate(sizes):
        buffer = gpumem.DeviceBuffer.to_device(pattern(size, 100 + i).tobytes(), mr=pool)
        buffers.append(buffer)
        handles.put(pickle.dumps(buffer.export()))
    done.wait(60)


def child_on_another_device(handle, seed, results):
    """In a process whose device 0 is the exporter's device 1 (CUDA_VISIBLE_DEVICES="1,0"): imports memory of
    the exporter's device 0 (found by its PCI bus id: here device 1), copies it into a buffer of its own device 0
    across the GPUs and checks it."""
    try:
        with gpumem.import_buffer(handle, peers=[0]) as imported:
            local = gpumem.DeviceBuffer(size=imported.size)
            local.copy_from_device(imported)
            ok = np.array_equal(local.copy_to_host(), pattern(imported.size, seed))
            results.put(("ok" if ok else "bytes differ", imported.device))
    except Exception as error:
        results.put((f"{type(error).__name__}: {error}", None))


def run_child(target, *args):
    process = spawn().Process(target=target, args=args)
    process.start()
    return process


# ---- handles ---------------------------------------------------------------------------------------------

def test_a_handle_is_a_value_that_pickles_and_converts_to_bytes():
    pool = vmm_pool()
    buffer = gpumem.DeviceBuffer.to_device(pattern(3 * MiB, 1).tobytes(), mr=pool)
    handle = buffer.export()
    assert isinstance(handle, gpumem.IpcHandle)
    assert handle.kind == "vmm" and handle.size == 3 * MiB and handle.nbytes == 3 * MiB
    assert handle.exporter_pid == os.getpid() and handle.device == 0
    assert pickle.loads(pickle.dumps(handle)) == handle
    assert gpumem.IpcHandle.from_bytes(bytes(handle)) == handle
    assert hash(gpumem.IpcHandle.from_bytes(handle.to_bytes())) == hash(handle)
    assert "vmm handle of 3.00 MiB" in repr(handle)


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "junk", "longer"])
def test_damaged_handle_bytes_are_a_value_error(damage):
    pool = vmm_pool()
    buffer = gpumem.DeviceBuffer(size=MiB, mr=pool)
    data = bytes(buffer.export())
    damaged = {"truncate": data[:-5], "flip": data[:20] + bytes([data[20] ^ 1]) + data[21:], "empty": b"",
               "junk": b"x" * len(data), "longer": data + b"\0"}[damage]
    with pytest.raises(ValueError, match="gpumem IPC handle"):
        gpumem.IpcHandle.from_bytes(damaged)
    with pytest.raises(ValueError, match="gpumem IPC handle"):
        gpumem.import_buffer(damaged)


def test_import_buffer_refuses_what_is_not_a_handle():
    with pytest.raises(TypeError, match="IpcHandle or its bytes"):
        gpumem.import_buffer(42)
    with pytest.raises(ValueError, match="1-tuple of bytes"):
        gpumem.IpcHandle.__new__(gpumem.IpcHandle).__setstate__(("x",))


# ---- in this process ---------------------------------------------------------------------------------------

def test_an_import_in_this_process_is_a_second_view_of_the_same_bytes():
    pool = vmm_pool()
    size = 5 * MiB + 4096
    buffer = gpumem.DeviceBuffer.to_device(pattern(size, 2).tobytes(), mr=pool)
    with gpumem.import_buffer(buffer.export()) as imported:
        assert imported.ptr != buffer.ptr and imported.size == size and imported.kind == "vmm"
        assert imported.tobytes() == buffer.tobytes()
        interface = imported.__cuda_array_interface__
        assert interface["shape"] == (size,) and interface["data"][0] == imported.ptr
        imported.copy_from_host(pattern(size, 3))
        assert np.array_equal(buffer.copy_to_host(), pattern(size, 3))
    assert imported.closed and "closed" in repr(imported)
    for access in (lambda: imported.ptr, imported.tobytes, imported.copy_to_host,
                   lambda: imported.__cuda_array_interface__, lambda: imported.copy_from_host(b"x")):
        with pytest.raises(ValueError, match="closed"):
            access()
    imported.close()  # twice: nothing


def test_an_export_is_withdrawn_when_its_buffer_goes_or_moves_and_imports_made_stay():
    pool = vmm_pool()
    buffer = gpumem.DeviceBuffer.to_device(pattern(MiB, 4).tobytes(), mr=pool)
    handle = buffer.export()
    imported = gpumem.import_buffer(handle)
    buffer.reserve(8 * MiB)  # reallocates: the old memory's export is withdrawn
    with pytest.raises(ValueError, match="withdrawn"):
        gpumem.import_buffer(handle)
    second = buffer.export()
    del buffer
    with pytest.raises(ValueError, match="withdrawn"):
        gpumem.import_buffer(second)
    assert np.array_equal(imported.copy_to_host(), pattern(MiB, 4))  # still mapped, still the bytes it had
    imported.close()


def test_memory_that_cannot_be_shared_is_refused_naming_the_resource():
    managed = gpumem.DeviceBuffer(size=4096, mr=gpumem.mr.ManagedMemoryResource())
    with pytest.raises(ValueError, match="managed_memory_resource cannot share"):
        managed.export()
    with pytest.raises(ValueError, match="empty"):
        gpumem.DeviceBuffer(size=0, mr=vmm_pool()).export()
    cuda = gpumem.DeviceBuffer(size=MiB, mr=gpumem.mr.CudaMemoryResource())
    if gpumem.cuda.get_backend() == "cuda":
        handle = cuda.export()
        assert handle.kind == "cuda_ipc"
        with pytest.raises(ValueError, match="exported by this process"):
            gpumem.import_buffer(handle)
    else:
        with pytest.raises(gpumem.CUDARuntimeError, match="private to its process"):
            cuda.export()


# ---- other processes ---------------------------------------------------------------------------------------

def test_a_consumer_process_checks_every_byte_of_many_buffers_and_writes_back():
    pool = vmm_pool()
    sizes = [256, 4096, MiB, 2 * MiB, 5 * MiB + 512, 17 * MiB] + [64 * 1024 + 256 * i for i in range(10)]
    buffers = [gpumem.DeviceBuffer.to_device(pattern(size, i).tobytes(), mr=pool) for i, size in enumerate(sizes)]
    handles = [pickle.dumps(buffer.export()) for buffer in buffers]
    results = spawn().Queue()
    child = run_child(child_import_check_write, [pickle.loads(h) for h in handles], list(range(len(sizes))), results)
    reports = [results.get(timeout=120) for _ in sizes]
    child.join(60)
    assert child.exitcode == 0
    assert reports == [("ok", True)] * len(sizes)
    for i, buffer in enumerate(buffers):
        assert np.array_equal(buffer.copy_to_host(), pattern(sizes[i], i + 1)), sizes[i]


def test_the_other_direction_and_a_consumer_that_outlives_its_producer():
    ctx = spawn()
    handles, done = ctx.Queue(), ctx.Event()
    sizes = [MiB, 3 * MiB + 256, 4096]
    producer = run_child(child_export, sizes, handles, done)
    imported = [gpumem.import_buffer(pickle.loads(handles.get(timeout=120))) for _ in sizes]
    for i, buffer in enumerate(imported):
        assert np.array_equal(buffer.copy_to_host(), pattern(sizes[i], 100 + i))
    done.set()
    producer.join(60)
    assert producer.exitcode == 0
    for i, buffer in enumerate(imported):  # the producer is gone; the mappings hold the memory
        assert np.array_equal(buffer.copy_to_host(), pattern(sizes[i], 100 + i))
        buffer.copy_from_host(pattern(sizes[i], 7))
        assert np.array_equal(buffer.copy_to_host(), pattern(sizes[i], 7))
        buffer.close()


def test_a_handle_of_a_process_that_is_gone_is_a_clear_error():
    ctx = spawn()
    handles, done = ctx.Queue(), ctx.Event()
    producer = run_child(child_export, [MiB], handles, done)
    handle = pickle.loads(handles.get(timeout=120))
    done.set()
    producer.join(60)
    with pytest.raises(ValueError, match="cannot reach the exporting process"):
        gpumem.import_buffer(handle)


def round_trip_through_a_child(resource, sizes, first_seed, kind):
    """Buffers of `sizes` from `resource` travel to a child as handles of `kind`; it checks every byte and writes
    the next pattern back, which this process then sees."""
    buffers = [gpumem.DeviceBuffer.to_device(pattern(size, first_seed + i).tobytes(), mr=resource)
               for i, size in enumerate(sizes)]
    handles = [buffer.export() for buffer in buffers]
    assert {handle.kind for handle in handles} == {kind}
    results = spawn().Queue()
    child = run_child(child_import_check_write, handles, [first_seed + i for i in range(len(sizes))], results)
    reports = [results.get(timeout=120) for _ in sizes]
    child.join(60)
    assert child.exitcode == 0 and reports == [("ok", True)] * len(sizes)
    for i, buffer in enumerate(buffers):
        assert np.array_equal(buffer.copy_to_host(), pattern(sizes[i], first_seed + i + 1))


@pytest.mark.skipif(gpumem.cuda.get_backend() != "cuda", reason="CUDA IPC needs the cuda backend and a GPU")
def test_cudamalloc_memory_travels_through_cuda_ipc():
    pool = gpumem.mr.PoolMemoryResource(gpumem.mr.CudaMemoryResource(), initial_pool_size=32 * MiB)
    round_trip_through_a_child(pool, [MiB, 3 * MiB + 256], 50, "cuda_ipc")


@pytest.mark.skipif(gpumem.cuda.get_backend() != "cuda", reason="memory pool export needs the cuda backend and a GPU")
def test_a_stream_ordered_pool_made_for_ipc_shares_its_allocations():
    round_trip_through_a_child(gpumem.mr.CudaAsyncMemoryResource(enable_ipc=True), [MiB, 5 * MiB], 60, "async_pool")


def test_a_stream_ordered_pool_not_made_for_ipc_is_refused():
    buffer = gpumem.DeviceBuffer(size=MiB, mr=gpumem.mr.CudaAsyncMemoryResource())
    with pytest.raises(ValueError, match="enable_ipc=True"):
        buffer.export()


@pytest.mark.skipif(gpumem.cuda.get_backend() != "cuda" or gpumem.cuda.get_device_count() < 2,
                    reason="needs two GPUs")
def test_a_process_on_the_other_gpu_imports_memory_of_gpu_0():
    pool = vmm_pool()
    size = 9 * MiB
    buffer = gpumem.DeviceBuffer.to_device(pattern(size, 70).tobytes(), mr=pool)
    handle = buffer.export()
    results = spawn().Queue()
    previous = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = "1,0"  # the child's device 0 is GPU 1; it sees GPU 0 as its device 1
    try:
        child = run_child(child_on_another_device, handle, 70, results)
    finally:
        if previous is None:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = previous
    report = results.get(timeout=120)
    child.join(60)
    assert child.exitcode == 0 and report == ("ok", 1)
