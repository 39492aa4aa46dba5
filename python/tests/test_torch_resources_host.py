"""The device's PyTorch resource on the host backend, driven through the allocator hooks table as
libgpumem_torch_allocator.so drives it: the default VMM pool built on a device's first allocation (and a resource
the program set kept), the statistics, out of memory, the memory limit and fraction, empty_cache, and making room
with spill managers."""

import gc

import numpy as np
import pytest

import gpumem
import gpumem.allocators
import gpumem.torch
from gpumem import mr
from torch_hooks_table import hooks_table
from torch_state import fresh_torch_state  # noqa: F401 (an autouse fixture)

MiB = 1 << 20
OUT_OF_MEMORY = (1, 2)  # GPUMEM_ERROR_OUT_OF_MEMORY, GPUMEM_ERROR_BAD_ALLOC




@pytest.fixture
def hooks():
    return hooks_table()


def alloc(hooks, size, device=0):
    status, pointer = hooks.alloc(size, device)
    assert status == 0, hooks.error()
    assert pointer
    return pointer


def free(hooks, pointer, size, device=0):
    assert hooks.free2(pointer, size, device, None) == 0, hooks.error()


def test_the_default_vmm_pool_is_built_on_the_devices_first_allocation(hooks):
    gpumem.torch.configure("")  # the defaults
    assert gpumem.torch.resource(0) is None
    assert not gpumem._gpumem._torch_prepared(0)
    p = alloc(hooks, 1000)
    pool = gpumem.torch.resource(0)
    assert isinstance(pool, mr.VmmPoolMemoryResource)
    assert (pool.slab_size, pool.mapping_divisor) == (2 * MiB, 0)  # gpumem.torch's defaults: pieces of 2 MiB
    assert (pool.small_block_limit, pool.small_page_count) == (0, 0)  # and small blocks from the heap itself
    assert isinstance(mr.get_per_device_resource(0), mr.VmmPoolMemoryResource)
    assert pool.bytes_in_use == 1024  # rounded up to 256
    q = gpumem.alloc(4096)  # gpumem's other users share the pool
    assert pool.bytes_in_use == 1024 + 4096
    gpumem.free(q)
    free(hooks, p, 1000)
    assert pool.bytes_in_use == 0
    assert gpumem.torch.resource("cuda:0") is not None
    assert gpumem.torch.resource(None) is not None


def test_a_resource_the_program_set_is_kept(hooks):
    gpumem.torch.configure("resource:vmm")
    stats = mr.StatisticsResourceAdaptor(mr.CudaMemoryResource())
    mr.set_per_device_resource(0, stats)
    p = alloc(hooks, 4096)
    assert stats.allocation_counts.current_bytes == 4096
    assert gpumem.torch.resource(0) is stats
    assert gpumem.torch.memory_stats(0)["gpumem.resource"] == "other"
    free(hooks, p, 4096)
    assert stats.allocation_counts.current_bytes == 0
    # Set after the first allocation: the program's resource serves the next ones.
    mr.set_per_device_resource(0, None)
    p = alloc(hooks, 4096)
    assert stats.allocation_counts.current_bytes == 0
    free(hooks, p, 4096)


def test_a_device_is_prepared_once_and_a_later_configuration_leaves_it(hooks):
    gpumem.torch.configure("slab_size:2MiB")
    free(hooks, alloc(hooks, 256), 256)
    pool = gpumem.torch.resource(0)
    gpumem.torch.configure("resource:cuda")
    free(hooks, alloc(hooks, 256), 256)
    kept = gpumem.torch.resource(0)
    assert isinstance(kept, mr.VmmPoolMemoryResource) and kept.slab_size == 2 * MiB
    assert pool.slab_size == 2 * MiB


