"""gpumem as the allocator of CuPy, PyTorch and Numba (gpumem.allocators).

On any machine (host backend included): the hooks table of the extension module, called through ctypes;
the PyTorch allocator library, loaded with ctypes and called directly (alloc, free, a refused allocation,
a free before install, another device, a free after gpumem.mr dropped its resources at exit); the refusals
(no CUDA backend, a library built without PyTorch); and that importing gpumem.allocators imports none of
the three clients.

With a GPU and the client installed (skipped otherwise): CuPy arithmetic on gpumem memory with checked
results; a PyTorch training loop giving the same losses on gpumem's allocator as on PyTorch's own (two
subprocesses: PyTorch's allocator can be swapped only before it is initialised) and torch.OutOfMemoryError
from gpumem; a Numba kernel writing gpumem memory, with the plug-in chosen by NUMBA_CUDA_MEMORY_MANAGER.
"""

import ctypes
import gc
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import gpumem
import gpumem.allocators
from gpumem import mr
from torch_hooks_table import hooks_table

MiB = 1 << 20
GPUMEM_SUCCESS = 0
GPUMEM_ERROR_OUT_OF_MEMORY = 1
GPUMEM_ERROR_INVALID_VALUE = 3


def run_python(code, *args, env=None, timeout=300):
    """Runs `code` with `args` in a fresh interpreter with gpumem importable; returns the CompletedProcess."""
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(Path(gpumem.__file__).resolve().parents[1])] + [p for p in [environment.get("PYTHONPATH")] if p]
    )
    environment.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=environment,
                          capture_output=True, text=True, timeout=timeout)


def installed(name):
    return importlib.util.find_spec(name) is not None


def on_cuda_backend():
    return gpumem.cuda.get_backend() == "cuda"


# ---- importing ------------------------------------------------------------------------------------------


