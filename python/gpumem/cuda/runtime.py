"""gpumem.cuda.runtime: the functions of CuPy's cupy.cuda.runtime that programs reach for, on gpumem's backend.

::

    from gpumem.cuda import runtime

    free, total = runtime.memGetInfo()            # of the current device
    runtime.setDevice(runtime.getDeviceCount() - 1)
    attributes = runtime.pointerGetAttributes(ptr)   # .type, .device, .devicePointer, .hostPointer

A failed call raises CUDARuntimeError (gpumem.CUDARuntimeError, a RuntimeError with .status, the cudaError_t
code), as CuPy's raise cupy.cuda.runtime.CUDARuntimeError. Under the host backend they describe the emulated
devices (driverGetVersion() is 0 there).
"""

from .. import _gpumem
from .._gpumem import cuda as _cuda

CUDARuntimeError = _gpumem.CUDARuntimeError

# cudaMemoryType (PointerAttributes.type)
memoryTypeUnregistered = 0
memoryTypeHost = 1
memoryTypeDevice = 2
memoryTypeManaged = 3
# special device ids
cudaCpuDeviceId = -1
cudaInvalidDeviceId = -2
# cudaMemoryAdvise (ManagedMemory.advise)
cudaMemAdviseSetReadMostly = 1
cudaMemAdviseUnsetReadMostly = 2
cudaMemAdviseSetPreferredLocation = 3
cudaMemAdviseUnsetPreferredLocation = 4
cudaMemAdviseSetAccessedBy = 5
cudaMemAdviseUnsetAccessedBy = 6
# cudaError_t values these functions raise with
errorInvalidValue = 1
errorMemoryAllocation = 2
errorInvalidDevice = 101
errorIllegalState = 401
errorNotSupported = 801


class PointerAttributes:
    """What pointerGetAttributes says of an address (CuPy's cupy.cuda.runtime.PointerAttributes)."""

    def __init__(self, device, devicePointer, hostPointer, type):  # noqa: A002 (CuPy's field name)
        self.device = device
        self.devicePointer = devicePointer
        self.hostPointer = hostPointer
        self.type = type

    def __repr__(self):
        return (f"PointerAttributes(device={self.device}, devicePointer={self.devicePointer:#x}, "
                f"hostPointer={self.hostPointer:#x}, type={self.type})")


def getDeviceCount():
    """How many devices the backend has (cudaGetDeviceCount)."""
    return _cuda.get_device_count()


def getDevice():
    """The calling thread's current device (cudaGetDevice)."""
    return _cuda.get_device_id()


def setDevice(device):
    """Makes `device` (an int) the calling thread's current device (cudaSetDevice). Raises CUDARuntimeError
    (cudaErrorInvalidDevice) for a device that does not exist."""
    _cuda.Device(device).use()


def deviceSynchronize():
    """Blocks until all work on the current device has completed (cudaDeviceSynchronize; the GIL is released)."""
    _cuda.Device().synchronize()


def memGetInfo():
    """(free, total) bytes of the current device (cudaMemGetInfo)."""
    return _cuda.Device().mem_info


def runtimeGetVersion():
    """The CUDA runtime version, CUDART_VERSION's encoding (13000 for 13.0; cudaRuntimeGetVersion)."""
    return _cuda.get_local_runtime_version()


def driverGetVersion():
    """The driver's CUDA version (cudaDriverGetVersion), 0 under the host backend."""
    return _cuda.get_driver_version()


def pointerGetAttributes(ptr):
    """What `ptr` (an int) is: a PointerAttributes with type (memoryTypeDevice, ...), device, devicePointer and
    hostPointer (cudaPointerGetAttributes). Memory CUDA does not know is type memoryTypeUnregistered, device
    cudaInvalidDeviceId. Raises CUDARuntimeError (cudaErrorInvalidValue) for 0."""
    kind, device, device_pointer, host_pointer = _cuda._pointer_get_attributes(ptr)
    return PointerAttributes(device, device_pointer, host_pointer, kind)


__all__ = [
    "CUDARuntimeError",
    "PointerAttributes",
    "deviceSynchronize",
    "driverGetVersion",
    "getDevice",
    "getDeviceCount",
    "memGetInfo",
    "pointerGetAttributes",
    "runtimeGetVersion",
    "setDevice",
]
