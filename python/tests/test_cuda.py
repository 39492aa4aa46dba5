"""gpumem.cuda from Python: devices, streams, callbacks, the current stream, events and graphs.

Passes on the host backend (streams are worker threads, events carry timestamps) and on a GPU.
"""

import gc
import os
import sys
import threading
import time
import weakref

import gpumem
import gpumem.cuda as cuda
import pytest

WAIT = 10.0  # seconds: a generous limit for things that should happen at once


def gate(stream):
    """Holds `stream` back until the returned threading.Event is set (a callback that waits).

    Garbage of earlier tests is collected first: a resource collected while the gate is closed would free its
    memory with the GIL held, and a free synchronises the device, which waits for the gate's callback, which
    waits for the GIL."""
    gc.collect()
    opened = threading.Event()
    stream.add_callback(lambda s, status, arg: arg.wait(WAIT), opened)
    return opened


# ---- devices ---------------------------------------------------------------------------------------------


def test_device_basics():
    device = cuda.Device()
    assert device.id == cuda.get_device_id() == int(device)
    assert cuda.Device(device) == device == cuda.Device(device.id)
    assert hash(cuda.Device(0)) == hash(cuda.Device(0))
    assert repr(cuda.Device(0)) == "<CUDA Device 0>"
    assert device.compute_capability.isdigit() and len(device.compute_capability) >= 2
    free, total = device.mem_info
    assert 0 <= free <= total and total == device.total_memory
    assert isinstance(device.name, str) and device.name
    assert isinstance(device.pci_bus_id, str)
    assert device.multi_processor_count >= 1
    assert cuda.get_device_count() >= 1
    assert cuda.is_available()
    assert cuda.get_backend() in ("cuda", "host")
    assert cuda.get_local_runtime_version() > 0
    assert cuda.get_driver_version() >= 0
    if cuda.get_backend() == "host":
        assert device.compute_capability == "00" and device.pci_bus_id == "" and cuda.get_driver_version() == 0
    device.synchronize()


def test_device_that_does_not_exist_raises_at_use_as_in_cupy():
    missing = cuda.Device(cuda.get_device_count())  # constructing is no error (CuPy's rule)
    for use in (missing.use, missing.synchronize, lambda: missing.__enter__(), lambda: missing.mem_info,
                lambda: missing.attributes, lambda: cuda.Device(-1).use()):
        with pytest.raises(gpumem.CUDARuntimeError, match="does not exist") as raised:
            use()
        assert raised.value.status == 101  # cudaErrorInvalidDevice


def test_device_context_manager_restores_the_previous_device():
    last = cuda.get_device_count() - 1
    before = cuda.get_device_id()
    with cuda.Device(last) as device:
        assert device.id == last and cuda.get_device_id() == last
        with cuda.Device(0):
            assert cuda.get_device_id() == 0
        assert cuda.get_device_id() == last
    assert cuda.get_device_id() == before


@pytest.mark.skipif(os.environ.get("GPUMEM_BACKEND") != "host", reason="emulates two devices on the host backend")
def test_device_context_manager_with_two_host_devices(run_on_two_host_devices):
    run_on_two_host_devices(
        """
        import gpumem.cuda as cuda
        assert cuda.get_device_count() == 2
        assert cuda.get_device_id() == 0
        with cuda.Device(1):
            assert cuda.get_device_id() == 1
            assert cuda.Stream().device_id == 1
            with cuda.Device(0):
                assert cuda.get_device_id() == 0
            assert cuda.get_device_id() == 1
        assert cuda.get_device_id() == 0
        cuda.Device(1).use()
        assert cuda.get_device_id() == 1
        print("ok")
        """
    )


# ---- streams ---------------------------------------------------------------------------------------------


def test_stream_create_synchronize_done():
    stream = cuda.Stream()
    assert isinstance(stream.ptr, int) and stream.ptr != 0
    assert stream.device_id == cuda.get_device_id()
    stream.synchronize()
    assert stream.done and stream.query()
    assert cuda.Stream(non_blocking=True).ptr != 0
    assert isinstance(cuda.Stream(priority=-1).priority, int)
    assert cuda.Stream.null.ptr == 0
    assert cuda.Stream(null=True) == cuda.Stream.null
    assert cuda.Stream.null.done
    cuda.Stream.null.synchronize()
    assert "Stream" in repr(stream) and hex(stream.ptr) in repr(stream)
    with pytest.raises(ValueError):
        cuda.Stream(null=True, non_blocking=True)


def test_stream_is_not_done_while_held_back():
    stream = cuda.Stream()
    opened = gate(stream)
    assert not stream.done
    opened.set()
    stream.synchronize()
    assert stream.done


def test_streams_compare_and_hash_by_handle():
    a, b = cuda.Stream(), cuda.Stream()
    assert a == a and a != b
    assert len({a, b, cuda.ExternalStream(a.ptr)}) == 2
    assert (a == 5) is False


def test_callback_runs_after_earlier_work_and_receives_stream_status_and_arg():
    stream = cuda.Stream()
    seen = []
    stream.add_callback(lambda s, status, arg: (time.sleep(0.05), seen.append("first")), None)
    stream.add_callback(lambda s, status, arg: seen.append((s, status, arg)), {"key": 42})
    stream.synchronize()
    assert seen == ["first", (stream, 0, {"key": 42})]


