"""gpumem as Numba's device memory manager (an External Memory Management plug-in, interface version 1).

Enable it before Numba creates its CUDA context, with the environment::

    NUMBA_CUDA_MEMORY_MANAGER=gpumem.allocators.numba python3 program.py
    NUMBA_CUDA_MEMORY_MANAGER=gpumem python3 program.py      # the same, through gpumem's package

or in the program: ``numba.cuda.set_memory_manager(gpumem.allocators.GpumemNumbaMemoryManager)``.

Numba's device arrays (``cuda.device_array``, ``cuda.to_device``, ...) then take their memory from gpumem's
current resource of the context's device, as ``gpumem.DeviceBuffer`` objects on the default stream; the
buffer is freed when Numba finalises the array's memory. Mapped and pinned host memory stay Numba's own
(``HostOnlyCUDAMemoryManager``). As RMM's ``RMMNumbaManager``, after which it is modelled.

Importing this module imports Numba.
"""

import ctypes

from numba.cuda import HostOnlyCUDAMemoryManager, MemoryInfo, MemoryPointer
from numba.cuda.cudadrv import driver as _numba_driver

from .. import DeviceBuffer
from .. import cuda as _gpumem_cuda

try:
    from numba.cuda import GetIpcHandleMixin
except ImportError:  # older Numba exports it from the driver module only
    GetIpcHandleMixin = _numba_driver.GetIpcHandleMixin


def _device_pointer(address):
    """`address` as the device-pointer type of Numba's driver binding (NVIDIA's cuda-python, or ctypes)."""
    if getattr(_numba_driver, "USE_NV_BINDING", True):
        return _numba_driver.binding.CUdeviceptr(address)
    return ctypes.c_uint64(address)


def _make_finalizer(address, allocations):
    """The finalizer Numba runs when the MemoryPointer at `address` dies: it drops the DeviceBuffer."""

    def finalize():
        # allocations is emptied by reset() (a context reset, also at exit) before late finalizers run:
        # then the buffer is already gone.
        allocations.pop(address, None)

    return finalize


class GpumemNumbaMemoryManager(GetIpcHandleMixin, HostOnlyCUDAMemoryManager):
    """Numba's External Memory Management plug-in over gpumem: device memory from gpumem's current resource.

    - ``memalloc(size)``: a ``gpumem.DeviceBuffer`` of `size` bytes on the context's device (default
      stream), held in ``self.allocations`` until Numba finalises the returned ``MemoryPointer``.
      Raises ``gpumem.OutOfMemoryError`` (a MemoryError) when the resource has not the memory.
    - ``get_memory_info()``: the device's free and total bytes, as the driver reports them (memory that a
      gpumem pool holds counts as used).
    - ``get_ipc_handle(memory)``: an IPC handle to the driver allocation holding `memory`, with its offset
      (Numba's own implementation; resources built on ``cudaMallocAsync`` pools cannot be shared this way).
    - ``initialize()``: checks that gpumem runs on its cuda backend (RuntimeError otherwise).
    - ``reset()``, ``defer_cleanup()``: Numba's (``HostOnlyCUDAMemoryManager``): reset drops every buffer.
    """

    def initialize(self):
        """Called by Numba when the context is created: checks that gpumem hands out GPU memory."""
        from . import _require_cuda_backend

        _require_cuda_backend("Numba")

    def memalloc(self, size):
        """Allocates `size` bytes of device memory from gpumem; returns a ``numba.cuda.MemoryPointer``."""
        with _gpumem_cuda.Device(self.context.device.id):
            buffer = DeviceBuffer(size)
        address = buffer.ptr
        finalizer = None
        if address != 0:  # size 0 has no memory to keep
            self.allocations[address] = buffer
            finalizer = _make_finalizer(address, self.allocations)
        return MemoryPointer(self.context, _device_pointer(address), size, finalizer=finalizer)

    def get_memory_info(self):
        """(free, total) bytes of the context's device, as a ``numba.cuda.MemoryInfo``."""
        free, total = _gpumem_cuda.Device(self.context.device.id).mem_info
        return MemoryInfo(free=free, total=total)

    @property
    def interface_version(self):
        """The EMM interface version implemented: 1."""
        return 1


RMMNumbaManager = GpumemNumbaMemoryManager
"""RMM's name for the plug-in (``rmm.allocators.numba.RMMNumbaManager``)."""

# NUMBA_CUDA_MEMORY_MANAGER=<module> makes Numba read <module>._numba_memory_manager.
_numba_memory_manager = GpumemNumbaMemoryManager
