"""Tensor.record_stream through gpumem's allocator hooks table, on host streams (any backend, no PyTorch): a free
waits for the work of the recorded streams, the refused mode and bad pointers fail with gpumem's message, and a
free meeting a capture is held back until nothing captures."""

import gc
import threading

import pytest

import gpumem
from gpumem import cuda, mr
from torch_hooks_table import hooks_table

INVALID_VALUE = 3
SIZE = 4096
QUIET = 0.3  # seconds in which a callback that is free to run does run
WAIT = 10.0


@pytest.fixture
def hooks(current_resource):
    """The table, over a stream-ordered resource (cudaFree would synchronise the device, the gated stream too)."""
    mr.set_current_device_resource(mr.VmmPoolMemoryResource())
    table = hooks_table()
    gpumem._gpumem._torch_record_stream_mode("order")
    yield table
    gpumem._gpumem._torch_record_stream_mode("order")


def allocate(hooks, stream):
    status, ptr = hooks.alloc(SIZE, -1, stream.ptr)
    assert status == 0, hooks.error()
    return ptr


# CUDA runs the host callbacks of every stream on one thread, so a callback that waits blocks the callbacks of the
# other streams too, and a stream gated that way cannot be told from the others: the gated tests run on the host
# backend (test_torch_gpu_streams.py holds a stream back with a kernel on the GPU).
host_gates_only = pytest.mark.skipif(cuda.get_backend() == "cuda",
                                     reason="a gate made of a host callback blocks every stream's callbacks on CUDA")


def gate_stream(stream):
    """Blocks `stream` until the returned event is set (garbage collected first: see test_cuda.py's gate)."""
    gc.collect()
    gate = threading.Event()
    stream.add_callback(lambda s, status, arg: arg.wait(WAIT), gate)
    return gate


def ran_after_free(hooks, record):
    """Allocates on s0, uses it on a gated s1 (recorded when `record`), frees on s0, then asks whether work queued on
    s0 after the free runs while s1 is still blocked."""
    s0, s1 = cuda.Stream(non_blocking=True), cuda.Stream(non_blocking=True)
    ptr = allocate(hooks, s0)
    gate = gate_stream(s1)
    if record:
        assert hooks.record_stream(ptr, s1.ptr) == 0, hooks.error()
    assert hooks.free2(ptr, SIZE, -1, s0.ptr) == 0, hooks.error()
    after = threading.Event()
    s0.add_callback(lambda s, status, arg: arg.set(), after)
    ran_early = after.wait(QUIET)
    gate.set()
    s0.synchronize()
    s1.synchronize()
    assert after.is_set()
    return ran_early


@host_gates_only
def test_a_free_waits_for_the_work_of_a_recorded_stream(hooks):
    assert not ran_after_free(hooks, record=True)


@host_gates_only
def test_without_record_stream_the_free_does_not_wait(hooks):
    # The control: the test above fails without the feature.
    assert ran_after_free(hooks, record=False)


@host_gates_only
def test_recording_the_allocation_stream_or_twice_orders_nothing_more(hooks):
    s0, s1 = cuda.Stream(non_blocking=True), cuda.Stream(non_blocking=True)
    ptr = allocate(hooks, s0)
    gate = gate_stream(s1)
    assert hooks.record_stream(ptr, s0.ptr) == 0, hooks.error()
    assert hooks.record_stream(ptr, s0.ptr) == 0, hooks.error()
    assert hooks.free2(ptr, SIZE, -1, s0.ptr) == 0, hooks.error()
    after = threading.Event()
    s0.add_callback(lambda s, status, arg: arg.set(), after)
    assert after.wait(WAIT)
    gate.set()
    s1.synchronize()


def test_the_error_mode_refuses_with_a_message_that_says_what_to_do(hooks):
    s0 = cuda.Stream(non_blocking=True)
    ptr = allocate(hooks, s0)
    gpumem._gpumem._torch_record_stream_mode("error")
    assert hooks.record_stream(ptr, s0.ptr) == INVALID_VALUE
    assert hooks.error() == (
        "Tensor.record_stream is disabled by GPUMEM_TORCH_ALLOC_CONF=record_stream:error; synchronise the streams "
        "before the tensor is freed"
    )
    gpumem._gpumem._torch_record_stream_mode("order")
    assert hooks.record_stream(ptr, s0.ptr) == 0
    assert hooks.free2(ptr, SIZE, -1, s0.ptr) == 0


def test_an_unknown_mode_is_a_value_error():
    with pytest.raises(ValueError, match="'order' or 'error'.*'sometimes'"):
        gpumem._gpumem._torch_record_stream_mode("sometimes")


def test_a_pointer_that_is_not_live_is_refused_by_name(hooks):
    s0 = cuda.Stream(non_blocking=True)
    assert hooks.record_stream(0x1234500, s0.ptr) == INVALID_VALUE
    assert "0x1234500" in hooks.error() and "not a live allocation" in hooks.error()
    ptr = allocate(hooks, s0)
    assert hooks.free2(ptr, SIZE, -1, s0.ptr) == 0
    assert hooks.record_stream(ptr, s0.ptr) == INVALID_VALUE  # freed
    assert hex(ptr) in hooks.error()
    assert hooks.record_stream(None, s0.ptr) == INVALID_VALUE


def test_a_free_whose_recorded_stream_is_capturing_is_held_back_and_the_capture_stays_valid(hooks):
    # Ordering the free would record an event in s1's capture and make s0 wait on it, which joins s0 to the
    # capture and leaves it unjoined: the capture could not end.
    s0, s1 = cuda.Stream(non_blocking=True), cuda.Stream(non_blocking=True)
    ptr = allocate(hooks, s0)
    assert hooks.record_stream(ptr, s1.ptr) == 0
    held = gpumem._gpumem._torch_held_frees()
    s1.begin_capture(mode="global")
    assert hooks.free2(ptr, SIZE, -1, s0.ptr) == 0, hooks.error()
    assert gpumem._gpumem._torch_held_frees() == held + 1
    assert hooks.record_stream(ptr, s1.ptr) == 0, "still live while held back"
    s1.end_capture()
    # The next free made while nothing captures carries it out.
    other = allocate(hooks, s0)
    assert hooks.record_stream(other, s1.ptr) == 0
    assert hooks.free2(other, SIZE, -1, s0.ptr) == 0, hooks.error()
    assert gpumem._gpumem._torch_held_frees() == 0
    assert hooks.record_stream(ptr, s1.ptr) == INVALID_VALUE, "freed now"
    s0.synchronize()


def test_a_free_on_a_capturing_allocation_stream_is_held_back(hooks):
    s0, s1 = cuda.Stream(non_blocking=True), cuda.Stream(non_blocking=True)
    ptr = allocate(hooks, s0)
    assert hooks.record_stream(ptr, s1.ptr) == 0
    s0.begin_capture(mode="global")
    assert hooks.free2(ptr, SIZE, -1, s0.ptr) == 0, hooks.error()
    assert gpumem._gpumem._torch_held_frees() >= 1
    s0.end_capture()
    s1.synchronize()
    other = allocate(hooks, s0)  # nothing recorded for it: the next free made while nothing captures
    assert hooks.free2(other, SIZE, -1, s0.ptr) == 0
    assert gpumem._gpumem._torch_held_frees() == 0
    assert hooks.record_stream(ptr, s1.ptr) == INVALID_VALUE
