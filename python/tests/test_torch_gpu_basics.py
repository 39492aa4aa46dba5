"""gpumem.torch with PyTorch on a GPU: install() and its default VMM pool, the statistics against PyTorch's own
tensors, torch.cuda.empty_cache and set_per_process_memory_fraction reaching gpumem, out of memory and recovery,
GPUMEM_TORCH_ALLOC_CONF, and `python -m gpumem.torch script.py`. Each case runs in a new interpreter: PyTorch lets
its allocator be swapped once per process, before the first CUDA tensor. Skipped without PyTorch, a GPU, gpumem's
cuda backend, or an allocator library built with PyTorch's headers."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import gpumem
import gpumem.allocators

MiB = 1 << 20


@pytest.fixture(scope="module")
def torch_gpu():
    torch = pytest.importorskip("torch")
    if gpumem.cuda.get_backend() != "cuda" or not torch.cuda.is_available():
        pytest.skip("gpumem.torch on a GPU needs gpumem's cuda backend and a CUDA device")
    library = gpumem.allocators.torch._installed_library()
    if not library.gpumem_torch_built_with_torch():
        pytest.skip("libgpumem_torch_allocator was built without PyTorch: reconfigure where torch imports")
    return torch


def environment(extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(gpumem.__file__).resolve().parents[1])] + [p for p in [env.get("PYTHONPATH")] if p]
    )
    env.pop("GPUMEM_TORCH_ALLOC_CONF", None)
    env.update(extra or {})
    return env


def run(code, env=None, args=(), timeout=300):
    """Runs `code` in a new interpreter and asserts that it printed "ok" last; returns its stdout."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=environment(env),
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert done.stdout.strip().splitlines()[-1] == "ok", done.stdout
    return done.stdout


def test_install_makes_a_vmm_pool_on_the_first_tensor(torch_gpu):
    run("""
        import torch, gpumem.torch
        from gpumem import mr
        allocator = gpumem.torch.install()
        assert gpumem.torch.install() is allocator  # idempotent
        assert gpumem.torch.installed()
        x = torch.ones(1000, device="cuda")
        pool = gpumem.torch.resource(0)
        assert isinstance(pool, mr.VmmPoolMemoryResource), pool
        assert pool.bytes_in_use >= 4000 and pool.physical_bytes >= pool.slab_size
        assert gpumem.torch.resource(torch.device("cuda:0")) is not None
        assert float(x.sum().item()) == 1000.0
        print("ok")
    """)


def test_install_after_the_first_tensor_says_how_to_do_it(torch_gpu):
    out = run("""
        import torch, gpumem.torch
        torch.ones(1, device="cuda")
        try:
            gpumem.torch.install()
        except RuntimeError as error:
            print(error)
        print("ok")
    """)
    assert "before the first CUDA tensor" in out and "python -m gpumem.torch" in out


def test_allocated_bytes_are_the_live_tensors_storage_and_peaks_reset(torch_gpu):
    run("""
        import torch, gpumem.torch
        gpumem.torch.install()
        tensors = [torch.empty(n, dtype=torch.uint8, device="cuda") for n in (1000, 1 << 20, 12345)]
        tensors.append(torch.zeros(300, 7, device="cuda"))
        tensors.append(torch.arange(4096, device="cuda", dtype=torch.float64))
        torch.cuda.synchronize()
        live = sum(t.untyped_storage().nbytes() for t in tensors)
        stats = gpumem.torch.memory_stats()
        assert stats["allocated_bytes.all.current"] == live, (stats["allocated_bytes.all.current"], live)
        assert stats["allocation.all.current"] == len(tensors)
        assert gpumem.torch.memory_allocated(0) == live
        assert gpumem.torch.memory_reserved() >= live
        big = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
        del big
        assert gpumem.torch.max_memory_allocated() == live + (64 << 20)
        assert gpumem.torch.memory_allocated() == live
        gpumem.torch.reset_peak_memory_stats()
        assert gpumem.torch.max_memory_allocated() == live
        freed = tensors.pop(1).untyped_storage().nbytes()
        assert gpumem.torch.memory_allocated() == live - freed
        assert gpumem.torch.max_memory_allocated() == live
        summary = gpumem.torch.memory_summary()
        assert "Allocated memory" in summary
        print("ok")
    """)


def test_torch_empty_cache_gives_the_pools_free_memory_back_to_the_device(torch_gpu):
    run("""
        import torch, gpumem.torch
        gpumem.torch.install()
        keep = torch.ones(1 << 20, device="cuda")
        x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
        x.fill_(1)
        del x
        torch.cuda.synchronize()
        reserved = gpumem.torch.memory_reserved()
        assert reserved >= 1 << 30
        free_before = torch.cuda.mem_get_info()[0]
        torch.cuda.empty_cache()   # PyTorch's own function reaches gpumem (reset_fn)
        free_after = torch.cuda.mem_get_info()[0]
        released = reserved - gpumem.torch.memory_reserved()
        # The slab that holds `keep` stays; the tensor's first bytes may have shared it.
        assert released >= (1 << 30) - (64 << 20), released
        assert free_after - free_before >= (1 << 30) * 9 // 10, (free_before, free_after)
        assert float(keep.sum().item()) == float(1 << 20)
        print("ok")
    """)


