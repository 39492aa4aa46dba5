"""The recorder of allocation history (gpumem.torch._history) on any backend, without PyTorch: the allocator
hooks table is driven as the PyTorch allocator library drives it, and what is recorded is checked in PyTorch's
snapshot schema, through gpumem's snapshot converter and through `python -m gpumem report`."""

import ctypes
import io
import os
import pickle
import subprocess
import sys

import pytest

import gpumem
from gpumem import mr
from gpumem.tools import torch_snapshot
from gpumem.torch import _history as history
from torch_hooks_table import hooks_table

KiB = 1 << 10
THIS_FILE = os.path.abspath(__file__)


class GilHolding(ctypes.Structure):
    """alloc2 and free2 of the hooks table called with the GIL held (as an operator that keeps it calls them);
    ctypes' CFUNCTYPE releases the GIL around a call, PYFUNCTYPE keeps it."""

    _fields_ = [
        ("alloc_async", ctypes.c_void_p),
        ("free_async", ctypes.c_void_p),
        ("last_error", ctypes.c_void_p),
        ("alloc2", ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64,
                                     ctypes.c_uint64, ctypes.POINTER(ctypes.c_void_p))),
        ("free2", ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)),
    ]

    def alloc(self, size):
        out = ctypes.c_void_p()
        assert self.alloc2(size, 0, None, 0, 0, ctypes.byref(out)) == 0
        return out.value

    def free(self, pointer, size):
        assert self.free2(pointer, size, 0, None) == 0


@pytest.fixture
def table(current_resource):
    """The GIL-holding table over a CudaMemoryResource; recording stopped and cleared before and after."""
    hooks_table()  # checks the version
    mr.set_current_device_resource(mr.CudaMemoryResource())
    history.record_memory_history(None, clear_history=True)
    yield GilHolding.from_address(gpumem._gpumem._allocator_hooks_address())
    history.record_memory_history(None, clear_history=True)


def allocate_in_a_named_function(table, sizes):
    return [table.alloc(size) for size in sizes]


def test_entries_carry_this_tests_frames(table):
    history.record_memory_history(max_entries=100)
    pointers = allocate_in_a_named_function(table, [KiB, 2 * KiB])
    table.free(pointers[0], KiB)
    snap = history.snapshot()
    trace = snap["device_traces"][0]
    assert [e["action"] for e in trace] == ["alloc", "alloc", "free_requested", "free_completed"]
    assert [e["addr"] for e in trace] == [pointers[0], pointers[1], pointers[0], pointers[0]]
    assert [e["size"] for e in trace] == [KiB, 2 * KiB, KiB, KiB]
    frames = trace[0]["frames"]
    assert frames[0] == {"filename": THIS_FILE, "line": frames[0]["line"], "name": "alloc"}  # GilHolding.alloc
    assert isinstance(frames[0]["line"], int) and frames[0]["line"] > 0
    names = [f["name"] for f in frames]
    assert "allocate_in_a_named_function" in names and "test_entries_carry_this_tests_frames" in names
    assert all(f["filename"] == THIS_FILE for f in frames[:2])
    assert len(frames) <= 64
    assert trace[2]["frames"] == frames  # a free shows its allocation's stack
    # The live block is in a pseudo-segment of its own, with its frames.
    (segment,) = snap["segments"]
    assert segment["address"] == pointers[1] and segment["total_size"] == 2 * KiB
    (block,) = segment["blocks"]
    assert block == {"address": pointers[1], "size": 2 * KiB, "requested_size": 2 * KiB,
                     "state": "active_allocated", "frames": block["frames"]}
    assert "test_entries_carry_this_tests_frames" in [f["name"] for f in block["frames"]]
    table.free(pointers[1], 2 * KiB)


def allocate_with_the_gil_released(hooks, size):
    """alloc2 through CFUNCTYPE (ctypes releases the GIL around the call), as PyTorch's operators allocate."""
    status, pointer = hooks.alloc(size, 0)
    assert status == 0
    return pointer


