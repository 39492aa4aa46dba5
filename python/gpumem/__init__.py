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

RMM's top-level names are here too (``rmm`` -> ``gpumem``): ``reinitialize``, ``is_initialized``,
``register_reinitialize_hook`` / ``unregister_reinitialize_hook``, ``RMMError`` (the base of gpumem's
errors), ``enable_logging`` / ``disable_logging`` / ``get_log_filenames`` and the debug logger's
``set_logging_level`` and friends (``gpumem.logger``).

``gpumem.__version__`` is the project's version (CMake's ``project(gpumem VERSION ...)``, written into
``gpumem/_version.py`` by the build). The package also holds the ``gpumem`` command-line tool: the console
script ``gpumem`` and ``python -m gpumem`` run it.
"""

from ._version import __version__  # noqa: F401  (written by the build)

from ._gpumem import (  # noqa: F401  (re-exported)
    BufferNotAllocatedError,
    BufferState,
    CUDARuntimeError,
    DeviceBuffer,
    ImportedBuffer,
    IpcHandle,
    OutOfMemoryError,
    PoolStatistics,
    RMMError,
    SpillManager,
    UnifiedBuffer,
    UnifiedBufferPool,
    UnifiedDeviceView,
    alloc,
    allocation_size,
    free,
    import_buffer,
    live_allocation_count,
    zeros,
)

from ._keyword_aliases import accept_aliases as _accept_aliases  # noqa: E402

# RMM's keyword names for DeviceBuffer's copies, beside gpumem's.
_accept_aliases(DeviceBuffer, "to_device", {"b": "data"})
_accept_aliases(DeviceBuffer, "copy_from_host", {"ary": "data"})
_accept_aliases(DeviceBuffer, "copy_to_host", {"ary": "out"})

from . import cuda  # noqa: E402,F401  (gpumem.cuda: devices, streams, events, graphs; CuPy's names)
from . import mr  # noqa: E402,F401  (gpumem.mr: the memory resources; RMM's names)
from . import statistics  # noqa: E402,F401  (gpumem.statistics: RMM's rmm.statistics)
from ._reinitialize import (  # noqa: E402,F401  (RMM's rmm.reinitialize and its hooks)
    is_initialized,
    register_reinitialize_hook,
    reinitialize,
    unregister_reinitialize_hook,
)
from ._resource_logging import disable_logging, enable_logging, get_log_filenames  # noqa: E402,F401
from .logger import (  # noqa: E402,F401  (RMM's debug logger functions)
    flush_logger,
    get_flush_level,
    get_logging_level,
    level_enum,
    set_flush_level,
    set_logging_level,
    should_log,
)
from .unified import Accelerator, get_accelerator, get_memory_pool, set_memory_pool  # noqa: E402,F401
from .unified import cuda_available  # noqa: E402,F401  (PyDotCompute's name)
from . import allocators  # noqa: E402,F401  (gpumem.allocators: gpumem as CuPy's, PyTorch's and Numba's allocator)


def __getattr__(name):
    """``NUMBA_CUDA_MEMORY_MANAGER=gpumem``: Numba reads ``gpumem._numba_memory_manager``, imported only then."""
    if name == "_numba_memory_manager":
        from .allocators.numba import _numba_memory_manager

        return _numba_memory_manager
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "Accelerator",
    "BufferNotAllocatedError",
    "BufferState",
    "CUDARuntimeError",
    "DeviceBuffer",
    "ImportedBuffer",
    "IpcHandle",
    "OutOfMemoryError",
    "PoolStatistics",
    "RMMError",
    "SpillManager",
    "UnifiedBuffer",
    "UnifiedBufferPool",
    "UnifiedDeviceView",
    "alloc",
    "allocators",
    "allocation_size",
    "cuda",
    "cuda_available",
    "disable_logging",
    "enable_logging",
    "flush_logger",
    "free",
    "get_accelerator",
    "get_flush_level",
    "get_log_filenames",
    "get_logging_level",
    "get_memory_pool",
    "import_buffer",
    "is_initialized",
    "level_enum",
    "live_allocation_count",
    "mr",
    "register_reinitialize_hook",
    "reinitialize",
    "set_flush_level",
    "set_logging_level",
    "set_memory_pool",
    "should_log",
    "statistics",
    "unregister_reinitialize_hook",
    "zeros",
]
