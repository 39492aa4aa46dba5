"""Unified buffers: the default buffer pool and the accelerator's memory information.

::

    import gpumem
    pool = gpumem.get_memory_pool()
    buf = pool.acquire((1024, 1024), "float32")   # a UnifiedBuffer, reusing released memory when it fits
    buf.host[:] = 1.0                              # the host copy written (HOST_DIRTY)
    dev = buf.device                               # copied to the device; __cuda_array_interface__, DLPack
    del dev                                        # views must be gone before the buffer is released
    pool.release(buf)
    free, total = gpumem.get_accelerator().get_memory_info()

A ``gpumem.SpillManager(budget_bytes)`` passed as ``spill=`` (to ``UnifiedBuffer`` or ``UnifiedBufferPool``)
caps the device memory the buffers hold; ``set_memory_pool(UnifiedBufferPool(spill=manager))`` makes
``get_memory_pool()`` hand out such buffers.

PyDotCompute's names are here too (docs/python.md has the table): ``UnifiedBuffer.ensure_on_host()`` and
``ensure_on_device()`` (coroutines), ``Accelerator()`` with its device list, ``cuda_available()``.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass
from typing import List, Optional, Tuple

from ._gpumem import BufferNotAllocatedError, BufferState, UnifiedBuffer, UnifiedBufferPool
from ._gpumem import cuda as _cuda

__all__ = [
    "Accelerator",
    "DeviceProperties",
    "DeviceType",
    "cuda_available",
    "get_accelerator",
    "get_memory_pool",
    "set_memory_pool",
]

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


def _require_data(buffer: UnifiedBuffer, what: str) -> None:
    if buffer.state == BufferState.UNINITIALIZED:
        raise BufferNotAllocatedError(
            f"UnifiedBuffer.{what}: the buffer is UNINITIALIZED: it holds no data yet (write it, or allocate() it, first)")


async def _ensure_on_device(self: UnifiedBuffer, stream=None) -> None:
    """Makes the device copy current (HOST_ONLY, HOST_DIRTY -> SYNCHRONIZED), as a coroutine.

    Raises BufferNotAllocatedError when the buffer holds no data (UNINITIALIZED)."""
    _require_data(self, "ensure_on_device")
    self.sync_to_device(stream)


async def _ensure_on_host(self: UnifiedBuffer, stream=None) -> None:
    """Makes the host copy current (DEVICE_ONLY, DEVICE_DIRTY -> SYNCHRONIZED), as a coroutine.

    Raises BufferNotAllocatedError when the buffer holds no data (UNINITIALIZED)."""
    _require_data(self, "ensure_on_host")
    self.sync_to_host(stream)


# PyDotCompute's awaitable methods: coroutines are written in Python, so they join the class here.
UnifiedBuffer.ensure_on_device = _ensure_on_device
UnifiedBuffer.ensure_on_host = _ensure_on_host


class DeviceType(enum.Enum):
    """What a listed device is: a GPU (``CUDA``), or one that gpumem's host backend emulates (``CPU``)."""

    CPU = "cpu"
    CUDA = "cuda"


@dataclass(frozen=True)
class DeviceProperties:
    """One device as ``Accelerator.devices`` lists it."""

    device_id: int
    device_type: DeviceType
    name: str
    compute_capability: Optional[Tuple[int, int]]  # (major, minor); None for an emulated device
    total_memory: int  # bytes
    multiprocessor_count: int
    is_available: bool = True

    @property
    def compute_capability_str(self) -> str:
        """``"9.0"``, or ``"N/A"`` for an emulated device."""
        if self.compute_capability is None:
            return "N/A"
        return f"{self.compute_capability[0]}.{self.compute_capability[1]}"

    @property
    def total_memory_gb(self) -> float:
        """total_memory in GiB."""
        return self.total_memory / (1 << 30)


def cuda_available() -> bool:
    """Whether gpumem runs on CUDA with at least one GPU (False on its host backend, which emulates devices)."""
    return _cuda.get_backend() == "cuda" and _cuda.get_device_count() > 0


def _check_device_id(device_id: object, what: str) -> int:
    if not isinstance(device_id, int) or isinstance(device_id, bool):
        raise TypeError(f"{what}: device_id must be an int, not {type(device_id).__name__}")
    count = _cuda.get_device_count()
    if not 0 <= device_id < count:
        raise ValueError(f"{what}: device_id {device_id} is not a valid device ({count} device(s) present)")
    return device_id


def _properties(device_id: int) -> DeviceProperties:
    device = _cuda.Device(device_id)
    on_gpu = _cuda.get_backend() == "cuda"
    capability = device.compute_capability  # CuPy's spelling: "90" for 9.0
    return DeviceProperties(
        device_id=device_id,
        device_type=DeviceType.CUDA if on_gpu else DeviceType.CPU,
        name=device.name,
        compute_capability=(int(capability[:-1]), int(capability[-1])) if on_gpu else None,
        total_memory=device.total_memory,
        multiprocessor_count=device.multi_processor_count,
    )


class Accelerator:
    """One device and the list of all, as PyDotCompute's Accelerator and DeepSpeed's get_accelerator() present them.

    ``Accelerator()`` is the current device; ``Accelerator(device_id)`` a given one. Each call makes a new
    object (not a singleton): compare ``device_id``.
    """

    def __init__(self, device_id: Optional[int] = None) -> None:
        self._device_id = _check_device_id(_cuda.get_device_id() if device_id is None else device_id, "Accelerator")

    @property
    def device_id(self) -> int:
        """The device ordinal."""
        return self._device_id

    def device_name(self) -> str:
        """``"cuda:<id>"``."""
        return f"cuda:{self._device_id}"

    @property
    def cuda_available(self) -> bool:
        """As the module's cuda_available()."""
        return cuda_available()

    @property
    def device_count(self) -> int:
        """How many devices there are (emulated ones on the host backend)."""
        return _cuda.get_device_count()

    @property
    def devices(self) -> List[DeviceProperties]:
        """Every device's properties, by device id."""
        return [_properties(i) for i in range(self.device_count)]

    @property
    def current_device(self) -> DeviceProperties:
        """This accelerator's device's properties."""
        return _properties(self._device_id)

    def get_device(self, device_id: int) -> DeviceProperties:
        """The properties of ``device_id``; ValueError for a device that does not exist."""
        return _properties(_check_device_id(device_id, "Accelerator.get_device"))

    def set_device(self, device_id: int) -> None:
        """Makes ``device_id`` this accelerator's device and the calling thread's current device."""
        self._device_id = _check_device_id(device_id, "Accelerator.set_device")
        _cuda.Device(device_id).use()

    select_device = set_device

    def get_memory_info(self, device_id: Optional[int] = None) -> Tuple[int, int]:
        """(free, total) bytes of ``device_id`` (None: this accelerator's device), as the driver reports them
        now (emulated on the host backend)."""
        target = self._device_id if device_id is None else _check_device_id(device_id, "Accelerator.get_memory_info")
        return tuple(_cuda.Device(target).mem_info)

    def synchronize(self) -> None:
        """Waits for all work on the device."""
        _cuda.Device(self._device_id).synchronize()

    def __repr__(self) -> str:
        return f"<gpumem Accelerator cuda:{self._device_id} of {self.device_count}, cuda_available={self.cuda_available}>"


def get_accelerator(device_id: Optional[int] = None) -> Accelerator:
    """The accelerator for ``device_id`` (None: the current device)."""
    return Accelerator(device_id)
