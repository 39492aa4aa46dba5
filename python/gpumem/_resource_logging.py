"""RMM's allocation logging switches (``rmm.enable_logging``, ``disable_logging``, ``get_log_filenames``).

Logging puts a ``LoggingResourceAdaptor`` on top of a device's current resource; it writes every allocation
and free as a CSV row (Thread,Time,Action,Pointer,Size,Stream), the log that ``gpumem replay`` reads. One
file per device: ``name.ext`` becomes the absolute path of ``name.dev<device>.ext``, as in RMM.
"""

from __future__ import annotations

import os
import threading
from typing import Dict, List, Optional

from . import _gpumem, mr

__all__ = ["disable_logging", "enable_logging", "get_log_filenames"]

LOG_FILE_VARIABLE = "GPUMEM_LOG_FILE"
"""The environment variable naming the log file when none is given (RMM's ``RMM_LOG_FILE``)."""

_lock = threading.Lock()


def log_file_for(log_file_name: str, device: int) -> str:
    """RMM's per-device name: ``name.ext`` -> the absolute path of ``name.dev<device>.ext``."""
    root, ext = os.path.splitext(os.fspath(log_file_name))
    return os.path.abspath(f"{root}.dev{device}{ext}")


def log_file_name_or_environment(log_file_name, caller: str) -> str:
    """`log_file_name`, or GPUMEM_LOG_FILE when it is None. Raises ValueError when neither names a file,
    TypeError when `log_file_name` is no str or path."""
    if log_file_name is None:
        log_file_name = os.environ.get(LOG_FILE_VARIABLE) or None
        if log_file_name is None:
            raise ValueError(f"{caller}: logging needs log_file_name, or the environment variable {LOG_FILE_VARIABLE}")
    if not isinstance(log_file_name, (str, os.PathLike)):
        raise TypeError(f"log_file_name must be a str or a path, not {type(log_file_name).__name__}")
    return os.fspath(log_file_name)


def _devices() -> List[int]:
    """The devices whose resource was set from Python (RMM's per-device table), or the current device."""
    held = sorted(_gpumem.mr._per_device_resources.keys())
    return held or [_gpumem.cuda.get_device_id()]


def enable_logging(log_file_name: Optional[str] = None) -> None:
    """Logs every allocation and free of each device in use to ``<name>.dev<device><ext>`` (absolute), by
    putting a ``LoggingResourceAdaptor`` over its current resource (unless it is one already).

    The devices are those whose resource was set (``set_per_device_resource``, ``reinitialize``), else the
    current one. `log_file_name` None: the file GPUMEM_LOG_FILE names; ValueError when neither is given.
    ValueError when a file cannot be opened (nothing is changed then).
    """
    name = log_file_name_or_environment(log_file_name, "enable_logging")
    with _lock:
        built = {}
        current = _gpumem.cuda.get_device_id()
        try:
            for device in _devices():
                resource = mr.get_per_device_resource(device)
                if isinstance(resource, mr.LoggingResourceAdaptor):
                    continue
                _gpumem.cuda.Device(device).use()  # the adaptor serves this device
                built[device] = mr.LoggingResourceAdaptor(resource, log_file_for(name, device))
        finally:
            _gpumem.cuda.Device(current).use()
        for device, resource in built.items():
            mr.set_per_device_resource(device, resource)


def disable_logging() -> None:
    """Removes the ``LoggingResourceAdaptor`` that ``enable_logging`` or ``reinitialize(logging=True)`` put on
    each device (its upstream becomes the device's resource again), after flushing its file."""
    with _lock:
        for device in sorted(_gpumem.mr._per_device_resources.keys()):
            resource = mr.get_per_device_resource(device)
            if isinstance(resource, mr.LoggingResourceAdaptor):
                resource.flush()
                mr.set_per_device_resource(device, resource.get_upstream())


def get_log_filenames() -> Dict[int, Optional[str]]:
    """{device: the log file of its resource, or None when it does not log} for each device whose resource
    was set."""
    result = {}
    for device in sorted(_gpumem.mr._per_device_resources.keys()):
        resource = mr.get_per_device_resource(device)
        result[device] = resource.get_file_name() if isinstance(resource, mr.LoggingResourceAdaptor) else None
    return result
