"""LineProfileHook: memory taken from MemoryPool by source line (CuPy's cupy.cuda.memory_hooks.LineProfileHook)."""

import os
import sys
import traceback

from ..memory_hook import MemoryHook


class LineProfileHook(MemoryHook):
    """Sums, per call stack, the bytes taken from the pool (used) and by the pool from its upstream (acquired).

    ::

        hook = LineProfileHook()
        with hook:
            ...                       # code that allocates through gpumem.cuda.MemoryPool
        hook.print_report()

    prints a tree, one line per frame: ``{filename}:{lineno}:{function} ({used}, {acquired})`` under a ``_root``
    line with the totals. `max_depth`: how many frames deep to follow (0: all).
    """

    name = "LineProfileHook"

    def __init__(self, max_depth=0):
        self._frames = {}
        self._root = MemoryFrame(None, None)
        self._max_depth = max_depth
        self._own_files = {os.path.abspath(__file__), os.path.abspath(sys.modules[MemoryHook.__module__].__file__)}

    def malloc_preprocess(self, device_id, size, mem_size):
        """Adds the block's mem_size to the used bytes of the calling stack."""
        self._add(used_bytes=mem_size)

    def alloc_preprocess(self, device_id, mem_size):
        """Adds mem_size to the acquired bytes of the calling stack."""
        self._add(acquired_bytes=mem_size)

    def _add(self, used_bytes=0, acquired_bytes=0):
        self._root.used_bytes += used_bytes
        self._root.acquired_bytes += acquired_bytes
        parent = self._root
        stack = [frame for frame in traceback.extract_stack() if os.path.abspath(frame.filename) not in self._own_files]
        for depth, frame in enumerate(stack):
            if 0 < self._max_depth <= depth + 1:
                break
            key = (parent, frame.filename, frame.lineno, frame.name)
            node = self._frames.get(key)
            if node is None:
                node = self._frames[key] = MemoryFrame(parent, frame)
            node.used_bytes += used_bytes
            node.acquired_bytes += acquired_bytes
            parent = node

    def print_report(self, file=sys.stdout):
        """Writes the report (see the class) to `file`."""
        file.write("_root (%s, %s)\n" % self._root.humanized_bytes())
        for child in self._root.children:
            self._print_frame(child, 1, file)
        file.flush()

    def _print_frame(self, node, depth, file):
        used, acquired = node.humanized_bytes()
        frame = node.stackframe
        file.write(f"{' ' * (depth * 2)}{frame.filename}:{frame.lineno}:{frame.name} ({used}, {acquired})\n")
        for child in node.children:
            self._print_frame(child, depth + 1, file)


class MemoryFrame:
    """One frame of the report: its stack frame, caller (parent), callees (children) and byte sums."""

    def __init__(self, parent, stackframe):
        self.stackframe = stackframe
        self.parent = parent
        self.children = []
        if parent is not None:
            parent.children.append(self)
        self.used_bytes = 0
        self.acquired_bytes = 0

    def humanized_bytes(self):
        """(used, acquired) as text: "1.00KB"."""
        return _humanized(self.used_bytes), _humanized(self.acquired_bytes)


def _humanized(size):
    for unit in ("", "K", "M", "G", "T", "P", "E"):
        if size < 1024.0:
            return "%3.2f%sB" % (size, unit)
        size /= 1024.0
    return "%.2fZB" % size
