"""gpumem's allocator hooks table (python/torch_allocator/gpumem_allocator_hooks.h) as a ctypes structure, for
tests that drive it directly, as the PyTorch allocator library does, on any backend and without PyTorch."""

import ctypes

import gpumem

VERSION = 2

_status = ctypes.c_int
_size = ctypes.c_size_t
_u64 = ctypes.c_uint64
_ptr = ctypes.c_void_p
_out = ctypes.POINTER(ctypes.c_void_p)


class Hooks(ctypes.Structure):
    """gpumem_allocator_hooks, version 2 (members in the header's order)."""

    _fields_ = [
        ("alloc_async", ctypes.CFUNCTYPE(_status, _size, ctypes.c_int, _ptr, _out)),
        ("free_async", ctypes.CFUNCTYPE(_status, _ptr, _ptr)),
        ("last_error", ctypes.CFUNCTYPE(ctypes.c_char_p)),
        ("alloc2", ctypes.CFUNCTYPE(_status, _size, ctypes.c_int, _ptr, _u64, _u64, _out)),
        ("free2", ctypes.CFUNCTYPE(_status, _ptr, _size, ctypes.c_int, _ptr)),
        ("record_stream", ctypes.CFUNCTYPE(_status, _ptr, _ptr)),
        ("pool_begin", ctypes.CFUNCTYPE(_status, ctypes.c_int, _u64, _u64)),
        ("pool_end", ctypes.CFUNCTYPE(_status, ctypes.c_int, _u64, _u64)),
        ("pool_release", ctypes.CFUNCTYPE(_status, ctypes.c_int, _u64, _u64)),
        ("empty_cache", ctypes.CFUNCTYPE(_status, ctypes.c_int, ctypes.POINTER(_size))),
        ("set_memory_fraction", ctypes.CFUNCTYPE(_status, ctypes.c_double, ctypes.c_int)),
    ]

    def error(self):
        """The message of the latest failed call on this thread."""
        return self.last_error().decode()

    def alloc(self, size, device=-1, stream=None, pool=(0, 0)):
        """alloc2; returns (status, pointer or None)."""
        out = ctypes.c_void_p(1)
        status = self.alloc2(size, device, stream, pool[0], pool[1], ctypes.byref(out))
        return status, out.value

    def released_by_empty_cache(self, device=-1):
        """empty_cache; returns (status, bytes released)."""
        released = _size(12345)
        status = self.empty_cache(device, ctypes.byref(released))
        return status, released.value


def hooks_table():
    """The table of this process's gpumem._gpumem (one per process), checked to be version 2."""
    assert gpumem._gpumem._allocator_hooks_version == VERSION
    address = gpumem._gpumem._allocator_hooks_address()
    assert isinstance(address, int) and address != 0
    assert gpumem._gpumem._allocator_hooks_address() == address
    return Hooks.from_address(address)
