"""Conformance with CuPy's documented cupy.cuda API: programs written for CuPy run with gpumem.cuda.

Each test exercises one name as CuPy's documentation and tests use it, through gpumem.cuda (docs/python.md,
"CuPy", has the table of what is the same and what differs, and why). The tests marked gpu need the cuda
backend; where CuPy itself is importable there, some compare with it directly.
"""

import ctypes
import gc
import io
import re
import sys
import threading
import weakref

import numpy as np
import pytest

import gpumem
import gpumem.cuda as cuda
from gpumem.cuda import memory_hooks, runtime

gpu = pytest.mark.skipif(cuda.get_backend() != "cuda", reason="needs the cuda backend (a GPU)")
host_only = pytest.mark.skipif(cuda.get_backend() != "host", reason="the host backend's behaviour")


def cupy_or_skip():
    if cuda.get_backend() != "cuda":
        pytest.skip("compares with CuPy on a GPU")
    return pytest.importorskip("cupy")


# ---- Graph ---------------------------------------------------------------------------------------------------


def test_graph_captures_by_itself_and_replays_on_launch():
    stream = cuda.Stream(non_blocking=True)
    seen = []
    graph = cuda.Graph()
    graph.capture_begin(stream)
    assert stream.is_capturing()
    stream.launch_host_func(seen.append, "replayed")
    graph.capture_end(stream)
    assert not stream.is_capturing() and seen == []
    for _ in range(3):
        graph.launch(stream)
    stream.synchronize()
    assert seen == ["replayed"] * 3


def test_graph_capture_begin_defaults_to_the_current_stream():
    stream = cuda.Stream(non_blocking=True)
    seen = []
    graph = cuda.Graph()
    with stream:
        graph.capture_begin()
        stream.add_callback(lambda s, status, arg: seen.append((s is stream, status, arg)), "x")
        graph.capture_end()
        graph.launch()  # the current stream
    stream.synchronize()
    assert seen == [(True, 0, "x")]


def test_graph_copies_device_memory_at_each_launch():
    stream = cuda.Stream(non_blocking=True)
    source, target = cuda.alloc(1024), cuda.alloc(1024)
    source.copy_from_host(np.arange(256, dtype=np.float32), 1024)
    graph = cuda.Graph()
    graph.capture_begin(stream)
    target.copy_from_device_async(source, 1024, stream=stream)
    graph.capture_end()
    target.memset(0, 1024)
    graph.launch(stream)
    stream.synchronize()
    out = np.empty(256, np.float32)
    target.copy_to_host(out, 1024)
    assert (out == np.arange(256, dtype=np.float32)).all()


def test_graph_misuse_raises_cupys_errors():
    stream = cuda.Stream(non_blocking=True)
    with pytest.raises(ValueError, match="not been captured"):
        cuda.Graph().launch(stream)
    with pytest.raises(gpumem.CUDARuntimeError) as raised:
        cuda.Graph().capture_end()
    assert raised.value.status == runtime.errorIllegalState
    graph = cuda.Graph()
    graph.capture_begin(stream)
    with pytest.raises(ValueError, match="already capturing"):
        graph.capture_begin(stream)
    with pytest.raises(ValueError, match="another stream"):
        graph.capture_end(cuda.Stream(non_blocking=True))
    with pytest.raises(gpumem.CUDARuntimeError, match="Graph.capture_end"):
        stream.end_capture()
    graph.capture_end(stream)
    with pytest.raises(gpumem.CUDARuntimeError):
        cuda.Graph().capture_begin(cuda.Stream.null)  # the legacy stream cannot be captured
    with pytest.raises(TypeError, match="stream"):
        cuda.Graph().capture_begin("abc")


def test_a_graph_dropped_while_capturing_ends_the_capture():
    stream = cuda.Stream(non_blocking=True)
    graph = cuda.Graph()
    graph.capture_begin(stream)
    del graph
    gc.collect()
    assert not stream.is_capturing()
    stream.synchronize()


def test_stream_end_capture_returns_a_graph_as_in_cupy():
    stream = cuda.Stream(non_blocking=True)
    seen = []
    with stream:
        stream.begin_capture()
        stream.launch_host_func(seen.append, 1)
        graph = stream.end_capture()
    graph.launch(stream=stream)
    stream.synchronize()
    assert isinstance(graph, cuda.Graph) and seen == [1]


# ---- cuBLAS ---------------------------------------------------------------------------------------------------


