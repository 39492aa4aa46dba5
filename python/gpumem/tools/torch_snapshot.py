"""Converts a PyTorch memory snapshot into gpumem's allocation log, to replay a real program's allocations.

Record the part of the program to replay, with PyTorch's own allocator::

    torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    ...                                                   # the work
    torch.cuda.memory._dump_snapshot("run.pickle")

then convert and replay::

    python3 -m gpumem.tools.torch_snapshot run.pickle run.csv.gz     # .gz: gzip-compressed
    gpumem replay run.csv.gz

The log is RMM's CSV (docs/formats.md; include/gpumem/replay/allocation_log.hpp reads it)::

    Thread,Time,Action,Pointer,Size,Stream
    0,13:09:44.158987,allocate,0x7f98f9e00000,37632,0x0

What each trace entry becomes (the snapshot's ``device_traces``: one list per device, in order):

- ``alloc``: an ``allocate`` row with the block's address, the size PyTorch recorded (the size requested)
  and its stream.
- ``free_completed``: a ``free`` row, with the size the block was allocated with. This is when the block is
  free for reuse (the work on its stream is done), not ``free_requested`` (when the tensor died).
- ``oom``: counted and reported; with ``--oom-as-failures`` also written as an ``allocate failure`` row
  (pointer 0x0, the size PyTorch could not serve), which the replay retries against each resource.
- ``free_requested``, ``segment_alloc``/``segment_free``/``segment_map``/``segment_unmap``, ``snapshot``:
  skipped (counted per action): they describe PyTorch's cache, not the program's requests.

A trace seldom covers the whole program: PyTorch keeps only the last ``max_entries`` entries (a ring buffer)
and recording may start mid-run. So:

- a ``free_completed`` of an address not allocated in the trace (before the trace began) is skipped and
  counted as an unknown free (the replay would skip it anyway);
- an ``alloc`` whose free never comes is left live to the end (counted as never freed);
- an ``alloc`` at an address that is still live (the trace lost a free) is written as is and counted; the
  replay frees the older block first.

Columns:

- Thread: the CUDA device the entry belongs to. By default every device with entries is converted and the
  devices' rows are merged in time order (each device's own order kept); ``--device N`` keeps device N
  only. Under CUDA's unified addressing the devices' addresses never coincide, so one log holds them all
  (the replay runs every row in file order, on one device).
- Time: ``time_us`` as the UTC wall-clock time ``HH:MM:SS.ffffff``. The log reader takes a jump back of
  more than 12 hours as a midnight, so a trace must span less than 12 hours for its times to read right
  (the replay's results do not depend on them). An entry without ``time_us`` (PyTorch before 2.1) takes
  the time of the entry before it (00:00:00 for the first).
- Pointer and Stream: lowercase hexadecimal with ``0x`` (stream 0x0 is the default stream).

A snapshot is a pickle of plain dicts, lists, strings and numbers; this reader refuses anything else, since
unpickling other objects can run arbitrary code.

With ``--timeline FILE`` (``timeline_path``), the same rows are also written as an allocation timeline for
``gpumem report --timeline`` (docs/formats.md, "Allocation timeline"): each ``allocate`` row with the stack of
its ``alloc`` entry (``frames``) and its call site, each ``free`` row. The call site of a stack is its first
frame (innermost first) outside PyTorch, gpumem, Python's standard library and C++ (a file not ending in
``.py``); a stack without one has none. ``python -m gpumem report run.pickle`` does both conversions and
passes the results to the report.
"""

import argparse
import contextlib
import dataclasses
import functools
import gzip
import heapq
import io
import operator
import os
import pickle
import sys
import sysconfig
import tempfile

LOG_HEADER = "Thread,Time,Action,Pointer,Size,Stream"
TIMELINE_HEADER = "gpumem-timeline 1"

_KEPT_ACTIONS = ("alloc", "free_completed", "oom")


