"""The memory profiler of ``gpumem.statistics`` (RMM's ``rmm.statistics.profiler`` and ``ProfilerRecords``).

A profiled function or block pushes a statistics scope when it starts and pops it when it ends; the popped
counters (bytes allocated in total and at the peak) are added to a ``ProfilerRecords`` under the block's
name. Without statistics enabled (the current resource is no ``StatisticsResourceAdaptor``) nothing is
recorded and the profiler costs two checks.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Dict

__all__ = ["ProfilerRecords", "default_profiler_records", "get_descriptive_name_of_object", "profiler"]


class ProfilerRecords:
    """Memory statistics per profiled name: how often it ran, the bytes it allocated in total and at its peak.

    ``add`` is thread-safe. ``records`` is a snapshot (a dict of name to ``ProfilerRecords.Data``);
    ``pretty_print(ordered_by=...)`` formats it as a table, largest first.
    """

    @dataclass
    class Data:
        """One name's statistics: num_calls, memory_total (bytes, summed over calls), memory_peak (bytes, the
        largest peak of one call)."""

        num_calls: int = 0
        memory_total: int = 0
        memory_peak: int = 0

        def add(self, memory_total: int, memory_peak: int) -> None:
            """Counts one more call that allocated `memory_total` bytes with a peak of `memory_peak`."""
            self.num_calls += 1
            self.memory_total += memory_total
            self.memory_peak = max(self.memory_peak, memory_peak)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: Dict[str, ProfilerRecords.Data] = defaultdict(ProfilerRecords.Data)

    def add(self, name: str, data) -> None:
        """Adds the counters `data` (a ``Statistics``: its total_bytes and peak_bytes) to the record `name`."""
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, not {type(name).__name__}")
        if not hasattr(data, "total_bytes") or not hasattr(data, "peak_bytes"):
            raise TypeError(f"data must be a Statistics, not {type(data).__name__}")
        with self._lock:
            self._records[name].add(memory_total=data.total_bytes, memory_peak=data.peak_bytes)

    @property
    def records(self) -> Dict[str, "ProfilerRecords.Data"]:
        """A copy of the records: name -> ProfilerRecords.Data."""
        with self._lock:
            return dict(self._records)

    def pretty_print(self, ordered_by: str = "memory_peak") -> str:
        """The records as a table (ncalls, memory_peak, memory_total, name), sorted by `ordered_by`
        ("num_calls", "memory_peak" or "memory_total"), largest first. Raises ValueError for another key."""
        if ordered_by not in ("num_calls", "memory_peak", "memory_total"):
            raise ValueError(f"ordered_by must be 'num_calls', 'memory_peak' or 'memory_total', got {ordered_by!r}")
        records = sorted(self.records.items(), key=lambda item: getattr(item[1], ordered_by), reverse=True)
        text = "Memory Profiling\n================\n\n"
        if not records:
            return text + "No data, maybe profiling wasn't enabled?"
        text += f"Ordered by:   {ordered_by}\nMemory units: bytes\n\n"
        text += "ncalls     memory_peak    memory_total  filename:lineno(function)\n"
        lines = [f"{data.num_calls:6,d} {data.memory_peak:15,d} {data.memory_total:15,d}  {name}"
                 for name, data in records]
        return text + "\n".join(lines)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.records})"

    def __str__(self) -> str:
        return self.pretty_print()


def get_descriptive_name_of_object(obj: object) -> str:
    """``"<file>:<line>(<qualified name>)"`` of a function or class (unwrapping decorators), the name a
    profiled function is recorded under."""
    try:
        obj = inspect.unwrap(obj)
        _, line = inspect.getsourcelines(obj)
        return f"{inspect.getfile(obj)}:{line}({obj.__qualname__})"
    except (TypeError, OSError) as error:
        raise TypeError(f"obj must be a function or class defined in a source file, not {type(obj).__name__} "
                        f"({error})") from None


default_profiler_records = ProfilerRecords()
"""The records that ``profiler()`` writes to unless given others."""


class _Profiler:
    """What ``profiler()`` returns: a decorator and a context manager (see ``profiler``)."""

    def __init__(self, records: ProfilerRecords, name: str) -> None:
        self._records = records
        self._name = name

    def _record(self, name: str) -> None:
        from .statistics import pop_statistics

        popped = pop_statistics()
        if popped is not None:
            self._records.add(name=name, data=popped)

    def __call__(self, func: Callable) -> Callable:
        """Profiles every call of `func` under the profiler's name, or `func`'s descriptive name."""
        from .statistics import push_statistics

        if not callable(func):
            raise TypeError(f"profiler() decorates a callable, not {type(func).__name__}")
        name = self._name or get_descriptive_name_of_object(func)

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            push_statistics()
            try:
                return func(*args, **kwargs)
            finally:
                self._record(name)

        return wrapper

    def __enter__(self) -> "_Profiler":
        """Starts profiling the block; raises ValueError when the profiler has no name."""
        from .statistics import push_statistics

        if not self._name:
            raise ValueError("when profiler is used as a context manager, a name must be provided")
        push_statistics()
        return self

    def __exit__(self, *exc) -> bool:
        """Records the block's statistics; lets any exception through."""
        self._record(self._name)
        return False


def profiler(*, records: ProfilerRecords = default_profiler_records, name: str = "") -> _Profiler:
    """A decorator and context manager that records the memory statistics of a function or block.

    While statistics are enabled (``gpumem.statistics.enable_statistics()`` or inside ``statistics()``),
    each call of a decorated function, or each pass through a ``with profiler(name=...)`` block, adds its
    total and peak allocated bytes to `records` under `name` (a decorated function without a name: its file,
    line and qualified name). Otherwise nothing is recorded. A context manager needs a name (ValueError).
    Raises TypeError for records that are no ProfilerRecords or a name that is no str.
    """
    if not isinstance(records, ProfilerRecords):
        raise TypeError(f"records must be a ProfilerRecords, not {type(records).__name__}")
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, not {type(name).__name__}")
    return _Profiler(records, name)
