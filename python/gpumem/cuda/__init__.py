"""gpumem.cuda: devices, streams, events, graphs and memory with CuPy's names (cupy.cuda).

::

    import gpumem.cuda as cuda

    with cuda.Device(0):
        stream = cuda.Stream(non_blocking=True)
        with stream:                       # device 0's current stream on this thread, for the block
            start = cuda.Event(); start.record()
            stream.add_callback(lambda s, status, arg: print(arg), "done")
            end = stream.record()
        end.synchronize()
        print(cuda.get_elapsed_time(start, end), "ms")

        stream.begin_capture()             # stream capture into a graph
        stream.add_callback(lambda s, status, arg: None, None)
        graph = stream.end_capture()
        graph.launch(stream)

Memory (gpumem.cuda.memory, CuPy's cupy.cuda.memory and pinned_memory names): Memory, ManagedMemory,
MemoryAsync, UnownedMemory, MemoryPointer, MemoryPool, MemoryAsyncPool, alloc, set_allocator,
using_allocator, PinnedMemory, PinnedMemoryPool, alloc_pinned_memory, asnumpy, ...::

    p = cuda.alloc(1 << 20)                # a MemoryPointer from get_default_memory_pool()
    p.memset_async(0, 1 << 20)             # on the current stream
    host = cuda.asnumpy(some_cuda_array)   # anything with __cuda_array_interface__

Also CuPy's get_cublas_handle(), get_array_module(*args), the memory hooks (MemoryHook, memory_hooks.DebugPrintHook,
memory_hooks.LineProfileHook) and gpumem.cuda.runtime (memGetInfo, getDeviceCount, setDevice, pointerGetAttributes, ...).

Callbacks (Stream.add_callback, Stream.launch_host_func) run on another thread with the GIL held and must not call CUDA or gpumem.

Under the host backend (GPUMEM_BACKEND=host, or no GPU) these describe the emulated devices: streams are
worker-thread queues and events carry timestamps; is_available() is True there too, so use
get_backend() == "cuda" to ask whether a GPU is in use.
"""

from .._gpumem import cuda as _cuda

Device = _cuda.Device
Stream = _cuda.Stream
ExternalStream = _cuda.ExternalStream
Event = _cuda.Event
Graph = _cuda.Graph
get_elapsed_time = _cuda.get_elapsed_time
get_current_stream = _cuda.get_current_stream
get_device_id = _cuda.get_device_id
get_device_count = _cuda.get_device_count
is_available = _cuda.is_available
get_local_runtime_version = _cuda.get_local_runtime_version
get_driver_version = _cuda.get_driver_version
get_backend = _cuda.get_backend

from . import memory_hook, memory_hooks, runtime  # noqa: E402,F401  (CuPy's cupy.cuda submodules)
from ._array_module import get_array_module  # noqa: E402
from ._cublas import get_cublas_handle  # noqa: E402
from .memory_hook import MemoryHook  # noqa: E402
from . import memory  # noqa: E402  (gpumem.cuda.memory: the memory API below, and its pure-Python parts)
from .memory import (  # noqa: E402,F401  (re-exported)
    BaseMemory,
    CFunctionAllocator,
    ManagedMemory,
    Memory,
    MemoryAsync,
    MemoryAsyncPool,
    MemoryPointer,
    MemoryPool,
    PinnedMemory,
    PinnedMemoryPointer,
    PinnedMemoryPool,
    PooledMemory,
    PooledPinnedMemory,
    PythonFunctionAllocator,
    UnownedMemory,
    alloc,
    alloc_pinned_memory,
    asnumpy,
    get_allocator,
    get_default_memory_pool,
    get_default_pinned_memory_pool,
    malloc_async,
    malloc_managed,
    set_allocator,
    set_pinned_memory_allocator,
    using_allocator,
)

__all__ = [
    "Device",
    "MemoryHook",
    "Event",
    "ExternalStream",
    "Graph",
    "Stream",
    "get_backend",
    "get_current_stream",
    "get_device_count",
    "get_device_id",
    "get_driver_version",
    "get_array_module",
    "get_cublas_handle",
    "get_elapsed_time",
    "get_local_runtime_version",
    "is_available",
    "memory",
    "memory_hook",
    "memory_hooks",
    "runtime",
]
__all__ += memory.__all__
