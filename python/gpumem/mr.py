"""Memory resources with the names RMM's Python users know (``rmm.mr``).

A resource hands out stream-ordered, 256-byte aligned device memory::

    import gpumem
    from gpumem import mr

    pool = mr.PoolMemoryResource(mr.CudaMemoryResource(), initial_pool_size=1 << 30)
    stats = mr.StatisticsResourceAdaptor(pool)
    mr.set_current_device_resource(stats)      # gpumem.alloc and DeviceBuffer now use it
    buf = gpumem.DeviceBuffer(1 << 20)
    print(stats.allocation_counts.current_bytes)

Upstream resources: ``CudaMemoryResource``, ``ManagedMemoryResource``, ``PinnedHostMemoryResource``,
``CudaAsyncMemoryResource``, ``CudaAsyncViewMemoryResource`` (over a pool it does not own),
``SystemMemoryResource`` (malloc'd memory, where the device can access pageable memory),
``CallbackMemoryResource`` (your Python functions); ``VmmPoolMemoryResource``, a pool over one virtual address range whose
physical memory grows and shrinks in slabs. Sub-allocators over an upstream: ``PoolMemoryResource``,
``ArenaMemoryResource``, ``FixedSizeMemoryResource``, ``BinningMemoryResource``. Adaptors, each adding one
concern: ``LoggingResourceAdaptor``, ``StatisticsResourceAdaptor`` (``Statistics`` records),
``TrackingResourceAdaptor``, ``LimitingResourceAdaptor``, ``FailureCallbackResourceAdaptor``,
``PrefetchResourceAdaptor``. Sizes of pools and arenas may be strings, as in RMM ("4MiB", "1GB").

RMM's allocation log switches are here too: ``enable_logging(log_file_name=None)``, ``disable_logging()``,
``get_log_filenames()``; and ``available_device_memory()`` -> (free, total).

Lifetimes are handled for you: a resource keeps its upstream alive, a DeviceBuffer keeps its resource
alive, and the resource set with ``set_current_device_resource`` / ``set_per_device_resource`` is kept
alive while it is set. Memory obtained with ``allocate`` must be returned with ``deallocate`` to the same
resource, with the same size, before that resource is dropped.

Errors: ``gpumem.OutOfMemoryError`` (a ``MemoryError`` naming the size) when memory is exhausted,
``ValueError`` for misuse.
"""

from ._gpumem.mr import (  # noqa: F401  (re-exported)
    ArenaMemoryResource,
    BinningMemoryResource,
    CallbackMemoryResource,
    CudaAsyncMemoryResource,
    CudaAsyncViewMemoryResource,
    CudaMemoryResource,
    DeviceMemoryResource,
    FailureCallbackResourceAdaptor,
    FixedSizeMemoryResource,
    LimitingResourceAdaptor,
    LoggingResourceAdaptor,
    ManagedMemoryResource,
    PinnedHostMemoryResource,
    PoolMemoryResource,
    PrefetchResourceAdaptor,
    VmmPoolMemoryResource,
    Statistics,
    StatisticsResourceAdaptor,
    SystemMemoryResource,
    TrackingResourceAdaptor,
    available_device_memory,
    default_memory_pool,
    get_current_device_resource,
    get_per_device_resource,
    is_system_memory_supported,
    set_current_device_resource,
    set_per_device_resource,
)
from ._resource_logging import disable_logging, enable_logging, get_log_filenames  # noqa: E402,F401

from ._keyword_aliases import accept_aliases  # noqa: E402

# RMM names the upstream `upstream_mr`: calls that pass it by that keyword run unchanged.
for _resource in (
    ArenaMemoryResource,
    BinningMemoryResource,
    FailureCallbackResourceAdaptor,
    FixedSizeMemoryResource,
    LimitingResourceAdaptor,
    LoggingResourceAdaptor,
    PoolMemoryResource,
    PrefetchResourceAdaptor,
    StatisticsResourceAdaptor,
    TrackingResourceAdaptor,
):
    accept_aliases(_resource, "__init__", {"upstream_mr": "upstream"})
del _resource


def get_per_device_resource_type(device: int) -> type:
    """The class of device `device`'s resource (RMM's get_per_device_resource_type). Raises ValueError for an
    invalid device."""
    return type(get_per_device_resource(device))


def get_current_device_resource_type() -> type:
    """The class of the current device's resource (RMM's get_current_device_resource_type)."""
    return type(get_current_device_resource())


__all__ = [
    "ArenaMemoryResource",
    "BinningMemoryResource",
    "CallbackMemoryResource",
    "CudaAsyncMemoryResource",
    "CudaAsyncViewMemoryResource",
    "CudaMemoryResource",
    "DeviceMemoryResource",
    "FailureCallbackResourceAdaptor",
    "FixedSizeMemoryResource",
    "LimitingResourceAdaptor",
    "LoggingResourceAdaptor",
    "ManagedMemoryResource",
    "PinnedHostMemoryResource",
    "PoolMemoryResource",
    "PrefetchResourceAdaptor",
    "VmmPoolMemoryResource",
    "Statistics",
    "StatisticsResourceAdaptor",
    "SystemMemoryResource",
    "TrackingResourceAdaptor",
    "available_device_memory",
    "default_memory_pool",
    "disable_logging",
    "enable_logging",
    "get_current_device_resource",
    "get_current_device_resource_type",
    "get_log_filenames",
    "get_per_device_resource",
    "get_per_device_resource_type",
    "is_system_memory_supported",
    "set_current_device_resource",
    "set_per_device_resource",
]