def test_statistics_count_exactly_what_the_hooks_allocated_and_freed(hooks):
    gpumem.torch.configure("slab_size:2MiB,release_threshold:none")
    sizes = [1000, 3 * MiB, 256, 5]
    pointers = [alloc(hooks, size) for size in sizes]
    status, none = hooks.alloc(0, 0)  # PyTorch asks for 0 bytes at times: no block, nothing counted
    assert status == 0 and none is None
    free(hooks, pointers[1], sizes[1])
    free(hooks, pointers[3], sizes[3])
    stats = gpumem.torch.memory_stats(0)
    assert stats["allocation.all.current"] == 2
    assert stats["allocation.all.peak"] == 4
    assert stats["allocation.all.allocated"] == 4
    assert stats["allocation.all.freed"] == 2
    assert stats["allocated_bytes.all.current"] == 1000 + 256
    assert stats["allocated_bytes.all.peak"] == sum(sizes)
    assert stats["allocated_bytes.all.allocated"] == sum(sizes)
    assert stats["allocated_bytes.all.freed"] == 3 * MiB + 5
    assert stats["requested_bytes.all.current"] == 1000 + 256
    pool = gpumem.torch.resource(0)
    assert stats["reserved_bytes.all.current"] == pool.physical_bytes == 4 * MiB
    assert stats["reserved_bytes.all.peak"] == pool.peak_physical_bytes
    assert stats["num_ooms"] == 0 and stats["num_alloc_retries"] == 0
    assert stats["gpumem.resource"] == "vmm" and stats["gpumem.slab_size"] == 2 * MiB
    assert stats["num_device_alloc"] == pool.slabs_created and stats["gpumem.slabs_moved"] == pool.slabs_moved
    assert stats["gpumem.cross_stream_takes"] == pool.cross_stream_takes
    assert stats["gpumem.cross_stream_waits"] == pool.cross_stream_waits
    assert gpumem.torch.memory_allocated(0) == 1256
    assert gpumem.torch.max_memory_allocated() == sum(sizes)
    assert gpumem.torch.memory_reserved("cuda:0") == 4 * MiB
    nested = gpumem.torch.memory_stats_as_nested_dict(0)
    assert nested["allocated_bytes"]["all"]["current"] == 1256
    assert nested["gpumem"]["resource"] == "vmm"
    summary = gpumem.torch.memory_summary(0)
    assert "Allocated memory" in summary and "Reserved memory" in summary and "device ID 0" in summary
    assert "slab_size" in summary and "slab_size" not in gpumem.torch.memory_summary(0, abbreviated=True)
    free(hooks, pointers[0], sizes[0])
    free(hooks, pointers[2], sizes[2])
    assert gpumem.torch.memory_allocated(0) == 0


def test_peaks_and_accumulated_counts_reset(hooks):
    gpumem.torch.configure("slab_size:2MiB,release_threshold:0")
    big = alloc(hooks, 6 * MiB)
    small = alloc(hooks, 1000)
    free(hooks, big, 6 * MiB)
    stats = gpumem.torch.memory_stats(0)
    assert stats["allocated_bytes.all.peak"] == 6 * MiB + 1000
    assert stats["reserved_bytes.all.peak"] >= 8 * MiB
    gpumem.torch.reset_peak_memory_stats(0)
    stats = gpumem.torch.memory_stats(0)
    assert stats["allocated_bytes.all.peak"] == 1000
    assert stats["allocation.all.peak"] == 1
    assert stats["reserved_bytes.all.peak"] == stats["reserved_bytes.all.current"] == 2 * MiB
    assert gpumem.torch.max_memory_reserved(0) == 2 * MiB
    assert stats["allocated_bytes.all.allocated"] == 6 * MiB + 1000  # not reset by reset_peak
    gpumem.torch.reset_accumulated_memory_stats(0)
    stats = gpumem.torch.memory_stats(0)
    assert stats["allocated_bytes.all.allocated"] == 0 and stats["allocated_bytes.all.freed"] == 0
    assert stats["allocated_bytes.all.current"] == 1000  # current is never reset
    free(hooks, small, 1000)
    assert gpumem.torch.memory_stats(0)["allocated_bytes.all.freed"] == 1000


