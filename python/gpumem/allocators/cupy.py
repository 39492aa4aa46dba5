"""gpumem as CuPy's allocator: ``cupy.cuda.set_allocator(gpumem.allocators.cupy_allocator)``.

CuPy then asks gpumem for every array's memory instead of using its own memory pool: each allocation is a
``gpumem.DeviceBuffer`` from the current gpumem resource of CuPy's current device, ordered on CuPy's
current stream, and is freed on that same stream when CuPy drops the memory (as RMM's
``rmm_cupy_allocator`` does). The buffer holds the CuPy stream object until then, so dropping the stream
first is safe. Work on other streams must be ordered after that stream by the program, as with CuPy's own
stream-ordered allocator.

CuPy is imported on the first call, not when gpumem is. ``rmm_cupy_allocator`` is the same function under
RMM's name (``rmm.allocators.cupy.rmm_cupy_allocator``).
"""

from .. import DeviceBuffer
from .. import cuda as _gpumem_cuda


def cupy_allocator(nbytes):
    """Allocates `nbytes` bytes for CuPy; pass this function to ``cupy.cuda.set_allocator``.

    The memory comes from gpumem's current resource of CuPy's current device and is ordered on CuPy's
    current stream (``cupy.cuda.get_current_stream()``), on which it is also freed once CuPy lets go of it.

    Returns a ``cupy.cuda.MemoryPointer`` over a ``cupy.cuda.UnownedMemory`` whose owner is the
    ``gpumem.DeviceBuffer``. Raises TypeError or ValueError when `nbytes` is not an int >= 0,
    ``gpumem.OutOfMemoryError`` (a MemoryError) when the resource has not
    the memory, and RuntimeError when gpumem is not on its cuda backend (its memory would be host memory).
    """
    from . import _require_cuda_backend

    if isinstance(nbytes, bool) or not isinstance(nbytes, int):
        raise TypeError(f"nbytes must be an int, not {type(nbytes).__name__}")
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    _require_cuda_backend("CuPy")
    import cupy

    stream = cupy.cuda.get_current_stream()
    device_id = cupy.cuda.runtime.getDevice()
    # CuPy and gpumem each link a CUDA runtime; make CuPy's device gpumem's current one for the call.
    with _gpumem_cuda.Device(device_id):
        buffer = DeviceBuffer(nbytes, stream=stream)  # the buffer holds the stream object until it frees
    memory = cupy.cuda.UnownedMemory(buffer.ptr, nbytes, buffer, device_id)
    return cupy.cuda.MemoryPointer(memory, 0)


rmm_cupy_allocator = cupy_allocator
"""RMM's name for ``cupy_allocator``: ``cupy.cuda.set_allocator(rmm_cupy_allocator)``."""
