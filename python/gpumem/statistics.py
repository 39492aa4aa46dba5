"""Allocation statistics with the names of RMM's ``rmm.statistics``.

::

    import gpumem
    from gpumem import statistics

    with statistics.statistics():          # counts what the block allocates through the current resource
        buf = gpumem.DeviceBuffer(1 << 20)
        print(statistics.get_statistics())  # Statistics(current_bytes=1048576, current_count=1, ...)

``enable_statistics()`` wraps the current device's resource in a ``gpumem.mr.StatisticsResourceAdaptor``
for good; ``push_statistics()`` / ``pop_statistics()`` open and close nested counting scopes on it (popping
a scope that was never pushed raises IndexError, as RMM). ``Statistics`` is RMM's record (a dataclass).

The memory profiler, RMM's: ``profiler(records=..., name=...)`` as a decorator or a context manager records
the bytes each function or block allocated (total and peak, and how often it ran) into a ``ProfilerRecords``
(``default_profiler_records`` unless given), while statistics are enabled::

    statistics.enable_statistics()

    @statistics.profiler()
    def step():
        return gpumem.DeviceBuffer(1 << 20)

    step()
    with statistics.profiler(name="block"):
        buf = gpumem.DeviceBuffer(256)
    print(statistics.default_profiler_records.pretty_print())

Only allocations made through the current device's resource while it is (or is wrapped by) the statistics
adaptor are counted: a ``gpumem.mr`` resource used directly is not.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator, List, Optional

from . import mr
from ._profiler import ProfilerRecords, default_profiler_records, get_descriptive_name_of_object, profiler

Statistics = mr.Statistics

__all__ = ["ProfilerRecords", "Statistics", "default_profiler_records", "enable_statistics",
           "get_descriptive_name_of_object", "get_statistics", "pop_statistics", "profiler", "push_statistics",
           "statistics"]

_lock = threading.Lock()
# Adaptors that statistics() took off the current resource while memory they handed out was still live:
# that memory returns through them, so they stay alive until it has (pruned at each exit).
_retired: List[mr.StatisticsResourceAdaptor] = []


def _current_adaptor() -> Optional[mr.StatisticsResourceAdaptor]:
    current = mr.get_current_device_resource()
    return current if isinstance(current, mr.StatisticsResourceAdaptor) else None


def enable_statistics() -> None:
    """Makes the current device's resource count allocations: wraps it in a StatisticsResourceAdaptor
    (set as the current resource), unless it already is one."""
    with _lock:
        if _current_adaptor() is None:
            mr.set_current_device_resource(mr.StatisticsResourceAdaptor(mr.get_current_device_resource()))


def get_statistics() -> Optional[mr.Statistics]:
    """The innermost scope's counters of the current resource, or None when statistics are not enabled."""
    adaptor = _current_adaptor()
    return None if adaptor is None else adaptor.allocation_counts


def push_statistics() -> Optional[mr.Statistics]:
    """Opens a counting scope whose counters start at zero; returns the counters of the scope that was
    innermost, or None (and does nothing) when statistics are not enabled."""
    adaptor = _current_adaptor()
    return None if adaptor is None else adaptor.push_counters()


def pop_statistics() -> Optional[mr.Statistics]:
    """Closes the innermost scope (its counts fold into the enclosing one) and returns its counters, or None
    when statistics are not enabled. Raises IndexError when no scope was pushed (as RMM)."""
    adaptor = _current_adaptor()
    return None if adaptor is None else adaptor.pop_counters()


@contextlib.contextmanager
def statistics() -> Iterator[None]:
    """Counts the block's allocations. If statistics are enabled, pushes a scope on entry and pops it on
    exit; otherwise sets a StatisticsResourceAdaptor over the current resource for the block, then restores
    the previous resource (keeping the adaptor alive while memory it handed out is still live)."""
    with _lock:
        adaptor = _current_adaptor()
        installed = adaptor is None
        if installed:
            adaptor = mr.StatisticsResourceAdaptor(mr.get_current_device_resource())
            previous = mr.set_current_device_resource(adaptor)
        else:
            adaptor.push_counters()
    try:
        yield
    finally:
        with _lock:
            if not installed:
                adaptor.pop_counters()
            else:
                if mr.get_current_device_resource() is adaptor:
                    mr.set_current_device_resource(previous)
                _retired.append(adaptor)
                _retired[:] = [a for a in _retired if a.allocation_counts.current_count > 0]
