"""gpumem.dask.LocalDeviceCluster: one Dask worker process per device, each on its own device.

gpumem's current device belongs to a thread, as CUDA's does, and a worker runs its tasks on executor threads
that no plugin can reach; so, as dask-cuda's LocalCUDACluster does, each worker process is started seeing its
own device first: device 0 of every thread of the worker is that device.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence

from distributed import LocalCluster, Nanny
from distributed.diagnostics.plugin import WorkerPlugin

from . import _gpumem

INHERITED = ("GPUMEM_HOST_DEVICES", "GPUMEM_HOST_MEMORY")
"""Variables every worker takes from the process that makes the cluster, with its GPUMEM_BACKEND, so that a
worker's devices are the same devices (emulated ones included) as this process's."""

VISIBILITY = {"cuda": "CUDA_VISIBLE_DEVICES", "host": "GPUMEM_HOST_VISIBLE_DEVICES"}
"""By backend, the variable that says which devices a worker sees and in which order. Only the backend's own is
set: emulated ordinals in CUDA_VISIBLE_DEVICES would hide or reorder a machine's real GPUs from every CUDA
library a worker loads (NVML, which Distributed's worker monitor asks for its CUDA_VISIBLE_DEVICES' first GPU,
PyTorch, CuPy)."""


def _physical(variable: str, devices: Sequence[int]) -> List[str]:
    """What ``variable`` must name for this process's ``devices``: the entries of this process's own value
    where it has one that names them (this process may itself see a subset), else the ordinals."""
    own = [entry.strip() for entry in os.environ.get(variable, "").split(",") if entry.strip()]
    return [own[device] if device < len(own) else str(device) for device in devices]


def rotated(entries: Sequence[str], first: int) -> str:
    """``entries`` as a variable's value, starting at index ``first`` and wrapping around, as dask-cuda gives
    worker i "i,i+1,...,0,...,i-1": ``rotated(["0", "1", "2"], 1) == "1,2,0"``."""
    return ",".join([*entries[first:], *entries[:first]])


def _check_devices(devices: Optional[Sequence[int]]) -> List[int]:
    count = _gpumem.cuda.get_device_count()
    if devices is None:
        return list(range(count))
    if isinstance(devices, (str, bytes)) or not hasattr(devices, "__iter__"):
        raise TypeError(f"LocalDeviceCluster: devices must be a list of device ordinals, not {devices!r}")
    chosen = list(devices)
    if not chosen:
        raise ValueError("LocalDeviceCluster: devices is empty; name at least one device (None: all)")
    for device in chosen:
        if not isinstance(device, int) or isinstance(device, bool):
            raise TypeError(f"LocalDeviceCluster: devices must be ints (device ordinals), not {device!r}")
        if not 0 <= device < count:
            raise ValueError(f"LocalDeviceCluster: device {device} does not exist "
                             f"({count} device(s) in this process, 0 to {count - 1})")
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"LocalDeviceCluster: devices {chosen} names a device twice")
    return chosen


class LocalDeviceCluster(LocalCluster):
    """A ``distributed.LocalCluster`` with one worker process per device, each on its own device:
    dask-cuda's ``LocalCUDACluster`` for gpumem.

    The worker of ``devices[i]`` runs with its backend's visibility variable (VISIBILITY: CUDA_VISIBLE_DEVICES
    on the cuda backend, GPUMEM_HOST_VISIBLE_DEVICES on the host backend) listing ``devices`` rotated to start
    at ``devices[i]`` (dask-cuda's "i,i+1,...,0,...,i-1"), so its device 0, the current device of each of its
    threads and the device that ``GpumemPlugin`` sets up, is its own device: a GPU on the cuda backend, an
    emulated device on the host backend. The variable is translated through this process's own value where it
    has one (this process may see a subset of the devices itself); the other backend's variable is left as this
    process has it. Workers are
    named by their device's ordinal in this process; ``gpumem.dask.worker_info()`` reports the device's name
    and PCI bus id, which tell the workers' devices apart.

    ``n_workers``: how many of ``devices`` get a worker at once, the first ones (default: all; ``scale(n)``
    goes up to ``len(devices)``). ``devices``: ordinals of this process's devices (default: every device,
    ``gpumem.cuda.get_device_count()``). ``plugin``: a worker plugin every worker runs when it starts, such as
    ``GpumemPlugin("pool", initial_pool_size="4GiB")``. ``threads_per_worker``: 1 by default, as dask-cuda's.
    ``env``: more variables for every worker. Other keyword arguments go to ``LocalCluster``
    (``dashboard_address``, ``memory_limit``: by default the host's memory shared equally by one worker per
    device, ...). Every worker inherits this process's environment, and this process's backend (as
    GPUMEM_BACKEND) and its INHERITED variables whatever ``distributed.nanny.environ`` says.

    Raises ValueError (TypeError for wrong types) before starting anything: a device that does not exist, an
    empty or repeated ``devices``, ``n_workers`` below 1 or above ``len(devices)``, ``processes=False`` or a
    ``worker_class`` that is not a Nanny (threads of one process share the devices' numbering). ``scale`` beyond
    ``len(devices)`` raises ValueError. A plugin whose setup fails on a worker stops that worker from starting:
    making the cluster raises distributed's RuntimeError("Worker failed to start."), the setup's error as its
    ``__cause__``.
    """

    def __init__(self, n_workers: Optional[int] = None, *, devices: Optional[Sequence[int]] = None,
                 plugin: Optional[WorkerPlugin] = None, threads_per_worker: int = 1,
                 env: Optional[Dict[str, str]] = None, **kwargs: Any):
        self._devices = _check_devices(devices)
        if n_workers is None:
            n_workers = len(self._devices)
        if not isinstance(n_workers, int) or isinstance(n_workers, bool):
            raise TypeError(f"LocalDeviceCluster: n_workers must be an int, not {n_workers!r}")
        if not 1 <= n_workers <= len(self._devices):
            raise ValueError(f"LocalDeviceCluster: n_workers must be from 1 to {len(self._devices)} (one worker "
                             f"per device of {self._devices}), not {n_workers}")
        if kwargs.get("processes", True) is False:
            raise ValueError("LocalDeviceCluster: processes=False is not possible: each worker is a process that "
                             "sees its own device")
        worker_class = kwargs.pop("worker_class", Nanny)
        if not (isinstance(worker_class, type) and issubclass(worker_class, Nanny)):
            raise ValueError(f"LocalDeviceCluster: worker_class must be a Nanny (one process per worker), "
                             f"not {worker_class!r}")
        if plugin is not None and not isinstance(plugin, WorkerPlugin):
            raise TypeError(f"LocalDeviceCluster: plugin must be a distributed WorkerPlugin, not {plugin!r}")
        backend = _gpumem.cuda.get_backend()
        variable = VISIBILITY[backend]
        self._visibility = {variable: _physical(variable, self._devices)}
        inherited = {name: os.environ[name] for name in INHERITED if name in os.environ}
        inherited["GPUMEM_BACKEND"] = backend
        # LocalCluster's default (it sees no workers here): the host's memory shared by one worker per device
        kwargs.setdefault("memory_limit", 1.0 / len(self._devices))
        kwargs["processes"] = True
        super().__init__(n_workers=0, threads_per_worker=threads_per_worker, worker_class=worker_class,
                         env={**(env or {}), **inherited}, plugins=() if plugin is None else (plugin,), **kwargs)
        self.scale(n_workers)
        if not self.asynchronous:
            try:
                self.sync(self._correct_state)
            except Exception:
                self.close()  # the scheduler and the workers that did start
                raise

    @property
    def devices(self) -> List[int]:
        """The devices this cluster may have workers on (ordinals of this process), in their order."""
        return list(self._devices)

    def worker_environment(self, device: int) -> Dict[str, str]:
        """The visibility variable of ``device``'s worker: ``{"CUDA_VISIBLE_DEVICES": "1,0"}`` on the cuda
        backend, ``{"GPUMEM_HOST_VISIBLE_DEVICES": "1,0"}`` on the host backend."""
        first = self._devices.index(device)
        return {variable: rotated(entries, first) for variable, entries in self._visibility.items()}

    def new_worker_spec(self) -> Dict[int, Dict[str, Any]]:
        """The spec of the worker of the first device without one (``scale``'s building block)."""
        free = [device for device in self._devices if device not in self.worker_spec]
        if not free:
            raise ValueError(f"LocalDeviceCluster: cannot scale beyond one worker per device of {self._devices}")
        device = free[0]
        options = dict(self.new_spec["options"])
        options["env"] = {**options.get("env", {}), **self.worker_environment(device)}
        return {device: {"cls": self.new_spec["cls"], "options": options}}
