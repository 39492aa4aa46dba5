"""gpumem.reinitialize and its companions, RMM's: ``reinitialize``, ``is_initialized``,
``register_reinitialize_hook`` and ``unregister_reinitialize_hook``."""

from __future__ import annotations

import threading
from typing import Callable, Iterable, List, Optional, Tuple, Union

from . import _gpumem, mr
from ._resource_logging import log_file_for, log_file_name_or_environment

_lock = threading.Lock()
_hooks: List[Tuple[Callable, tuple, dict]] = []


def register_reinitialize_hook(func: Callable, *args, **kwargs) -> Callable:
    """Adds ``func(*args, **kwargs)`` to the hooks ``reinitialize`` calls first (newest first), for example
    to release cached device memory before the resources are replaced; returns `func`. Raises TypeError when
    `func` is not callable."""
    if not callable(func):
        raise TypeError(f"func must be callable, not {type(func).__name__}")
    with _lock:
        _hooks.append((func, args, kwargs))
    return func


def unregister_reinitialize_hook(func: Callable) -> None:
    """Removes every registration of `func` (nothing happens when there is none)."""
    with _lock:
        _hooks[:] = [hook for hook in _hooks if hook[0] != func]


def is_initialized() -> bool:
    """True when every device has a resource to allocate from: always, in gpumem (a device's resource is its
    default CudaMemoryResource until another is set), as in RMM once it is imported."""
    return all(mr.get_per_device_resource(device) is not None for device in range(_gpumem.cuda.get_device_count()))


def _size(value, name: str) -> Optional[int]:
    """None, an int, or RMM's size string ("4MiB") as bytes, parsed as every resource's size arguments are."""
    if value is None or isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _gpumem._parse_bytes(value, name)
    raise TypeError(f"{name} must be an int or a str such as \"4MiB\", not {type(value).__name__}")


def reinitialize(pool_allocator: bool = False, managed_memory: bool = False,
                 initial_pool_size: Union[int, str, None] = None, maximum_pool_size: Union[int, str, None] = None,
                 devices: Union[int, Iterable[int]] = 0, logging: bool = False,
                 log_file_name: Optional[str] = None) -> None:
    """Sets the current resource of each device in ``devices`` (an int or a list of ints), as RMM does.

    First the hooks of ``register_reinitialize_hook`` run, newest first. The resource is
    ``ManagedMemoryResource()`` when ``managed_memory`` else ``CudaMemoryResource()``; with ``pool_allocator``
    a ``PoolMemoryResource`` over it (``initial_pool_size``: bytes taken at once, ``maximum_pool_size``: its
    cap; ints or strings such as "4MiB"; ignored without ``pool_allocator``, as RMM); with ``logging`` a
    ``LoggingResourceAdaptor`` on top writing the absolute path of ``log_file_name`` with ``.dev<N>`` before
    its extension (``log_file_name`` None: GPUMEM_LOG_FILE).

    Raises ValueError for a maximum below the initial size, a size string that is no size, logging without a
    file name, or an invalid device; ``gpumem.OutOfMemoryError`` when the initial pool cannot be had.
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
    initial = _size(initial_pool_size, "initial_pool_size")
    maximum = _size(maximum_pool_size, "maximum_pool_size")
    if logging:
        log_file_name = log_file_name_or_environment(log_file_name, "reinitialize")

    with _lock:
        hooks = list(reversed(_hooks))
    for func, args, kwargs in hooks:
        func(*args, **kwargs)

    built = {}
    current_device = _gpumem.cuda.get_device_id()
    try:
        for device in device_list:
            _gpumem.cuda.Device(device).use()  # resources are created on the device they serve
            resource = mr.ManagedMemoryResource() if managed_memory else mr.CudaMemoryResource()
            if pool_allocator:
                resource = mr.PoolMemoryResource(resource, initial, maximum)
            if logging:
                resource = mr.LoggingResourceAdaptor(resource, log_file_for(log_file_name, device))
            built[device] = resource
    finally:
        _gpumem.cuda.Device(current_device).use()

    with _lock:
        for device, resource in built.items():
            mr.set_per_device_resource(device, resource)
