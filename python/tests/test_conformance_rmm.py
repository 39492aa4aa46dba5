"""RMM's documented Python API, exercised through gpumem as RMM's users write it (``import gpumem as rmm``).

Each test is a program written for RMM with only its import changed, checking the behaviour RMM documents
(docs/python.md, "RMM in Python", lists every name: same, differs and why, or not applicable). Runs on the
host backend in CI; the GPU-only cases skip there and run on the GPU machine, where rmm itself is not
installed: expectations are RMM's documentation and its own tests.
"""

import copy
import csv
import gc
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gpumem as rmm
import gpumem.mr
import gpumem.statistics
from gpumem import mr
from gpumem.allocators import cupy as rmm_cupy
from gpumem.allocators import torch as rmm_torch

ON_GPU = rmm.cuda.get_backend() == "cuda"
gpu_only = pytest.mark.skipif(not ON_GPU, reason="needs a GPU (cuda backend)")


@pytest.fixture(autouse=True)
def restore_resources():
    """Every test leaves each device's resource as it found it."""
    previous = {d: mr.get_per_device_resource(d) for d in range(rmm.cuda.get_device_count())}
    yield
    gc.collect()
    for device, resource in previous.items():
        mr.set_per_device_resource(device, resource)


# ---- rmm: top level ----------------------------------------------------------------------------------------


def test_version_is_a_version_string():
    parts = rmm.__version__.split(".")
    assert len(parts) >= 2 and all(part.isdigit() for part in parts[:2])


def test_is_initialized_before_and_after_reinitialize():
    assert rmm.is_initialized() is True
    rmm.reinitialize(pool_allocator=True, initial_pool_size="4MiB")
    assert rmm.is_initialized() is True
    assert isinstance(mr.get_current_device_resource(), mr.PoolMemoryResource)


def test_reinitialize_hooks_run_newest_first_with_their_arguments_and_unregister():
    calls = []

    def first(*args, **kwargs):
        calls.append(("first", args, kwargs))

    def second():
        calls.append(("second", (), {}))

    assert rmm.register_reinitialize_hook(first, 1, key="v") is first
    rmm.register_reinitialize_hook(second)
    rmm.register_reinitialize_hook(first, 2)
    try:
        rmm.reinitialize()
        assert calls == [("first", (2,), {}), ("second", (), {}), ("first", (1,), {"key": "v"})]
        rmm.unregister_reinitialize_hook(first)  # every registration of it
        calls.clear()
        rmm.reinitialize()
        assert calls == [("second", (), {})]
    finally:
        rmm.unregister_reinitialize_hook(first)
        rmm.unregister_reinitialize_hook(second)
    calls.clear()
    rmm.reinitialize()
    assert calls == []


@pytest.mark.parametrize("text, expected", [("4MiB", 4 << 20), ("1GB", 10**9), ("1.5 KiB", 1536), ("100", 100),
                                            ("2kb", 2000), ("8 b", 8), ("3\tMB", 3 * 10**6)])
def test_string_sizes_everywhere_rmm_takes_them(text, expected):
    upstream = mr.CudaMemoryResource()
    rounded = -(-expected // 256) * 256
    pool = mr.PoolMemoryResource(upstream, initial_pool_size=text, maximum_pool_size="1GiB")
    assert pool.pool_size() == rounded
    capped = mr.PoolMemoryResource(upstream, maximum_pool_size=text if expected >= 1 << 20 else "1MiB")
    assert capped.maximum_pool_size == (expected if expected >= 1 << 20 else 1 << 20)
    if expected >= 1 << 20:
        assert mr.ArenaMemoryResource(upstream, arena_size=text).arena_size == mr.ArenaMemoryResource(
            upstream, arena_size=expected).arena_size
    asynchronous = mr.CudaAsyncMemoryResource(initial_pool_size=text)
    asynchronous.deallocate(asynchronous.allocate(256), 256)
    rmm.reinitialize(pool_allocator=True, initial_pool_size=text, maximum_pool_size="1GiB")
    assert mr.get_current_device_resource().pool_size() == rounded


@pytest.mark.parametrize("bad", ["abc", "4 XB", "MiB", "-1MB", "1e6"])
def test_a_string_that_is_no_size_is_a_value_error_naming_the_argument(bad):
    with pytest.raises(ValueError, match="initial_pool_size"):
        mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size=bad)
    with pytest.raises(ValueError, match="initial_pool_size"):
        rmm.reinitialize(pool_allocator=True, initial_pool_size=bad)