def test_a_refused_allocation_counts_as_an_oom_and_the_pool_stays_usable(hooks):
    gpumem.torch.configure("slab_size:2MiB,memory_limit:16MiB")
    p = alloc(hooks, 1000)
    status, pointer = hooks.alloc(32 * MiB, 0)
    assert status in OUT_OF_MEMORY and pointer is None
    message = hooks.error()
    assert "vmm_pool_memory_resource" in message and "maximum_physical_size" in message, message
    assert str(32 * MiB) in message or "32" in message
    stats = gpumem.torch.memory_stats(0)
    assert stats["num_ooms"] == 1
    assert stats["allocation.all.current"] == 1  # the failure is not an allocation
    q = alloc(hooks, 8 * MiB)  # still usable
    free(hooks, q, 8 * MiB)
    free(hooks, p, 1000)
    gpumem.torch.reset_accumulated_memory_stats(0)
    assert gpumem.torch.memory_stats(0)["num_ooms"] == 0


def test_a_memory_fraction_set_later_caps_the_pool_with_gpumems_message(hooks):
    gpumem.torch.configure("slab_size:2MiB")
    p = alloc(hooks, 1000)
    total = mr.available_device_memory()[1]
    assert gpumem.torch.get_per_process_memory_fraction(0) == 1.0
    fraction = 64 * MiB / total
    assert hooks.set_memory_fraction(fraction, 0) == 0, hooks.error()
    assert gpumem.torch.get_per_process_memory_fraction(0) == pytest.approx(fraction, rel=1e-6)
    assert gpumem.torch.resource(0).maximum_physical_size == int(fraction * total)
    status, _ = hooks.alloc(96 * MiB, 0)
    assert status in OUT_OF_MEMORY
    assert "maximum_physical_size" in hooks.error()
    q = alloc(hooks, 32 * MiB)  # under the cap: still usable
    free(hooks, q, 32 * MiB)
    gpumem.torch.set_per_process_memory_fraction(1.0, "cuda:0")
    q = alloc(hooks, 96 * MiB)
    free(hooks, q, 96 * MiB)
    free(hooks, p, 1000)


def test_a_memory_fraction_before_the_first_allocation_applies_to_the_resource_built(hooks):
    gpumem.torch.configure("resource:cuda")
    gpumem.torch.set_per_process_memory_fraction(0.5, 0)
    assert gpumem.torch.get_per_process_memory_fraction(0) == 0.5
    p = alloc(hooks, 1000)
    limiting = gpumem.torch.resource(0)
    assert isinstance(limiting, mr.LimitingResourceAdaptor)
    assert limiting.get_allocation_limit() == int(0.5 * mr.available_device_memory()[1])
    free(hooks, p, 1000)


def test_a_memory_fraction_out_of_range_or_on_a_resource_that_takes_none_is_refused(hooks):
    for bad in (0.0, -0.5, 1.5, float("nan")):
        assert hooks.set_memory_fraction(bad, 0) != 0
        assert "not in (0, 1]" in hooks.error()
        with pytest.raises(ValueError, match=r"\(0, 1\]"):
            gpumem.torch.set_per_process_memory_fraction(bad, 0)
    with pytest.raises(TypeError):
        gpumem.torch.set_per_process_memory_fraction("half", 0)
    gpumem.torch.configure("resource:cuda")
    free(hooks, alloc(hooks, 256), 256)
    assert hooks.set_memory_fraction(0.5, 0) != 0
    message = hooks.error()
    assert "CudaMemoryResource" in message and "VmmPoolMemoryResource" in message, message
    with pytest.raises(ValueError, match="takes no memory fraction"):
        gpumem.torch.set_per_process_memory_fraction(0.5)


