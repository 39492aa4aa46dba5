"""The recorder of allocation history with Python stack traces, for gpumem as PyTorch's allocator.

PyTorch's own ``torch.cuda.memory._record_memory_history`` and ``_snapshot`` refuse to work with a pluggable
allocator; these take their place, with the same argument names and the same snapshot schema, so that PyTorch's
tools (``torch.cuda._memory_viz``, https://pytorch.org/memory_viz) and ``gpumem report`` read the result::

    record_memory_history(max_entries=100_000)
    ...                                      # the work
    dump_snapshot("run.pickle")              # then: python -m gpumem report run.pickle
    record_memory_history(None)

What is recorded: every allocation, free and failed allocation (out of memory) that goes through gpumem's
allocator hooks table (the PyTorch allocator library's calls), with the time, address, size, stream and device.
With ``stacks="python"``, an allocation also keeps the Python stack of the thread that made it (at most 64
frames, innermost first). PyTorch's operators release the GIL before they allocate: the recorder takes it back on
a Python thread, as PyTorch's own recorder does. An allocation made on a thread without a Python thread state
(PyTorch's autograd threads) is recorded without frames.

The recorder lives in the extension module (python/src/torch_history.cpp); this module turns what it keeps
into PyTorch's schema.
"""

from __future__ import annotations

import pickle
import sys
from typing import Any, Dict, List, Optional

from .. import _gpumem

__all__ = ["record_memory_history", "snapshot", "dump_snapshot"]

_ENABLED = ("all", "state")
_STACKS = ("python",)
_CONTEXTS = ("all", "alloc", "state")


def record_memory_history(enabled: Optional[str] = "all", context: Optional[str] = "all",
                          stacks: Optional[str] = "python", max_entries: int = sys.maxsize,
                          clear_history: bool = False) -> None:
    """Starts, changes or stops recording the allocation history (``torch.cuda.memory._record_memory_history``).

    `enabled`: ``"all"`` records the live blocks and a trace of every alloc/free/oom (``device_traces``);
    ``"state"`` only the live blocks (``segments``); None stops recording (what was recorded stays for
    snapshot() until it is cleared or recording starts again with `clear_history`). True and False read as
    ``"all"`` and None. `context`: which entries keep their stacks: ``"all"``, ``"alloc"`` and ``"state"``
    all mean allocations (a free is shown with its allocation's stack); None keeps none. `stacks`:
    ``"python"`` or None (no frames; C++ frames are never recorded). `max_entries`: the trace keeps the last
    `max_entries` entries (a ring; a smaller limit than before drops the oldest now). `clear_history`: drop
    what was recorded before starting.

    Raises ValueError naming the argument when one is not among its choices, TypeError when max_entries is not
    an integer.
    """
    if isinstance(enabled, bool):
        enabled = "all" if enabled else None
    if enabled is not None and enabled not in _ENABLED:
        raise ValueError(f"enabled={enabled!r}: expected 'all', 'state' or None")
    if context is not None and context not in _CONTEXTS:
        raise ValueError(f"context={context!r}: expected 'all', 'alloc', 'state' or None")
    if stacks is not None and stacks not in _STACKS:
        hint = " (C++ frames are not recorded)" if stacks == "all" else ""
        raise ValueError(f"stacks={stacks!r}: expected 'python' or None{hint}")
    if isinstance(max_entries, bool) or not isinstance(max_entries, int):
        raise TypeError(f"max_entries must be an integer, not {type(max_entries).__name__}")
    if max_entries < 0:
        raise ValueError(f"max_entries={max_entries}: must be >= 0")
    if enabled is None:
        _gpumem._torch_history_disable()
        if clear_history:
            _gpumem._torch_history_clear()
        return
    if clear_history:
        _gpumem._torch_history_clear()
    _gpumem._torch_history_enable(max_entries=max_entries, with_stacks=stacks is not None and context is not None,
                                  with_trace=enabled == "all")


def _frames(stacks: List[list], stack: int) -> List[Dict[str, Any]]:
    # Each entry gets its own dicts: a consumer that edits one (memory_viz filters frames) changes no other.
    return [dict(frame) for frame in stacks[stack]] if stack >= 0 else []


def _trace_entries(entry: Dict[str, Any], stacks: List[list]) -> List[Dict[str, Any]]:
    """PyTorch's trace entries for one recorded entry (a free is requested and completed at once: gpumem's
    frees are stream-ordered, so the block is free for reuse by work queued after the free)."""
    common = {"addr": entry["addr"], "size": entry["size"], "stream": entry["stream"], "time_us": entry["time_us"]}
    frames = _frames(stacks, entry["stack"])
    if entry["action"] == "alloc":
        return [{"action": "alloc", **common, "frames": frames}]
    if entry["action"] == "free":
        return [{"action": "free_requested", **common, "frames": frames},
                {"action": "free_completed", **common, "frames": _frames(stacks, entry["stack"])}]
    return [{"action": "oom", **common, "addr": 0, "device_free": 0, "frames": frames}]


def _segment(block: Dict[str, Any], stacks: List[list]) -> Dict[str, Any]:
    """A pseudo-segment holding one live block: gpumem's resources do not expose PyTorch's segments."""
    size = block["size"]
    return {
        "device": block["device"],
        "address": block["addr"],
        "total_size": size,
        "allocated_size": size,
        "active_size": size,
        "requested_size": size,
        "stream": block["stream"],
        "segment_type": "large" if size > (1 << 20) else "small",
        "segment_pool_id": (0, 0),
        "is_expandable": False,
        "frames": [],
        "blocks": [{
            "address": block["addr"],
            "size": size,
            "requested_size": size,
            "state": "active_allocated",
            "frames": _frames(stacks, block["stack"]),
        }],
    }


def snapshot() -> Dict[str, Any]:
    """What was recorded, as ``torch.cuda.memory._snapshot()`` returns it (plain dicts and lists).

    ``segments``: the blocks allocated while recording and still live, each in a pseudo-segment of its own
    (address, sizes, stream, ``blocks`` with one block in state ``active_allocated`` and its ``frames``).
    ``device_traces``: one list per device (0 to the largest device seen) of entries, oldest first:
    ``alloc``, ``free_requested`` then ``free_completed`` (one free), ``oom`` (``device_free`` 0: not
    measured), each with ``addr``, ``size``, ``stream``, ``time_us`` (microseconds since the Unix epoch) and
    ``frames`` (``filename``, ``line``, ``name``; innermost first; empty without a stack). Empty lists
    when nothing was recorded.
    """
    history = _gpumem._torch_history_export()
    stacks = history["stacks"]
    devices = [entry["device"] for entry in history["entries"]] + [block["device"] for block in history["live"]]
    traces: List[List[Dict[str, Any]]] = [[] for _ in range(max(devices, default=0) + 1)]
    for entry in history["entries"]:
        traces[entry["device"]].extend(_trace_entries(entry, stacks))
    return {
        "segments": [_segment(block, stacks) for block in history["live"]],
        "device_traces": traces,
    }


def dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Writes snapshot() to `filename` as a pickle (``torch.cuda.memory._dump_snapshot``), which
    ``torch.cuda._memory_viz``, https://pytorch.org/memory_viz and ``gpumem report`` read.

    Raises OSError when the file cannot be written.
    """
    data = snapshot()
    with open(filename, "wb") as file:
        pickle.dump(data, file)
