"""get_array_module: the array module that handles the arguments (CuPy's cupy.get_array_module)."""

import sys

from .._gpumem import cuda as _cuda


def _cupy_ndarray():
    """cupy.ndarray if CuPy is imported already (an argument can only be a CuPy array then), else None."""
    cupy = sys.modules.get("cupy")
    return getattr(cupy, "ndarray", None)


def _importable_cupy():
    """The cupy module when it imports, else None."""
    try:
        import cupy
    except Exception:  # noqa: BLE001 (any failure to import means: not usable here)
        return None
    return cupy


def get_array_module(*args):
    """The module whose functions handle the arrays in `args`: CuPy's get_array_module, with gpumem's arrays.

    - a CuPy array among the arguments -> cupy, as in CuPy;
    - otherwise an argument with __cuda_array_interface__ (gpumem's DeviceBuffer and UnifiedDeviceView, a
      PyTorch CUDA tensor, ...) -> cupy when the cuda backend runs and CuPy imports (cupy.asarray takes such an
      object without a copy); otherwise gpumem.cuda, whose asnumpy copies any of them to the host (the host
      backend's device memory is not for CuPy);
    - otherwise numpy (imported then: gpumem itself does not need NumPy).
    """
    ndarray = _cupy_ndarray()
    if ndarray is not None and any(isinstance(arg, ndarray) for arg in args):
        return sys.modules["cupy"]
    if any(hasattr(arg, "__cuda_array_interface__") for arg in args):
        if _cuda.get_backend() == "cuda":
            cupy = _importable_cupy()
            if cupy is not None:
                return cupy
        return sys.modules[__package__]
    import numpy

    return numpy
