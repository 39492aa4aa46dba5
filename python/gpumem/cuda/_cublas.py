"""get_cublas_handle: one cuBLAS handle per device and thread, made on first use (CuPy's cupy.cuda.get_cublas_handle)."""

import atexit
import threading
import weakref

from .._gpumem import cuda as _cuda

_thread_local = threading.local()  # .handles: {device: _CublasHandle} of the calling thread
_every_handle = weakref.WeakSet()  # destroyed at exit, before the CUDA runtime goes


def get_cublas_handle():
    """The calling thread's cuBLAS handle (cublasHandle_t, an int) for the current device, made on first use with
    cublasCreate and kept until the thread ends (or the process exits), as CuPy keeps one per device and thread.

    libcublas is loaded at run time from the CUDA toolkit (libcublas.so.<major>, else libcublas.so). Raises
    CUDARuntimeError (cudaErrorNotSupported) under the host backend, or when libcublas cannot be loaded (the
    message says why)."""
    handles = getattr(_thread_local, "handles", None)
    if handles is None:
        handles = _thread_local.handles = {}
    device = _cuda.get_device_id()
    handle = handles.get(device)
    if handle is None:
        handle = handles[device] = _cuda._CublasHandle(device)
        _every_handle.add(handle)
    return handle.ptr


@atexit.register
def _destroy_handles():
    for handle in list(_every_handle):
        handle.destroy()
