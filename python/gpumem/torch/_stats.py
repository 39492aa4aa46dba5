"""gpumem's answers to torch.cuda's memory statistics, empty_cache and memory fraction, for gpumem as PyTorch's
allocator (PyTorch's own functions raise "CUDAPluggableAllocator does not yet support ..." for most of them).

The counts cover every allocation PyTorch made through gpumem (install()), with the sizes PyTorch asked for:
PyTorch's "allocated_bytes" and "requested_bytes" are then the same. "reserved_bytes" is the physical memory of
the device's VMM pool (VmmPoolMemoryResource), or what its CUDA memory pool holds (CudaAsyncMemoryResource); for
other resources, which do not say what they hold, it equals "allocated_bytes".
"""

from __future__ import annotations

import collections
from typing import Any, Dict

from .. import _gpumem
from ._device import device_index

_STATS = ("current", "peak", "allocated", "freed")


def memory_stats(device=None) -> Dict[str, Any]:
    """torch.cuda.memory_stats for gpumem: a flat dict sorted by key, with PyTorch's names where the meaning is
    the same ("allocation.all.current", "allocated_bytes.all.peak", "requested_bytes.all.allocated",
    "reserved_bytes.all.current", "num_ooms", "num_alloc_retries", ...) and gpumem's own under "gpumem."
    (the resource, its slabs, mappings, free bytes and memory fraction)."""
    raw = _gpumem._torch_stats(device_index(device))
    stats: Dict[str, Any] = {}
    for group in ("allocation", "allocated_bytes"):
        for stat in _STATS:
            stats[f"{group}.all.{stat}"] = raw[group][stat]
    for stat in _STATS:
        stats[f"requested_bytes.all.{stat}"] = raw["allocated_bytes"][stat]
    if raw["resource"] == "vmm":
        stats["reserved_bytes.all.current"] = raw["reserved_current"]
        stats["reserved_bytes.all.peak"] = raw["reserved_peak"]
        stats["num_device_alloc"] = raw["slabs_created"]
        stats["num_device_free"] = raw["slabs_released"]
        stats["segment.all.current"] = raw["mapping_count"]
        for key in ("slab_size", "slab_count", "mapping_count", "free_bytes", "largest_free_block",
                    "maximum_physical_size", "slabs_moved", "cross_stream_takes",
                    "cross_stream_waits"):
            stats[f"gpumem.{key}"] = raw[key]
    elif raw["resource"] == "async":
        stats["reserved_bytes.all.current"] = raw["reserved_current"]
        stats["reserved_bytes.all.peak"] = raw["reserved_peak"]
    else:
        stats["reserved_bytes.all.current"] = raw["allocated_bytes"]["current"]
        stats["reserved_bytes.all.peak"] = raw["allocated_bytes"]["peak"]
        if raw["resource"] == "pool":
            stats["gpumem.pool_size"] = raw["pool_size"]
    stats["num_ooms"] = raw["num_ooms"]
    stats["num_alloc_retries"] = raw["num_alloc_retries"]
    stats["gpumem.resource"] = raw["resource"]
    stats["gpumem.memory_fraction"] = _gpumem._torch_memory_fraction(raw["device"])
    return collections.OrderedDict(sorted(stats.items()))


def memory_stats_as_nested_dict(device=None) -> Dict[str, Any]:
    """memory_stats() nested at each "." (torch.cuda.memory_stats_as_nested_dict)."""
    nested: Dict[str, Any] = {}
    for key, value in memory_stats(device).items():
        *path, last = key.split(".")
        node = nested
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return nested


def memory_allocated(device=None) -> int:
    """Bytes of PyTorch's live allocations on the device (torch.cuda.memory_allocated)."""
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device=None) -> int:
    """The peak of memory_allocated() since the start or reset_peak_memory_stats()."""
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device=None) -> int:
    """Bytes the device's resource holds (its VMM pool's physical memory; see the module's note)."""
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device=None) -> int:
    """The peak of memory_reserved() since the start or reset_peak_memory_stats()."""
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device=None) -> None:
    """Sets every peak (allocations, bytes, the VMM pool's physical bytes) to its current value."""
    _gpumem._torch_reset_peak(device_index(device))


