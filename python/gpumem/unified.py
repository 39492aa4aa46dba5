"""Unified buffers: the default buffer pool and the accelerator's memory information.

::

    import gpumem
    pool = gpumem.get_memory_pool()
    buf = pool.acquire((1024, 1024), "float32")   # a UnifiedBuffer, reusing released memory when it fits
    buf.host[:] = 1.0                              # host copy current (HOST_ONLY)
    dev = buf.device                               # copied to the device; __cuda_array_interface__, DLPack
    del dev                                        # views must be gone before the buffer is released
    pool.release(buf)
    free, total = gpumem.get_accelerator().get_memory_info()

A ``gpumem.SpillManager(budget_bytes)`` passed as ``spill=`` (to ``UnifiedBuffer`` or ``UnifiedBufferPool``)
caps the device memory the buffers hold; ``set_memory_pool(UnifiedBufferPool(spill=manager))`` makes
``get_memory_pool()`` hand out such buffers.
"""

from __future__ import annotations

import threading
from typing import Optional, Tuple

from ._gpumem import UnifiedBufferPool
from ._gpumem import cuda as _cuda

__all__ = ["Accelerator", "get_accelerator", "get_memory_pool", "set_memory_pool"]

_lock = threading.Lock()
_default_pool: Optional[UnifiedBufferPool] = None


def get_memory_pool() -> UnifiedBufferPool:
    """The process's default UnifiedBufferPool (pageable host copies, no spilling unless set otherwise)."""
    global _default_pool
    with _lock:
        if _default_pool is None:
            _default_pool = UnifiedBufferPool()
        return _default_pool


def set_memory_pool(pool: Optional[UnifiedBufferPool]) -> Optional[UnifiedBufferPool]:
    """Makes ``pool`` the default returned by get_memory_pool() (None: a new default on next use); returns
    the previous one. Buffers acquired from the previous pool may still be released to it."""
    global _default_pool
    if pool is not None and not isinstance(pool, UnifiedBufferPool):
        raise TypeError(f"set_memory_pool: expected a gpumem.UnifiedBufferPool or None, got {type(pool).__name__}")
    with _lock:
        previous, _default_pool = _default_pool, pool
        return previous


class Accelerator:
    """One device as the accelerator APIs of training frameworks present it (DeepSpeed's get_accelerator())."""

    def __init__(self, device_id: int) -> None:
        if not isinstance(device_id, int) or isinstance(device_id, bool):
            raise TypeError(f"Accelerator: device_id must be an int, not {type(device_id).__name__}")
        count = _cuda.get_device_count()
        if not 0 <= device_id < count:
            raise ValueError(f"Accelerator: device_id {device_id} is not a valid device ({count} device(s) present)")
        self._device_id = device_id

    @property
    def device_id(self) -> int:
        """The device ordinal."""
        return self._device_id

    def device_name(self) -> str:
        """``"cuda:<id>"``."""
        return f"cuda:{self._device_id}"

    def get_memory_info(self) -> Tuple[int, int]:
        """(free, total) bytes of device memory, as the driver reports them now (emulated on the host backend)."""
        return tuple(_cuda.Device(self._device_id).mem_info)

    def synchronize(self) -> None:
        """Waits for all work on the device."""
        _cuda.Device(self._device_id).synchronize()

    def __repr__(self) -> str:
        return f"<gpumem Accelerator cuda:{self._device_id}>"


def get_accelerator(device_id: Optional[int] = None) -> Accelerator:
    """The accelerator for ``device_id`` (None: the current device)."""
    return Accelerator(_cuda.get_device_id() if device_id is None else device_id)