def test_a_python_thread_that_released_the_gil_is_recorded_with_its_frames(table):
    history.record_memory_history()
    released = hooks_table()  # CFUNCTYPE: the GIL is released around the call, and the recorder takes it back
    pointer = allocate_with_the_gil_released(released, KiB)
    assert released.free2(pointer, KiB, 0, None) == 0
    trace = history.snapshot()["device_traces"][0]
    assert [e["action"] for e in trace] == ["alloc", "free_requested", "free_completed"]
    names = [f["name"] for f in trace[0]["frames"]]
    assert names[:2] == ["alloc", "allocate_with_the_gil_released"]
    assert "test_a_python_thread_that_released_the_gil_is_recorded_with_its_frames" in names


def test_stacks_none_records_entries_without_frames(table):
    history.record_memory_history(stacks=None)
    pointer = table.alloc(KiB)
    table.free(pointer, KiB)
    trace = history.snapshot()["device_traces"][0]
    assert len(trace) == 3 and all(e["frames"] == [] for e in trace)


def test_the_ring_keeps_the_last_max_entries(table):
    history.record_memory_history(max_entries=5)
    sizes = [KiB * (i + 1) for i in range(6)]
    pointers = allocate_in_a_named_function(table, sizes)
    for pointer, size in zip(pointers, sizes):
        table.free(pointer, size)
    trace = history.snapshot()["device_traces"][0]
    # 12 entries recorded, the last 5 kept: frees of the 2nd to the 6th block.
    assert [(e["action"], e["size"]) for e in trace if e["action"] != "free_requested"] == [
        ("free_completed", size) for size in sizes[1:]]
    assert history.snapshot()["segments"] == []
    # A smaller limit drops the oldest at once.
    history.record_memory_history(max_entries=2)
    kept = history.snapshot()["device_traces"][0]
    assert [e["size"] for e in kept if e["action"] == "free_completed"] == sizes[4:]


def test_nothing_is_recorded_while_off(table):
    pointer = table.alloc(KiB)
    table.free(pointer, KiB)
    assert history.snapshot() == {"segments": [], "device_traces": [[]]}
    history.record_memory_history()
    history.record_memory_history(None)
    pointer = table.alloc(KiB)
    table.free(pointer, KiB)
    assert history.snapshot()["device_traces"] == [[]]


def test_state_keeps_live_blocks_only(table):
    history.record_memory_history("state")
    pointers = allocate_in_a_named_function(table, [KiB, 3 * KiB])
    table.free(pointers[0], KiB)
    snap = history.snapshot()
    assert snap["device_traces"] == [[]]
    assert [s["address"] for s in snap["segments"]] == [pointers[1]]
    table.free(pointers[1], 3 * KiB)


def test_history_stays_after_stopping_until_cleared(table):
    history.record_memory_history()
    table.free(table.alloc(KiB), KiB)
    history.record_memory_history(None)
    assert len(history.snapshot()["device_traces"][0]) == 3
    history.record_memory_history(clear_history=True)
    assert history.snapshot()["device_traces"] == [[]]


def test_times_do_not_decrease_and_keys_follow_pytorch(table):
    history.record_memory_history()
    pointers = allocate_in_a_named_function(table, [KiB] * 20)
    for pointer in pointers:
        table.free(pointer, KiB)
    snap = history.snapshot()
    assert set(snap) == {"segments", "device_traces"}
    trace = snap["device_traces"][0]
    times = [e["time_us"] for e in trace]
    assert times == sorted(times) and times[0] > 1_600_000_000_000_000  # microseconds since the epoch
    for e in trace:
        assert set(e) == {"action", "addr", "size", "stream", "time_us", "frames"}
        assert e["action"] in ("alloc", "free_requested", "free_completed")
        for f in e["frames"]:
            assert set(f) == {"filename", "line", "name"}
            assert isinstance(f["line"], int)


@pytest.mark.parametrize("arguments, message", [
    ({"enabled": "everything"}, "enabled='everything'"),
    ({"context": "some"}, "context='some'"),
    ({"stacks": "all"}, "C++ frames are not recorded"),
    ({"max_entries": -1}, "max_entries=-1"),
])
def test_bad_arguments_are_named(table, arguments, message):
    with pytest.raises(ValueError, match=message.replace("+", r"\+")):
        history.record_memory_history(**arguments)
    with pytest.raises(TypeError, match="max_entries"):
        history.record_memory_history(max_entries=1.5)


