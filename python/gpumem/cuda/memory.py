"""gpumem.cuda.memory: CuPy's device and pinned memory API (cupy.cuda.memory, cupy.cuda.pinned_memory).

The memory classes, MemoryPointer and the pools are gpumem's C++ (the extension module); this module adds
the pure-Python parts: the current allocators, the allocation functions built on them, and asnumpy.

::

    import numpy
    import gpumem.cuda as cuda

    p = cuda.alloc(1024)                       # from the default MemoryPool, on the current stream
    p.copy_from_host(numpy.arange(256, dtype=numpy.float32), 1024)
    host = numpy.empty(256, numpy.float32)
    p.copy_to_host(host, 1024)

    with cuda.using_allocator(cuda.malloc_managed):   # this thread only, inside the block
        q = cuda.alloc(4096)

    pinned = cuda.alloc_pinned_memory(1024)    # from the default PinnedMemoryPool
    view = numpy.frombuffer(pinned, numpy.float32, 256)

Allocators are CuPy's: a callable allocator(size) -> MemoryPointer (MemoryPool().malloc, malloc_managed,
malloc_async, PythonFunctionAllocator, CFunctionAllocator, ...). As in CuPy, set_allocator changes the
process's allocator and using_allocator overrides it for the calling thread only.
"""

import contextlib
import threading

from .._gpumem import cuda as _cuda

BaseMemory = _cuda.BaseMemory
Memory = _cuda.Memory
ManagedMemory = _cuda.ManagedMemory
MemoryAsync = _cuda.MemoryAsync
UnownedMemory = _cuda.UnownedMemory
PooledMemory = _cuda.PooledMemory
MemoryPointer = _cuda.MemoryPointer
MemoryPool = _cuda.MemoryPool
MemoryAsyncPool = _cuda.MemoryAsyncPool
PythonFunctionAllocator = _cuda.PythonFunctionAllocator
CFunctionAllocator = _cuda.CFunctionAllocator
get_default_memory_pool = _cuda.get_default_memory_pool

PinnedMemory = _cuda.PinnedMemory
PinnedMemoryPointer = _cuda.PinnedMemoryPointer
PooledPinnedMemory = _cuda.PooledPinnedMemory
PinnedMemoryPool = _cuda.PinnedMemoryPool
get_default_pinned_memory_pool = _cuda.get_default_pinned_memory_pool

_CUDA_HOST_ALLOC_PORTABLE = 1

# ---- device memory allocators ----------------------------------------------------------------------------


def _malloc(size):
    """The raw allocator (no pool): a MemoryPointer to a new Memory(size). set_allocator(None) selects it."""
    return MemoryPointer(Memory(size), 0)


def malloc_managed(size):
    """Allocates `size` bytes of managed (unified) memory: a MemoryPointer to a new ManagedMemory.

    An allocator: set_allocator(malloc_managed), or MemoryPool(malloc_managed) for a pool of managed memory.
    Raises ValueError for a negative size, OutOfMemoryError when the memory is not there.
    """
    return MemoryPointer(ManagedMemory(size), 0)


def malloc_async(size):
    """Allocates `size` bytes of stream-ordered memory on the current stream: a MemoryPointer to a MemoryAsync.

    The memory is freed on that stream when its last reference goes (the stream is kept alive until then).
    An allocator: set_allocator(malloc_async). Raises ValueError for a negative size, OutOfMemoryError when
    the memory is not there.
    """
    return MemoryPointer(MemoryAsync(size, _cuda.get_current_stream()), 0)


_current_allocator = get_default_memory_pool().malloc  # the process's allocator (set_allocator)
_thread_local = threading.local()  # .allocator: the calling thread's override (using_allocator), or None


def _check_allocator(allocator, name):
    if not callable(allocator):
        raise TypeError(f"{name}: the allocator must be callable (allocator(size) -> MemoryPointer), "
                        f"not {type(allocator).__name__}")


def get_allocator():
    """The allocator alloc() uses on the calling thread: its using_allocator one if inside such a block,
    else the process's (set_allocator; by default get_default_memory_pool().malloc)."""
    allocator = getattr(_thread_local, "allocator", None)
    return _current_allocator if allocator is None else allocator


def set_allocator(allocator=None):
    """Sets the process's allocator for device memory (CuPy's cupy.cuda.set_allocator).

    `allocator` is a callable allocator(size) -> MemoryPointer; None means the raw allocator (Memory, no
    pool). Raises ValueError inside a using_allocator block of the calling thread (as CuPy), TypeError for
    an object that is not callable.
    """
    global _current_allocator
    if allocator is None:
        allocator = _malloc
    _check_allocator(allocator, "set_allocator")
    if getattr(_thread_local, "allocator", None) is not None:
        raise ValueError("Can't change the global allocator inside `using_allocator` context manager")
    _current_allocator = allocator


