"""gpumem: a GPU memory manager with the names CuPy, RMM and NumPy users already know.

The plain API::

    import gpumem
    p = gpumem.alloc(1 << 20)      # an int: the device address
    gpumem.free(p)

Errors: ``gpumem.OutOfMemoryError`` (a ``MemoryError`` naming the size, device, free and total memory)
when memory is exhausted; ``ValueError`` for misuse (an unknown or already-freed pointer, a bad size);
``gpumem.CUDARuntimeError`` when a CUDA call fails.

The library runs on the GPU (CUDA backend) or, where there is none, on its host backend, which emulates
a device on the CPU (``GPUMEM_BACKEND=cuda|host`` chooses).
"""

from ._gpumem import (  # noqa: F401  (re-exported)
    BufferState,
    CUDARuntimeError,
    DeviceBuffer,
    OutOfMemoryError,
    UnifiedBuffer,
    alloc,
    allocation_size,
    free,
    zeros,
)

from . import cuda  # noqa: E402,F401  (gpumem.cuda: devices, streams, events, graphs; CuPy's names)
from . import mr  # noqa: E402,F401  (gpumem.mr: the memory resources; RMM's names)

__all__ = [
    "BufferState",
    "CUDARuntimeError",
    "DeviceBuffer",
    "OutOfMemoryError",
    "UnifiedBuffer",
    "alloc",
    "allocation_size",
    "cuda",
    "free",
    "mr",
    "zeros",
]
