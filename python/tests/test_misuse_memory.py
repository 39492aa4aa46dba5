"""Misuse of memory from Python: object dtypes, foreign, freed and doubly freed pointers, sizes at the limits.

Every buffer-protocol entry point refuses items that hold Python objects (their bytes are references: a
copy would duplicate or overwrite them without counting), before a byte moves. Pointers gpumem did not hand
out, or handed out and took back, are ValueErrors naming the pointer. Cases that end the process while the
contract that would make them errors is pending run in a subprocess and are expected to fail.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import gpumem
import gpumem.cuda as cuda
from gpumem import mr

# Not live: never handed out, or handed out and taken back (a foreign address may be one the plain API
# freed a moment ago: host memory is reused).
NOT_LIVE = "(not allocated by gpumem|was already freed)"
OBJECTS = np.array([object(), "text", 3], dtype=object)
STRUCTURED_WITH_OBJECTS = np.zeros(3, dtype=[("count", "i4"), ("payload", "O")])


def run_python(code, timeout=120):
    """Runs `code` in a fresh interpreter with gpumem importable, on this process's backend."""
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(Path(gpumem.__file__).resolve().parents[1])] + [p for p in [environment.get("PYTHONPATH")] if p])
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=environment, capture_output=True,
                          text=True, timeout=timeout)


# ---- object dtypes -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("array", [OBJECTS, STRUCTURED_WITH_OBJECTS], ids=["object", "structured"])
def test_device_buffer_refuses_arrays_of_python_objects(array):
    buffer = gpumem.DeviceBuffer(array.nbytes)
    with pytest.raises(TypeError, match="DeviceBuffer.to_device: data holds Python objects"):
        gpumem.DeviceBuffer.to_device(array)
    with pytest.raises(TypeError, match="DeviceBuffer.copy_from_host: data holds Python objects"):
        buffer.copy_from_host(array)
    out = np.empty_like(array)
    with pytest.raises(TypeError, match="DeviceBuffer.copy_to_host: out holds Python objects"):
        buffer.copy_to_host(out)
    assert all(item is None or item == 0 or isinstance(item, tuple) for item in out.tolist()), "out was written"


def test_copying_into_an_object_array_and_printing_it_does_not_crash():
    result = run_python("""
        import numpy as np, gpumem
        buffer = gpumem.DeviceBuffer.to_device(np.arange(10, dtype=np.int64).view(np.uint8))
        out = np.empty(10, object)
        try:
            buffer.copy_to_host(out)
        except TypeError as error:
            print("refused:", error)
        print(out)
    """)
    assert result.returncode == 0, result.stderr
    assert "refused: DeviceBuffer.copy_to_host: out holds Python objects" in result.stdout


