"""gpumem.cuda.memory_hooks: the memory hooks CuPy ships (cupy.cuda.memory_hooks): DebugPrintHook, LineProfileHook."""

from .debug_print import DebugPrintHook
from .line_profile import LineProfileHook

__all__ = ["DebugPrintHook", "LineProfileHook"]