def test_a_memory_fraction_caps_pytorch_and_out_of_memory_recovers(torch_gpu):
    run("""
        import torch, gpumem.torch
        gpumem.torch.install()
        torch.cuda.set_per_process_memory_fraction(0.3)   # before the first tensor: kept for the pool
        total = torch.cuda.mem_get_info()[1]
        assert abs(gpumem.torch.get_per_process_memory_fraction() - 0.3) < 1e-6
        small = torch.ones(1 << 20, device="cuda")
        try:
            torch.empty(int(0.35 * total), dtype=torch.uint8, device="cuda")
            raise SystemExit("an allocation over the memory fraction succeeded")
        except torch.OutOfMemoryError as error:
            message = str(error)
            assert "gpumem" in message and "maximum_physical_size" in message, message
        after = torch.ones(256 << 20, dtype=torch.uint8, device="cuda")   # a smaller tensor still succeeds
        assert int(after.sum().item()) == 256 << 20
        stats = gpumem.torch.memory_stats()
        assert stats["num_ooms"] == 1, stats["num_ooms"]
        assert gpumem.torch.memory_reserved() <= int(0.3 * total)
        print("ok")
    """)


def test_a_memory_fraction_set_after_the_pool_exists_caps_it_too(torch_gpu):
    run("""
        import torch, gpumem.torch
        gpumem.torch.install()
        x = torch.ones(1 << 20, device="cuda")
        total = torch.cuda.mem_get_info()[1]
        torch.cuda.set_per_process_memory_fraction(0.25)
        assert gpumem.torch.resource(0).maximum_physical_size == int(0.25 * total)
        try:
            torch.empty(int(0.3 * total), dtype=torch.uint8, device="cuda")
            raise SystemExit("an allocation over the memory fraction succeeded")
        except torch.OutOfMemoryError as error:
            assert "gpumem" in str(error)
        torch.cuda.set_per_process_memory_fraction(1.0)
        y = torch.empty(int(0.3 * total), dtype=torch.uint8, device="cuda")
        del y
        print("ok")
    """)


def test_the_configuration_variable_chooses_the_resource(torch_gpu):
    run("""
        import torch, gpumem.torch
        from gpumem import mr
        gpumem.torch.install()
        x = torch.ones(1000, device="cuda")
        assert isinstance(gpumem.torch.resource(0), mr.PoolMemoryResource), gpumem.torch.resource(0)
        assert gpumem.torch.memory_stats()["gpumem.resource"] == "pool"
        assert gpumem.torch.configuration()["resource"] == "pool"
        print("ok")
    """, env={"GPUMEM_TORCH_ALLOC_CONF": "resource:pool,initial_pool_size:64MiB"})


def test_a_resource_the_program_set_is_kept(torch_gpu):
    run("""
        import torch, gpumem.torch
        from gpumem import mr
        stats = mr.StatisticsResourceAdaptor(mr.CudaMemoryResource())
        mr.set_current_device_resource(stats)
        gpumem.torch.install()
        x = torch.ones(1000, device="cuda")
        assert gpumem.torch.resource(0) is stats
        assert stats.allocation_counts.current_bytes == 4000
        print("ok")
    """)


def test_python_m_gpumem_torch_runs_a_script_unchanged(torch_gpu, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import sys
        import torch
        import gpumem.torch
        x = torch.ones(1 << 20, device="cuda")
        assert gpumem.torch.installed()
        assert gpumem.torch.memory_allocated() >= x.untyped_storage().nbytes()
        print("script", __name__, sys.argv[1:], gpumem.torch.configuration()["slab_size"])
        print("ok")
    """))
    done = subprocess.run([sys.executable, "-m", "gpumem.torch", "--conf", "slab_size:64MiB", str(script), "a", "b"],
                          env=environment(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"script __main__ ['a', 'b'] {64 * MiB}" in done.stdout


def test_python_m_gpumem_torch_check_says_the_library_matches(torch_gpu):
    done = subprocess.run([sys.executable, "-m", "gpumem.torch", "--check"], env=environment(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "built with PyTorch: yes, PyTorch " in done.stdout
    assert f"running PyTorch: {torch_gpu.__version__} (matches)" in done.stdout


def test_unified_buffers_give_way_before_pytorch_fails(torch_gpu):
    run("""
        import numpy as np, torch, gpumem, gpumem.torch
        gpumem.torch.install("slab_size:2MiB,memory_limit:512MiB,release_threshold:0")
        first = torch.ones(1, device="cuda")  # builds the pool
        pool = gpumem.torch.resource(0)
        manager = gpumem.SpillManager(384 << 20, upstream=pool)
        gpumem.torch.register_spill_manager(manager)
        n = 16 << 20  # float64 elements: 128 MiB per buffer
        buffers = []
        for value in range(3):
            buffer = gpumem.UnifiedBuffer(n, np.float64, spill=manager)
            buffer.copy_from(np.full(n, value + 1.0))  # on the device only: a spill copies it back first
            buffers.append(buffer)
        assert manager.used_bytes == 3 * (128 << 20), manager.used_bytes
        x = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")  # over the limit unless two buffers spill
        x.fill_(3)
        assert int(x[-1].item()) == 3
        stats = gpumem.torch.memory_stats()
        assert stats["num_alloc_retries"] == 1 and stats["num_ooms"] == 0, stats
        assert manager.statistics()["spills"] >= 2, manager.statistics()
        del x
        for value, buffer in enumerate(buffers):
            assert np.array_equal(buffer.to_numpy(), np.full(n, value + 1.0)), value
        print("ok")
    """)