def test_empty_cache_gives_free_slabs_back(hooks):
    gpumem.torch.configure("slab_size:2MiB,release_threshold:none")
    p = alloc(hooks, 10 * MiB)
    q = alloc(hooks, 1000)
    pool = gpumem.torch.resource(0)
    free(hooks, p, 10 * MiB)
    before = pool.physical_bytes
    assert before >= 10 * MiB
    released = gpumem.torch.empty_cache()
    assert released > 0
    assert pool.physical_bytes == before - released
    assert gpumem.torch.memory_reserved(0) == pool.physical_bytes
    q_status = hooks.released_by_empty_cache(0)
    assert q_status == (0, 0)  # nothing more to give back
    free(hooks, q, 1000)
    status, released = hooks.released_by_empty_cache(-1)
    assert status == 0 and released > 0 and pool.physical_bytes == 0


def test_empty_cache_on_resources_that_keep_their_memory_releases_nothing(hooks):
    gpumem.torch.configure("resource:pool,initial_pool_size:4MiB")
    free(hooks, alloc(hooks, 1000), 1000)
    stats = gpumem.torch.memory_stats(0)
    assert stats["gpumem.resource"] == "pool" and stats["gpumem.pool_size"] >= 4 * MiB
    assert gpumem.torch.empty_cache() == 0
    assert hooks.empty_cache(1 << 20, None) != 0  # not a device gpumem.torch keeps state for
    assert "beyond" in hooks.error()


def test_make_room_spills_unified_buffers_so_a_too_large_allocation_succeeds(hooks):
    gpumem.torch.configure("slab_size:2MiB,memory_limit:32MiB,release_threshold:0")
    first = alloc(hooks, 1000)  # builds the pool
    pool = gpumem.torch.resource(0)
    manager = gpumem.SpillManager(24 * MiB, upstream=pool)
    gpumem.torch.register_spill_manager(manager)
    gpumem.torch.register_spill_manager(manager)  # once is enough
    buffers = []
    for value in range(3):
        buffer = gpumem.UnifiedBuffer(1 << 20, np.float64, spill=manager)  # 8 MiB each
        buffer.copy_from(np.full(1 << 20, value + 1.0))  # on the device only: a spill copies it back first
        buffers.append(buffer)
    assert manager.used_bytes == 24 * MiB
    p = alloc(hooks, 16 * MiB)  # needs two of the buffers' device copies spilled
    stats = gpumem.torch.memory_stats(0)
    assert stats["num_alloc_retries"] == 1 and stats["num_ooms"] == 0
    assert manager.statistics()["spills"] >= 2
    free(hooks, p, 16 * MiB)
    for value, buffer in enumerate(buffers):
        np.testing.assert_array_equal(buffer.to_numpy(), np.full(1 << 20, value + 1.0))  # the data survived
    del buffers, buffer
    gc.collect()
    free(hooks, first, 1000)


def test_without_spill_managers_a_too_large_allocation_fails_without_a_retry(hooks):
    gpumem.torch.configure("slab_size:2MiB,memory_limit:8MiB")
    status, _ = hooks.alloc(16 * MiB, 0)
    assert status in OUT_OF_MEMORY
    stats = gpumem.torch.memory_stats(0)
    assert stats["num_alloc_retries"] == 0 and stats["num_ooms"] == 1


def test_a_spill_manager_must_be_one():
    with pytest.raises(TypeError):
        gpumem.torch.register_spill_manager(object())


def test_devices_are_prepared_lazily_one_by_one(run_on_two_host_devices):
    run_on_two_host_devices("""
        import sys
        sys.path.insert(0, %r)
        import gpumem, gpumem.torch
        from gpumem import mr
        from torch_hooks_table import hooks_table
        gpumem.torch.configure("slab_size:2MiB")
        hooks = hooks_table()
        status, p = hooks.alloc(4096, 1)
        assert status == 0, hooks.error()
        assert gpumem.torch.resource(1) is not None and gpumem.torch.resource(0) is None
        assert isinstance(mr.get_per_device_resource(1), mr.VmmPoolMemoryResource)
        assert isinstance(mr.get_per_device_resource(0), mr.CudaMemoryResource)
        assert gpumem.torch.memory_allocated(1) == 4096 and gpumem.torch.memory_allocated(0) == 0
        assert gpumem.cuda.get_device_id() == 0
        assert hooks.free2(p, 4096, 1, None) == 0
        print("ok")
    """ % (__import__("os").path.dirname(__file__),))


