"""gpumem as the memory allocator of CuPy, PyTorch and Numba.

Each client then takes its device memory from gpumem's current resource of the current device
(``gpumem.mr.set_current_device_resource``), so a pool, a limit, statistics or a log set up there apply
to the whole program::

    import gpumem
    from gpumem import mr
    mr.set_current_device_resource(mr.PoolMemoryResource(mr.CudaMemoryResource()))

    import cupy                                          # CuPy
    cupy.cuda.set_allocator(gpumem.allocators.cupy_allocator)

    import torch                                         # PyTorch, before its first CUDA allocation
    torch.cuda.memory.change_current_allocator(gpumem.allocators.torch_allocator())

    # Numba: NUMBA_CUDA_MEMORY_MANAGER=gpumem.allocators.numba (or =gpumem) in the environment, or
    from numba import cuda
    cuda.set_memory_manager(gpumem.allocators.GpumemNumbaMemoryManager)

RMM's names work too, where RMM puts them: ``gpumem.allocators.cupy.rmm_cupy_allocator``,
``gpumem.allocators.torch.rmm_torch_allocator`` (the pluggable allocator object, or None where PyTorch or a
CUDA device is missing, as RMM's) and ``gpumem.allocators.numba.RMMNumbaManager``.

Importing this package imports none of CuPy, PyTorch or Numba: each is imported when first used
(``GpumemNumbaMemoryManager`` is loaded on first access, since it subclasses a Numba class).

All of them need gpumem on its cuda backend: under the host backend the "device" memory is host memory,
which no GPU library can use, and they raise RuntimeError saying so.
"""

from .. import cuda as _cuda
from .cupy import cupy_allocator, rmm_cupy_allocator
from .torch import torch_allocator, torch_allocator_library_path

_cuda_backend_checked = False


def _require_cuda_backend(client):
    """Raises RuntimeError naming `client` unless gpumem runs on its cuda backend; cheap after the first pass.

    The plug-ins (cupy.py, torch.py, numba.py) call it before handing out memory, importing it inside
    their functions (this package imports them).

    Under the host backend gpumem's "device" memory is host memory, which a GPU library would hand to its
    kernels: a crash, or silent corruption. The backend cannot change once chosen, so one check suffices.
    """
    global _cuda_backend_checked
    if _cuda_backend_checked:
        return
    backend = _cuda.get_backend()
    if backend != "cuda":
        raise RuntimeError(
            f"gpumem cannot allocate for {client}: it runs on its {backend!r} backend, whose device memory is "
            "host memory; run where a CUDA device is usable (with GPUMEM_BACKEND unset or 'cuda')"
        )
    _cuda_backend_checked = True


_NUMBA_NAMES = ("GpumemNumbaMemoryManager", "RMMNumbaManager", "_numba_memory_manager")


def __getattr__(name):
    """Loads the Numba plug-in (gpumem.allocators.numba, which imports numba) on first access."""
    if name in _NUMBA_NAMES:
        from . import numba as numba_plugin

        return getattr(numba_plugin, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# GpumemNumbaMemoryManager is left out: `from gpumem.allocators import *` must not need Numba.
__all__ = ["cupy_allocator", "rmm_cupy_allocator", "torch_allocator", "torch_allocator_library_path"]
