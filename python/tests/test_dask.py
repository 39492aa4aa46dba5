"""gpumem.dask: the worker plugin on a real distributed.LocalCluster (worker processes), on whatever backend
gpumem runs (the host backend in CI), with a blockwise array computation made through gpumem."""

import os
import subprocess
import sys

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
dask_array = pytest.importorskip("dask.array")

import gpumem  # noqa: E402
import gpumem.dask  # noqa: E402
from gpumem.dask import GpumemPlugin, from_dask_cuda_options  # noqa: E402


# ---- the plugin's options, checked on the client -------------------------------------------------------------

@pytest.mark.parametrize("kwargs, words", [
    (dict(resource="rmm"), ["resource", "'rmm'", "vmm, pool"]),
    (dict(resource="pool", initial_pool_size="lots"), ["initial_pool_size", "lots"]),
    (dict(resource="pool", initial_pool_size=-1), ["initial_pool_size", "negative"]),
    (dict(resource="vmm", initial_pool_size="1GiB"), ["initial_pool_size", "'vmm'"]),
    (dict(resource="async", maximum_pool_size="1GiB"), ["maximum_pool_size", "'async'"]),
    (dict(resource="pool", initial_pool_size="2GiB", maximum_pool_size="1GiB"), ["maximum_pool_size", "below"]),
    (dict(resource="vmm", managed=True), ["managed"]),
    (dict(device=-1), ["device", "-1"]),
    (dict(device="0"), ["device"]),
    (dict(frameworks=("cupy", "jax")), ["frameworks", "jax"]),
])
def test_bad_options_are_refused_on_the_client_naming_them(kwargs, words):
    with pytest.raises((ValueError, TypeError)) as error:
        GpumemPlugin(**kwargs)
    for word in words:
        assert word in str(error.value)


def test_sizes_are_ints_or_size_strings():
    plugin = GpumemPlugin("pool", initial_pool_size="64MiB", maximum_pool_size=1 << 30)
    assert (plugin.initial_pool_size, plugin.maximum_pool_size) == (64 << 20, 1 << 30)
    with pytest.raises(TypeError, match="initial_pool_size"):
        GpumemPlugin("pool", initial_pool_size=1.5)


@pytest.mark.parametrize("options, resource, managed", [
    (dict(), "cuda", False),
    (dict(rmm_managed_memory=True), "managed", False),
    (dict(rmm_pool_size="1GiB"), "pool", False),
    (dict(rmm_pool_size="1GiB", rmm_managed_memory=True), "pool", True),
    (dict(rmm_maximum_pool_size="2GiB"), "pool", False),
    (dict(rmm_async=True, rmm_pool_size="1GiB"), "async", False),
])
def test_dask_cuda_options_map_to_the_plugin(options, resource, managed):
    plugin = from_dask_cuda_options(**options, rmm_log_directory="/tmp/logs", statistics=False)
    assert (plugin.resource, plugin.managed, plugin.log_directory, plugin.statistics) == (resource, managed, "/tmp/logs", False)
    if "rmm_pool_size" in options:
        assert plugin.initial_pool_size == 1 << 30


def test_dask_cuda_refuses_async_with_managed_memory_and_so_do_we():
    with pytest.raises(ValueError, match="rmm_async and rmm_managed_memory"):
        from_dask_cuda_options(rmm_async=True, rmm_managed_memory=True)


def test_without_a_plugin_a_process_reports_no_resource():
    assert gpumem.dask.worker_info() == {"resource": None}


# ---- on a cluster ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  worker_dashboard_address=None) as local:
        yield local


def _block_through_gpumem(block):
    """A block's round trip through device memory from the worker's gpumem resource, then 2x + 1 on the host."""
    device = gpumem.DeviceBuffer.to_device(np.ascontiguousarray(block).tobytes())
    back = np.frombuffer(device.tobytes(), dtype=block.dtype).reshape(block.shape)
    return back * 2 + 1


def test_every_worker_gets_the_resource_logs_and_counts_a_blockwise_computation(cluster, tmp_path):
    logs = tmp_path / "logs"
    with distributed.Client(cluster) as client:
        client.register_worker_plugin(GpumemPlugin("pool", initial_pool_size="16MiB", log_directory=str(logs)))
        try:
            x = dask_array.arange(64 * 1024, chunks=4096, dtype=np.float64).reshape(256, 256).rechunk((32, 256))
            result = x.map_blocks(_block_through_gpumem, dtype=np.float64).sum().compute()
            expected = (np.arange(64 * 1024, dtype=np.float64) * 2 + 1).sum()
            assert result == expected

            infos = gpumem.dask.gather_statistics(client)
            assert set(infos) == set(cluster.scheduler_info["workers"])
            for info in infos.values():
                assert (info["resource"], info["resource_type"], info["device"]) == ("pool", "PoolMemoryResource", 0)
                assert info["statistics"]["current_bytes"] == 0, "every block went back"
                assert os.path.dirname(info["log_file"]) == str(logs)
                assert set(info["frameworks"]) == {"cupy", "torch", "numba"}
            total = sum(info["statistics"]["total_count"] for info in infos.values())
            assert total >= 8, "the eight blocks were allocated through gpumem on the workers"
            rows = 0
            for info in infos.values():
                with open(info["log_file"]) as log:
                    lines = log.read().splitlines()
                assert lines[0].startswith("Thread,Time,Action,Pointer,Size,Stream")
                rows += len(lines) - 1
            assert rows == 2 * total, "one allocate and one free row per block"
            for info in infos.values():  # each worker's log is a page of `gpumem report`
                page = tmp_path / (os.path.basename(info["log_file"]) + ".html")
                done = subprocess.run([sys.executable, "-m", "gpumem", "report", info["log_file"], "--simulate",
                                       "--resource", "pool,vmm", "-o", str(page)], capture_output=True, text=True,
                                      timeout=120)
                assert done.returncode == 0, done.stderr
                assert page.read_text().lstrip().lower().startswith("<!doctype html")
        finally:
            client.unregister_worker_plugin("gpumem")
        assert all(info == {"resource": None} for info in gpumem.dask.gather_statistics(client).values()), \
            "teardown restored the previous resource"