# ---- install() and the command line without PyTorch or a GPU ----------------------------------------------


def _python_m_gpumem_torch(*args):
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(gpumem.__file__).resolve().parents[1])]
                                        + [p for p in [env.get("PYTHONPATH")] if p])
    return subprocess.run([sys.executable, "-m", "gpumem.torch", *args], env=env, capture_output=True, text=True,
                          timeout=120)


def test_python_m_gpumem_torch_without_a_script_prints_its_usage():
    done = _python_m_gpumem_torch()
    assert done.returncode == 2 and "usage: python -m gpumem.torch" in done.stderr
    done = _python_m_gpumem_torch("--conf")
    assert done.returncode == 2 and "usage" in done.stderr


def test_python_m_gpumem_torch_check_says_how_the_library_was_built():
    import importlib.util

    done = _python_m_gpumem_torch("--check")
    assert "library: " in done.stdout and "libgpumem_torch_allocator.so" in done.stdout, done.stdout + done.stderr
    assert "built with PyTorch: " in done.stdout
    library = gpumem.allocators.torch._installed_library()
    version = gpumem.torch._install._torch_version_of(library)
    if library.gpumem_torch_built_with_torch():
        assert version and f"built with PyTorch: yes, PyTorch {version}" in done.stdout
    else:
        assert version == "" and "built with PyTorch: no" in done.stdout
        assert done.returncode == 1
    if importlib.util.find_spec("torch") is None:
        assert "running PyTorch: none" in done.stdout and done.returncode == 1


def test_install_without_pytorch_is_an_import_error():
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        pytest.skip("PyTorch is installed here")
    with pytest.raises(ImportError):
        gpumem.torch.install()
    assert not gpumem.torch.installed()


class _FakeCppAllocator:
    """The C++ allocator object of a CUDAPluggableAllocator: records the set_*_fn calls."""

    def __init__(self):
        self.set = {}

    def __getattr__(self, name):
        if not name.startswith("set_"):
            raise AttributeError(name)
        return lambda address: self.set.__setitem__(name, address)


class _FakePluggable:
    def __init__(self):
        self._allocator = _FakeCppAllocator()

    def allocator(self):
        return self._allocator


