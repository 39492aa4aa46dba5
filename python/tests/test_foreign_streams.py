"""Streams that belong to the program: CuPy, PyTorch, Numba and raw CUDA create and destroy streams without
telling gpumem, and CUDA turns a call on a destroyed stream into a crash. gpumem may use a stream only during
the call that passed it, unless it holds the stream alive (a DeviceBuffer keeps its stream object).

These run on the GPU (the host backend's own check is the C++ battery, where a destroyed stream handle stops
the process). Each case runs in a fresh interpreter, so a crash fails the case that caused it, and the exit
status covers the interpreter's teardown too.
"""

import textwrap

import pytest

from test_allocators import on_cuda_backend, run_python

RESOURCES = {
    "pool": "mr.PoolMemoryResource(mr.CudaMemoryResource())",
    "vmm": "mr.VmmPoolMemoryResource()",
    "arena": "mr.ArenaMemoryResource(mr.CudaMemoryResource(), arena_size=1 << 30)",
    "binning": "mr.BinningMemoryResource(mr.PoolMemoryResource(mr.CudaMemoryResource()), 8, 22)",
    "fixed_size": "mr.FixedSizeMemoryResource(mr.CudaMemoryResource(), block_size=1 << 20)",
    "cuda_async": "mr.CudaAsyncMemoryResource()",
    "cuda": "mr.CudaMemoryResource()",
}

# Raw CUDA through ctypes, from the runtime library CuPy or PyTorch load: streams gpumem never hears of.
RAW_CUDA = """
    import ctypes, ctypes.util
    def load_cudart():
        import glob, os
        candidates = [ctypes.util.find_library("cudart")]
        for module in ("nvidia.cuda_runtime", "torch", "cupy"):
            try:
                base = os.path.dirname(__import__(module, fromlist=["_"]).__file__)
            except Exception:
                continue
            candidates += glob.glob(os.path.join(base, "**", "libcudart.so*"), recursive=True)
        for name in [c for c in candidates if c]:
            try:
                return ctypes.CDLL(name)
            except OSError:
                pass
        raise RuntimeError("no libcudart here")
    cudart = load_cudart()
    def stream_create(flags):
        handle = ctypes.c_void_p()
        assert cudart.cudaStreamCreateWithFlags(ctypes.byref(handle), ctypes.c_uint(flags)) == 0
        return handle.value
    def stream_destroy(handle):
        assert cudart.cudaStreamDestroy(ctypes.c_void_p(handle)) == 0
    def memset_async(ptr, value, size, stream):
        assert cudart.cudaMemsetAsync(ctypes.c_void_p(ptr), ctypes.c_int(value), ctypes.c_size_t(size),
                                      ctypes.c_void_p(stream)) == 0
"""


@pytest.fixture(autouse=True)
def needs_gpu():
    if not on_cuda_backend():
        pytest.skip("foreign streams of CuPy, PyTorch and raw CUDA need a GPU")


def with_raw_cuda(code):
    """`code` after the definitions of RAW_CUDA."""
    return textwrap.dedent(RAW_CUDA) + textwrap.dedent(code)


def check(code, *args, env=None, timeout=600):
    result = run_python(code, *args, env=env, timeout=timeout)
    assert result.returncode == 0, f"exit status {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert "terminate called" not in result.stderr, result.stderr
    assert result.stdout.strip().endswith("ok"), result.stdout
    return result


@pytest.mark.parametrize("resource", sorted(RESOURCES))
def test_cupy_streams_dropped_after_their_arrays(resource):
    pytest.importorskip("cupy")
    check("""
        import gc, sys, cupy, gpumem
        from gpumem import mr
        mr.set_current_device_resource(eval(sys.argv[1]))
        cupy.cuda.set_allocator(gpumem.allocators.cupy_allocator)
        for i in range(200):
            s = cupy.cuda.Stream(non_blocking=True)
            with s:
                a = cupy.arange(1000 + i)
                assert int(a.sum()) == (999 + i) * (1000 + i) // 2
            del a
            s.synchronize()
            del s
            gc.collect()
        b = cupy.ones(1 << 16)  # 512 KiB: within the fixed-size resource's blocks
        assert float(b.sum()) == float(1 << 16)
        del b
        cupy.cuda.Device().synchronize()
        print("ok")
    """, RESOURCES[resource])


@pytest.mark.parametrize("resource", sorted(RESOURCES))
def test_a_resource_used_on_a_stream_that_is_then_destroyed(resource):
    # RMM's PoolTest.DeletedStream, with CuPy's streams and with raw CUDA streams destroyed while their
    # work may still run.
    pytest.importorskip("cupy")
    check(with_raw_cuda("""
        import gc, sys, cupy
        from gpumem import mr
        r = eval(sys.argv[1])
        for i in range(100):
            s = cupy.cuda.Stream(non_blocking=i % 2 == 0)
            p = r.allocate(4096 + 256 * i, stream=s.ptr)
            r.deallocate(p, 4096 + 256 * i, stream=s.ptr)
            del s
            gc.collect()
            raw = stream_create(i % 2)
            q = r.allocate(1 << 20, stream=raw)
            memset_async(q, i, 1 << 20, raw)
            r.deallocate(q, 1 << 20, stream=raw)
            stream_destroy(raw)  # no synchronisation: CUDA finishes the work by itself
        blocks = [r.allocate(4096 + 256 * i) for i in range(100)]
        for i, p in enumerate(blocks):
            r.deallocate(p, 4096 + 256 * i)
        for release in ("release", "release_unused", "flush_thread_caches"):
            if hasattr(r, release):
                getattr(r, release)()
        print("ok")
    """), RESOURCES[resource])