@contextlib.contextmanager
def using_allocator(allocator=None):
    """Makes `allocator` the calling thread's allocator inside the block (CuPy's cupy.cuda.using_allocator).

    Other threads keep theirs. None means the raw allocator (Memory, no pool). Blocks nest; the previous
    allocator is restored on exit, also when the block raises.
    """
    if allocator is None:
        allocator = _malloc
    _check_allocator(allocator, "using_allocator")
    previous = getattr(_thread_local, "allocator", None)
    _thread_local.allocator = allocator
    try:
        yield
    finally:
        _thread_local.allocator = previous


def alloc(size):
    """Allocates `size` bytes of device memory with the calling thread's current allocator (get_allocator())
    and returns its MemoryPointer. By default from get_default_memory_pool(), on the current stream."""
    return get_allocator()(size)


# ---- pinned memory allocators ----------------------------------------------------------------------------


def _malloc_pinned(size):
    """The raw pinned allocator (no pool): a PinnedMemoryPointer to a new PinnedMemory(size, portable)."""
    return PinnedMemoryPointer(PinnedMemory(size, _CUDA_HOST_ALLOC_PORTABLE), 0)


_pinned_allocator = get_default_pinned_memory_pool().malloc


def alloc_pinned_memory(size):
    """Allocates `size` bytes of pinned host memory with the current pinned allocator and returns its
    PinnedMemoryPointer (a writable buffer: numpy.frombuffer works). By default from
    get_default_pinned_memory_pool()."""
    return _pinned_allocator(size)


def set_pinned_memory_allocator(allocator=None):
    """Sets the process's pinned memory allocator (CuPy's cupy.cuda.set_pinned_memory_allocator):
    allocator(size) -> PinnedMemoryPointer; None means the raw allocator (PinnedMemory, no pool). Raises
    TypeError for an object that is not callable."""
    global _pinned_allocator
    if allocator is None:
        allocator = _malloc_pinned
    _check_allocator(allocator, "set_pinned_memory_allocator")
    _pinned_allocator = allocator


# ---- asnumpy ---------------------------------------------------------------------------------------------


def _as_stream(stream):
    """A gpumem Stream for `stream`: None -> the current stream; an int or an object with .ptr -> wrapped."""
    if stream is None:
        return _cuda.get_current_stream()
    if isinstance(stream, _cuda.Stream):
        return stream
    handle = stream if isinstance(stream, int) else getattr(stream, "ptr", None)
    if isinstance(handle, int):
        if handle < 0:
            raise ValueError(f"asnumpy: stream must be >= 0, got {handle}")
        return _cuda._external_stream(handle)
    raise TypeError(f"asnumpy: stream must be None, a Stream, an int or an object with .ptr, not {type(stream).__name__}")


def _wait_for_producer(interface, stream):
    """Orders `stream` after the producer's stream of a __cuda_array_interface__ (v3's `stream`)."""
    producer = interface.get("stream")
    if producer is None:
        return  # the producer says no synchronisation is needed
    if producer == 0:
        raise ValueError("__cuda_array_interface__: stream 0 is not allowed (1 is the legacy default stream, "
                         "2 the per-thread default stream)")
    if producer == stream.ptr:
        return  # the same stream: already in order
    event = _cuda.Event(disable_timing=True)
    event.record(_cuda._external_stream(producer))
    stream.wait_event(event)


def _contiguous(shape, strides, itemsize, order):
    """Whether `strides` lay `shape` out contiguously in `order` ("C" or "F"); extent-1 axes may have any stride."""
    expected = itemsize
    axes = range(len(shape) - 1, -1, -1) if order == "C" else range(len(shape))
    for axis in axes:
        if shape[axis] != 1 and strides[axis] != expected:
            return False
        expected *= shape[axis]
    return True


def _check_out(numpy, out, shape, dtype):
    if not isinstance(out, numpy.ndarray):
        raise TypeError(f"asnumpy: out must be a numpy.ndarray, not {type(out).__name__}")
    if out.shape != shape:
        raise ValueError(f"asnumpy: out has shape {out.shape}, but the array has shape {shape}")
    if out.dtype != dtype:
        raise ValueError(f"asnumpy: out has dtype {out.dtype}, but the array has dtype {dtype}")
    if not out.flags.writeable:
        raise ValueError("asnumpy: out is read-only")


def _dtype(numpy, interface):
    descr = interface.get("descr")
    typestr = interface["typestr"]
    if descr is not None and numpy.dtype(typestr).kind == "V" and len(descr) > 0 and descr[0][0] != "":
        return numpy.dtype(descr)  # a structured type
    return numpy.dtype(typestr)