def test_callback_objects_live_until_it_ran_and_are_released_after():
    class Arg:
        pass

    stream = cuda.Stream()
    opened = gate(stream)
    arg = Arg()
    ran = []
    stream.add_callback(lambda s, status, a: ran.append(a is not None), arg)
    ref = weakref.ref(arg)
    del arg
    gc.collect()
    assert ref() is not None  # kept by the pending callback
    opened.set()
    stream.synchronize()
    assert ran == [True]
    gc.collect()
    assert ref() is None


def test_dropping_a_stream_with_a_pending_callback_does_not_deadlock():
    ran = threading.Event()
    stream = cuda.Stream()
    opened = gate(stream)
    stream.add_callback(lambda s, status, arg: arg.set(), ran)
    del stream  # the callback holds the Stream; it is released on the main thread after the callback ran
    gc.collect()
    opened.set()
    assert ran.wait(WAIT)
    cuda.Device().synchronize()


def test_callback_must_be_callable():
    with pytest.raises(TypeError):
        cuda.Stream().add_callback(42, None)


def test_exception_in_callback_is_unraisable(monkeypatch):
    reported = []
    monkeypatch.setattr(sys, "unraisablehook", lambda info: reported.append(info.exc_value))
    stream = cuda.Stream()

    def fail(s, status, arg):
        raise KeyError("from the callback")

    stream.add_callback(fail, None)
    stream.synchronize()
    assert len(reported) == 1 and isinstance(reported[0], KeyError)


def test_with_stream_nests_and_sets_the_current_stream():
    assert cuda.get_current_stream() == cuda.Stream.null
    a, b = cuda.Stream(), cuda.Stream()
    with a as entered:
        assert entered is a and cuda.get_current_stream() is a
        with b:
            assert cuda.get_current_stream() is b
            other = []
            thread = threading.Thread(target=lambda: other.append(cuda.get_current_stream()))
            thread.start()
            thread.join()
            assert other == [cuda.Stream.null]  # per thread
        assert cuda.get_current_stream() is a
    assert cuda.get_current_stream() == cuda.Stream.null


def test_leaving_a_with_block_makes_the_enclosing_blocks_stream_current_again_as_cupy():
    outer, used, inner = cuda.Stream(), cuda.Stream(), cuda.Stream()
    with outer:
        used.use()
        assert cuda.get_current_stream() is used
        with inner:
            assert cuda.get_current_stream() is inner
        assert cuda.get_current_stream() is outer, "the enclosing block's stream, not the one use() set"
    assert cuda.get_current_stream() == cuda.Stream.null
    used.use()
    assert cuda.get_current_stream() is used
    cuda.Stream.null.use()


def test_get_current_stream_takes_a_device_id():
    stream = cuda.Stream()
    device = cuda.get_device_id()
    with stream:
        assert cuda.get_current_stream(device) is stream
        assert cuda.get_current_stream(device_id=None) is stream
    assert cuda.get_current_stream(device) == cuda.Stream.null
    with pytest.raises(ValueError, match="does not exist"):
        cuda.get_current_stream(cuda.get_device_count())
    with pytest.raises(TypeError, match="device_id"):
        cuda.get_current_stream("0")


@pytest.mark.skipif(os.environ.get("GPUMEM_BACKEND") != "host", reason="emulates two devices on the host backend")
def test_the_current_stream_is_per_device_and_thread_with_two_host_devices(run_on_two_host_devices):
    run_on_two_host_devices(
        """
        import gpumem.cuda as cuda
        with cuda.Device(0):
            s0 = cuda.Stream()
        with s0, cuda.Device(1):
            assert cuda.get_current_stream() == cuda.Stream.null, "device 1 has its own current stream"
            assert cuda.get_current_stream(0) is s0
            event = cuda.Event()
            event.record()  # on device 1's current stream, as CuPy
            event.synchronize()
        with cuda.Device(1):
            s1 = cuda.Stream()
            with s1:
                assert cuda.get_current_stream(1) is s1 and cuda.get_current_stream(0) == cuda.Stream.null
                with cuda.Device(0):
                    assert cuda.get_current_stream() == cuda.Stream.null
                    try:
                        with s1:
                            raise AssertionError("entered a stream of another device")
                    except ValueError as error:
                        assert "device 1" in str(error) and "device 0" in str(error), error
                    try:
                        s1.use()
                        raise AssertionError("used a stream of another device")
                    except ValueError:
                        pass
                cuda.Event().record()
            assert cuda.get_current_stream() == cuda.Stream.null
        print("ok")
        """
    )


def test_with_stream_restores_after_an_exception():
    stream = cuda.Stream()
    with pytest.raises(RuntimeError):
        with stream:
            raise RuntimeError("inside")
    assert cuda.get_current_stream() == cuda.Stream.null