@pytest.mark.parametrize("resource", ["pool", "cuda_async", "vmm"])
def test_a_device_buffer_outlives_the_stream_object_it_was_made_on(resource):
    check("""
        import gc, sys, gpumem
        from gpumem import mr, cuda
        mr.set_current_device_resource(eval(sys.argv[1]))
        buffers = []
        for i in range(64):
            s = cuda.Stream(non_blocking=True)
            buffers.append(gpumem.DeviceBuffer(size=4096 + i, stream=s))
            del s
            gc.collect()
        del buffers
        gc.collect()
        cuda.Device().synchronize()
        print("ok")
    """, RESOURCES[resource])


def test_threads_create_and_drop_thousands_of_streams_while_allocating():
    pytest.importorskip("cupy")
    check(with_raw_cuda("""
        import gc, threading, cupy, gpumem
        from gpumem import mr, cuda
        resources = [eval(text) for text in (%s)]
        mr.set_current_device_resource(resources[0])
        cupy.cuda.set_allocator(gpumem.allocators.cupy_allocator)
        errors = []
        def work(t):
            try:
                for i in range(400):
                    r = resources[(t + i) %% len(resources)]
                    kind = i %% 3
                    if kind == 0:
                        s = cupy.cuda.Stream(non_blocking=True)
                        with s:
                            a = cupy.full(1024 + i, t, dtype=cupy.int32)
                            assert int(a[-1]) == t
                        p = r.allocate(65536, stream=s.ptr)
                        r.deallocate(p, 65536, stream=s.ptr)
                        del a
                        del s
                    elif kind == 1:
                        raw = stream_create(1)
                        p = r.allocate(4096, stream=raw)
                        memset_async(p, 1, 4096, raw)
                        r.deallocate(p, 4096, stream=raw)
                        stream_destroy(raw)
                    else:
                        s = cuda.Stream(non_blocking=True)
                        b = gpumem.DeviceBuffer(size=8192, stream=s)
                        del s
                        del b
            except Exception as error:  # reported below
                errors.append(repr(error))
        threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        gc.collect()
        cupy.cuda.Device().synchronize()
        assert not errors, errors
        print("ok")
    """ % ", ".join(repr(RESOURCES[name]) for name in ("pool", "vmm", "arena", "binning", "cuda_async"))))


def test_pytorch_streams_with_gpumem_as_its_allocator():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no GPU")
    check("""
        import gc, torch, gpumem
        from gpumem import mr
        mr.set_current_device_resource(mr.PoolMemoryResource(mr.CudaMemoryResource()))
        torch.cuda.memory.change_current_allocator(gpumem.allocators.torch_allocator())
        total = 0.0
        for i in range(300):
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                x = torch.ones(1000 + i, device="cuda")
                total += float((x * 2).sum())
            s.synchronize()
            del x, s
            if i % 50 == 0:
                gc.collect()
        assert total == sum(2.0 * (1000 + i) for i in range(300))
        print("ok")
    """)


GENERATE = """
    import torch, gpumem
    from gpumem import mr
    mr.set_current_device_resource(mr.VmmPoolMemoryResource())
    torch.cuda.memory.change_current_allocator(gpumem.allocators.torch_allocator())
    torch.manual_seed(0)
    d, vocab = 512, 1000
    emb = torch.nn.Embedding(vocab, d).cuda().half()
    layers = torch.nn.ModuleList(torch.nn.Linear(d, d) for _ in range(4)).cuda().half()
    head = torch.nn.Linear(d, vocab).cuda().half()
    with torch.no_grad():
        for request in range(6):
            tokens = torch.randint(0, vocab, (2 + request % 3, 8), device="cuda")
            cache = []
            for step in range(24):
                x = emb(tokens[:, -1:])
                for layer in layers:
                    x = torch.relu(layer(x))
                cache.append(x)
                context = torch.cat(cache, dim=1).mean(dim=1, keepdim=True)
                tokens = torch.cat([tokens, head(x + context).argmax(-1)], dim=1)
    torch.cuda.synchronize()
    print(tokens.shape[1], "ok")
"""


def test_a_pytorch_generation_program_on_the_vmm_pool_exits_cleanly_every_time():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no GPU")
    for run in range(8):
        check(GENERATE)


def test_numba_arrays_on_streams_that_are_dropped():
    pytest.importorskip("numba")
    check("""
        import gc
        import numpy as np
        from numba import cuda
        from gpumem import mr
        mr.set_current_device_resource(mr.PoolMemoryResource(mr.CudaMemoryResource()))
        for i in range(100):
            s = cuda.stream()
            a = cuda.to_device(np.arange(1000 + i), stream=s)
            assert a.copy_to_host(stream=s)[-1] == 999 + i
            s.synchronize()
            del a, s
            gc.collect()
        print("ok")
    """, env={"NUMBA_CUDA_MEMORY_MANAGER": "gpumem"})
