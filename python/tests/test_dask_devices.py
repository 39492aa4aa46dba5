"""gpumem.dask.LocalDeviceCluster: one worker process per device, each on its own device, on emulated host
devices. The cluster's process must see several devices from its start (GPUMEM_HOST_DEVICES is read once per
process), so each cluster runs in a new interpreter, which prints what its workers saw as JSON."""

import json
import os
import subprocess
import sys

import pytest

distributed = pytest.importorskip("distributed")
pytest.importorskip("dask.array")

from gpumem.dask import GpumemPlugin, LocalDeviceCluster, rotated  # noqa: E402

_CLUSTER = r"""
import json, os, sys, time
import numpy as np
import dask.array as da
import distributed
import gpumem, gpumem.dask
from gpumem.dask import GpumemPlugin, LocalDeviceCluster

def through_gpumem(block):
    time.sleep(0.02)  # long enough that every worker takes blocks
    device = gpumem.DeviceBuffer.to_device(np.ascontiguousarray(block).tobytes())
    return np.frombuffer(device.tobytes(), dtype=block.dtype).reshape(block.shape) * 2 + 1

def seen_by_a_task():
    # a task runs on an executor thread of its worker: its current device, the names of the worker's devices
    # and their size
    names = [gpumem.cuda.Device(d).name for d in range(gpumem.cuda.get_device_count())]
    return gpumem.cuda.get_device_id(), names, gpumem.cuda.Device(0).total_memory, os.environ.get("CUDA_VISIBLE_DEVICES")

devices = json.loads(sys.argv[1])
with LocalDeviceCluster(devices=devices, plugin=GpumemPlugin("pool", initial_pool_size="16MiB"),
                        dashboard_address=None) as cluster, distributed.Client(cluster) as client:
    n = 8 * 4096 * len(cluster.devices)  # eight blocks per worker
    x = da.arange(n, chunks=4096, dtype=np.float64)
    total = float(x.map_blocks(through_gpumem, dtype=np.float64).sum().compute())
    workers = client.scheduler_info()["workers"]
    seen = {str(w["name"]): client.submit(seen_by_a_task, workers=[a], pure=False).result() for a, w in workers.items()}
    infos = {str(workers[a]["name"]): info for a, info in gpumem.dask.gather_statistics(client).items()}
    env = {str(device): cluster.worker_environment(device) for device in cluster.devices}
    try:
        cluster.scale(len(cluster.devices) + 1)
        scale_error = None
    except ValueError as error:
        scale_error = str(error)
print(json.dumps(dict(total=total, expected=float((np.arange(n) * 2 + 1).sum()), seen=seen, infos=infos, env=env,
                      scale_error=scale_error)))
"""