def test_importing_gpumem_allocators_imports_no_client_library():
    result = run_python("""
        import sys
        import gpumem, gpumem.allocators
        print(sorted(name for name in ("cupy", "torch", "numba") if name in sys.modules))
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_unknown_attributes_of_gpumem_allocators_are_attribute_errors():
    with pytest.raises(AttributeError, match="no_such_allocator"):
        gpumem.allocators.no_such_allocator  # noqa: B018


def test_the_numba_plug_in_needs_numba_only_when_asked_for():
    if installed("numba"):
        assert gpumem.allocators.GpumemNumbaMemoryManager is gpumem.allocators.numba._numba_memory_manager
    else:
        with pytest.raises(ImportError, match="numba"):
            gpumem.allocators.GpumemNumbaMemoryManager  # noqa: B018


# ---- the hooks table, through ctypes ----------------------------------------------------------------------

@pytest.fixture
def hooks():
    return hooks_table()


def test_the_hooks_allocate_from_the_current_resource_and_free_through_gpumem(hooks, current_resource):
    stats = mr.StatisticsResourceAdaptor(mr.CudaMemoryResource())
    mr.set_current_device_resource(stats)
    out = ctypes.c_void_p(1)
    assert hooks.alloc_async(1000, -1, None, ctypes.byref(out)) == GPUMEM_SUCCESS
    assert out.value and out.value % 256 == 0
    assert gpumem.allocation_size(out.value) == 1000  # gpumem's own registry: one gpumem per process
    assert stats.allocation_counts.current_bytes == 1000
    assert hooks.free_async(out.value, None) == GPUMEM_SUCCESS
    assert stats.allocation_counts.current_bytes == 0
    # The C API's errors come back with their message.
    assert hooks.free_async(out.value, None) == GPUMEM_ERROR_INVALID_VALUE
    assert "already freed" in hooks.last_error().decode()


def test_the_hooks_return_null_for_zero_bytes_and_report_exhaustion(hooks, current_resource):
    out = ctypes.c_void_p(1)
    assert hooks.alloc_async(0, -1, None, ctypes.byref(out)) == GPUMEM_SUCCESS
    assert out.value is None
    mr.set_current_device_resource(mr.LimitingResourceAdaptor(mr.CudaMemoryResource(), MiB))
    out = ctypes.c_void_p(1)
    assert hooks.alloc_async(2 * MiB, -1, None, ctypes.byref(out)) == GPUMEM_ERROR_OUT_OF_MEMORY
    assert out.value is None
    assert str(2 * MiB) in hooks.last_error().decode()


def test_the_hooks_refuse_a_device_that_does_not_exist_and_leave_the_current_one(hooks):
    count = gpumem.cuda.get_device_count()
    before = gpumem.cuda.get_device_id()
    out = ctypes.c_void_p(1)
    assert hooks.alloc_async(256, count + 3, None, ctypes.byref(out)) == GPUMEM_ERROR_INVALID_VALUE
    assert out.value is None
    assert str(count + 3) in hooks.last_error().decode()
    assert gpumem.cuda.get_device_id() == before


# ---- the PyTorch allocator library, through ctypes ------------------------------------------------------


@pytest.fixture
def library():
    path = Path(gpumem.allocators.torch_allocator_library_path())
    assert path.is_file(), f"the build did not put {path.name} next to the extension module"
    assert path.parent == Path(gpumem._gpumem.__file__).resolve().parent
    return gpumem.allocators.torch._installed_library()


def test_the_library_allocates_from_gpumem_and_frees_through_it(library, current_resource):
    stats = mr.StatisticsResourceAdaptor(mr.CudaMemoryResource())
    mr.set_current_device_resource(stats)
    device = gpumem.cuda.get_device_id()
    assert library.gpumem_torch_alloc(0, device, None) is None  # 0 bytes: NULL, as PyTorch expects
    sizes = [1, 255, 256, 1000, 4096, 3 * MiB + 7]
    pointers = [library.gpumem_torch_alloc(size, device, None) for size in sizes]
    assert all(p and p % 256 == 0 for p in pointers)
    assert len(set(pointers)) == len(pointers)
    assert [gpumem.allocation_size(p) for p in pointers] == sizes
    assert stats.allocation_counts.current_bytes == sum(sizes)
    for pointer, size in zip(pointers, sizes):
        library.gpumem_torch_free(pointer, size, device, None)
    assert stats.allocation_counts.current_bytes == 0
    assert stats.allocation_counts.total_count == len(sizes)
    library.gpumem_torch_free(None, 0, device, None)  # PyTorch may free NULL: nothing happens


def test_the_library_reports_a_bad_free_on_stderr_without_crashing(library, capfd):
    library.gpumem_torch_free(0x1234500, 256, 0, None)
    assert "gpumem_torch_free: could not free" in capfd.readouterr().err


def test_an_allocation_the_resource_refuses_is_null_in_a_library_built_without_torch(library, capfd,
                                                                                      current_resource):
    if library.gpumem_torch_built_with_torch():
        pytest.skip("built with PyTorch: the failure is a c10::OutOfMemoryError (see the PyTorch OOM test)")
    limiting = mr.LimitingResourceAdaptor(mr.CudaMemoryResource(), MiB)
    mr.set_current_device_resource(limiting)
    assert library.gpumem_torch_alloc(2 * MiB, gpumem.cuda.get_device_id(), None) is None
    err = capfd.readouterr().err
    assert f"gpumem could not allocate {2 * MiB} bytes on device" in err
    assert str(2 * MiB) in err.split("for PyTorch:", 1)[1]  # gpumem's own message follows
    assert limiting.get_allocated_bytes() == 0
    p = library.gpumem_torch_alloc(1000, gpumem.cuda.get_device_id(), None)  # still usable
    assert p
    library.gpumem_torch_free(p, 1000, gpumem.cuda.get_device_id(), None)
    assert limiting.get_allocated_bytes() == 0


def test_install_refuses_a_missing_or_older_table_and_keeps_the_installed_one(library):
    address = gpumem._gpumem._allocator_hooks_address()
    assert library.gpumem_torch_install(None, 1) == 1
    assert library.gpumem_torch_install(address, 0) == 2
    p = library.gpumem_torch_alloc(512, gpumem.cuda.get_device_id(), None)  # the installed table still works
    assert p and gpumem.allocation_size(p) == 512
    library.gpumem_torch_free(p, 512, gpumem.cuda.get_device_id(), None)
    assert library.gpumem_torch_install(address, gpumem._gpumem._allocator_hooks_version) == 0


def test_the_library_refuses_to_allocate_before_the_hooks_are_installed():
    result = run_python("""
        import ctypes
        import gpumem.allocators
        library = ctypes.CDLL(gpumem.allocators.torch_allocator_library_path())  # not installed
        if library.gpumem_torch_built_with_torch():
            print("built with torch")   # it would throw a c10::Error, which ctypes cannot catch
        else:
            library.gpumem_torch_alloc.restype = ctypes.c_void_p
            library.gpumem_torch_alloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
            print(library.gpumem_torch_alloc(256, 0, None))
    """)
    assert result.returncode == 0, result.stderr
    if result.stdout.strip() == "built with torch":
        pytest.skip("built with PyTorch: the refusal is a c10::Error")
    assert result.stdout.strip() == "None"
    assert "called before gpumem_torch_install" in result.stderr


def test_the_library_allocates_on_the_device_pytorch_names():
    # Two emulated devices: PyTorch's device argument is made current for the allocation only.
    result = run_python("""
        import gpumem, gpumem.allocators
        from gpumem import mr
        library = gpumem.allocators.torch._installed_library()
        stats = [mr.StatisticsResourceAdaptor(mr.CudaMemoryResource()) for _ in range(2)]
        for device, adaptor in enumerate(stats):
            mr.set_per_device_resource(device, adaptor)
        assert gpumem.cuda.get_device_id() == 0
        p = library.gpumem_torch_alloc(4096, 1, None)
        assert p and gpumem.cuda.get_device_id() == 0
        assert [s.allocation_counts.current_bytes for s in stats] == [0, 4096]
        library.gpumem_torch_free(p, 4096, 1, None)
        assert [s.allocation_counts.current_bytes for s in stats] == [0, 0]
        print("ok")
    """, env={"GPUMEM_BACKEND": "host", "GPUMEM_HOST_DEVICES": "2"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_frees_during_interpreter_teardown_do_not_reach_destroyed_resources():
    # The atexit handler registered first runs last: after gpumem.mr has dropped (and destroyed) the
    # resource that allocated `p`. PyTorch frees like this at exit (module globals, cuBLAS workspaces).
    result = run_python("""
        import atexit, ctypes
        late = []
        atexit.register(lambda: late[0].gpumem_torch_free(late[1], 4096, 0, None))
        import gpumem, gpumem.allocators
        from gpumem import mr
        mr.set_current_device_resource(mr.StatisticsResourceAdaptor(mr.CudaMemoryResource()))
        library = gpumem.allocators.torch._installed_library()
        p = library.gpumem_torch_alloc(4096, 0, None)
        assert p
        late.extend([library, p])
        print("ok")
    """, env={"GPUMEM_BACKEND": "host"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
    assert "could not free" not in result.stderr


def test_torch_allocator_refuses_a_library_built_without_torch(library):
    if library.gpumem_torch_built_with_torch():
        pytest.skip("this build's library has PyTorch")
    with pytest.raises(RuntimeError, match="built without PyTorch") as raised:
        gpumem.allocators.torch_allocator()
    assert "import torch" in str(raised.value)
    assert "libgpumem_torch_allocator.so" in str(raised.value)


def test_torch_allocator_refuses_the_host_backend(library):
    if not library.gpumem_torch_built_with_torch():
        pytest.skip("the library is built without PyTorch (refused before the backend is asked)")
    result = run_python("""
        import gpumem, gpumem.allocators
        try:
            gpumem.allocators.torch_allocator()
        except RuntimeError as error:
            print(error)
    """, env={"GPUMEM_BACKEND": "host"})
    assert result.returncode == 0, result.stderr
    assert "PyTorch" in result.stdout and "'host' backend" in result.stdout


def test_cupy_allocator_refuses_the_host_backend():
    if on_cuda_backend():
        pytest.skip("gpumem runs on the cuda backend here")
    with pytest.raises(RuntimeError, match="CuPy.*'host' backend"):
        gpumem.allocators.cupy_allocator(1024)


# ---- CuPy (GPU) ------------------------------------------------------------------------------------------


@pytest.fixture
def cupy_on_gpumem(current_resource):
    """CuPy allocating through gpumem, from a StatisticsResourceAdaptor; CuPy's allocator restored after."""
    cupy = pytest.importorskip("cupy")
    if not on_cuda_backend():
        pytest.skip("CuPy needs gpumem on its cuda backend")
    stats = mr.StatisticsResourceAdaptor(mr.CudaMemoryResource())
    mr.set_current_device_resource(stats)
    previous = cupy.cuda.get_allocator()
    cupy.cuda.set_allocator(gpumem.allocators.cupy_allocator)
    yield cupy, stats
    cupy.cuda.get_current_stream().synchronize()
    gc.collect()
    cupy.cuda.set_allocator(previous)


def test_cupy_arithmetic_on_gpumem_memory(cupy_on_gpumem):
    import numpy

    cupy, stats = cupy_on_gpumem
    n = 1 << 20
    a = cupy.arange(n, dtype=cupy.float64)
    b = cupy.full(n, 2.5, dtype=cupy.float64)
    c = a * b + 1.0
    assert stats.allocation_counts.current_bytes >= 3 * n * 8
    owner = c.data.mem._owner
    assert isinstance(owner, gpumem.DeviceBuffer) and owner.ptr == c.data.ptr and owner.size == n * 8
    expected = numpy.arange(n, dtype=numpy.float64) * 2.5 + 1.0
    numpy.testing.assert_array_equal(cupy.asnumpy(c), expected)
    assert float(c.sum()) == float(expected.sum())
    matrix = cupy.arange(64 * 64, dtype=cupy.float32).reshape(64, 64) / 1000
    numpy.testing.assert_allclose(cupy.asnumpy(matrix @ matrix), cupy.asnumpy(matrix) @ cupy.asnumpy(matrix),
                                  rtol=1e-5)
    del a, b, c, owner, matrix
    gc.collect()
    assert stats.allocation_counts.current_bytes == 0
    assert stats.allocation_counts.total_count >= 4


def test_cupy_memory_is_ordered_on_cupys_current_stream(cupy_on_gpumem):
    cupy, _ = cupy_on_gpumem
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        x = cupy.ones(1000, dtype=cupy.int32)
        y = x * 7
    stream.synchronize()
    assert y.data.mem._owner.__cuda_array_interface__["stream"] == stream.ptr
    assert int(y.sum()) == 7000


def test_cupy_out_of_memory_is_a_memory_error_and_zero_bytes_is_null(cupy_on_gpumem):
    cupy, _ = cupy_on_gpumem
    zero = gpumem.allocators.cupy_allocator(0)
    assert zero.ptr == 0
    mr.set_current_device_resource(mr.LimitingResourceAdaptor(mr.CudaMemoryResource(), MiB))
    with pytest.raises(MemoryError, match=str(2 * MiB)):
        cupy.empty(2 * MiB, dtype=cupy.uint8)
    small = cupy.zeros(1000, dtype=cupy.uint8)  # still usable
    assert int(small.sum()) == 0


# ---- PyTorch (GPU, subprocesses) --------------------------------------------------------------------------

TRAINING = """
    import json, sys
    import torch
    use_gpumem = sys.argv[1] == "gpumem"
    if use_gpumem:
        import gpumem, gpumem.allocators
        from gpumem import mr
        stats = mr.StatisticsResourceAdaptor(mr.PoolMemoryResource(mr.CudaMemoryResource()))
        mr.set_current_device_resource(stats)
        torch.cuda.memory.change_current_allocator(gpumem.allocators.torch_allocator())
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)
    device = torch.device("cuda")
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    inputs = torch.randn(512, 64, device=device)
    targets = torch.randint(0, 10, (512,), device=device)
    losses = []
    for step in range(8):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    result = {"losses": losses}
    if use_gpumem:
        torch.cuda.synchronize()
        result["allocations"] = stats.allocation_counts.total_count
        result["live_bytes"] = stats.allocation_counts.current_bytes
    del model, optimizer, inputs, targets, loss
    print(json.dumps(result))
"""


@pytest.fixture
def torch_on_gpu(library):
    torch = pytest.importorskip("torch")
    if not on_cuda_backend() or not torch.cuda.is_available():
        pytest.skip("PyTorch on gpumem needs a GPU")
    if not library.gpumem_torch_built_with_torch():
        pytest.skip("libgpumem_torch_allocator was built without PyTorch: reconfigure where torch imports")
    return torch


def test_a_pytorch_training_loop_gives_the_same_losses_on_gpumem(torch_on_gpu):
    runs = {}
    for allocator in ("pytorch", "gpumem"):
        # Same seed, deterministic kernels (cuBLAS needs its workspace configured for that).
        result = run_python(TRAINING, allocator, env={"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}, timeout=600)
        assert result.returncode == 0, f"{allocator}: {result.stderr}"
        runs[allocator] = json.loads(result.stdout.strip().splitlines()[-1])
    expected, got = runs["pytorch"]["losses"], runs["gpumem"]["losses"]
    assert len(got) == len(expected) == 8
    assert got == pytest.approx(expected, rel=1e-6, abs=1e-7), f"PyTorch's allocator {expected}, gpumem {got}"
    assert expected[-1] < expected[0]  # it trains
    assert runs["gpumem"]["allocations"] > 10  # PyTorch's tensors came from gpumem
    assert runs["gpumem"]["live_bytes"] > 0  # the model is still held at that point


def test_pytorch_out_of_memory_is_torch_out_of_memory_error_with_gpumems_message(torch_on_gpu):
    result = run_python(f"""
        import torch, gpumem, gpumem.allocators
        from gpumem import mr
        mr.set_current_device_resource(mr.LimitingResourceAdaptor(mr.CudaMemoryResource(), {64 * MiB}))
        torch.cuda.memory.change_current_allocator(gpumem.allocators.torch_allocator())
        try:
            torch.empty({1 << 30}, dtype=torch.uint8, device="cuda")
        except torch.OutOfMemoryError as error:
            print("OOM:", str(error).splitlines()[0])
        small = torch.ones(1000, device="cuda")
        print("sum:", int(small.sum().item()))
    """)
    assert result.returncode == 0, result.stderr
    assert f"OOM: gpumem could not allocate {1 << 30} bytes on device 0 for PyTorch" in result.stdout
    assert "sum: 1000" in result.stdout


# ---- Numba (GPU, subprocesses) ----------------------------------------------------------------------------

NUMBA_KERNEL = """
    import gc, sys
    import numpy as np
    from numba import cuda
    from gpumem import mr
    stats = mr.StatisticsResourceAdaptor(mr.CudaMemoryResource())
    mr.set_current_device_resource(stats)

    n = 10000
    array = cuda.device_array(n, dtype=np.int64)
    manager = cuda.current_context().memory_manager
    assert type(manager).__name__ == "GpumemNumbaMemoryManager", type(manager)
    assert stats.allocation_counts.current_bytes == n * 8, stats.allocation_counts
    array.copy_to_device(7 * np.arange(n))                     # Numba writes gpumem memory by a copy
    assert (array.copy_to_host() == 7 * np.arange(n)).all()
    if sys.argv[1] == "kernel":                                 # and by a kernel, where Numba can compile one
        @cuda.jit
        def fill(out):
            i = cuda.grid(1)
            if i < out.size:
                out[i] = 3 * i + 1

        fill[(n + 255) // 256, 256](array)
        assert (array.copy_to_host() == 3 * np.arange(n) + 1).all()
    info = cuda.current_context().get_memory_info()
    assert 0 < info.free <= info.total, info
    handle = cuda.current_context().get_ipc_handle(array.gpu_data)  # the plug-in's get_ipc_handle
    assert (handle.size, handle.offset) == (n * 8, 0), (handle.size, handle.offset)  # cudaMalloc: no offset
    del array, handle
    gc.collect()
    assert stats.allocation_counts.current_bytes == 0, stats.allocation_counts
    print("ok")
"""

NUMBA_PLAIN_KERNEL = """
    import numpy as np
    from numba import cuda

    @cuda.jit
    def one(out):
        out[0] = 1

    a = cuda.device_array(1, dtype=np.int64)
    one[1, 1](a)
    assert a.copy_to_host()[0] == 1
"""


@pytest.fixture(scope="module")
def numba_kernels_work():
    """Whether this environment's Numba compiles and runs a kernel at all, without gpumem (on the GPU image,
    numba-cuda may not support the installed NumPy): the reason when it does not, else None."""
    result = run_python(NUMBA_PLAIN_KERNEL)  # Numba's own memory manager (the variable is not set here)
    if result.returncode == 0:
        return None
    return (result.stderr.strip().splitlines() or ["(no output)"])[-1]


@pytest.mark.parametrize("manager", ["gpumem.allocators.numba", "gpumem"])
def test_a_numba_kernel_writes_gpumem_memory(manager, request):
    pytest.importorskip("numba")
    if not on_cuda_backend():
        pytest.skip("Numba on gpumem needs a GPU")
    broken = request.getfixturevalue("numba_kernels_work")
    result = run_python(NUMBA_KERNEL, "nokernel" if broken else "kernel", env={"NUMBA_CUDA_MEMORY_MANAGER": manager})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
    if broken:
        pytest.skip(f"allocation, copies, memory info and IPC through gpumem checked; the kernel part skipped: "
                    f"Numba cannot run any kernel here, even without gpumem ({broken})")
