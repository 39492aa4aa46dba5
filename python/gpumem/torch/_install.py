"""install(): gpumem as PyTorch's CUDA allocator, configured by GPUMEM_TORCH_ALLOC_CONF."""

from __future__ import annotations

import ctypes
import threading
from typing import Any, Dict, Iterable, Mapping, Optional, Union

from .. import _gpumem
from . import _config
from ._device import device_index

_lock = threading.Lock()
_installed = None  # the CUDAPluggableAllocator, once install() succeeded
_parsed: Optional[Dict[str, Any]] = None  # the configuration last applied


def configure(conf: Union[None, str, Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Parses `conf` (as install() does: None reads GPUMEM_TORCH_ALLOC_CONF) and makes it the resource that each
    device builds on its first PyTorch allocation; returns the parsed dict (every key). Needs no PyTorch.

    Devices that have allocated already keep their resource. Raises ValueError for a bad configuration (nothing is
    changed then).
    """
    global _parsed
    parsed = _config.parse(conf)
    with _lock:
        _config.apply(parsed)
        _parsed = parsed
    return dict(parsed)


def configuration() -> Dict[str, Any]:
    """The configuration last applied by configure() or install() (the defaults before either)."""
    with _lock:
        return dict(_parsed if _parsed is not None else _config.DEFAULTS)


def register_spill_manager(manager) -> None:
    """Asks `manager` (a gpumem.SpillManager) to spill unified buffers' device copies when a PyTorch allocation
    fails for want of memory; the allocation is then tried once more. Registering the same manager again does
    nothing. Raises TypeError for anything but a SpillManager."""
    _gpumem._torch_add_spill_manager(manager)


def _torch_version_of(library) -> str:
    function = library.gpumem_torch_torch_version
    function.argtypes = []
    function.restype = ctypes.c_char_p
    return function().decode()


def _check_torch_version(library, path: str) -> None:
    """Refuses a library built against another PyTorch release (the CUDA graph hooks depend on its C++ ABI)."""
    import torch

    built = _torch_version_of(library)
    running = torch.__version__.split("+")[0]
    if built and built != "unknown" and built.split(".")[:2] != running.split(".")[:2]:
        raise RuntimeError(
            f"{path} was built against PyTorch {built}, but PyTorch {torch.__version__} is running: reinstall "
            "gpumem with the Python that runs this PyTorch (`pip install ./python`), or check with "
            "`python -m gpumem.torch --check`"
        )


def install(conf: Union[None, str, Mapping[str, Any]] = None, *, spill: Optional[Iterable[Any]] = None):
    """Makes gpumem PyTorch's CUDA allocator and returns the ``torch.cuda.memory.CUDAPluggableAllocator``.

    `conf`: the configuration (see gpumem.torch._config: a "key:value,..." string or a dict); None reads the
    environment variable GPUMEM_TORCH_ALLOC_CONF. Each device builds the configured resource (a
    VmmPoolMemoryResource by default) on its first PyTorch allocation, unless the program has set a gpumem
    resource for it, which is then kept. `spill`: gpumem.SpillManager objects asked to spill when an allocation
    fails (register_spill_manager).

    Call it before PyTorch's first CUDA tensor (or run the program with ``python -m gpumem.torch``). A second call
    returns the same allocator (and registers `spill`); it raises RuntimeError when it names another
    configuration. Raises RuntimeError when PyTorch's allocator is initialised already, when the allocator library
    was built without PyTorch or against another PyTorch release, or when gpumem is not on its cuda backend;
    ImportError without PyTorch; ValueError for a bad configuration.
    """
    global _installed, _parsed
    managers = list(spill or ())
    with _lock:
        if _installed is not None:
            if conf is not None and _config.parse(conf) != _parsed:
                raise RuntimeError(
                    "gpumem.torch.install() ran already with another configuration; the allocator can be installed "
                    "once per process"
                )
            for manager in managers:
                register_spill_manager(manager)
            return _installed
        import torch.cuda.memory

        from . import _graphs
        from ..allocators import torch as _allocators_torch

        parsed = _config.parse(conf)
        pluggable = _allocators_torch.torch_allocator()  # refuses a library without PyTorch, or no cuda backend
        library = _allocators_torch._installed_library()
        path = _allocators_torch.torch_allocator_library_path()
        _check_torch_version(library, path)
        for manager in managers:
            register_spill_manager(manager)
        _config.apply(parsed)
        try:
            torch.cuda.memory.change_current_allocator(pluggable)
        except RuntimeError as error:
            raise RuntimeError(
                "gpumem.torch.install() must run before PyTorch's CUDA allocator is initialised, that is before the "
                "first CUDA tensor: call it first thing in the program, or run the program unchanged with "
                f"`python -m gpumem.torch script.py` (PyTorch said: {error})"
            ) from error
        allocator = pluggable.allocator()
        allocator.set_reset_fn(ctypes.cast(library.gpumem_torch_empty_cache, ctypes.c_void_p).value)
        allocator.set_memory_fraction_fn(ctypes.cast(library.gpumem_torch_set_memory_fraction, ctypes.c_void_p).value)
        _graphs.set_hooks(pluggable, library, dict(parsed))
        _installed, _parsed = pluggable, parsed
        return pluggable


def installed() -> bool:
    """Whether install() has made gpumem PyTorch's allocator in this process."""
    return _installed is not None


def resource(device=None):
    """The gpumem resource that serves PyTorch on `device` (an int, "cuda:N", a torch.device, or None for the
    current device), as a gpumem.mr object; None before the device's first PyTorch allocation."""
    from .. import mr

    index = device_index(device)
    if not _gpumem._torch_prepared(index):
        return None
    return mr.get_per_device_resource(index)


def _reset() -> None:
    """Restores gpumem.torch's state to before configure() (tests): every device where gpumem.torch built the
    resource gets its default back, statistics and spill managers are cleared. Memory allocated through the
    hooks must have been freed. Does not undo install()."""
    global _parsed
    with _lock:
        _gpumem._torch_reset()
        _parsed = None