def reset_accumulated_memory_stats(device=None) -> None:
    """Sets the all-time counts ("allocated", "freed", num_ooms, num_alloc_retries) to 0."""
    _gpumem._torch_reset_accumulated(device_index(device))


def empty_cache() -> int:
    """Gives the memory that no live tensor uses back to the devices (torch.cuda.empty_cache, which install() also
    routes here): the wholly free slabs of each device's VMM pool (or the cache of its CUDA memory pool, after the
    device's work) and idle private pools of CUDA graphs. Returns the bytes given back (0 for resources that keep
    what they hold)."""
    return _gpumem._torch_empty_cache(-1)


def set_per_process_memory_fraction(fraction: float, device=None) -> None:
    """Caps the device's PyTorch resource at `fraction` (0 < fraction <= 1) of the device's total memory
    (torch.cuda.set_per_process_memory_fraction, which install() also routes here). Allocations beyond it raise
    torch.OutOfMemoryError; memory held already beyond it is not taken back. Before the device's first allocation
    the fraction is kept for the resource gpumem.torch builds; afterwards only a VmmPoolMemoryResource takes one.
    Raises ValueError for a fraction out of range or a resource that takes none, TypeError for a non-number."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise TypeError(f"the memory fraction is a number in (0, 1], not {type(fraction).__name__}")
    _gpumem._torch_set_memory_fraction(float(fraction), device_index(device))


def get_per_process_memory_fraction(device=None) -> float:
    """The device's cap over its total memory (torch.cuda.get_per_process_memory_fraction); 1.0 when none."""
    return _gpumem._torch_memory_fraction(device_index(device))


def _format_size(size: int) -> str:
    for unit in ("B  ", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            return f"{size:6d} {unit}" if unit == "B  " else f"{size:6.1f} {unit}"
        size /= 1024
    return f"{size:6.1f} GiB"  # pragma: no cover (unreachable)


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A table of memory_stats() in the shape of torch.cuda.memory_summary: current, peak, all-time allocated
    and freed, for allocated, requested and reserved memory and allocation counts; then gpumem's resource
    details (left out when `abbreviated`)."""
    index = device_index(device)
    stats = memory_stats(index)
    width = 75
    rule, thick = "|" + "-" * width + "|", "|" + "=" * width + "|"

    def row(name, values):
        return "| " + f"{name:<22}" + "".join(f"| {v:>10} " for v in values) + "|"

    def sizes(group, stats_names=_STATS):
        return [_format_size(stats[f"{group}.all.{s}"]) if f"{group}.all.{s}" in stats else "" for s in stats_names]

    lines = [
        thick,
        "|" + f"gpumem.torch memory summary, device ID {index}".center(width) + "|",
        rule,
        "|" + f"num_ooms: {stats['num_ooms']:<10} num_alloc_retries: {stats['num_alloc_retries']:<10}".center(width)
        + "|",
        thick,
        row("Metric", ["Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed"]),
        rule,
        row("Allocated memory", sizes("allocated_bytes")),
        row("Requested memory", sizes("requested_bytes")),
        row("Reserved memory", sizes("reserved_bytes")),
        row("Allocations", [str(stats[f"allocation.all.{s}"]) for s in _STATS]),
    ]
    if not abbreviated:
        lines.append(rule)
        lines.append("| " + f"resource: {stats['gpumem.resource']}".ljust(width - 1) + "|")
        for key in sorted(k for k in stats if k.startswith("gpumem.") and k != "gpumem.resource"):
            lines.append("| " + f"{key[len('gpumem.'):]}: {stats[key]}".ljust(width - 1) + "|")
    lines.append(thick)
    return "\n".join(lines) + "\n"