@pytest.fixture
def fake_torch(monkeypatch):
    """A stand-in for PyTorch's modules and gpumem's allocator object, so that install()'s own steps run here."""
    import sys
    import types

    from gpumem.torch import _graphs, _install

    torch = types.ModuleType("torch")
    torch.__version__ = "2.11.0+fake"
    torch.cuda = types.ModuleType("torch.cuda")
    torch.cuda.memory = types.ModuleType("torch.cuda.memory")
    torch.swapped = []
    torch.cuda.memory.change_current_allocator = torch.swapped.append
    for name, module in (("torch", torch), ("torch.cuda", torch.cuda), ("torch.cuda.memory", torch.cuda.memory)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(gpumem.allocators.torch, "torch_allocator", _FakePluggable)
    torch.graph_hooks = []
    monkeypatch.setattr(_graphs, "set_hooks", lambda *arguments: torch.graph_hooks.append(arguments))
    monkeypatch.setattr(_install, "_installed", None)
    return torch


def test_install_swaps_the_allocator_and_routes_empty_cache_and_the_fraction_to_gpumem(fake_torch, hooks):
    import ctypes

    manager = gpumem.SpillManager(1 << 20)
    pluggable = gpumem.torch.install("slab_size:2MiB,record_stream:error", spill=[manager])
    assert fake_torch.swapped == [pluggable]
    assert gpumem.torch.installed()
    library = gpumem.allocators.torch._installed_library()
    address = lambda name: ctypes.cast(getattr(library, name), ctypes.c_void_p).value  # noqa: E731
    assert pluggable.allocator().set["set_reset_fn"] == address("gpumem_torch_empty_cache")
    assert pluggable.allocator().set["set_memory_fraction_fn"] == address("gpumem_torch_set_memory_fraction")
    (graph_arguments,) = fake_torch.graph_hooks
    assert graph_arguments[0] is pluggable and graph_arguments[1] is library
    assert graph_arguments[2]["record_stream"] == "error" and graph_arguments[2]["slab_size"] == 2 * MiB
    assert gpumem.torch.install() is pluggable  # idempotent: no second swap
    assert gpumem.torch.install("slab_size:2MiB,record_stream:error") is pluggable
    assert len(fake_torch.swapped) == 1
    with pytest.raises(RuntimeError, match="another configuration"):
        gpumem.torch.install("slab_size:4MiB")
    # What PyTorch calls through those addresses reaches gpumem.
    p = alloc(hooks, 3 * MiB)
    pool = gpumem.torch.resource(0)
    assert pool.slab_size == 2 * MiB
    free(hooks, p, 3 * MiB)
    library.gpumem_torch_set_memory_fraction.argtypes = [ctypes.c_double, ctypes.c_int]
    library.gpumem_torch_set_memory_fraction(0.5, 0)
    assert gpumem.torch.get_per_process_memory_fraction(0) == pytest.approx(0.5, rel=1e-6)
    before = pool.physical_bytes
    assert before >= 4 * MiB
    library.gpumem_torch_empty_cache()
    assert pool.physical_bytes == 0


def test_install_after_pytorchs_allocator_started_says_to_install_first(fake_torch):
    def refuse(allocator):
        raise RuntimeError("Can't swap an already initialized allocator")

    fake_torch.cuda.memory.change_current_allocator = refuse
    with pytest.raises(RuntimeError) as error:
        gpumem.torch.install()
    message = str(error.value)
    assert "before the first CUDA tensor" in message and "python -m gpumem.torch" in message
    assert "already initialized" in message
    assert not gpumem.torch.installed()


def test_install_refuses_a_library_built_against_another_pytorch_release(fake_torch, monkeypatch):
    from gpumem.torch import _install

    monkeypatch.setattr(_install, "_torch_version_of", lambda library: "2.9.1")
    with pytest.raises(RuntimeError, match=r"built against PyTorch 2\.9\.1, but PyTorch 2\.11\.0\+fake is running"):
        gpumem.torch.install()
    assert not gpumem.torch.installed() and fake_torch.swapped == []
    monkeypatch.setattr(_install, "_torch_version_of", lambda library: "2.11.3")  # another patch release: fine
    gpumem.torch.install()
    assert len(fake_torch.swapped) == 1


def test_a_cuda_memory_pool_reports_what_it_holds_and_empty_cache_trims_it(hooks):
    gpumem.torch.configure("resource:async")
    p = alloc(hooks, 8 * MiB)
    assert isinstance(gpumem.torch.resource(0), mr.CudaAsyncMemoryResource)
    stats = gpumem.torch.memory_stats(0)
    assert stats["gpumem.resource"] == "async"
    assert stats["reserved_bytes.all.current"] >= 8 * MiB
    free(hooks, p, 8 * MiB)
    released = gpumem.torch.empty_cache()
    assert gpumem.torch.memory_reserved(0) < 8 * MiB  # the pool's cache went back to the device
    if gpumem.cuda.get_backend() == "host":  # (CUDA's pool may give it back by itself at any synchronisation)
        assert released >= 8 * MiB
    assert gpumem.torch.max_memory_reserved(0) >= 8 * MiB
