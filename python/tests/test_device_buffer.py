"""gpumem.DeviceBuffer from Python: round trips through device memory, sizes, resize, the copy functions'
checks, the CUDA Array Interface and DLPack (numpy.from_dlpack where the memory is host memory, i.e. on the
host backend), and lifetimes. Runs on the host backend and on a GPU alike."""

import gc
import weakref

import gpumem
import numpy as np
import pytest
from gpumem import mr

# gpumem re-exports DeviceBuffer at the top level; the extension module is the fallback while it does not.
DeviceBuffer = getattr(gpumem, "DeviceBuffer", gpumem._gpumem.DeviceBuffer)

MiB = 1 << 20
SIZES = [0, 1, 7, 255, 256, 257, 4097, MiB + 3, 5 * MiB + 1]  # 5 MiB: the parallel staged path


def _pattern(size):
    return (np.arange(size, dtype=np.uint64) * 2654435761 % 251).astype(np.uint8).tobytes()


@pytest.mark.parametrize("size", SIZES)
def test_bytes_round_trip(size):
    data = _pattern(size)
    buffer = DeviceBuffer.to_device(data)
    assert buffer.size == buffer.nbytes == len(buffer) == size
    assert buffer.capacity() >= size
    assert buffer.tobytes() == data
    host = buffer.copy_to_host()
    assert isinstance(host, np.ndarray) and host.dtype == np.uint8 and host.shape == (size,)
    assert host.tobytes() == data
    if size:
        assert buffer.ptr != 0 and buffer.ptr % 256 == 0
    else:
        assert buffer.ptr == 0


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.complex128])
def test_numpy_round_trip(dtype):
    array = (np.arange(1001) * 3 - 7).astype(dtype)
    buffer = DeviceBuffer.to_device(array.view(np.uint8))  # RMM's to_device takes bytes: view other dtypes so
    with pytest.raises(ValueError, match="format"):
        DeviceBuffer.to_device(array)
    assert buffer.size == array.nbytes
    back = buffer.copy_to_host().view(dtype)
    np.testing.assert_array_equal(back, array)


def test_any_buffer_protocol_object_and_non_contiguous_is_refused():
    for data in (bytearray(b"abc"), memoryview(b"abcdef")[2:], np.arange(4, dtype=np.uint16).view(np.uint8)):
        assert DeviceBuffer.to_device(data).tobytes() == bytes(data)
    with pytest.raises(ValueError, match="data must be C-contiguous"):
        DeviceBuffer.to_device(np.arange(10, dtype=np.uint8)[::2])
    with pytest.raises(TypeError, match="data must support the buffer protocol"):
        DeviceBuffer.to_device("text is not bytes")


def test_empty_constructor_and_uninitialised_size():
    empty = DeviceBuffer()
    assert empty.size == 0 and empty.ptr == 0 and empty.tobytes() == b""
    assert empty.copy_to_host().shape == (0,)
    buffer = DeviceBuffer(size=1000, stream=None)
    assert buffer.size == 1000 and buffer.ptr % 256 == 0


def test_copy_to_host_into_out():
    data = _pattern(1001)
    buffer = DeviceBuffer.to_device(data)
    out = bytearray(1001)
    assert buffer.copy_to_host(out) is out
    assert bytes(out) == data
    array = np.zeros(1001, dtype=np.uint8)
    buffer.copy_to_host(out=array, stream=0)
    assert array.tobytes() == data
    larger = np.zeros(2000, dtype=np.uint8)
    buffer.copy_to_host(larger)  # as RMM: the first size bytes are written
    assert larger[:1001].tobytes() == data and not larger[1001:].any()


def test_copy_to_host_out_of_the_wrong_size_or_read_only_raises():
    buffer = DeviceBuffer.to_device(b"x" * 100)
    with pytest.raises(ValueError, match="100"):
        buffer.copy_to_host(bytearray(99))
    with pytest.raises(ValueError):
        buffer.copy_to_host(np.zeros(10, dtype=np.uint8))
    with pytest.raises(ValueError, match="out must be a writable buffer"):
        buffer.copy_to_host(b"\0" * 100)  # read-only


def test_copy_from_host():
    buffer = DeviceBuffer(10)
    buffer.copy_from_host(b"0123456789")
    assert buffer.tobytes() == b"0123456789"
    buffer.copy_from_host(np.frombuffer(b"abc", dtype=np.uint8))
    assert buffer.tobytes() == b"abc3456789"
    with pytest.raises(ValueError):
        buffer.copy_from_host(b"01234567890")


def test_resize_keeps_the_prefix():
    buffer = DeviceBuffer.to_device(b"hello world")
    buffer.resize(5)
    assert buffer.size == 5 and buffer.capacity() >= 11
    assert buffer.tobytes() == b"hello"
    buffer.resize(3 * MiB)
    assert buffer.size == 3 * MiB
    assert buffer.tobytes()[:5] == b"hello"
    buffer.resize(0)
    assert buffer.size == 0 and buffer.tobytes() == b""
    buffer.shrink_to_fit()
    assert buffer.capacity() == 0 and buffer.ptr == 0
    buffer.reserve(100)
    assert buffer.capacity() >= 100 and buffer.size == 0


