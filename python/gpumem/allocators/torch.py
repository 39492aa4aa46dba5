"""gpumem as PyTorch's CUDA allocator, the low-level way::

    import torch, gpumem
    torch.cuda.memory.change_current_allocator(gpumem.allocators.torch_allocator())

The recommended way is ``gpumem.torch.install()`` (or ``python -m gpumem.torch script.py``): it does the same
swap and also routes ``torch.cuda.empty_cache`` and ``torch.cuda.set_per_process_memory_fraction`` to gpumem,
sets the hooks for ``Tensor.record_stream`` and CUDA graphs, and reads GPUMEM_TORCH_ALLOC_CONF; its
``gpumem.torch.memory_stats()``, ``memory_summary()`` and the other functions of torch.cuda's names report
PyTorch's memory (``torch.cuda.memory_stats`` itself raises for any pluggable allocator).

PyTorch allows the swap only before its own CUDA allocator has been initialised in the process (before
the first CUDA tensor); afterwards ``change_current_allocator`` raises RuntimeError.

``torch_allocator()`` returns a ``torch.cuda.memory.CUDAPluggableAllocator`` over
``libgpumem_torch_allocator.so``, a small library that ships next to gpumem's extension module. The library
does not link gpumem: it calls the gpumem of this module through a table of C hooks that
``torch_allocator()`` installs first, so PyTorch's memory comes from the resource that
``gpumem.mr.set_current_device_resource`` chose for the device PyTorch allocates on, ordered on PyTorch's
current stream and freed on that stream. On a device for which the program set no resource, the first
PyTorch allocation builds gpumem.torch's configured resource (a ``VmmPoolMemoryResource`` by default) and
sets it as the device's resource. A failed allocation raises ``torch.OutOfMemoryError`` with gpumem's
message (size, resource, device, free and total memory).

Set the resource before the first tensor and keep it while PyTorch holds memory from it: memory is
returned to the resource that allocated it, so replacing that resource with
``set_current_device_resource`` and dropping it while tensors live would free into a destroyed resource
(``gpumem.reinitialize`` keeps replaced resources alive while their memory is live). At interpreter exit,
memory that PyTorch frees after gpumem has dropped its resources is left to the process's exit.

With the allocator object alone (no ``gpumem.torch.install()``), PyTorch's optional hooks are not set:
``Tensor.record_stream`` then has no effect (synchronise before a tensor used on a second stream is dropped)
and ``torch.cuda.empty_cache`` does nothing; gpumem.torch's statistics functions still count its allocations.

PyTorch is imported by ``torch_allocator()``, not when gpumem is. ``rmm_torch_allocator`` is RMM's name
(``rmm.allocators.torch.rmm_torch_allocator``): the allocator object itself, made on first access, or None
where PyTorch is not installed, sees no CUDA device, or gpumem is not on its cuda backend (as RMM's is None
without PyTorch or CUDA).
"""

import ctypes
import threading
from pathlib import Path

from .. import _gpumem

LIBRARY_NAME = "libgpumem_torch_allocator.so"
ALLOC_FUNCTION = "gpumem_torch_alloc"
FREE_FUNCTION = "gpumem_torch_free"

_lock = threading.Lock()
_library = None  # the loaded library, hooks installed


def torch_allocator_library_path():
    """The path (a str) of libgpumem_torch_allocator.so, next to gpumem's extension module.

    The file exists when the package was built with its allocator library (the default); it is not
    checked here.
    """
    return str(Path(_gpumem.__file__).resolve().parent / LIBRARY_NAME)


def _installed_library():
    """The library, loaded with ctypes and given gpumem's hooks on first use (then cached).

    Raises FileNotFoundError naming the path when the library is not there, and RuntimeError when it
    refuses the hooks (a library older or newer than this module).
    """
    global _library
    with _lock:
        if _library is not None:
            return _library
        path = torch_allocator_library_path()
        if not Path(path).is_file():
            raise FileNotFoundError(
                f"gpumem's PyTorch allocator library is missing: {path} (build the CMake target "
                "gpumem_torch_allocator, which building the Python module also builds)"
            )
        library = ctypes.CDLL(path)
        library.gpumem_torch_install.argtypes = [ctypes.c_void_p, ctypes.c_int]
        library.gpumem_torch_install.restype = ctypes.c_int
        library.gpumem_torch_alloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
        library.gpumem_torch_alloc.restype = ctypes.c_void_p
        library.gpumem_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
        library.gpumem_torch_free.restype = None
        library.gpumem_torch_built_with_torch.argtypes = []
        library.gpumem_torch_built_with_torch.restype = ctypes.c_int
        version = _gpumem._allocator_hooks_version
        status = library.gpumem_torch_install(_gpumem._allocator_hooks_address(), version)
        if status != 0:
            why = {1: "the hooks table is incomplete", 2: f"the hooks table (version {version}) is too old"}
            raise RuntimeError(
                f"{path} refused gpumem's allocator hooks: {why.get(status, f'status {status}')}; the library "
                "and gpumem's extension module come from different builds (rebuild both)"
            )
        _library = library
        return library


def torch_allocator():
    """A ``torch.cuda.memory.CUDAPluggableAllocator`` that allocates PyTorch's CUDA memory with gpumem.

    Give it to ``torch.cuda.memory.change_current_allocator`` before the first CUDA tensor is created.
    Each call returns a new allocator object over the same library (and the same gpumem).

    Raises FileNotFoundError when libgpumem_torch_allocator.so is missing; RuntimeError when it was built
    without PyTorch's headers (out of memory would then hand PyTorch a null pointer rather than raise
    ``torch.OutOfMemoryError``: rebuild gpumem where its Python can ``import torch``) or when gpumem is not on
    its cuda backend; ImportError when PyTorch is not installed.
    """
    library = _installed_library()
    path = torch_allocator_library_path()
    if not library.gpumem_torch_built_with_torch():
        raise RuntimeError(
            f"{path} was built without PyTorch, so an allocation gpumem cannot serve would give PyTorch a null "
            "pointer instead of raising torch.OutOfMemoryError; rebuild gpumem where the Python it is built for "
            "can `import torch` (CMake option GPUMEM_TORCH_ALLOCATOR_TORCH=AUTO, the default, or ON)"
        )
    from . import _require_cuda_backend

    _require_cuda_backend("PyTorch")
    from torch.cuda.memory import CUDAPluggableAllocator

    return CUDAPluggableAllocator(path, ALLOC_FUNCTION, FREE_FUNCTION)


_rmm_torch_allocator = None
_rmm_torch_allocator_made = False


def _make_rmm_torch_allocator():
    """RMM's rmm_torch_allocator: torch_allocator(), or None where PyTorch or a CUDA device is missing."""
    global _rmm_torch_allocator, _rmm_torch_allocator_made
    with _lock:
        if _rmm_torch_allocator_made:
            return _rmm_torch_allocator
    try:
        import torch.cuda
    except ImportError:
        allocator = None
    else:
        from .. import cuda as _cuda

        usable = torch.cuda.is_available() and _cuda.get_backend() == "cuda"
        allocator = torch_allocator() if usable else None
    with _lock:
        _rmm_torch_allocator, _rmm_torch_allocator_made = allocator, True
    return allocator


def __getattr__(name):
    """``rmm_torch_allocator`` (RMM's name), made on first access."""
    if name == "rmm_torch_allocator":
        return _make_rmm_torch_allocator()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
