"""The plain API from Python: alloc/zeros/free, their errors, and their cost being honest (no leaks)."""

import gpumem
import pytest


def test_alloc_returns_aligned_distinct_addresses_and_free_returns_them():
    pointers = [gpumem.alloc(size) for size in (1, 255, 256, 4096, 1 << 20)]
    assert all(isinstance(p, int) and p != 0 for p in pointers)
    assert all(p % 256 == 0 for p in pointers)
    assert len(set(pointers)) == len(pointers)
    assert [gpumem.allocation_size(p) for p in pointers] == [1, 255, 256, 4096, 1 << 20]
    for p in pointers:
        gpumem.free(p)


def test_zero_bytes_is_the_null_pointer_and_freeing_it_is_a_no_op():
    assert gpumem.alloc(0) == 0
    assert gpumem.zeros(0) == 0
    gpumem.free(0)


def test_double_free_is_a_value_error_naming_the_pointer():
    p = gpumem.alloc(512)
    gpumem.free(p)
    with pytest.raises(ValueError, match=hex(p)[2:]) as raised:
        gpumem.free(p)
    assert "already freed" in str(raised.value)


def test_unknown_pointer_is_a_value_error():
    with pytest.raises(ValueError, match="not allocated by gpumem"):
        gpumem.free(0x1234500)


def test_out_of_memory_is_a_memory_error_naming_size_device_free_and_total():
    with pytest.raises(gpumem.OutOfMemoryError) as raised:
        gpumem.alloc(1 << 60)
    assert isinstance(raised.value, MemoryError)
    message = str(raised.value)
    for word in ("1152921504606846976", "device", "free", "total"):
        assert word in message, message
    # Nothing leaked and the resource still works.
    p = gpumem.alloc(1 << 20)
    gpumem.free(p)


def test_bad_arguments_are_type_errors():
    with pytest.raises(TypeError):
        gpumem.alloc("16")
    with pytest.raises(TypeError):
        gpumem.alloc(1.5)
    with pytest.raises(TypeError):
        gpumem.free("not a pointer")
    with pytest.raises(TypeError):
        gpumem.alloc(16, stream="not a stream")


def test_a_negative_size_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match=r"alloc: size must be >= 0, got -1"):
        gpumem.alloc(-1)
    with pytest.raises(ValueError, match=r"zeros: size must be >= 0, got -4096"):
        gpumem.zeros(-4096)
    assert gpumem.live_allocation_count() == 0


def test_arguments_by_keyword_and_python_call_errors():
    import numpy as np

    p = gpumem.alloc(size=np.int64(512), stream=None)  # anything with __index__ is a size
    assert gpumem.allocation_size(p) == 512
    gpumem.free(ptr=p, stream=0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'bytes'"):
        gpumem.alloc(bytes=16)
    with pytest.raises(TypeError, match="missing required argument 'size'"):
        gpumem.alloc()
    with pytest.raises(TypeError, match="multiple values for argument 'size'"):
        gpumem.zeros(16, size=16)
    with pytest.raises(TypeError, match="takes at most 2 arguments"):
        gpumem.free(0, None, None)
    with pytest.raises(ValueError, match="alloc: size must be at most 18446744073709551615, got 1180591620717411303424"):
        gpumem.alloc(1 << 70)
    assert gpumem.live_allocation_count() == 0
    assert gpumem.alloc.__doc__.startswith("alloc(size: int, stream: object = None) -> int")


def test_out_of_memory_error_is_exported_as_a_memory_error_subclass():
    assert issubclass(gpumem.OutOfMemoryError, MemoryError)
    assert issubclass(gpumem.CUDARuntimeError, RuntimeError)