def test_copy_and_construct_from_a_device_pointer():
    original = DeviceBuffer.to_device(b"device bytes")
    duplicate = original.copy()
    assert duplicate.ptr != original.ptr
    assert duplicate.tobytes() == b"device bytes"
    from_pointer = DeviceBuffer(size=6, ptr=original.ptr)
    assert from_pointer.tobytes() == b"device"


def test_out_of_memory_is_a_memory_error():
    with pytest.raises(gpumem.OutOfMemoryError):
        DeviceBuffer(1 << 60)
    limited = mr.LimitingResourceAdaptor(mr.CudaMemoryResource(), MiB)
    with pytest.raises(gpumem.OutOfMemoryError, match=str(2 * MiB)):
        DeviceBuffer(2 * MiB, mr=limited)


def test_the_buffer_keeps_its_resource_alive_and_frees_into_it():
    stats = mr.StatisticsResourceAdaptor(mr.CudaMemoryResource())
    stats_ref = weakref.ref(stats)
    buffer = DeviceBuffer(1000, mr=stats)
    assert buffer.mr is stats
    del stats
    gc.collect()
    assert stats_ref() is not None
    assert stats_ref().allocation_counts.current_bytes == 1000
    del buffer
    gc.collect()
    assert stats_ref() is None


def test_the_current_resource_is_used_and_kept():
    stats = mr.StatisticsResourceAdaptor(mr.CudaMemoryResource())
    mr.set_current_device_resource(stats)
    try:
        buffer = DeviceBuffer.to_device(b"abc")
        assert buffer.mr is stats
        assert stats.allocation_counts.current_bytes == 3
    finally:
        mr.set_current_device_resource(None)
    stats_ref = weakref.ref(stats)
    del stats
    gc.collect()
    assert buffer.tobytes() == b"abc"  # its resource is still there
    del buffer
    gc.collect()
    assert stats_ref() is None


def test_cuda_array_interface():
    buffer = DeviceBuffer.to_device(b"x" * 1000)
    interface = buffer.__cuda_array_interface__
    assert interface["shape"] == (1000,)
    assert interface["typestr"] == "|u1"
    assert interface["data"] == (buffer.ptr, False)
    assert interface["version"] == 3
    assert interface.get("strides") is None
    assert interface["stream"] is None or (isinstance(interface["stream"], int) and interface["stream"] != 0)
    assert DeviceBuffer(0).__cuda_array_interface__["shape"] == (0,)


def _memory_is_host_memory(buffer):
    return buffer.__dlpack_device__()[0] == 1  # kDLCPU


def test_dlpack_device():
    device_type, device_id = DeviceBuffer(10).__dlpack_device__()
    assert device_type in (1, 2)  # kDLCPU on the host backend (host memory), kDLCUDA on the cuda backend
    assert device_id >= 0
    if device_type == 1:
        assert device_id == 0


def test_numpy_from_dlpack_shares_the_memory_and_keeps_the_buffer_alive():
    data = _pattern(4097)
    buffer = DeviceBuffer.to_device(data)
    if not _memory_is_host_memory(buffer):
        pytest.skip("the memory is device memory (cuda backend): NumPy cannot take it")
    buffer_ref = weakref.ref(buffer)
    array = np.from_dlpack(buffer)
    assert array.dtype == np.uint8 and array.shape == (4097,)
    assert array.ctypes.data == buffer.ptr  # zero-copy
    del buffer
    gc.collect()
    assert buffer_ref() is not None  # held by the capsule's tensor
    assert array.tobytes() == data
    del array
    gc.collect()
    assert buffer_ref() is None


def test_dlpack_capsule_keeps_the_buffer_alive_until_it_is_dropped():
    buffer = DeviceBuffer.to_device(b"abc")
    buffer_ref = weakref.ref(buffer)
    capsule = buffer.__dlpack__()
    assert type(capsule).__name__ == "PyCapsule"
    assert "dltensor" in repr(capsule)
    del buffer
    gc.collect()
    assert buffer_ref() is not None
    del capsule  # never consumed: its destructor releases the buffer
    gc.collect()
    assert buffer_ref() is None


def test_dlpack_of_an_empty_buffer_and_stream_rules():
    empty = DeviceBuffer(0)
    if not _memory_is_host_memory(empty):
        empty.__dlpack__(stream=-1)
        pytest.skip("CPU-only checks")
    assert np.from_dlpack(empty).shape == (0,)
    with pytest.raises(ValueError):
        empty.__dlpack__(stream=1)  # a CPU consumer passes no stream
