"""gpumem as PyTorch's CUDA allocator, with PyTorch's memory tools (statistics, empty_cache, memory fraction,
allocation history) answered by gpumem.

    import gpumem.torch
    gpumem.torch.install()          # before the first CUDA tensor; or: python -m gpumem.torch script.py

install() reads GPUMEM_TORCH_ALLOC_CONF ("resource:vmm,slab_size:32MiB,..."; gpumem.torch._config lists the
keys). Each device gets the configured resource (a VmmPoolMemoryResource by default) on its first PyTorch
allocation, unless the program set a gpumem resource for it. memory_stats(), memory_summary(), empty_cache(),
set_per_process_memory_fraction() and the others mirror torch.cuda's functions of the same names; PyTorch's own
torch.cuda.empty_cache() and torch.cuda.set_per_process_memory_fraction() reach gpumem too once installed.
record_memory_history(), snapshot() and dump_snapshot() mirror torch.cuda.memory's _record_memory_history,
_snapshot and _dump_snapshot, in PyTorch's snapshot schema.
PyTorch is imported by install(), not when gpumem.torch is.
"""

from ._config import ENVIRONMENT_VARIABLE, parse as parse_configuration
from ._history import dump_snapshot, record_memory_history, snapshot
from ._install import configuration, configure, install, installed, register_spill_manager, resource
from ._stats import (
    empty_cache,
    get_per_process_memory_fraction,
    max_memory_allocated,
    max_memory_reserved,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_stats_as_nested_dict,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
)

__all__ = [
    "ENVIRONMENT_VARIABLE",
    "configuration",
    "configure",
    "dump_snapshot",
    "empty_cache",
    "get_per_process_memory_fraction",
    "install",
    "installed",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "memory_summary",
    "parse_configuration",
    "record_memory_history",
    "register_spill_manager",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "resource",
    "set_per_process_memory_fraction",
    "snapshot",
]