def _run_cluster(devices=None, **variables):
    """Runs _CLUSTER on the host backend with `variables` as the only GPUMEM_HOST_* settings and
    CUDA_VISIBLE_DEVICES=0 (a real GPU's ordinal, which no emulated device may change); returns what it
    printed."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("GPUMEM_HOST_")}
    env.update(GPUMEM_BACKEND="host", CUDA_VISIBLE_DEVICES="0", **variables)
    done = subprocess.run([sys.executable, "-c", _CLUSTER, json.dumps(devices)], env=env, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout)


def _check(result, emulated, device_bytes=8 << 30):
    """`emulated[d]`: the emulated device of worker d (its name in the cluster's process); `device_bytes`: the
    size of each (GPUMEM_HOST_MEMORY of the cluster's process)."""
    assert result["total"] == result["expected"], "every block came back through device memory intact"
    assert set(result["seen"]) == set(result["infos"]) == set(emulated), "one worker per device"
    order = list(emulated)
    names = {d: f"gpumem host device {emulated[d]}" for d in order}
    for i, d in enumerate(order):
        rotation = [names[e] for e in order[i:] + order[:i]]
        assert result["seen"][d] == [0, rotation, device_bytes, "0"], \
            "a task's device 0 is its worker's own device, the others follow, as large as the cluster's process " \
            "says; CUDA_VISIBLE_DEVICES is the cluster process's own"
        info = result["infos"][d]
        assert (info["device"], info["device_name"], info["resource_type"]) == (0, names[d], "PoolMemoryResource")
        assert info["statistics"]["total_count"] >= 1, f"worker {d} allocated blocks through gpumem"
        assert info["statistics"]["current_bytes"] == 0, "every block went back"
    assert len({info["device_name"] for info in result["infos"].values()}) == len(order), "each on its own device"
    assert sum(info["statistics"]["total_count"] for info in result["infos"].values()) >= 8 * len(order)
    assert "cannot scale beyond one worker per device" in result["scale_error"]


@pytest.mark.parametrize("count", [2, 4])
def test_one_worker_per_emulated_device_each_computing_on_its_own(count):
    result = _run_cluster(GPUMEM_HOST_DEVICES=str(count))
    _check(result, {str(d): d for d in range(count)})
    for d in range(count):
        ordinals = rotated([str(e) for e in range(count)], d)
        assert result["env"][str(d)] == {"GPUMEM_HOST_VISIBLE_DEVICES": ordinals}


def test_chosen_devices_of_a_process_that_sees_a_reordered_subset():
    # The cluster's process sees emulated devices 3,2,1,0 as its devices 0..3; its devices 2 and 0 are
    # emulated devices 1 and 3, and the workers must see those.
    result = _run_cluster([2, 0], GPUMEM_HOST_DEVICES="4", GPUMEM_HOST_VISIBLE_DEVICES="3,2,1,0",
                          GPUMEM_HOST_MEMORY="256MiB")
    _check(result, {"2": 1, "0": 3}, device_bytes=256 << 20)
    assert result["env"] == {"2": {"GPUMEM_HOST_VISIBLE_DEVICES": "1,3"}, "0": {"GPUMEM_HOST_VISIBLE_DEVICES": "3,1"}}


def test_rotation_starts_at_the_worker_and_wraps_around():
    assert rotated(["0", "1", "2", "3"], 0) == "0,1,2,3"
    assert rotated(["0", "1", "2", "3"], 2) == "2,3,0,1"
    assert rotated(["GPU-a", "GPU-b"], 1) == "GPU-b,GPU-a"


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(devices=[64]), ValueError, ["device 64 does not exist"]),
    (dict(devices=[-1]), ValueError, ["device -1 does not exist"]),
    (dict(devices=[]), ValueError, ["devices is empty"]),
    (dict(devices=[0, 0]), ValueError, ["twice"]),
    (dict(devices="0"), TypeError, ["list of device ordinals"]),
    (dict(devices=[0.0]), TypeError, ["ints"]),
    (dict(n_workers=0), ValueError, ["n_workers must be from 1", "not 0"]),
    (dict(n_workers=-2), ValueError, ["n_workers", "-2"]),
    (dict(n_workers=65), ValueError, ["n_workers", "not 65"]),
    (dict(n_workers="2"), TypeError, ["n_workers must be an int"]),
    (dict(processes=False), ValueError, ["processes=False"]),
    (dict(worker_class=distributed.Worker), ValueError, ["worker_class must be a Nanny"]),
    (dict(plugin="pool"), TypeError, ["WorkerPlugin"]),
])
def test_bad_arguments_are_refused_before_anything_starts(kwargs, error, words):
    with pytest.raises(error) as raised:
        LocalDeviceCluster(dashboard_address=None, **kwargs)
    for word in words:
        assert word in str(raised.value)


def test_a_plugin_that_fails_on_the_workers_fails_the_cluster_with_its_error():
    with pytest.raises(RuntimeError, match="failed to start") as raised:
        LocalDeviceCluster(plugin=GpumemPlugin("cuda", device=64), dashboard_address=None)
    assert "device 64 does not exist" in str(raised.value.__cause__)


def _gpu_count():
    if os.environ.get("GPUMEM_BACKEND") == "host":
        return 0
    import gpumem

    return gpumem.cuda.get_device_count() if gpumem.cuda.get_backend() == "cuda" else 0


@pytest.mark.skipif(_gpu_count() < 2, reason="needs two GPUs (the cuda backend)")
def test_one_worker_per_gpu_each_with_its_own_resource_and_statistics():
    env = {name: value for name, value in os.environ.items() if name != "CUDA_VISIBLE_DEVICES"}
    env["GPUMEM_BACKEND"] = "cuda"
    done = subprocess.run([sys.executable, "-c", _CLUSTER, "null"], env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout)
    count = _gpu_count()
    assert result["total"] == result["expected"], "every block came back through device memory intact"
    assert set(result["infos"]) == {str(d) for d in range(count)}, "one worker per GPU"
    buses = {info["device_pci_bus_id"] for info in result["infos"].values()}
    assert len(buses) == count and "" not in buses, "each worker on its own GPU"
    for d, info in result["infos"].items():
        assert (info["device"], info["resource_type"]) == (0, "PoolMemoryResource")
        assert info["statistics"]["total_count"] >= 1 and info["statistics"]["current_bytes"] == 0, d
        assert result["seen"][d][0] == 0 and len(result["seen"][d][1]) == count
    for d in range(count):
        ordinals = rotated([str(e) for e in range(count)], d)
        assert result["env"][str(d)] == {"CUDA_VISIBLE_DEVICES": ordinals}
        assert result["seen"][str(d)][3] == ordinals, "a task's process sees its GPU first"