def test_a_worker_that_joins_later_is_set_up_too(cluster):
    with distributed.Client(cluster) as client:
        client.register_worker_plugin(GpumemPlugin("vmm", maximum_pool_size="256MiB", statistics=False))
        try:
            cluster.scale(3)
            client.wait_for_workers(3, timeout=60)
            infos = gpumem.dask.gather_statistics(client)
            assert len(infos) == 3
            assert all(info["resource_type"] == "VmmPoolMemoryResource" and info["statistics"] is None
                       for info in infos.values())
            assert all(info["log_file"] is None for info in infos.values())
        finally:
            client.unregister_worker_plugin("gpumem")
            cluster.scale(2)


def test_a_setup_that_fails_is_reported_to_the_client_and_changes_nothing(cluster):
    with distributed.Client(cluster) as client:
        with pytest.raises(ValueError, match="device 64 does not exist"):
            client.register_worker_plugin(GpumemPlugin("cuda", device=64))
        assert all(info == {"resource": None} for info in gpumem.dask.gather_statistics(client).values())


# ---- spilling: a device-memory limit per worker ------------------------------------------------------------------

def test_a_zero_device_memory_limit_is_refused():
    with pytest.raises(ValueError, match="device_memory_limit"):
        GpumemPlugin(device_memory_limit=0)
    assert GpumemPlugin(device_memory_limit="48MiB").device_memory_limit == 48 << 20


def _block(i):
    return gpumem.dask.unified_array(np.full(1 << 20, float(i)))  # 8 MiB on the device


def _device_sum(buffer):
    """The sum of a buffer's data after bringing its device copy back; and where its data were before."""
    before = buffer.state.name
    _ = buffer.device  # the device copy is current again (brought back if it was spilled)
    assert buffer.state.name in ("DEVICE_ONLY", "DEVICE_DIRTY", "SYNCHRONIZED"), buffer.state
    return float(buffer.to_numpy().sum()), before


def _hold_sixteen_blocks(client):
    """16 blocks of 8 MiB kept at once on one worker whose device has 64 MiB, then each used on the device."""
    blocks = [client.submit(_block, i, pure=False) for i in range(16)]
    distributed.wait(blocks)  # all made before any is used
    return client.gather([client.submit(_device_sum, block) for block in blocks])


# The worker's device holds 64 MiB: on the host backend an emulated device of that size (GPUMEM_HOST_MEMORY);
# on any backend, a pool that may not grow past it. The job keeps 128 MiB.
SMALL_DEVICES = {
    "emulated_device": (dict(resource="cuda"), {"GPUMEM_HOST_MEMORY": str(64 << 20)}),
    "capped_pool": (dict(resource="pool", initial_pool_size="64MiB", maximum_pool_size="64MiB"), {}),
}


@pytest.fixture(params=sorted(SMALL_DEVICES))
def small_device(request, monkeypatch):
    """(the plugin's resource options, a one-worker cluster) for a worker whose device holds 64 MiB."""
    options, environment = SMALL_DEVICES[request.param]
    if "GPUMEM_HOST_MEMORY" in environment and gpumem.cuda.get_backend() != "host":
        pytest.skip("sizes the device through GPUMEM_HOST_MEMORY, which only the host backend reads")
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                                  worker_dashboard_address=None) as local:
        yield options, local


def test_a_job_larger_than_the_device_runs_out_of_memory_without_spilling_and_finishes_with_it(small_device):
    options, cluster = small_device
    with distributed.Client(cluster) as client:
        client.register_worker_plugin(GpumemPlugin(**options))
        try:
            with pytest.raises(gpumem.OutOfMemoryError):
                _hold_sixteen_blocks(client)
        finally:
            client.unregister_worker_plugin("gpumem")
        client.restart()

        client.register_worker_plugin(GpumemPlugin(**options, device_memory_limit="48MiB"))
        try:
            results = _hold_sixteen_blocks(client)
            assert [total for total, _ in results] == [float(i) * (1 << 20) for i in range(16)], \
                "every block's data survived its spills"
            assert sum(before == "HOST_ONLY" for _, before in results) >= 10, \
                "the blocks spilled while the others were made came back to the device when used"
            (info,) = gpumem.dask.gather_statistics(client).values()
            spilling = info["spilling"]
            assert spilling["budget"] == 48 << 20 and spilling["used_bytes"] <= 48 << 20
            assert spilling["copies_back"] >= 10, "device-only data were copied to the host before their device copy went"
            assert spilling["failed_allocations"] == 0
        finally:
            client.unregister_worker_plugin("gpumem")


def test_unified_buffers_travel_between_workers_and_to_the_client(cluster):
    with distributed.Client(cluster) as client:
        client.register_worker_plugin(GpumemPlugin("cuda", device_memory_limit="32MiB"))
        try:
            a, b = list(cluster.scheduler_info["workers"])
            made = client.submit(gpumem.dask.unified_array, np.arange(1000, dtype=np.int32), workers=[a], pure=False)
            moved = client.submit(_device_sum, made, workers=[b], pure=False)
            assert moved.result()[0] == float(np.arange(1000).sum())
            back = made.result()
            assert isinstance(back, gpumem.UnifiedBuffer)
            np.testing.assert_array_equal(back.to_numpy(), np.arange(1000, dtype=np.int32))
        finally:
            client.unregister_worker_plugin("gpumem")