@dataclasses.dataclass
class ConversionSummary:
    """What a conversion wrote and what it left out (counts over the converted devices)."""

    devices: list  #: the devices whose traces were converted (their Thread ids)
    allocations: int = 0  #: ``allocate`` rows (``alloc`` entries)
    frees: int = 0  #: ``free`` rows (``free_completed`` entries of live blocks)
    failures: int = 0  #: ``allocate failure`` rows (``oom`` entries, with oom_as_failures)
    never_freed: int = 0  #: blocks still live after the last entry
    unknown_frees: int = 0  #: ``free_completed`` entries of addresses not allocated in the trace, skipped
    allocated_while_live: int = 0  #: ``alloc`` entries at an address still live (the trace lost a free)
    oom: int = 0  #: ``oom`` entries (PyTorch could not serve a request)
    skipped: dict = dataclasses.field(default_factory=dict)  #: other actions -> how many were skipped
    peak_live_bytes: int = 0  #: the largest sum of live blocks' sizes, as gpumem replay's "peak live"

    @property
    def rows(self):
        """The rows written, header not counted."""
        return self.allocations + self.frees + self.failures

    def describe(self, log_name="the log"):
        """A few lines for people: what was written to `log_name` and what was left out, and why."""
        devices = ", ".join(str(d) for d in self.devices)
        lines = [
            f"wrote {self.rows} rows to {log_name} (device{'s' if len(self.devices) != 1 else ''} {devices}): "
            f"{self.allocations} allocations, {self.frees} frees, {self.failures} allocation failures; "
            f"peak live bytes {self.peak_live_bytes}",
            f"{self.never_freed} blocks are never freed in the trace (left live)",
            f"{self.unknown_frees} frees of blocks allocated before the trace began were skipped",
        ]
        if self.allocated_while_live:
            lines.append(f"{self.allocated_while_live} allocations reuse an address still live (a free is missing)")
        if self.oom:
            written = "written as allocate failure rows" if self.failures else "not written (--oom-as-failures)"
            lines.append(f"{self.oom} out-of-memory entries: {written}")
        if self.skipped:
            counts = ", ".join(f"{action} {count}" for action, count in sorted(self.skipped.items()))
            lines.append(f"skipped entries: {counts}")
        return "\n".join(lines)