def test_external_stream_does_not_destroy_the_handle():
    owner = cuda.Stream()
    external = cuda.ExternalStream(owner.ptr)
    assert isinstance(external, cuda.Stream) and external == owner and external.ptr == owner.ptr
    seen = []
    external.add_callback(lambda s, status, arg: seen.append(arg), "via external")
    external.synchronize()
    del external
    gc.collect()
    owner.add_callback(lambda s, status, arg: seen.append(arg), "via owner")
    owner.synchronize()
    assert seen == ["via external", "via owner"] and owner.done


def test_per_thread_default_stream():
    assert cuda.Stream.ptds.ptr not in (0, None)
    cuda.Stream.ptds.synchronize()


# ---- events ----------------------------------------------------------------------------------------------


def test_event_record_synchronize_query():
    event = cuda.Event()
    assert event.done and event.query()  # never recorded
    assert isinstance(event.ptr, int) and event.ptr != 0
    stream = cuda.Stream()
    opened = gate(stream)
    event.record(stream)
    assert not event.done
    opened.set()
    event.synchronize()
    assert event.done and event.query()


def test_stream_record_returns_an_event_and_wait_event_orders_streams():
    first, second = cuda.Stream(), cuda.Stream()
    opened = gate(first)
    event = first.record()
    assert isinstance(event, cuda.Event)
    second.wait_event(event)
    seen = []
    second.add_callback(lambda s, status, arg: seen.append(arg), "after")
    time.sleep(0.05)
    assert seen == []  # second waits for first's gate
    opened.set()
    second.synchronize()
    assert seen == ["after"]
    mine = cuda.Event()
    assert first.record(mine) is mine


def test_event_record_defaults_to_the_current_stream():
    stream = cuda.Stream()
    opened = gate(stream)
    event = cuda.Event()
    with stream:
        event.record()
    assert not event.done
    opened.set()
    event.synchronize()
    assert event.done


def test_elapsed_time_covers_a_sleeping_callback():
    stream = cuda.Stream()
    start, end = cuda.Event(), cuda.Event()
    start.record(stream)
    stream.add_callback(lambda s, status, arg: time.sleep(arg), 0.05)
    end.record(stream)
    end.synchronize()
    elapsed = cuda.get_elapsed_time(start, end)
    assert isinstance(elapsed, float)
    assert elapsed >= 45.0  # the 50 ms sleep, less timer granularity


def test_elapsed_time_errors():
    with pytest.raises(ValueError, match="disable_timing"):
        start, end = cuda.Event(disable_timing=True), cuda.Event()
        start.record()
        end.record()
        end.synchronize()
        cuda.get_elapsed_time(start, end)
    with pytest.raises(gpumem.CUDARuntimeError):
        cuda.get_elapsed_time(cuda.Event(), cuda.Event())  # never recorded


def test_event_flags():
    assert cuda.Event(block=True).block
    assert cuda.Event(disable_timing=True).disable_timing
    with pytest.raises(ValueError, match="interprocess"):
        cuda.Event(interprocess=True)
    if cuda.get_backend() == "host":
        assert cuda.Event(disable_timing=True, interprocess=True).interprocess


# ---- graphs ----------------------------------------------------------------------------------------------


def test_graph_capture_and_launch_twice_runs_the_work_twice():
    stream = cuda.Stream()
    seen = []
    stream.begin_capture()
    assert stream.is_capturing()
    stream.add_callback(lambda s, status, arg: seen.append(arg), "captured")
    event = stream.record()
    graph = stream.end_capture()
    assert not stream.is_capturing()
    assert isinstance(graph, cuda.Graph)
    stream.synchronize()
    assert seen == []  # capture runs nothing
    graph.launch(stream)
    graph.launch(stream)
    stream.synchronize()
    assert seen == ["captured", "captured"]
    # An event recorded during capture stands for a point in the graph, and neither the capture nor a launch
    # records it: querying it is cudaErrorInvalidValue (seen on an H200), on both backends.
    with pytest.raises(gpumem.CUDARuntimeError):
        event.done
    with stream:
        graph.launch()  # the current stream
    stream.synchronize()
    assert seen == ["captured"] * 3


def test_graph_keeps_its_callbacks_alive_after_it_is_dropped_mid_launch():
    stream = cuda.Stream()
    seen = []
    stream.begin_capture()
    stream.add_callback(lambda s, status, arg: seen.append(arg), "ran")
    graph = stream.end_capture()
    opened = gate(stream)
    graph.launch(stream)
    del graph
    gc.collect()
    opened.set()
    stream.synchronize()
    assert seen == ["ran"]


def test_capture_errors():
    with pytest.raises(gpumem.CUDARuntimeError):
        cuda.Stream.null.begin_capture()
    stream = cuda.Stream()
    with pytest.raises(gpumem.CUDARuntimeError, match="without begin_capture") as raised:
        stream.end_capture()
    assert raised.value.status == 401  # cudaErrorIllegalState, as CUDA and CuPy
    stream.begin_capture()
    with pytest.raises(ValueError, match="already capturing"):
        stream.begin_capture()
    stream.end_capture()
    with pytest.raises(ValueError):
        cuda.Stream().begin_capture(mode="sideways")
    with pytest.raises(ValueError, match="not been captured"):
        cuda.Graph().launch(stream)