@host_only
def test_get_cublas_handle_is_a_clear_error_on_the_host_backend():
    with pytest.raises(gpumem.CUDARuntimeError, match="cuBLAS needs the cuda backend") as raised:
        cuda.get_cublas_handle()
    assert raised.value.status == runtime.errorNotSupported


@gpu
def test_get_cublas_handle_is_one_handle_per_device_and_thread():
    handles = [cuda.get_cublas_handle(), None, None]

    def other_thread():
        handles[1] = cuda.get_cublas_handle()
        handles[2] = cuda.get_cublas_handle()

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert isinstance(handles[0], int) and handles[0] != 0
    assert handles[0] == cuda.get_cublas_handle()  # the same on the same thread
    assert handles[0] != handles[1] and handles[1] == handles[2]  # another thread has its own, as in CuPy


@gpu
def test_cublas_handle_works_in_a_real_call():
    cublas = ctypes.CDLL("libcublas.so.%d" % (runtime.runtimeGetVersion() // 1000))
    n = 64
    x = cuda.alloc(n * 4)
    x.copy_from_host(np.arange(n, dtype=np.float32), n * 4)
    result = ctypes.c_float()
    cublas.cublasSnrm2_v2.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                                      ctypes.POINTER(ctypes.c_float)]
    status = cublas.cublasSnrm2_v2(ctypes.c_void_p(cuda.get_cublas_handle()), n, ctypes.c_void_p(x.ptr), 1,
                                   ctypes.byref(result))
    assert status == 0
    assert result.value == pytest.approx(float(np.linalg.norm(np.arange(n, dtype=np.float32))), rel=1e-5)


# ---- get_array_module -----------------------------------------------------------------------------------------


def test_get_array_module_is_numpy_for_host_data():
    assert cuda.get_array_module() is np
    assert cuda.get_array_module(np.zeros(3), 1, "x", None) is np


def test_get_array_module_of_gpumem_device_arrays():
    buffer = gpumem.DeviceBuffer(size=64)
    module = cuda.get_array_module(np.zeros(3), buffer)
    if cuda.get_backend() == "host":
        assert module is cuda  # its asnumpy handles them
        assert module.asnumpy(buffer).nbytes == 64
    else:
        cupy = sys.modules.get("cupy")
        assert module is cupy or module is cuda


@gpu
def test_get_array_module_of_a_cupy_array_is_cupy():
    cupy = cupy_or_skip()
    a = cupy.arange(4)
    assert cuda.get_array_module(a) is cupy is cupy.get_array_module(a)
    assert cuda.get_array_module(np.zeros(1)) is np is cupy.get_array_module(np.zeros(1))


# ---- streams --------------------------------------------------------------------------------------------------


def test_launch_host_func_calls_with_the_argument_only():
    stream = cuda.Stream()
    seen = []
    stream.launch_host_func(seen.append, "arg")
    stream.synchronize()
    assert seen == ["arg"]
    with pytest.raises(TypeError, match="callable"):
        stream.launch_host_func(None, 1)


def test_is_non_blocking():
    assert cuda.Stream(non_blocking=True).is_non_blocking
    assert not cuda.Stream().is_non_blocking
    assert not cuda.Stream.null.is_non_blocking


def test_cuda_stream_protocol_and_from_external():
    stream = cuda.Stream()
    assert stream.__cuda_stream__() == (0, stream.ptr)
    assert cuda.Stream.null.__cuda_stream__() == (0, 0)

    class Foreign:
        def __init__(self, ptr):
            self.ptr = ptr

        def __cuda_stream__(self):
            return (0, self.ptr)

    foreign = Foreign(stream.ptr)
    wrapped = cuda.Stream.from_external(foreign)
    assert isinstance(wrapped, cuda.Stream) and wrapped.ptr == stream.ptr and wrapped == stream
    assert wrapped.device_id == cuda.get_device_id()
    seen = []
    wrapped.launch_host_func(seen.append, 1)
    wrapped.synchronize()
    assert seen == [1]
    alive = weakref.ref(foreign)
    del foreign
    gc.collect()
    assert alive() is not None  # kept by the wrapping Stream
    del wrapped
    gc.collect()
    assert alive() is None


def test_from_external_refuses_what_cupy_refuses():
    with pytest.raises(AttributeError, match="__cuda_stream__"):
        cuda.Stream.from_external(object())

    class Returns:
        def __init__(self, result):
            self.result = result

        def __cuda_stream__(self):
            return self.result

    with pytest.raises(TypeError):
        cuda.Stream.from_external(Returns([0, 0]))
    with pytest.raises(TypeError):
        cuda.Stream.from_external(Returns((0, "x")))
    with pytest.raises(ValueError, match="version"):
        cuda.Stream.from_external(Returns((1, 0)))


def test_external_stream_is_deprecated_and_keeps_an_unknown_device():
    owner = cuda.Stream()
    with pytest.warns(DeprecationWarning, match="from_external"):
        external = cuda.ExternalStream(owner.ptr)
    assert external.device_id == -1 and external.ptr == owner.ptr
    with pytest.warns(DeprecationWarning):
        assert cuda.ExternalStream(owner.ptr, device_id=0).device_id == 0
    with external:  # used with the current device
        assert cuda.get_current_stream() is external
    assert cuda.Stream.null.device_id == -1 and cuda.Stream.ptds.device_id == -1  # CuPy's singletons


def test_get_current_stream_of_a_device():
    stream = cuda.Stream()
    assert cuda.get_current_stream(cuda.get_device_id()) == cuda.Stream.null
    with stream:
        assert cuda.get_current_stream() is stream
        assert cuda.get_current_stream(device_id=cuda.get_device_id()) is stream
    assert cuda.get_current_stream() == cuda.Stream.null


def test_done_is_false_during_a_capture_as_in_cupy():
    stream = cuda.Stream(non_blocking=True)
    stream.begin_capture()
    assert stream.done is False
    try:
        stream.end_capture()
    except gpumem.CUDARuntimeError:
        pass  # the query invalidates a capture that is not relaxed; CuPy's relaxed default keeps it
    assert stream.done


def test_end_capture_without_a_capture_is_a_cuda_runtime_error():
    with pytest.raises(gpumem.CUDARuntimeError) as raised:
        cuda.Stream().end_capture()
    assert isinstance(raised.value, RuntimeError) and raised.value.status == runtime.errorIllegalState


@gpu
def test_end_capture_error_is_cupys_status():
    cupy = cupy_or_skip()
    with pytest.raises(cupy.cuda.runtime.CUDARuntimeError) as theirs:
        cupy.cuda.Stream().end_capture()
    with pytest.raises(gpumem.CUDARuntimeError) as ours:
        cuda.Stream().end_capture()
    assert ours.value.status == theirs.value.status


# ---- devices --------------------------------------------------------------------------------------------------


def test_device_use_returns_the_device():
    device = cuda.Device(0)
    assert device.use() is device and cuda.get_device_id() == 0


def test_device_ordering_and_equality_as_in_cupy():
    a, b = cuda.Device(0), cuda.Device(1)  # Device(1) need not exist: only its use raises
    assert a < b and a <= b and b > a and b >= a and a <= cuda.Device(0) and a >= cuda.Device(0)
    assert not (a < cuda.Device(0)) and a == cuda.Device(0) and a != b
    assert a != 0 and a != None and a != object()  # noqa: E711
    for other in (0, 1, None, object()):
        for compare in (lambda: a < other, lambda: a <= other, lambda: a > other, lambda: a >= other,
                        lambda: other < a, lambda: other >= a):
            with pytest.raises(TypeError):
                compare()
    assert sorted([b, a]) == [a, b]


def test_a_missing_device_raises_at_use_not_at_construction():
    missing = cuda.Device(cuda.get_device_count())
    assert missing.id == cuda.get_device_count()
    with pytest.raises(gpumem.CUDARuntimeError) as raised:
        missing.use()
    assert raised.value.status == runtime.errorInvalidDevice
    with pytest.raises(gpumem.CUDARuntimeError):
        missing.attributes
    with pytest.raises(gpumem.CUDARuntimeError):
        with missing:
            pass
    assert cuda.get_device_id() == 0


def test_device_attributes_is_a_dict_of_ints():
    attributes = cuda.Device().attributes
    assert isinstance(attributes, dict) and attributes
    assert all(isinstance(k, str) and isinstance(v, int) for k, v in attributes.items())
    assert "MaxThreadsPerBlock" in attributes and "ComputeCapabilityMajor" in attributes
    assert attributes["MultiProcessorCount"] == cuda.Device().multi_processor_count
    assert str(attributes["ComputeCapabilityMajor"]) + str(attributes["ComputeCapabilityMinor"]) == \
        cuda.Device().compute_capability


@gpu
def test_device_attributes_match_cupys():
    cupy = cupy_or_skip()
    theirs = cupy.cuda.Device().attributes
    ours = cuda.Device().attributes
    shared = set(theirs) & set(ours)
    assert len(shared) >= 0.9 * len(theirs), sorted(set(theirs) - set(ours))
    assert {k: ours[k] for k in shared} == {k: theirs[k] for k in shared}


@host_only
def test_from_pci_bus_id_on_the_host_backend():
    with pytest.raises(gpumem.CUDARuntimeError) as raised:
        cuda.Device.from_pci_bus_id("fake:id")
    assert raised.value.status == runtime.errorInvalidValue
    with pytest.raises(gpumem.CUDARuntimeError) as raised:
        cuda.Device.from_pci_bus_id("FFFF:FF:FF.F")
    assert raised.value.status == runtime.errorInvalidDevice
    with pytest.raises(TypeError, match="pci_bus_id"):
        cuda.Device.from_pci_bus_id(0)


@gpu
def test_from_pci_bus_id_finds_the_device():
    d1 = cuda.Device()
    assert re.match(r"^[a-fA-F0-9]{4}:[a-fA-F0-9]{2}:[a-fA-F0-9]{2}\.[a-fA-F0-9]", d1.pci_bus_id)
    d2 = cuda.Device.from_pci_bus_id(d1.pci_bus_id)
    assert d1 == d2 and cuda.Device(d2) == d2
    with pytest.raises(gpumem.CUDARuntimeError):
        cuda.Device.from_pci_bus_id("fake:id")
    with pytest.raises(gpumem.CUDARuntimeError):
        cuda.Device.from_pci_bus_id("FFFF:FF:FF.F")


# ---- memory ---------------------------------------------------------------------------------------------------


def test_memory_pool_malloc_zero_is_a_plain_memory():
    p = cuda.MemoryPool().malloc(0)
    assert type(p.mem) is cuda.Memory and p.ptr == 0 and p.mem.size == 0
    assert p.mem.device_id == cuda.get_device_id()


def test_unowned_memory_finds_the_pointers_device():
    backing = cuda.Memory(1024)
    unowned = cuda.UnownedMemory(backing.ptr + 256, 256, backing)
    assert unowned.device_id == backing.device_id
    assert cuda.UnownedMemory(backing.ptr, 256, backing, device_id=-1).device_id == backing.device_id
    with pytest.raises(RuntimeError, match="explicit device ID"):
        cuda.UnownedMemory(0, 0, None)
    assert cuda.UnownedMemory(0, 0, None, device_id=0).ptr == 0


@host_only
def test_unowned_memory_finds_the_device_of_each_host_device(run_on_two_host_devices):
    run_on_two_host_devices(
        """
        import gpumem.cuda as cuda
        with cuda.Device(1):
            backing = cuda.Memory(256)
        assert cuda.get_device_id() == 0
        assert cuda.UnownedMemory(backing.ptr, 256, backing).device_id == 1
        print("ok")
        """
    )


def test_memory_async_stream_ref_is_a_weak_reference_to_the_stream():
    stream = cuda.Stream()
    memory = cuda.MemoryAsync(512, stream)
    assert isinstance(memory.stream_ref, weakref.ref) and memory.stream_ref() is stream
    assert cuda.MemoryAsync(512, cuda.Stream.null).stream_ref() is cuda.Stream.null
    stream.synchronize()


def test_memory_async_pool_get_limit_of_an_unlimited_pool():
    pool = cuda.MemoryAsyncPool()
    pool.set_limit(size=0)
    assert pool.get_limit() == 2**64 - 1  # CuPy's UINT64_MAX release threshold
    pool.set_limit(size=1 << 20)
    assert pool.get_limit() == 1 << 20
    pool.set_limit()
    assert pool.get_limit() == 2**64 - 1


def test_managed_memory_prefetch_and_advise():
    memory = cuda.ManagedMemory(4096)
    stream = cuda.Stream()
    memory.prefetch(stream)
    memory.prefetch(stream, device_id=cuda.get_device_id())
    memory.prefetch(stream, device_id=runtime.cudaCpuDeviceId)  # to the host
    stream.synchronize()
    with pytest.raises(gpumem.CUDARuntimeError):
        memory.prefetch(stream, device_id=cuda.get_device_count())
    with pytest.raises(TypeError):
        memory.prefetch(stream, 0)  # device_id is keyword-only, as in CuPy
    device = cuda.Device()
    for advice in (runtime.cudaMemAdviseSetReadMostly, runtime.cudaMemAdviseUnsetReadMostly,
                   runtime.cudaMemAdviseSetPreferredLocation, runtime.cudaMemAdviseSetAccessedBy):
        memory.advise(advice, device)
    with pytest.raises(gpumem.CUDARuntimeError):
        memory.advise(99, device)
    with pytest.raises(TypeError, match="Device"):
        memory.advise(runtime.cudaMemAdviseSetReadMostly, 0)
    view = np.ctypeslib.as_array((ctypes.c_uint8 * 16).from_address(memory.ptr))
    view[:] = 7  # managed memory stays usable from the host after the hints
    assert (view == 7).all()


def test_memory_and_pinned_memory_subclass_with_a_python_init():
    class TaggedMemory(cuda.Memory):
        def __init__(self, size, tag):
            super().__init__(size)
            self.tag = tag

    class TaggedPinned(cuda.PinnedMemory):
        def __init__(self, size, tag):
            super().__init__(size)
            self.tag = tag

    memory = TaggedMemory(512, "a")
    assert memory.tag == "a" and memory.size == 512 and memory.ptr != 0
    pointer = cuda.MemoryPointer(memory, 256)
    assert pointer.ptr == memory.ptr + 256 and pointer.mem is memory
    pointer.memset(1, 256)
    pinned = TaggedPinned(64, "b")
    assert pinned.tag == "b" and pinned.size == 64 and pinned.ptr != 0
    assert cuda.PinnedMemoryPointer(pinned, 16).size() == 48  # CuPy's PinnedMemoryPointer.size() is a method
    assert cuda.PinnedMemoryPointer(pinned, 0).ptr == pinned.ptr


# ---- runtime --------------------------------------------------------------------------------------------------


def test_runtime_functions():
    count = runtime.getDeviceCount()
    assert count == cuda.get_device_count() >= 1
    free, total = runtime.memGetInfo()
    assert 0 <= free <= total and total == cuda.Device().mem_info[1]
    assert runtime.getDevice() == cuda.get_device_id()
    runtime.setDevice(count - 1)
    assert runtime.getDevice() == count - 1
    runtime.setDevice(0)
    with pytest.raises(runtime.CUDARuntimeError) as raised:
        runtime.setDevice(count)
    assert raised.value.status == runtime.errorInvalidDevice
    runtime.deviceSynchronize()
    assert runtime.runtimeGetVersion() == cuda.get_local_runtime_version() > 0
    assert runtime.driverGetVersion() == cuda.get_driver_version()
    assert runtime.CUDARuntimeError is gpumem.CUDARuntimeError and issubclass(runtime.CUDARuntimeError, RuntimeError)


def test_pointer_get_attributes():
    memory = cuda.Memory(1024)
    attributes = runtime.pointerGetAttributes(memory.ptr + 100)
    assert attributes.type == runtime.memoryTypeDevice and attributes.device == memory.device_id
    assert attributes.devicePointer == memory.ptr + 100
    managed = cuda.ManagedMemory(256)
    attributes = runtime.pointerGetAttributes(managed.ptr)
    assert attributes.type == runtime.memoryTypeManaged and attributes.device == managed.device_id
    pinned = cuda.alloc_pinned_memory(256)
    assert runtime.pointerGetAttributes(pinned.ptr).type == runtime.memoryTypeHost
    plain = np.zeros(16)
    attributes = runtime.pointerGetAttributes(plain.ctypes.data)
    assert attributes.type == runtime.memoryTypeUnregistered


@gpu
def test_runtime_matches_cupys():
    cupy = cupy_or_skip()
    theirs = cupy.cuda.runtime
    assert runtime.getDeviceCount() == theirs.getDeviceCount()
    assert runtime.driverGetVersion() == theirs.driverGetVersion()
    assert len(runtime.memGetInfo()) == len(theirs.memGetInfo()) == 2
    assert runtime.memGetInfo()[1] == theirs.memGetInfo()[1]
    memory = cuda.Memory(256)
    ours, their = runtime.pointerGetAttributes(memory.ptr), theirs.pointerGetAttributes(memory.ptr)
    assert (ours.type, ours.device, ours.devicePointer) == (their.type, their.device, their.devicePointer)


# ---- memory hooks ---------------------------------------------------------------------------------------------


class Recorder(cuda.MemoryHook):
    name = "Recorder"

    def __init__(self):
        self.calls = []

    def __getattribute__(self, attribute):
        if attribute.endswith("process"):
            return lambda **kwargs: object.__getattribute__(self, "calls").append((attribute, kwargs))
        return object.__getattribute__(self, attribute)


def test_memory_hooks_fire_around_malloc_alloc_and_free_with_cupys_arguments():
    pool = cuda.MemoryPool()
    device = cuda.get_device_id()
    with Recorder() as hook:
        p = pool.malloc(1000)
        ptr = p.ptr
        del p
        gc.collect()
    names = [name for name, _ in hook.calls]
    assert names == ["malloc_preprocess", "alloc_preprocess", "alloc_postprocess", "malloc_postprocess",
                     "free_preprocess", "free_postprocess"]
    calls = dict(hook.calls)
    assert calls["malloc_preprocess"] == dict(device_id=device, size=1000, mem_size=1024)
    assert calls["alloc_preprocess"]["device_id"] == device and calls["alloc_preprocess"]["mem_size"] >= 1024
    assert calls["alloc_postprocess"]["mem_ptr"] != 0
    malloc = calls["malloc_postprocess"]
    assert malloc["size"] == 1000 and malloc["mem_size"] == 1024 and malloc["mem_ptr"] == ptr and malloc["pmem_id"]
    free = calls["free_preprocess"]
    assert free == dict(device_id=device, mem_size=1024, mem_ptr=ptr, pmem_id=malloc["pmem_id"])
    assert calls["free_postprocess"] == free


def test_memory_hooks_see_no_alloc_when_the_pool_has_the_block():
    pool = cuda.MemoryPool()
    del_me = pool.malloc(4096)
    del del_me
    with Recorder() as hook:
        p = pool.malloc(4096)
    assert [name for name, _ in hook.calls] == ["malloc_preprocess", "malloc_postprocess"]
    del p


def test_memory_hooks_fire_for_gpumem_cuda_alloc_and_are_thread_local():
    with Recorder() as hook:
        p = cuda.alloc(256)
        other = []
        thread = threading.Thread(target=lambda: other.append(cuda.alloc(256)))
        thread.start()
        thread.join()
        del other
    mallocs = [kwargs for name, kwargs in hook.calls if name == "malloc_postprocess"]
    assert len(mallocs) == 1 and mallocs[0]["mem_ptr"] == p.ptr  # the other thread has no hooks
    del p


def test_memory_hook_registration_rules():
    hook = cuda.MemoryHook()
    with hook:
        assert cuda.memory_hook.get_memory_hooks()["MemoryHook"] is hook
        with pytest.raises(KeyError, match="already exists"):
            cuda.MemoryHook().__enter__()
        cuda.alloc(256)  # the base class does nothing
    assert "MemoryHook" not in cuda.memory_hook.get_memory_hooks()


def test_an_exception_in_a_malloc_hook_propagates():
    class Failing(cuda.MemoryHook):
        name = "Failing"

        def malloc_preprocess(self, **kwargs):
            raise RuntimeError("refused by the hook")

    with Failing():
        with pytest.raises(RuntimeError, match="refused by the hook"):
            cuda.MemoryPool().malloc(256)


def test_debug_print_hook_writes_cupys_json_lines():
    out = io.StringIO()
    pool = cuda.MemoryPool()
    with memory_hooks.DebugPrintHook(file=out):
        p = pool.malloc(24)
        ptr = p.ptr
        del p
        gc.collect()
    lines = out.getvalue().splitlines()
    assert re.fullmatch(r'\{"hook":"alloc","device_id":0,"mem_size":\d+,"mem_ptr":\d+\}', lines[0])
    assert re.fullmatch(r'\{"hook":"malloc","device_id":0,"size":24,"mem_size":256,"mem_ptr":%d,"pmem_id":"0x[0-9a-f]+"\}'
                        % ptr, lines[1])
    assert re.fullmatch(r'\{"hook":"free","device_id":0,"mem_size":256,"mem_ptr":%d,"pmem_id":"0x[0-9a-f]+"\}' % ptr,
                        lines[2])
    assert len(lines) == 3


def test_line_profile_hook_reports_the_allocating_line():
    hook = memory_hooks.LineProfileHook()
    pool = cuda.MemoryPool()
    with hook:
        kept = pool.malloc(1024)  # the line the report names
    out = io.StringIO()
    hook.print_report(file=out)
    report = out.getvalue().splitlines()
    assert report[0].startswith("_root (1.00KB, ")
    assert any("test_line_profile_hook_reports_the_allocating_line (1.00KB" in line for line in report)
    del kept
