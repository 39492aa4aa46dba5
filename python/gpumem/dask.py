"""gpumem on Dask workers: a ``distributed`` worker plugin that sets each worker's gpumem resource.

Register it once from the client; every worker present, and every worker that joins later, runs its setup::

    from distributed import Client, LocalCluster
    import gpumem.dask

    client = Client(LocalCluster(n_workers=2))
    client.register_worker_plugin(gpumem.dask.GpumemPlugin("vmm", maximum_pool_size="8GiB",
                                                           log_directory="/tmp/gpumem-logs"))
    ...
    print(gpumem.dask.gather_statistics(client))   # {worker address: its resource, device and statistics}

On each worker, ``setup`` builds the resource on the worker's device (the current device of the worker
process: dask-cuda, and ``LocalDeviceCluster`` here, give each worker its own device as its device 0 through
CUDA_VISIBLE_DEVICES, or GPUMEM_HOST_VISIBLE_DEVICES on the host backend; so device 0 unless ``device`` is
given), wraps it in a ``StatisticsResourceAdaptor`` (``statistics=True``) and a ``LoggingResourceAdaptor`` writing
``<log_directory>/gpumem.<worker name>.csv`` (``log_directory``), and makes the result the device's current
resource. Where CuPy, PyTorch or Numba are importable on the worker and gpumem runs on its cuda
backend, it then makes gpumem their allocator (``frameworks``); ``worker_info()`` says which were set and
why the others were not. ``teardown`` (the worker closing, or ``client.unregister_worker_plugin``) flushes the
log and restores the resource the device had before.

Spilling: with ``device_memory_limit``, each worker also gets a ``gpumem.SpillManager`` of that budget over
its resource (``spill_manager()`` on the worker). Data a task keeps as ``unified_array(block)`` live in
``gpumem.UnifiedBuffer`` objects under that budget: when a new one does not fit, the least recently used
device copies go to the host, and the next device access brings them back, so a worker can hold more device
data than its GPU has. UnifiedBuffers travel between workers and to the client through Dask's serialization
(their current data, as a NumPy array; they arrive on the receiver's device, under its budget).

One worker per device, as dask-cuda's LocalCUDACluster::

    with LocalDeviceCluster(plugin=GpumemPlugin("pool", initial_pool_size="4GiB")) as cluster:
        client = Client(cluster)   # a worker per device of this process, each on its own device

dask-cuda's RMM options map to the plugin through ``from_dask_cuda_options``.

Importing this module imports ``distributed``.
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Dict, Iterable, Optional, Union

import numpy as np
from distributed.diagnostics.plugin import WorkerPlugin
from distributed.protocol import dask_deserialize, dask_serialize

from . import SpillManager, UnifiedBuffer, _gpumem, mr
from ._dask_cluster import LocalDeviceCluster, rotated
from ._reinitialize import _size

RESOURCES = ("vmm", "pool", "async", "cuda", "managed")
"""What ``GpumemPlugin(resource=...)`` builds: VmmPoolMemoryResource, PoolMemoryResource over cudaMalloc (or
over managed memory with ``managed=True``), CudaAsyncMemoryResource, CudaMemoryResource, ManagedMemoryResource."""

FRAMEWORKS = ("cupy", "torch", "numba")

_state: Dict[str, Any] = {}  # this worker process: what setup() built (one plugin per process)


def _check_size(value, name: str) -> Optional[int]:
    try:
        size = _size(value, name)
    except (TypeError, ValueError) as error:
        raise type(error)(f"GpumemPlugin: {error}") from None
    if size is not None and size < 0:
        raise ValueError(f"GpumemPlugin: {name} must not be negative, not {size}")
    return size


class GpumemPlugin(WorkerPlugin):
    """Sets a gpumem resource on every worker (the module's documentation).

    ``resource``: one of RESOURCES. ``initial_pool_size``: bytes the pool takes at once (``pool``, ``async``).
    ``maximum_pool_size``: the most the pool may hold (``pool``; ``vmm``: its physical memory). Sizes are ints
    or strings such as "4GiB". ``managed``: the ``pool`` takes managed memory (dask-cuda's rmm_managed_memory
    with a pool). ``device``: the device to set up (None: the worker's current device). ``statistics``: count
    allocations (gather_statistics). ``log_directory``: log every allocation as CSV, one file per worker
    (created if missing). ``frameworks``: which of CuPy, PyTorch and Numba to give gpumem as their allocator
    where they are importable. ``device_memory_limit``: a SpillManager budget per worker (the module's
    documentation; None: no spilling).

    Raises ValueError (or TypeError) on the client, when the plugin is made, for an unknown resource or
    framework, a bad size, a size the resource does not take, or ``managed`` with another resource than pool.
    """

    name = "gpumem"

    def __init__(self, resource: str = "vmm", *, initial_pool_size: Union[int, str, None] = None,
                 maximum_pool_size: Union[int, str, None] = None, managed: bool = False,
                 device: Optional[int] = None, statistics: bool = True, log_directory: Optional[str] = None,
                 frameworks: Iterable[str] = FRAMEWORKS, device_memory_limit: Union[int, str, None] = None):
        if resource not in RESOURCES:
            raise ValueError(f"GpumemPlugin: resource {resource!r} is not one of {', '.join(RESOURCES)}")
        self.resource = resource
        self.initial_pool_size = _check_size(initial_pool_size, "initial_pool_size")
        self.maximum_pool_size = _check_size(maximum_pool_size, "maximum_pool_size")
        if self.initial_pool_size is not None and resource not in ("pool", "async"):
            raise ValueError(f"GpumemPlugin: initial_pool_size is for the pool and async resources, not {resource!r}")
        if self.maximum_pool_size is not None and resource not in ("pool", "vmm"):
            raise ValueError(f"GpumemPlugin: maximum_pool_size is for the pool and vmm resources, not {resource!r}")
        if (self.initial_pool_size is not None and self.maximum_pool_size is not None
                and self.maximum_pool_size < self.initial_pool_size):
            raise ValueError(f"GpumemPlugin: maximum_pool_size {self.maximum_pool_size} is below "
                             f"initial_pool_size {self.initial_pool_size}")
        if managed and resource != "pool":
            raise ValueError("GpumemPlugin: managed=True is for the pool resource (use resource='managed' alone)")
        self.managed = bool(managed)
        if device is not None and (not isinstance(device, int) or isinstance(device, bool) or device < 0):
            raise ValueError(f"GpumemPlugin: device must be a device index (an int >= 0), not {device!r}")
        self.device = device
        self.statistics = bool(statistics)
        self.log_directory = None if log_directory is None else os.fspath(log_directory)
        self.device_memory_limit = _check_size(device_memory_limit, "device_memory_limit")
        if self.device_memory_limit == 0:
            raise ValueError("GpumemPlugin: device_memory_limit must be positive (None: no spilling)")
        self.frameworks = tuple(frameworks)
        unknown = [f for f in self.frameworks if f not in FRAMEWORKS]
        if unknown:
            raise ValueError(f"GpumemPlugin: unknown frameworks {unknown}; choose from {', '.join(FRAMEWORKS)}")

    # ---- on the worker ----

    def _build(self) -> mr.DeviceMemoryResource:
        if self.resource == "vmm":
            return mr.VmmPoolMemoryResource(maximum_physical_size=self.maximum_pool_size)
        if self.resource == "pool":
            upstream = mr.ManagedMemoryResource() if self.managed else mr.CudaMemoryResource()
            return mr.PoolMemoryResource(upstream, self.initial_pool_size, self.maximum_pool_size)
        if self.resource == "async":
            return mr.CudaAsyncMemoryResource(initial_pool_size=self.initial_pool_size)
        if self.resource == "managed":
            return mr.ManagedMemoryResource()
        return mr.CudaMemoryResource()

    def setup(self, worker=None):
        """Builds the resource on the worker's device and makes it current there (the module's documentation).
        Raises what building the resource raises (e.g. gpumem.OutOfMemoryError for an initial pool that does
        not fit, ValueError for a device that does not exist); the worker then reports the failure."""
        device = _gpumem.cuda.get_device_id() if self.device is None else self.device
        count = _gpumem.cuda.get_device_count()
        if device >= count:
            raise ValueError(f"GpumemPlugin: device {device} does not exist ({count} device(s) on this worker)")
        with _gpumem.cuda.Device(device):  # the resources are made on the current device
            base = self._build()
        chain = [base]
        if self.statistics:
            chain.append(mr.StatisticsResourceAdaptor(chain[-1]))
        log_file = None
        if self.log_directory is not None:
            os.makedirs(self.log_directory, exist_ok=True)
            name = getattr(worker, "name", None)
            label = str(name if name is not None else os.getpid()).replace(os.sep, "_")
            log_file = os.path.join(os.path.abspath(self.log_directory), f"gpumem.{label}.csv")
            chain.append(mr.LoggingResourceAdaptor(chain[-1], log_file))
        spill = None
        if self.device_memory_limit is not None:
            with _gpumem.cuda.Device(device):
                spill = SpillManager(self.device_memory_limit, chain[-1])
        previous = mr.get_per_device_resource(device)
        mr.set_per_device_resource(device, chain[-1])
        _state.clear()
        _state.update(plugin=self, device=device, chain=chain, previous=previous, log_file=log_file, spill=spill,
                      frameworks=self._set_frameworks())

    def _set_frameworks(self) -> Dict[str, str]:
        """Makes gpumem the allocator of each importable framework; says what was done for each."""
        done: Dict[str, str] = {}
        backend = _gpumem.cuda.get_backend()
        for name in self.frameworks:
            try:
                module = importlib.import_module(name)
            except ImportError:
                done[name] = "not importable"
                continue
            if backend != "cuda":
                done[name] = f"left alone: gpumem runs on its {backend!r} backend, whose device memory is host memory"
                continue
            try:
                if name == "cupy":
                    from .allocators import cupy_allocator
                    module.cuda.set_allocator(cupy_allocator)
                elif name == "torch":
                    from . import torch as gpumem_torch
                    gpumem_torch.install("resource:current")
                else:
                    from .allocators.numba import GpumemNumbaMemoryManager
                    module.cuda.set_memory_manager(GpumemNumbaMemoryManager)
                done[name] = "gpumem"
            except Exception as error:  # noqa: BLE001 - reported per framework, the worker keeps running
                done[name] = f"not set: {type(error).__name__}: {error}"
        return done

    def teardown(self, worker=None):
        """Flushes the log and gives the device back the resource it had before setup."""
        if _state.get("plugin") is not self:
            return
        chain = _state["chain"]
        if isinstance(chain[-1], mr.LoggingResourceAdaptor):
            chain[-1].flush()
        mr.set_per_device_resource(_state["device"], _state["previous"])
        _state.clear()


def worker_info() -> Dict[str, Any]:
    """On a worker (``client.run(gpumem.dask.worker_info)``): its plugin's resource, device (the worker's
    ordinal, the same on every worker of a LocalDeviceCluster) with the device's name and PCI bus id (which
    tell the workers' devices apart: "gpumem host device 2" for the host backend's emulated device 2, whose bus
    id is empty), statistics (None without ``statistics``), log file and frameworks; ``{"resource": None}``
    where no plugin ran setup."""
    if not _state:
        return {"resource": None}
    chain = _state["chain"]
    stats = None
    for adaptor in chain:
        if isinstance(adaptor, mr.StatisticsResourceAdaptor):
            counts = adaptor.allocation_counts
            stats = {key: getattr(counts, key) for key in
                     ("current_bytes", "current_count", "peak_bytes", "peak_count", "total_bytes", "total_count")}
    if isinstance(chain[-1], mr.LoggingResourceAdaptor):
        chain[-1].flush()
    spill = _state["spill"]
    device = _gpumem.cuda.Device(_state["device"])
    return {"resource": _state["plugin"].resource, "resource_type": type(chain[0]).__name__,
            "device": _state["device"], "device_name": device.name, "device_pci_bus_id": device.pci_bus_id,
            "statistics": stats, "log_file": _state["log_file"],
            "frameworks": dict(_state["frameworks"]),
            "spilling": None if spill is None else dict(spill.statistics(), budget=spill.budget,
                                                          used_bytes=spill.used_bytes)}


def spill_manager() -> Optional[SpillManager]:
    """On a worker: the SpillManager of its plugin's ``device_memory_limit``; None without one (or without
    the plugin)."""
    return _state.get("spill")


def unified_array(array) -> UnifiedBuffer:
    """A UnifiedBuffer holding a copy of ``array`` (anything NumPy can make an array of) on the device, under the
    worker's spill budget when it has one (``spill_manager()``). Raises gpumem.OutOfMemoryError when the
    device copy does not fit even after spilling (or, without a budget, when the device is full)."""
    host = np.ascontiguousarray(array)
    buffer = UnifiedBuffer(host.shape, host.dtype, spill=spill_manager())
    buffer.copy_from(host)
    return buffer


@dask_serialize.register(UnifiedBuffer)
def _serialize_unified_buffer(buffer: UnifiedBuffer):
    host = buffer.to_numpy()
    return {"shape": host.shape, "dtype": host.dtype.str}, [host.tobytes()]


@dask_deserialize.register(UnifiedBuffer)
def _deserialize_unified_buffer(header, frames) -> UnifiedBuffer:
    data = b"".join(bytes(frame) for frame in frames)
    return unified_array(np.frombuffer(data, dtype=np.dtype(header["dtype"])).reshape(header["shape"]))


def gather_statistics(client) -> Dict[str, Dict[str, Any]]:
    """``worker_info()`` of every worker of ``client``, by worker address. The log files it names can be read
    by ``gpumem report`` / ``gpumem replay`` (on the workers' host, or copied from it)."""
    return client.run(worker_info)


def from_dask_cuda_options(rmm_pool_size: Union[int, str, None] = None,
                           rmm_maximum_pool_size: Union[int, str, None] = None, rmm_managed_memory: bool = False,
                           rmm_async: bool = False, rmm_log_directory: Optional[str] = None,
                           **options) -> GpumemPlugin:
    """The plugin that matches dask-cuda's RMM options: ``rmm_async`` -> ``async`` (with rmm_pool_size as its
    initial size); a pool size -> ``pool`` (over managed memory with ``rmm_managed_memory``); only
    ``rmm_managed_memory`` -> ``managed``; none -> ``cuda``, as dask-cuda leaves RMM's default then.
    ``rmm_log_directory`` -> ``log_directory``; other keyword arguments go to GpumemPlugin. Raises ValueError
    for ``rmm_async`` with ``rmm_managed_memory`` (dask-cuda refuses it too), and what GpumemPlugin raises."""
    if rmm_async and rmm_managed_memory:
        raise ValueError("from_dask_cuda_options: rmm_async and rmm_managed_memory cannot be combined")
    if rmm_async:
        return GpumemPlugin("async", initial_pool_size=rmm_pool_size, log_directory=rmm_log_directory, **options)
    if rmm_pool_size is not None or rmm_maximum_pool_size is not None:
        return GpumemPlugin("pool", initial_pool_size=rmm_pool_size, maximum_pool_size=rmm_maximum_pool_size,
                            managed=rmm_managed_memory, log_directory=rmm_log_directory, **options)
    return GpumemPlugin("managed" if rmm_managed_memory else "cuda", log_directory=rmm_log_directory, **options)


__all__ = ["FRAMEWORKS", "RESOURCES", "GpumemPlugin", "LocalDeviceCluster", "from_dask_cuda_options",
           "gather_statistics", "rotated", "spill_manager", "unified_array", "worker_info"]
