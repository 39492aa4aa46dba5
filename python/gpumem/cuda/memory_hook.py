"""gpumem.cuda.memory_hook: CuPy's memory hooks (cupy.cuda.memory_hook), called by gpumem.cuda.MemoryPool.

A hook is a MemoryHook subclass registered with ``with hook:`` on the calling thread (hooks are thread-local,
as in CuPy). While registered, every MemoryPool.malloc of that thread (so gpumem.cuda.alloc with the default
allocator) and every block the thread returns to a MemoryPool calls the hook's methods with CuPy's keyword
arguments::

    malloc_preprocess(device_id, size, mem_size)
      alloc_preprocess(device_id, mem_size)             # only when the pool grew from its upstream
      alloc_postprocess(device_id, mem_size, mem_ptr)   # mem_ptr 0 when that failed
    malloc_postprocess(device_id, size, mem_size, mem_ptr, pmem_id)   # mem_ptr, pmem_id 0 when malloc failed
    free_preprocess(device_id, mem_size, mem_ptr, pmem_id)
    free_postprocess(device_id, mem_size, mem_ptr, pmem_id)

`size` is the request, `mem_size` the block (rounded up to 256 bytes; for alloc_*, the bytes the pool took from
its upstream, which may be a larger chunk), `pmem_id` identifies the block, the same at malloc and free.
An exception raised by a malloc hook propagates from malloc; one raised by a free hook is reported as
unraisable (the block is freed regardless). MemoryPool.malloc(0) calls no hook.
"""

import collections
import threading

from .._gpumem import cuda as _cuda

_thread_local = threading.local()


def get_memory_hooks():
    """The calling thread's registered hooks: an OrderedDict from hook name to hook (CuPy's get_memory_hooks)."""
    hooks = getattr(_thread_local, "memory_hooks", None)
    if hooks is None:
        hooks = _thread_local.memory_hooks = collections.OrderedDict()
    return hooks


def _call_hooks(method, **kwargs):
    """Calls `method` of every hook of the calling thread, in registration order (MemoryPool calls this)."""
    for hook in list(get_memory_hooks().values()):
        getattr(hook, method)(**kwargs)


class MemoryHook:
    """Base class of memory hooks (CuPy's cupy.cuda.MemoryHook): override the methods you need; each does nothing
    by default. ``with hook:`` registers it on the calling thread under its `name` (KeyError if a hook of that
    name is registered there already) and unregisters it at the end of the block."""

    name = "MemoryHook"

    def __enter__(self):
        hooks = get_memory_hooks()
        if self.name in hooks:
            raise KeyError(f"memory hook {self.name} already exists")
        hooks[self.name] = self
        _cuda._set_memory_hooks_active(True)
        return self

    def __exit__(self, *exception):
        hooks = get_memory_hooks()
        del hooks[self.name]
        _cuda._set_memory_hooks_active(bool(hooks))

    def alloc_preprocess(self, **kwargs):
        """Before the pool takes memory from its upstream: device_id, mem_size."""

    def alloc_postprocess(self, **kwargs):
        """After the pool took memory from its upstream: device_id, mem_size, mem_ptr (0 on failure)."""

    def malloc_preprocess(self, **kwargs):
        """Before a block is taken from the pool: device_id, size, mem_size."""

    def malloc_postprocess(self, **kwargs):
        """After a block was taken from the pool: device_id, size, mem_size, mem_ptr, pmem_id (0, 0 on failure)."""

    def free_preprocess(self, **kwargs):
        """Before a block goes back to the pool: device_id, mem_size, mem_ptr, pmem_id."""

    def free_postprocess(self, **kwargs):
        """After a block went back to the pool: device_id, mem_size, mem_ptr, pmem_id."""


__all__ = ["MemoryHook", "get_memory_hooks"]