def test_reinitialize_ignores_pool_sizes_without_a_pool_as_rmm():
    rmm.reinitialize(pool_allocator=False, initial_pool_size="1MiB")
    assert isinstance(mr.get_current_device_resource(), mr.CudaMemoryResource)


def test_rmm_error_is_the_base_of_gpumem_errors_and_keeps_its_code():
    error = rmm.RMMError(7, "message")
    assert error.errcode == 7 and str(error) == "message" and isinstance(error, Exception)
    assert issubclass(rmm.OutOfMemoryError, rmm.RMMError) and issubclass(rmm.OutOfMemoryError, MemoryError)
    assert issubclass(rmm.CUDARuntimeError, rmm.RMMError) and issubclass(rmm.CUDARuntimeError, RuntimeError)
    limited = mr.LimitingResourceAdaptor(mr.CudaMemoryResource(), allocation_limit=1024)
    with pytest.raises(rmm.RMMError):
        limited.allocate(4096)


# ---- logging -------------------------------------------------------------------------------------------------


def gpumem_cli():
    """The command-line tool with `replay`: the package's, else the build tree's; None when neither exists."""
    candidates = [Path(rmm._cli.EXECUTABLE), Path(rmm.__file__).resolve().parents[2] / "cli" / "gpumem"]
    return next((c for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)


def test_enable_logging_writes_the_csv_that_gpumem_replay_reads(tmp_path):
    import gpumem._cli  # noqa: F401  (the tool's location)

    rmm.reinitialize(pool_allocator=True, initial_pool_size="1MiB")
    rmm.enable_logging(log_file_name=str(tmp_path / "alloc.csv"))
    expected = str(tmp_path / "alloc.dev0.csv")
    device = rmm.cuda.get_device_id()
    assert rmm.get_log_filenames()[device] == os.path.abspath(str(tmp_path / f"alloc.dev{device}.csv"))
    rmm.enable_logging(log_file_name=str(tmp_path / "other.csv"))  # already logging: unchanged
    assert rmm.get_log_filenames()[device].endswith(f"alloc.dev{device}.csv")
    buffers = [rmm.DeviceBuffer(size=1000 * (i + 1)) for i in range(4)]
    del buffers
    gc.collect()
    rmm.disable_logging()
    assert rmm.get_log_filenames()[device] is None
    assert isinstance(mr.get_current_device_resource(), mr.PoolMemoryResource)
    path = Path(rmm.get_log_filenames().get(device) or expected.replace("dev0", f"dev{device}"))
    rows = list(csv.reader(path.open()))
    assert rows[0] == ["Thread", "Time", "Action", "Pointer", "Size", "Stream"]
    actions = [row[2] for row in rows[1:]]
    assert actions.count("allocate") == 4 and actions.count("free") == 4, rows
    cli = gpumem_cli()
    if cli is None:
        pytest.skip("no gpumem command-line tool in this build")
    result = subprocess.run([str(cli), "replay", str(path), "--simulate", "--csv", "--resource", "pool"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    table = list(csv.DictReader(result.stdout.splitlines()))
    assert int(table[0]["peak_live_bytes"]) == 1000 + 2000 + 3000 + 4000
    assert int(table[0]["unknown_frees"]) == 0


def test_enable_logging_without_a_name_uses_the_environment_or_refuses(tmp_path, monkeypatch):
    monkeypatch.delenv("GPUMEM_LOG_FILE", raising=False)
    with pytest.raises(ValueError, match="GPUMEM_LOG_FILE"):
        rmm.enable_logging()
    monkeypatch.setenv("GPUMEM_LOG_FILE", str(tmp_path / "env.csv"))
    rmm.enable_logging()
    try:
        device = rmm.cuda.get_device_id()
        assert rmm.mr.get_log_filenames()[device] == str(tmp_path / f"env.dev{device}.csv")
    finally:
        rmm.mr.disable_logging()


def test_debug_logger_levels_with_rmms_enum():
    level = rmm.level_enum
    previous, previous_flush = rmm.get_logging_level(), rmm.get_flush_level()
    try:
        for value in (level.trace, level.debug, level.info, level.warn, level.error, level.critical, level.off):
            rmm.set_logging_level(value)
            assert rmm.get_logging_level() is value
            assert rmm.should_log(level.error) == (value <= level.error)
            assert rmm.should_log(value) == (value != level.off)
        rmm.set_logging_level(level.warn)
        assert not rmm.should_log(level.info) and rmm.should_log(level.warn)
        rmm.set_flush_level(level.critical)
        assert rmm.get_flush_level() is level.critical
        rmm.set_flush_level(level.info)
        assert rmm.get_flush_level() is level.info
        rmm.flush_logger()
        for call in (rmm.set_logging_level, rmm.set_flush_level, rmm.should_log):
            with pytest.raises(TypeError, match="level_enum"):
                call(2)
    finally:
        rmm.set_logging_level(previous)
        rmm.set_flush_level(previous_flush)


FLUSH_PROGRAM = r"""
import os, sys
import gpumem as rmm
from gpumem import mr
log = sys.argv[1]
rmm.set_logging_level(rmm.level_enum.info)
rmm.set_flush_level(rmm.level_enum.error)
pool = mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size=1 << 20)
p = pool.allocate(4 << 20)          # the pool grows: an info line, held in the file's buffer
before = open(log).read()
rmm.flush_logger()
after = open(log).read()
pool.deallocate(p, 4 << 20)
print(repr(before), repr(after))
assert before == "" and "[info]" in after, (before, after)
"""


def test_lines_below_the_flush_level_wait_for_flush_logger(tmp_path):
    log = tmp_path / "debug.log"
    env = dict(os.environ, GPUMEM_DEBUG_LOG_FILE=str(log))
    result = subprocess.run([sys.executable, "-c", FLUSH_PROGRAM, str(log)], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


# ---- rmm.mr ------------------------------------------------------------------------------------------------


def test_callback_memory_resource_as_rmms_docstring_uses_it():
    base_mr = mr.CudaMemoryResource()
    seen = []

    def allocate_func(size, stream):
        seen.append(("allocate", size))
        return base_mr.allocate(size, stream)

    def deallocate_func(ptr, size, stream):
        seen.append(("deallocate", size))
        return base_mr.deallocate(ptr, size, stream)

    mr.set_current_device_resource(mr.CallbackMemoryResource(allocate_func, deallocate_func))
    dbuf = rmm.DeviceBuffer(size=256)
    assert seen == [("allocate", 256)]
    del dbuf
    gc.collect()
    assert seen == [("allocate", 256), ("deallocate", 256)]


def test_callback_memory_resource_passes_errors_and_checks_results():
    def failing(size, stream):
        raise KeyError("from the callback")

    resource = mr.CallbackMemoryResource(failing, lambda ptr, size, stream: None)
    with pytest.raises(KeyError, match="from the callback"):
        resource.allocate(256)
    with pytest.raises(MemoryError):
        mr.CallbackMemoryResource(lambda size, stream: 0, lambda *args: None).allocate(256)
    with pytest.raises(TypeError, match="int"):
        mr.CallbackMemoryResource(lambda size, stream: "x", lambda *args: None).allocate(256)
    with pytest.raises(TypeError, match="allocate_func must be callable"):
        mr.CallbackMemoryResource(None, lambda *args: None)


def test_system_memory_resource_where_pageable_memory_is_accessible():
    if not mr.is_system_memory_supported():
        with pytest.raises(rmm.CUDARuntimeError, match="cudaDevAttrPageableMemoryAccess"):
            mr.SystemMemoryResource()
        return
    resource = mr.SystemMemoryResource()
    buf = rmm.DeviceBuffer.to_device(b"system memory", mr=resource)
    assert buf.tobytes() == b"system memory"
    assert resource.is_equal(mr.SystemMemoryResource())


def test_resource_types_per_device_and_current():
    mr.set_current_device_resource(mr.ManagedMemoryResource())
    assert mr.get_current_device_resource_type() is mr.ManagedMemoryResource
    assert mr.get_per_device_resource_type(rmm.cuda.get_device_id()) is mr.ManagedMemoryResource
    with pytest.raises(ValueError):
        mr.get_per_device_resource_type(1 << 20)


def test_available_device_memory_is_free_and_total():
    free, total = mr.available_device_memory()
    assert 0 < free <= total
    assert (free, total)[1] == rmm.cuda.Device().mem_info[1]


def test_cuda_async_view_memory_resource_over_a_pool_it_does_not_own():
    owner = mr.CudaAsyncMemoryResource()
    view = mr.CudaAsyncViewMemoryResource(owner.pool_handle())
    assert view.pool_handle() == owner.pool_handle()
    buf = rmm.DeviceBuffer.to_device(b"viewed", mr=view)
    assert buf.tobytes() == b"viewed"
    del buf
    default = mr.CudaAsyncViewMemoryResource(mr.default_memory_pool())
    default.deallocate(default.allocate(1024), 1024)
    with pytest.raises(ValueError, match="pool_handle"):
        mr.CudaAsyncViewMemoryResource(0)
    with pytest.raises(TypeError, match="pool_handle"):
        mr.CudaAsyncViewMemoryResource("pool")


def test_cuda_async_memory_resource_enable_fabric_is_refused_clearly_where_unsupported():
    try:
        resource = mr.CudaAsyncMemoryResource(enable_fabric=True)
    except rmm.CUDARuntimeError as error:
        assert "fabric" in str(error) and "device" in str(error)
        assert ON_GPU or error.status == 801  # cudaErrorNotSupported: the host backend has no fabric
    else:
        resource.deallocate(resource.allocate(256), 256)
    with pytest.raises(ValueError, match="enable_ipc and enable_fabric"):
        mr.CudaAsyncMemoryResource(enable_ipc=True, enable_fabric=True)


def test_prefetch_resource_adaptor_over_managed_memory():
    adaptor = mr.PrefetchResourceAdaptor(mr.ManagedMemoryResource())
    assert isinstance(adaptor.get_upstream(), mr.ManagedMemoryResource)
    buf = rmm.DeviceBuffer.to_device(b"prefetched", mr=adaptor)
    assert buf.tobytes() == b"prefetched"


def test_binning_memory_resource_as_rmms_own_setup():
    upstream = mr.CudaMemoryResource()
    binning = mr.BinningMemoryResource(upstream, 10, 17)
    bins_before = binning.bin_sizes
    binning.add_bin(1 << 10)                              # exists: nothing changes, as RMM documents
    fixed = mr.FixedSizeMemoryResource(upstream, 1 << 10)
    binning.add_bin(1 << 10, fixed)                       # a resource for an existing size: nothing changes
    binning.add_bin(1 << 20, mr.FixedSizeMemoryResource(upstream, 1 << 20))
    assert binning.bin_sizes == sorted(bins_before + [1 << 20])
    assert [type(r) for r in binning.bin_mrs] == [mr.FixedSizeMemoryResource] * 2
    buffers = [rmm.DeviceBuffer(size=size, mr=binning) for size in (100, 1000, 1 << 20, 4 << 20)]
    assert fixed.used_bytes() == 0
    del buffers
    assert mr.BinningMemoryResource(upstream, -1, -1).bin_sizes == []


# ---- rmm.statistics ------------------------------------------------------------------------------------------


def test_statistics_is_rmms_dataclass():
    import dataclasses

    stats = rmm.statistics.Statistics(current_bytes=1, current_count=1, peak_bytes=1, peak_count=1, total_bytes=1,
                                      total_count=1)
    assert dataclasses.is_dataclass(stats) and dataclasses.asdict(stats)["peak_bytes"] == 1
    assert rmm.statistics.Statistics is mr.Statistics


def test_pop_without_push_raises_index_error_as_rmm():
    stats_mr = mr.StatisticsResourceAdaptor(mr.CudaMemoryResource())
    with pytest.raises(IndexError, match="cannot pop the last counter pair"):
        stats_mr.pop_counters()
    mr.set_current_device_resource(stats_mr)
    with pytest.raises(IndexError):
        rmm.statistics.pop_statistics()


def test_profiler_records_as_rmms_test_does():
    from gpumem.statistics import ProfilerRecords, default_profiler_records, get_descriptive_name_of_object, profiler

    mr.set_current_device_resource(mr.StatisticsResourceAdaptor(mr.get_current_device_resource()))
    records = ProfilerRecords()
    assert len(records.records) == 0 and "No data" in records.pretty_print()

    @profiler(records=records)
    def f1():
        b1 = rmm.DeviceBuffer(size=512)
        b2 = rmm.DeviceBuffer(size=512)
        del b1
        return b2

    kept = [f1(), f1()]

    @profiler(records=records, name="named")
    def f2():
        return rmm.DeviceBuffer(size=256)

    f2()
    assert records.records[get_descriptive_name_of_object(f1)] == ProfilerRecords.Data(
        num_calls=2, memory_total=2048, memory_peak=1024)
    assert records.records["named"] == ProfilerRecords.Data(num_calls=1, memory_total=256, memory_peak=256)
    with profiler(name="block"):
        b = rmm.DeviceBuffer(size=768)
    assert default_profiler_records.records["block"].memory_total >= 768
    with pytest.raises(ValueError, match="name"):
        with profiler():
            pass
    text = records.pretty_print(ordered_by="num_calls")
    assert "ncalls" in text and "named" in text
    del kept, b


def test_profiler_does_nothing_without_statistics():
    records = rmm.statistics.ProfilerRecords()
    with rmm.statistics.profiler(records=records, name="off"):
        rmm.DeviceBuffer(size=256)
    assert records.records == {}


# ---- rmm.DeviceBuffer ------------------------------------------------------------------------------------------


def test_device_buffer_methods_as_rmm_spells_them():
    db = rmm.DeviceBuffer.to_device(b"abc")
    assert db.capacity() >= 3 and len(db) == 3 and db.__sizeof__() == 3 and bytes(db) == b"abc"
    assert db.stream is rmm.cuda.Stream.null
    stream = rmm.cuda.Stream()
    assert rmm.DeviceBuffer(size=8, stream=stream).stream is stream
    copied = copy.copy(db)
    assert copied.ptr != db.ptr and bytes(copied) == b"abc"
    deep = copy.deepcopy(db)
    assert deep.ptr != db.ptr and bytes(deep) == b"abc"
    restored = pickle.loads(pickle.dumps(db))
    assert isinstance(restored, rmm.DeviceBuffer) and bytes(restored) == b"abc"


def test_copy_from_device_as_rmms_docstring():
    db = rmm.DeviceBuffer(size=5)
    db2 = rmm.DeviceBuffer.to_device(b"abc")
    db.copy_from_device(db2)
    assert db.copy_to_host()[:3].tobytes() == b"abc"
    with pytest.raises(ValueError, match="__cuda_array_interface__"):
        db.copy_from_device(b"abc")
    with pytest.raises(ValueError, match="more than the buffer"):
        rmm.DeviceBuffer(size=2).copy_from_device(db2)


def test_to_device_makes_rmms_checks_of_format_and_dimensions():
    assert bytes(rmm.DeviceBuffer.to_device(np.arange(4, dtype=np.uint8))) == bytes(range(4))
    assert bytes(rmm.DeviceBuffer.to_device(bytearray(b"xy"))) == b"xy"
    with pytest.raises(ValueError, match="format"):
        rmm.DeviceBuffer.to_device(np.zeros(4, dtype=np.float32))
    with pytest.raises(ValueError, match="dimension"):
        rmm.DeviceBuffer.to_device(np.zeros((2, 2), dtype=np.uint8))


def test_prefetch_is_a_no_op_for_memory_that_is_not_managed():
    db = rmm.DeviceBuffer.to_device(b"abc")
    db.prefetch()
    db.prefetch(device=0, stream=rmm.cuda.Stream())
    managed = rmm.DeviceBuffer.to_device(b"managed", mr=mr.ManagedMemoryResource())
    managed.prefetch()
    assert bytes(managed) == b"managed"


# ---- rmm.allocators ----------------------------------------------------------------------------------------------


def test_allocators_under_rmms_names():
    assert rmm_cupy.rmm_cupy_allocator is rmm.allocators.cupy_allocator
    if not ON_GPU:
        assert rmm_torch.rmm_torch_allocator is None  # no CUDA device: None, as RMM's
    try:
        import numba  # noqa: F401
    except ImportError:
        return
    from gpumem.allocators.numba import GpumemNumbaMemoryManager, RMMNumbaManager

    assert RMMNumbaManager is GpumemNumbaMemoryManager


@gpu_only
def test_rmm_cupy_allocator_with_cupy():
    cupy = pytest.importorskip("cupy")
    cupy.cuda.set_allocator(rmm_cupy.rmm_cupy_allocator)
    try:
        x = cupy.arange(1 << 10, dtype=cupy.float32)
        assert float(x.sum()) == float(sum(range(1 << 10)))
    finally:
        cupy.cuda.set_allocator(None)


def run_program(code):
    """`code` in a fresh interpreter (PyTorch and Numba take their allocator before their first use)."""
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(Path(rmm.__file__).resolve().parents[1])] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    return subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=600)


@gpu_only
def test_rmm_torch_allocator_with_pytorch():
    pytest.importorskip("torch")
    if not rmm_torch._installed_library().gpumem_torch_built_with_torch():
        pytest.skip("libgpumem_torch_allocator was built without PyTorch: reconfigure where torch imports")
    result = run_program(
        "import torch\n"
        "from gpumem.allocators.torch import rmm_torch_allocator\n"
        "from gpumem import statistics\n"
        "assert rmm_torch_allocator is not None\n"
        "torch.cuda.memory.change_current_allocator(rmm_torch_allocator)\n"
        "statistics.enable_statistics()\n"
        "x = torch.ones(1 << 20, device='cuda')\n"
        "assert float(x.sum()) == float(1 << 20)\n"
        "assert statistics.get_statistics().current_bytes >= 4 << 20\n")
    assert result.returncode == 0, result.stdout + result.stderr


@gpu_only
def test_rmm_numba_manager_with_numba():
    pytest.importorskip("numba")
    result = run_program(
        "import numpy as np\n"
        "from numba import cuda\n"
        "from gpumem.allocators.numba import RMMNumbaManager\n"
        "from gpumem import statistics\n"
        "cuda.set_memory_manager(RMMNumbaManager)\n"
        "statistics.enable_statistics()\n"
        "d = cuda.to_device(np.arange(1000, dtype=np.float64))\n"
        "assert (d.copy_to_host() == np.arange(1000)).all()\n"
        "assert statistics.get_statistics().current_bytes >= 8000\n")
    assert result.returncode == 0, result.stdout + result.stderr


def test_rmms_keyword_names_are_accepted_beside_gpumems():
    upstream = mr.CudaMemoryResource()
    pool = mr.PoolMemoryResource(upstream_mr=upstream, initial_pool_size="1MiB")
    assert pool.upstream_mr is upstream
    for adaptor in (mr.StatisticsResourceAdaptor, mr.TrackingResourceAdaptor, mr.PrefetchResourceAdaptor):
        assert adaptor(upstream_mr=pool).upstream_mr is pool
    assert mr.LimitingResourceAdaptor(upstream_mr=pool, allocation_limit=1 << 20).get_allocation_limit() == 1 << 20
    binning = mr.BinningMemoryResource(upstream_mr=pool, min_size_exponent=10, max_size_exponent=12)
    binning.deallocate(binning.allocate(1000), 1000)
    with pytest.raises(TypeError, match="upstream_mr"):
        mr.PoolMemoryResource(upstream=upstream, upstream_mr=upstream)

    buf = rmm.DeviceBuffer.to_device(b=b"\x01\x02\x03")
    out = np.zeros(3, dtype=np.uint8)
    buf.copy_to_host(ary=out)
    assert out.tolist() == [1, 2, 3]
    buf.copy_from_host(ary=np.array([7, 8, 9], dtype=np.uint8))
    assert bytes(buf) == b"\x07\x08\x09"
