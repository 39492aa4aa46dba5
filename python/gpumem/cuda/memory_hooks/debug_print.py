"""DebugPrintHook: one JSON line per pool event (CuPy's cupy.cuda.memory_hooks.DebugPrintHook)."""

import sys

from ..memory_hook import MemoryHook


class DebugPrintHook(MemoryHook):
    """Writes a JSON line to `file` after each alloc, malloc and free of a MemoryPool on this thread::

        {"hook":"alloc","device_id":0,"mem_size":512,"mem_ptr":150496608256}
        {"hook":"malloc","device_id":0,"size":24,"mem_size":512,"mem_ptr":150496608256,"pmem_id":"0x7f39200c5278"}
        {"hook":"free","device_id":0,"mem_size":512,"mem_ptr":150496608256,"pmem_id":"0x7f39200c5278"}

    `flush`: flush `file` after each line (default True).
    """

    name = "DebugPrintHook"

    def __init__(self, file=sys.stdout, flush=True):
        self.file = file
        self.flush = flush

    def _print(self, fields):
        parts = []
        for key, value in fields:
            parts.append(f'"{key}":"{value}"' if isinstance(value, str) else f'"{key}":{int(value)}')
        self.file.write("{" + ",".join(parts) + "}\n")
        if self.flush:
            self.file.flush()

    def alloc_postprocess(self, **kwargs):
        """Writes {"hook":"alloc","device_id":...,"mem_size":...,"mem_ptr":...}."""
        self._print([("hook", "alloc"), ("device_id", kwargs["device_id"]), ("mem_size", kwargs["mem_size"]),
                     ("mem_ptr", kwargs["mem_ptr"])])

    def malloc_postprocess(self, **kwargs):
        """Writes {"hook":"malloc","device_id":...,"size":...,"mem_size":...,"mem_ptr":...,"pmem_id":"0x..."}."""
        self._print([("hook", "malloc"), ("device_id", kwargs["device_id"]), ("size", kwargs["size"]),
                     ("mem_size", kwargs["mem_size"]), ("mem_ptr", kwargs["mem_ptr"]),
                     ("pmem_id", hex(kwargs["pmem_id"]))])

    def free_postprocess(self, **kwargs):
        """Writes {"hook":"free","device_id":...,"mem_size":...,"mem_ptr":...,"pmem_id":"0x..."}."""
        self._print([("hook", "free"), ("device_id", kwargs["device_id"]), ("mem_size", kwargs["mem_size"]),
                     ("mem_ptr", kwargs["mem_ptr"]), ("pmem_id", hex(kwargs["pmem_id"]))])
