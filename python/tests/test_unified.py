"""gpumem.UnifiedBuffer: the published states, the NumPy views, and the data through every path."""

import numpy as np
import pytest

import gpumem

S = gpumem.BufferState


@pytest.fixture(params=[False, True], ids=["pageable", "pinned"])
def pinned(request):
    return request.param


def test_a_new_buffer_is_uninitialized_and_allocates_nothing(pinned):
    b = gpumem.UnifiedBuffer((3, 5), np.float64, pinned=pinned)
    assert b.state == S.UNINITIALIZED
    assert b.shape == (3, 5) and b.dtype == np.float64 and b.nbytes == 120 and b.pinned == pinned


def test_host_then_device_then_kernel_then_host(pinned):
    b = gpumem.UnifiedBuffer(1000, np.int32, pinned=pinned)
    h = b.host
    assert b.state == S.HOST_DIRTY  # taking .host is a write access
    h[:] = np.arange(1000, dtype=np.int32)
    view = b.device
    assert b.state == S.SYNCHRONIZED
    cai = view.__cuda_array_interface__
    assert cai["shape"] == (1000,) and cai["typestr"] == "<i4" and cai["version"] == 3
    assert cai["data"][0] % 256 == 0
    # "A kernel" writes the device copy: copy_from writes it directly.
    b.copy_from(np.full(1000, 7, dtype=np.int32))
    assert b.state == S.DEVICE_DIRTY
    assert (b.host_view == 7).all()
    assert b.state == S.SYNCHRONIZED


def test_taking_host_is_a_write_access_and_host_view_is_read_only(pinned):
    b = gpumem.UnifiedBuffer(16, np.uint8, pinned=pinned)
    b.copy_from(np.arange(16, dtype=np.uint8))
    assert b.state == S.DEVICE_ONLY
    v = b.host_view
    assert b.state == S.SYNCHRONIZED
    with pytest.raises(ValueError):
        v[0] = 1
    _ = b.host
    assert b.state == S.HOST_DIRTY


def test_dirty_marks_in_impossible_states_are_value_errors_naming_the_state(pinned):
    b = gpumem.UnifiedBuffer(8, np.float32, pinned=pinned)
    with pytest.raises(ValueError, match="UNINITIALIZED"):
        b.mark_device_dirty()
    _ = b.host
    with pytest.raises(ValueError, match="HOST_DIRTY"):
        b.mark_device_dirty()
    assert b.state == S.HOST_DIRTY


def test_copy_from_with_the_wrong_size_is_a_value_error(pinned):
    b = gpumem.UnifiedBuffer(10, np.float32, pinned=pinned)
    with pytest.raises(ValueError, match="40"):
        b.copy_from(np.zeros(11, dtype=np.float32))


def test_zeros_and_syncs_and_to_numpy(pinned):
    b = gpumem.UnifiedBuffer((4, 4), np.float32, pinned=pinned)
    b.host[:] = 3.0
    b.sync_to_device()
    assert b.state == S.SYNCHRONIZED
    b.zeros()
    assert b.state == S.DEVICE_DIRTY
    b.sync_to_host()
    assert b.state == S.SYNCHRONIZED
    out = b.to_numpy()
    assert out.shape == (4, 4) and (out == 0).all()
    out[0, 0] = 1  # a copy: the buffer is not touched
    assert b.state == S.SYNCHRONIZED and b.host_view[0, 0] == 0


def test_arrays_keep_the_buffer_alive(pinned):
    b = gpumem.UnifiedBuffer(1 << 16, np.uint16, pinned=pinned)
    h = b.host
    h[:] = 42
    del b
    assert (h == 42).all()


def test_a_non_contiguous_source_is_copied_in_c_order(pinned):
    b = gpumem.UnifiedBuffer((3, 2), np.int64, pinned=pinned)
    source = np.arange(6, dtype=np.int64).reshape(2, 3).T  # not C-contiguous
    b.copy_from(source)
    assert (b.host_view == np.ascontiguousarray(source)).all()


def test_state_names_are_the_published_ones():
    assert [s.name for s in S.__members__.values()] == [
        "UNINITIALIZED", "HOST_ONLY", "DEVICE_ONLY", "SYNCHRONIZED", "HOST_DIRTY", "DEVICE_DIRTY"]