def asnumpy(a, stream=None, out=None, blocking=True):
    """Copies an array to the host: a numpy.ndarray with `a`'s shape, dtype and contents (CuPy's cupy.asnumpy).

    `a` is anything with __cuda_array_interface__ (v2 or v3; a CuPy array, a PyTorch CUDA tensor, a
    gpumem.DeviceBuffer, ...). Anything else is given to numpy.asarray(a, order="C"), as CuPy does: a
    C-contiguous NumPy array comes back as is, other arrays as a C-ordered copy.

    - `stream`: the stream the copy runs on (None: the current stream). When the interface names the stream
      that produced the data (v3), the copy stream first waits for it (an event, no host synchronisation).
    - `out`: a numpy.ndarray of the same shape and dtype to copy into (ValueError otherwise; TypeError if it
      is not an ndarray). Returned. An interface whose dtype holds Python objects is refused (TypeError).
    - `blocking`: with False, and `out` in pinned memory (e.g. numpy.frombuffer over alloc_pinned_memory),
      the call returns once the copy is enqueued: synchronise the stream before reading `out`. Otherwise the
      data are in the result when the call returns.

    C- and F-contiguous data are copied with one copy (staged through pinned buffers when the destination is
    pageable) into an array of the same layout, or into `out`; other strides copy the bytes the array spans
    and take a strided copy on the host.
    """
    import numpy

    interface = getattr(a, "__cuda_array_interface__", None)
    if interface is None:
        array = numpy.asarray(a, order="C")
        if out is None:
            return array
        _check_out(numpy, out, array.shape, array.dtype)
        out[...] = array
        return out

    shape = tuple(interface["shape"])
    dtype = _dtype(numpy, interface)
    if dtype.hasobject:
        raise TypeError(f"asnumpy: the __cuda_array_interface__ dtype {dtype} holds Python objects, which device "
                        "memory cannot hold; their bytes cannot be copied as data")
    if out is not None:
        _check_out(numpy, out, shape, dtype)
    count = 1
    for extent in shape:
        count *= extent
    if count == 0:
        return out if out is not None else numpy.empty(shape, dtype)
    ptr = interface["data"][0]
    if ptr == 0:
        raise ValueError("asnumpy: the __cuda_array_interface__ data pointer is 0 for a non-empty array")

    copy_stream = _as_stream(stream)
    _wait_for_producer(interface, copy_stream)
    itemsize = dtype.itemsize
    strides = interface.get("strides")
    if strides is None or _contiguous(shape, strides, itemsize, "C"):
        order = "C"
    elif _contiguous(shape, strides, itemsize, "F"):
        order = "F"
    else:
        order = None

    if order is not None:
        nbytes = count * itemsize
        direct = out is not None and out.flags[order + "_CONTIGUOUS"]
        target = out if direct else numpy.empty(shape, dtype, order=order)
        source = MemoryPointer(UnownedMemory(ptr, nbytes, a), 0)
        source.copy_to_host_async(target, nbytes, stream=copy_stream)
        if blocking or not direct:
            copy_stream.synchronize()
        if out is not None and not direct:
            out[...] = target
            return out
        return target

    # Arbitrary strides: copy the bytes the array spans, [ptr + low, ptr + high), then a strided view of them.
    low = sum(min(0, (extent - 1) * stride) for extent, stride in zip(shape, strides))
    high = sum(max(0, (extent - 1) * stride) for extent, stride in zip(shape, strides)) + itemsize
    span = numpy.empty(high - low, numpy.uint8)
    source = MemoryPointer(UnownedMemory(ptr + low, high - low, a), 0)
    source.copy_to_host_async(span, high - low, stream=copy_stream)
    copy_stream.synchronize()
    view = numpy.ndarray(shape, dtype, buffer=span, offset=-low, strides=tuple(strides))
    if out is not None:
        out[...] = view
        return out
    return view.copy()


__all__ = [
    "BaseMemory",
    "CFunctionAllocator",
    "ManagedMemory",
    "Memory",
    "MemoryAsync",
    "MemoryAsyncPool",
    "MemoryPointer",
    "MemoryPool",
    "PinnedMemory",
    "PinnedMemoryPointer",
    "PinnedMemoryPool",
    "PooledMemory",
    "PooledPinnedMemory",
    "PythonFunctionAllocator",
    "UnownedMemory",
    "alloc",
    "alloc_pinned_memory",
    "asnumpy",
    "get_allocator",
    "get_default_memory_pool",
    "get_default_pinned_memory_pool",
    "malloc_async",
    "malloc_managed",
    "set_allocator",
    "set_pinned_memory_allocator",
    "using_allocator",
]