def test_dump_loads_in_the_converter_and_round_trips(table, tmp_path):
    history.record_memory_history()
    sizes = [KiB, 4 * KiB, 2 * KiB]
    pointers = allocate_in_a_named_function(table, sizes)
    table.free(pointers[1], sizes[1])
    path = tmp_path / "run.pickle"
    history.dump_snapshot(str(path))
    table.free(pointers[0], sizes[0])
    table.free(pointers[2], sizes[2])

    snap = torch_snapshot.load_snapshot(path)
    assert snap == pickle.loads(path.read_bytes())
    log, timeline = io.StringIO(), io.StringIO()
    summary = torch_snapshot.convert_snapshot(snap, log, timeline_out=timeline)
    rows = log.getvalue().splitlines()
    assert rows[0] == torch_snapshot.LOG_HEADER
    assert [(r.split(",")[2], int(r.split(",")[3], 16), int(r.split(",")[4])) for r in rows[1:]] == [
        ("allocate", pointers[0], sizes[0]), ("allocate", pointers[1], sizes[1]), ("allocate", pointers[2], sizes[2]),
        ("free", pointers[1], sizes[1])]
    assert summary.allocations == 3 and summary.frees == 1 and summary.never_freed == 2
    lines = timeline.getvalue().splitlines()
    assert lines[0] == torch_snapshot.TIMELINE_HEADER
    (site,) = [line.split("\t") for line in lines if line.startswith("site\t")]
    assert site[3] == "alloc" and site[4] == THIS_FILE  # the innermost frame outside the libraries
    assert [line.split("\t")[0] for line in lines if not line.startswith(("site", "stack", "frame"))] == [
        "gpumem-timeline 1", "alloc", "alloc", "alloc", "free"]


def test_library_frames_are_not_call_sites():
    assert torch_snapshot.is_library_frame("/usr/lib/python3/dist-packages/torch/nn/modules/module.py")
    assert torch_snapshot.is_library_frame("/x/site-packages/gpumem/torch/_history.py")
    assert torch_snapshot.is_library_frame("<frozen runpy>")
    assert torch_snapshot.is_library_frame("/pytorch/c10/cuda/CUDACachingAllocator.cpp")
    assert torch_snapshot.is_library_frame(os.__file__)
    assert not torch_snapshot.is_library_frame("/home/me/train.py")
    assert not torch_snapshot.is_library_frame("<stdin>")


def test_report_on_the_dumped_snapshot_has_the_timeline(table, tmp_path):
    import gpumem._cli

    if not os.access(gpumem._cli.EXECUTABLE, os.X_OK):
        pytest.skip("the package has no command-line tool (built without GPUMEM_BUILD_CLI)")
    history.record_memory_history()
    pointers = allocate_in_a_named_function(table, [KiB, 8 * KiB, 2 * KiB])
    table.free(pointers[1], 8 * KiB)
    path = tmp_path / "run.pickle"
    history.dump_snapshot(str(path))
    for pointer, size in ((pointers[0], KiB), (pointers[2], 2 * KiB)):
        table.free(pointer, size)
    page = tmp_path / "page.html"
    assert gpumem._cli.snapshot_argument(["report", "-r", "cuda", str(path)]) == 3
    done = subprocess.run([sys.executable, "-m", "gpumem", "report", str(path), "-r", "cuda", "-o", str(page)],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "GPUMEM_BACKEND": "host"})
    assert done.returncode == 0, done.stdout + done.stderr
    html = page.read_text()
    assert '<h2 id="allocation-timeline">Allocation timeline</h2>' in html
    assert html.count("<path data-block=") == 3
    assert "allocate_in_a_named_function" in html and 'id="timeline-sites"' in html


def test_report_on_a_snapshot_that_is_not_one_names_the_problem(tmp_path):
    import gpumem._cli

    path = tmp_path / "bad.pickle"
    path.write_bytes(pickle.dumps({"no": "traces"}))
    done = subprocess.run([sys.executable, "-m", "gpumem", "report", str(path)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1 and "not a PyTorch memory snapshot" in done.stderr, done.stderr
    assert gpumem._cli.snapshot_argument(["replay", str(path)]) is None
