"""gpumem.reinitialize: RMM's ``rmm.reinitialize``, which sets up every chosen device's current resource."""

from __future__ import annotations

import os
import threading
from typing import Iterable, Optional, Union

from . import _gpumem, mr

_lock = threading.Lock()


def _log_file_for(log_file_name: str, device: int) -> str:
    """RMM's naming: ``name.ext`` becomes ``name.dev<device>.ext``, one log per device."""
    root, ext = os.path.splitext(log_file_name)
    return f"{root}.dev{device}{ext}"


def reinitialize(pool_allocator: bool = False, managed_memory: bool = False,
                 initial_pool_size: Optional[int] = None, maximum_pool_size: Optional[int] = None,
                 devices: Union[int, Iterable[int]] = 0, logging: bool = False,
                 log_file_name: Optional[str] = None) -> None:
    """Sets the current resource of each device in ``devices`` (an int or a list of ints), as RMM does.

    The resource is ``ManagedMemoryResource()`` when ``managed_memory`` else ``CudaMemoryResource()``;
    with ``pool_allocator`` a ``PoolMemoryResource`` over it (``initial_pool_size``: bytes taken at once,
    ``maximum_pool_size``: its cap); with ``logging`` a ``LoggingResourceAdaptor`` on top writing
    ``log_file_name`` with ``.dev<N>`` before its extension (``log_file_name`` None: GPUMEM_LOG_FILE).

    Raises ValueError for a pool size on a non-pool setup, a maximum below the initial size, logging without
    a file name, or an invalid device; ``gpumem.OutOfMemoryError`` when the initial pool cannot be had.
    Nothing is changed when any device fails. Memory already allocated stays valid: gpumem keeps a replaced
    resource alive while ``gpumem.alloc`` memory from it is live (DeviceBuffers keep theirs alive anyway).
    """
    if not isinstance(devices, int) and not hasattr(devices, "__iter__"):
        raise TypeError(f"reinitialize: devices must be an int or an iterable of ints, not {type(devices).__name__}")
    device_list = [devices] if isinstance(devices, int) else list(devices)
    if not device_list:
        raise ValueError("reinitialize: `devices` is empty")
    for device in device_list:
        if not isinstance(device, int) or not 0 <= device < _gpumem.cuda.get_device_count():
            raise ValueError(f"reinitialize: devices names {device!r}, which is not a device "
                             f"({_gpumem.cuda.get_device_count()} device(s) present)")
    if not pool_allocator and (initial_pool_size is not None or maximum_pool_size is not None):
        raise ValueError("reinitialize: initial_pool_size / maximum_pool_size need pool_allocator=True")
    if logging and log_file_name is None:
        log_file_name = os.environ.get("GPUMEM_LOG_FILE") or None
        if log_file_name is None:
            raise ValueError("reinitialize: logging=True needs log_file_name (or GPUMEM_LOG_FILE)")

    built = {}
    current_device = _gpumem.cuda.get_device_id()
    try:
        for device in device_list:
            _gpumem.cuda.Device(device).use()  # resources are created on the device they serve
            resource = mr.ManagedMemoryResource() if managed_memory else mr.CudaMemoryResource()
            if pool_allocator:
                resource = mr.PoolMemoryResource(resource, initial_pool_size, maximum_pool_size)
            if logging:
                resource = mr.LoggingResourceAdaptor(resource, _log_file_for(log_file_name, device))
            built[device] = resource
    finally:
        _gpumem.cuda.Device(current_device).use()

    with _lock:
        for device, resource in built.items():
            mr.set_per_device_resource(device, resource)