class _SnapshotUnpickler(pickle.Unpickler):
    """Unpickles plain data only: a snapshot has no classes, and loading one could run arbitrary code."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(
            f"it holds the object {module}.{name}; a PyTorch memory snapshot holds only dicts, lists, strings and "
            "numbers, and unpickling other objects can run arbitrary code"
        )


def load_snapshot(path):
    """Reads the snapshot pickle at `path` (``torch.cuda.memory._dump_snapshot``'s file) without PyTorch.

    Returns the unpickled object (a dict for a snapshot). Raises OSError when the file cannot be read and
    ValueError naming the file when it is not a pickle of plain data.
    """
    with open(path, "rb") as file:
        try:
            return _SnapshotUnpickler(file).load()
        except Exception as error:  # a corrupt pickle raises nearly anything; name the file instead
            raise ValueError(f"{path}: not a PyTorch memory snapshot: {error}") from error


def _number(entry, key, where, minimum=0):
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{where}: {key!r} must be an integer >= {minimum}, not {value!r}")
    return value


def _device_rows(device, entries, summary, oom_as_failures):
    """The rows of one device's trace, as (time_us, thread, action, pointer, size, stream, frames), in trace
    order (frames: the entry's, or None)."""
    if not isinstance(entries, list):
        raise ValueError(f"device_traces[{device}] must be a list of trace entries, not {type(entries).__name__}")
    rows = []
    live = {}  # address -> size allocated
    time_us = 0
    for index, entry in enumerate(entries):
        where = f"device_traces[{device}][{index}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("action"), str):
            raise ValueError(f"{where}: not a trace entry (a dict with an 'action'): {entry!r:.100}")
        action = entry["action"]
        if "time_us" in entry:
            time_us = _number(entry, "time_us", where, minimum=-(1 << 62))
        if action not in _KEPT_ACTIONS:
            summary.skipped[action] = summary.skipped.get(action, 0) + 1
            continue
        size = _number(entry, "size", where)
        stream = _number(entry, "stream", where)
        if action == "oom":
            summary.oom += 1
            if oom_as_failures:
                rows.append((time_us, device, "allocate failure", 0, size, stream, None))
                summary.failures += 1
            continue
        address = _number(entry, "addr", where)
        if action == "alloc":
            if address in live:
                summary.allocated_while_live += 1
            live[address] = size
            rows.append((time_us, device, "allocate", address, size, stream, entry.get("frames")))
            summary.allocations += 1
        else:  # free_completed
            allocated = live.pop(address, None)
            if allocated is None:
                summary.unknown_frees += 1
                continue
            rows.append((time_us, device, "free", address, allocated, stream, None))
            summary.frees += 1
    summary.never_freed += len(live)
    return rows


def _clock(time_us):
    """Microseconds since the Unix epoch as the UTC time of day HH:MM:SS.ffffff."""
    seconds, micros = divmod(time_us, 1_000_000)
    return f"{seconds // 3600 % 24:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{micros:06d}"


def _chosen_devices(traces, device):
    with_entries = [d for d, entries in enumerate(traces) if entries]
    if device is None:
        if not with_entries:
            raise ValueError(
                "the snapshot's traces are empty: record them with torch.cuda.memory._record_memory_history() "
                "before the work, and take the snapshot before recording stops"
            )
        return with_entries
    if isinstance(device, bool) or not isinstance(device, int) or not 0 <= device < len(traces):
        raise ValueError(f"device {device!r}: the snapshot has traces for devices 0 to {len(traces) - 1}")
    if not traces[device]:
        raise ValueError(f"device {device} has no trace entries (devices with entries: {with_entries})")
    return [device]


def convert_snapshot(snapshot, out, device=None, oom_as_failures=False, timeline_out=None):
    """Writes the allocation log of `snapshot` to the text stream `out`; returns a ConversionSummary.

    `snapshot`: a PyTorch memory snapshot, as ``torch.cuda.memory._snapshot()`` returns it or load_snapshot
    reads it (a dict with ``device_traces``). `device`: the device to convert, or None for every device with
    entries (Thread = the device). `oom_as_failures`: also write ``oom`` entries as ``allocate failure``
    rows. `timeline_out`: a text stream for the allocation timeline of the same rows, or None. The module's
    docstring says what each entry becomes.

    Raises ValueError naming what is wrong (not a snapshot, no entries, a device without entries or out of
    range, an entry without its fields, a malformed frame) before anything is written.
    """
    traces = snapshot.get("device_traces") if isinstance(snapshot, dict) else None
    if not isinstance(traces, list):
        raise ValueError(
            "not a PyTorch memory snapshot: expected a dict with 'device_traces' (from "
            "torch.cuda.memory._snapshot() or _dump_snapshot(), after _record_memory_history())"
        )
    devices = _chosen_devices(traces, device)
    summary = ConversionSummary(devices=devices)
    per_device = [_device_rows(d, traces[d], summary, oom_as_failures) for d in devices]
    rows = list(heapq.merge(*per_device, key=operator.itemgetter(0)))
    timeline = _timeline_lines(rows) if timeline_out is not None else None

    out.write(LOG_HEADER + "\n")
    live = {}  # (thread, pointer) -> size, for the peak
    live_bytes = 0
    for time_us, thread, action, pointer, size, stream, _ in rows:
        out.write(f"{thread},{_clock(time_us)},{action},0x{pointer:x},{size},0x{stream:x}\n")
        if action == "allocate":
            live_bytes += size - live.pop((thread, pointer), 0)  # a lost free: the older block goes first
            live[(thread, pointer)] = size
            summary.peak_live_bytes = max(summary.peak_live_bytes, live_bytes)
        elif action == "free":
            live_bytes -= live.pop((thread, pointer))
    if timeline is not None:
        timeline_out.writelines(timeline)
    return summary


_LIBRARY_PARTS = ("/torch/", "/gpumem/", "/_pytest/", "/pluggy/", "/importlib/")


@functools.lru_cache(maxsize=None)
def _library_directories():
    paths = sysconfig.get_paths()
    return tuple(os.path.join(paths[key], "") for key in ("stdlib", "platstdlib") if paths.get(key))


def is_library_frame(filename):
    """Whether a frame in `filename` is a library's rather than the program's: PyTorch's, gpumem's, pytest's,
    Python's standard library, frozen modules and C++ (a file not ending in ``.py``)."""
    if filename.startswith("<"):
        return filename.startswith("<frozen")
    if not filename.endswith(".py"):
        return True
    normal = filename.replace("\\", "/")
    if any(part in normal for part in _LIBRARY_PARTS):
        return True
    return filename.startswith(_library_directories()) and "-packages" not in normal


def _field(text):
    """A text field of the timeline: tabs and line breaks would end it, so they become spaces."""
    return str(text).replace("\t", " ").replace("\n", " ").replace("\r", " ")


def _frame_key(frame, where):
    if (not isinstance(frame, dict) or not isinstance(frame.get("filename"), str)
            or not isinstance(frame.get("name"), str) or isinstance(frame.get("line"), bool)
            or not isinstance(frame.get("line"), int)):
        raise ValueError(f"{where}: a frame must be a dict with 'filename', 'line' and 'name', not {frame!r:.100}")
    return (_field(frame["filename"]), max(0, min(frame["line"], 0xFFFFFFFF)), _field(frame["name"]))


def _timeline_lines(rows):
    """The allocation timeline (docs/formats.md) of the log's rows, as lines."""
    lines = [TIMELINE_HEADER + "\n"]
    sites = {}  # (filename, line, name) -> id
    stacks = {}  # tuple of frames -> id
    for index, (time_us, _, action, pointer, size, _, frames) in enumerate(rows):
        if action == "free":
            lines.append(f"free\t{time_us}\t0x{pointer:x}\n")
            continue
        if action != "allocate":
            continue
        if not isinstance(frames, (list, tuple)):
            frames = []
        key = tuple(_frame_key(frame, f"the allocation of row {index + 1}") for frame in frames)
        stack = -1
        if key:
            stack = stacks.get(key)
            if stack is None:
                site_frame = next((frame for frame in key if not is_library_frame(frame[0])), None)
                site = -1
                if site_frame is not None:
                    site = sites.get(site_frame)
                    if site is None:
                        site = sites[site_frame] = len(sites)
                        lines.append(f"site\t{site}\t{site_frame[1]}\t{site_frame[2]}\t{site_frame[0]}\n")
                stack = stacks[key] = len(stacks)
                lines.append(f"stack\t{stack}\t{site}\n")
                lines.extend(f"frame\t{line}\t{name}\t{filename}\n" for filename, line, name in key)
        lines.append(f"alloc\t{time_us}\t0x{pointer:x}\t{size}\t{stack}\n")
    return lines


def _open_text(raw, path):
    """A text stream writing to the binary file `raw`, gzip-compressed when `path` ends in .gz."""
    if path.endswith(".gz"):
        # mtime=0 and no name: the same snapshot always gives the same bytes.
        compressed = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0)
        return io.TextIOWrapper(compressed, encoding="utf-8", newline="\n")
    return io.TextIOWrapper(raw, encoding="utf-8", newline="\n")


def convert(snapshot_path, log_path, device=None, oom_as_failures=False, timeline_path=None):
    """Converts the snapshot pickle at `snapshot_path` into the allocation log `log_path` and, when
    `timeline_path` is given, the allocation timeline of the same rows.

    A file is gzip-compressed when its name ends in ``.gz``. Each is written to a temporary file next to it
    and renamed into place, so a failed conversion leaves no partial file. Returns a ConversionSummary.
    Raises OSError when a file cannot be read or written, ValueError as load_snapshot and convert_snapshot.
    """
    snapshot = load_snapshot(snapshot_path)
    targets = [os.fspath(log_path)] + ([os.fspath(timeline_path)] if timeline_path is not None else [])
    temporaries = []
    try:
        for target in targets:
            descriptor, temporary = tempfile.mkstemp(prefix=".torch_snapshot-",
                                                     dir=os.path.dirname(os.path.abspath(target)))
            os.close(descriptor)
            temporaries.append(temporary)
        with contextlib.ExitStack() as files:
            texts = [files.enter_context(_open_text(files.enter_context(open(temporary, "wb")), target))
                     for temporary, target in zip(temporaries, targets)]
            summary = convert_snapshot(snapshot, texts[0], device, oom_as_failures, (texts[1:] or [None])[0])
        for temporary, target in zip(temporaries, targets):
            os.chmod(temporary, 0o666 & ~_umask())
            os.replace(temporary, target)
    except BaseException:
        for temporary in temporaries:
            if os.path.exists(temporary):
                os.unlink(temporary)
        raise
    return summary


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def main(argv=None):
    """The command line: ``python3 -m gpumem.tools.torch_snapshot SNAPSHOT LOG [--device N] [--oom-as-failures]
    [--timeline FILE]``.

    Prints the summary on stdout and returns 0; on an error prints it on stderr and returns 1.
    """
    parser = argparse.ArgumentParser(
        prog="python3 -m gpumem.tools.torch_snapshot",
        description="Convert a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot) into gpumem's "
        "allocation log (RMM CSV) for `gpumem replay`.",
    )
    parser.add_argument("snapshot", help="the snapshot pickle")
    parser.add_argument("log", help="the log to write; gzip-compressed when the name ends in .gz")
    parser.add_argument(
        "--device", type=int, default=None, help="convert this device only (default: every device with entries)"
    )
    parser.add_argument(
        "--oom-as-failures", action="store_true", help="write out-of-memory entries as 'allocate failure' rows"
    )
    parser.add_argument(
        "--timeline", metavar="FILE", default=None,
        help="also write the allocation timeline with call sites (for gpumem report --timeline)"
    )
    args = parser.parse_args(argv)
    try:
        summary = convert(args.snapshot, args.log, args.device, args.oom_as_failures, args.timeline)
    except (OSError, ValueError) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 1
    print(summary.describe(args.log))
    return 0


if __name__ == "__main__":
    sys.exit(main())