@pytest.mark.parametrize("dtype", ["object", "O", np.dtype([("a", "i4"), ("b", "O")])], ids=str)
def test_unified_buffers_refuse_dtypes_that_hold_python_objects(dtype):
    with pytest.raises(TypeError, match="UnifiedBuffer: dtype .* holds Python objects"):
        gpumem.UnifiedBuffer(4, dtype)
    with pytest.raises(TypeError, match="UnifiedBufferPool.acquire: dtype .* holds Python objects"):
        gpumem.UnifiedBufferPool().acquire(4, dtype)
    buffer = gpumem.UnifiedBuffer(OBJECTS.nbytes // 8, "int64")
    with pytest.raises(TypeError, match="UnifiedBuffer.copy_from: source: dtype object holds Python objects"):
        buffer.copy_from(OBJECTS)


def test_printing_the_host_view_of_a_new_unified_buffer_does_not_crash():
    result = run_python("""
        import gpumem
        try:
            gpumem.UnifiedBuffer(4, "object").host_view
        except TypeError as error:
            print("refused:", error)
        print(gpumem.UnifiedBuffer(4, "float64").host_view.shape)
    """)
    assert result.returncode == 0, result.stderr
    assert "refused: UnifiedBuffer: dtype object holds Python objects" in result.stdout


def test_memory_pointer_copies_refuse_arrays_of_python_objects():
    pointer = cuda.alloc(OBJECTS.nbytes)
    for copy in (pointer.copy_from_host, pointer.copy_from_host_async, pointer.copy_from, pointer.copy_from_async):
        with pytest.raises(TypeError, match="host buffer holds Python objects"):
            copy(OBJECTS, OBJECTS.nbytes)
    out = np.empty(3, object)
    for copy in (pointer.copy_to_host, pointer.copy_to_host_async):
        with pytest.raises(TypeError, match="host buffer holds Python objects"):
            copy(out, out.nbytes)
    assert out.tolist() == [None, None, None]


def test_asnumpy_refuses_an_interface_of_python_objects():
    class Producer:
        def __init__(self):
            self.buffer = gpumem.DeviceBuffer(24)
            self.__cuda_array_interface__ = dict(shape=(3,), typestr="|O", data=(self.buffer.ptr, False), version=3,
                                                 strides=None, stream=None)

    with pytest.raises(TypeError, match="asnumpy: the __cuda_array_interface__ dtype object holds Python objects"):
        cuda.asnumpy(Producer())


@pytest.mark.parametrize("entry", ["to_device", "copy_from_host", "copy_to_host"])
def test_buffer_entry_points_check_contiguity_and_writability(entry):
    buffer = gpumem.DeviceBuffer(40)
    strided = np.arange(20, dtype=np.int32)[::2]
    if entry == "copy_to_host":
        with pytest.raises(ValueError, match="out must be C-contiguous"):
            buffer.copy_to_host(np.zeros(20, dtype=np.int32)[::2])
        with pytest.raises(ValueError, match="out must be a writable buffer"):
            read_only = np.zeros(40, np.uint8)
            read_only.flags.writeable = False
            buffer.copy_to_host(read_only)
        with pytest.raises(ValueError, match="has 8 bytes, too small"):
            buffer.copy_to_host(bytearray(8))
        with pytest.raises(TypeError, match="out must support the buffer protocol"):
            buffer.copy_to_host(12)
    elif entry == "to_device":
        with pytest.raises(ValueError, match="data must be C-contiguous"):
            gpumem.DeviceBuffer.to_device(strided)
        assert gpumem.DeviceBuffer.to_device(np.asfortranarray(np.ones((1, 32), np.uint8))[0]).size == 32  # one row
    else:
        with pytest.raises(ValueError, match="data must be C-contiguous"):
            buffer.copy_from_host(strided)
        with pytest.raises(ValueError, match="more than the buffer's 40"):
            buffer.copy_from_host(bytes(41))


# ---- foreign, freed and doubly freed pointers -------------------------------------------------------------


def test_foreign_freed_and_doubly_freed_pointers_are_value_errors_naming_them():
    foreign = np.zeros(16, np.uint8).ctypes.data
    for bad in (foreign, 1, 2**64 - 1):
        with pytest.raises(ValueError, match=f"{bad:x}.*{NOT_LIVE}"):
            gpumem.free(bad)
        with pytest.raises(ValueError, match=NOT_LIVE):
            gpumem.allocation_size(bad)
    p = gpumem.alloc(512)
    gpumem.free(p)
    for call in (gpumem.free, gpumem.allocation_size):
        with pytest.raises(ValueError, match=f"{p:x} was already freed"):
            call(p)
    with pytest.raises(ValueError, match="ptr must be >= 0, got -1"):
        gpumem.free(-1)
    with pytest.raises(ValueError, match="ptr must be at most"):
        gpumem.free(2**64)
    gpumem.free(0)  # free(NULL) does nothing
    assert gpumem.live_allocation_count() == 0


def test_a_pointer_of_a_device_buffer_or_memory_pointer_is_not_the_plain_apis():
    buffer = gpumem.DeviceBuffer(256)
    pointer = cuda.alloc(256)
    for foreign in (buffer, pointer):
        with pytest.raises(ValueError, match=NOT_LIVE):
            gpumem.free(foreign)  # an object with .ptr: its address, which gpumem.alloc did not hand out
    assert buffer.size == 256 and pointer.ptr != 0


def test_pooled_memory_freed_twice_and_pointers_past_their_memory():
    pointer = cuda.MemoryPool().malloc(1000)
    pointer.mem.free()
    pointer.mem.free()  # CuPy: later calls do nothing
    assert pointer.mem.ptr == 0
    memory = cuda.Memory(256)
    with pytest.raises(ValueError, match="outside the memory of 256 bytes"):
        cuda.MemoryPointer(memory, 257)
    with pytest.raises(ValueError, match="outside the memory"):
        cuda.MemoryPointer(memory, 0) + 300
    with pytest.raises(ValueError, match="exceeds the 256 bytes"):
        cuda.MemoryPointer(memory, 0).memset(0, 257)


@pytest.mark.parametrize("size", [2**64 - 1, 2**64 - 256, 2**63, 2**62])
def test_huge_sizes_are_memory_errors_even_where_a_pool_rounds_them_up(size):
    for allocate in (gpumem.alloc, gpumem.zeros, gpumem.DeviceBuffer, mr.CudaMemoryResource().allocate, cuda.Memory,
                     cuda.MemoryPool().malloc, cuda.MemoryAsyncPool().malloc, cuda.malloc_async,
                     cuda.PinnedMemoryPool().malloc, cuda.alloc_pinned_memory, cuda.PinnedMemory):
        with pytest.raises(MemoryError):
            allocate(size)
    assert gpumem.live_allocation_count() == 0


@pytest.mark.parametrize("size", [2**64, -1, -(2**63) - 1])
def test_sizes_outside_size_t_are_value_errors_naming_the_size(size):
    for allocate in (gpumem.alloc, gpumem.zeros, gpumem.DeviceBuffer, mr.CudaMemoryResource().allocate, cuda.Memory,
                     cuda.MemoryPool().malloc, cuda.alloc_pinned_memory, cuda.ManagedMemory):
        with pytest.raises(ValueError, match="size|nbytes"):
            allocate(size)


def test_zero_sizes_allocate_nothing():
    assert gpumem.alloc(0) == 0 and gpumem.zeros(0) == 0
    assert gpumem.DeviceBuffer(0).ptr == 0
    assert mr.CudaMemoryResource().allocate(0) == 0
    assert cuda.MemoryPool().malloc(0).ptr == 0
    assert gpumem.UnifiedBuffer(0).allocate().to_numpy().shape == (0,)
    assert gpumem.live_allocation_count() == 0


# ---- misuse that may end the process: run apart --------------------------------------------------------------

def expect_clean_error(result):
    """The child must exit normally, having printed the Python error it caught (a crash fails)."""
    assert result.returncode == 0 and "raised" in result.stdout, (
        f"exit status {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr[-3000:]}")


def test_a_pool_deallocation_twice_is_reported_not_fatal():
    expect_clean_error(run_python("""
        from gpumem import mr
        pool = mr.PoolMemoryResource(mr.CudaMemoryResource())
        p = pool.allocate(1000)
        pool.deallocate(p, 1000)
        try:
            pool.deallocate(p, 1000)
            print("no error")
        except ValueError as error:
            print("raised", error)
    """))


def deallocate_foreign(resource):
    return run_python(f"""
        import numpy as np
        from gpumem import mr
        resource = mr.{resource}
        foreign = np.zeros(4096, np.uint8)
        try:
            resource.deallocate(foreign.ctypes.data + 256 - foreign.ctypes.data % 256, 1024)
            print("returned")
        except ValueError as error:
            print("raised", error)
    """)


def test_deallocating_a_foreign_pointer_into_a_cuda_memory_resource_is_survived():
    result = deallocate_foreign("CudaMemoryResource()")
    assert result.returncode == 0, result.stderr[-3000:]


def test_deallocating_a_foreign_pointer_into_a_pool_is_reported_not_fatal():
    expect_clean_error(deallocate_foreign("PoolMemoryResource(mr.CudaMemoryResource())"))


def test_a_double_free_through_the_plain_api_over_a_pool_is_a_value_error():
    expect_clean_error(run_python("""
        import gpumem
        from gpumem import mr
        mr.set_current_device_resource(mr.PoolMemoryResource(mr.CudaMemoryResource()))
        p = gpumem.alloc(1000)
        gpumem.free(p)
        try:
            gpumem.free(p)
        except ValueError as error:
            print("raised", error)
    """))
