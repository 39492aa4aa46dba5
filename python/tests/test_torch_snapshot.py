"""The PyTorch memory snapshot converter (gpumem.tools.torch_snapshot), on snapshots built here (no PyTorch).

Each log written is parsed back as docs/formats.md specifies it; where the build tree has the gpumem CLI
with its replay command (or GPUMEM_CLI names one), the C++ reader and replay read it too.
"""

import csv
import gzip
import io
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

import gpumem
from gpumem.tools import torch_snapshot

HEADER = "Thread,Time,Action,Pointer,Size,Stream"
ROW = re.compile(r"^\d+,\d\d:\d\d:\d\d\.\d{6},(allocate|free|allocate failure),0x[0-9a-f]+,\d+,0x[0-9a-f]+$")
BASE_US = (13 * 3600 + 9 * 60 + 44) * 1_000_000  # 13:09:44 (UTC) on 1 Jan 1970; any day gives the same clock
REPO = Path(__file__).resolve().parents[2]


def entry(action, addr, size, time_us, stream=0, **extra):
    fields = {"action": action, "size": size, "stream": stream, "time_us": time_us, "frames": []}
    fields["device_free" if action == "oom" else "addr"] = addr
    fields.update(extra)
    return fields


def snapshot(*traces):
    """A snapshot as torch.cuda.memory._snapshot() shapes it, with the given device traces."""
    return {"segments": [], "device_traces": [list(t) for t in traces],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": None, "expandable_segments": False}}


def parse_log(text):
    """The rows of a log as docs/formats.md defines it: (thread, time, action, pointer, size, stream)."""
    lines = text.split("\n")
    assert lines[0] == HEADER
    assert lines[-1] == "", "the log ends with a newline"
    rows = []
    for number, line in enumerate(lines[1:-1], start=2):
        assert ROW.match(line), f"line {number}: {line!r}"
        thread, time, action, pointer, size, stream = line.split(",")
        rows.append((int(thread), time, action, int(pointer, 16), int(size), int(stream, 16)))
    return rows


def convert(snap, **options):
    out = io.StringIO()
    summary = torch_snapshot.convert_snapshot(snap, out, **options)
    return parse_log(out.getvalue()), summary


# A device-0 trace with a bit of everything: cache events to skip, a free of a block allocated before the
# trace began, a block never freed, an out-of-memory entry.
TRACE = [
    entry("free_completed", 0x7F0000000000, 4096, BASE_US + 1),  # allocated before the trace: skipped
    entry("segment_alloc", 0x7F1000000000, 2 << 20, BASE_US + 2),
    entry("alloc", 0x7F1000000000, 37632, BASE_US + 3),
    entry("alloc", 0x7F1000009400, 256, BASE_US + 4, stream=0x55D29FB6AA50),
    entry("free_requested", 0x7F1000000000, 37888, BASE_US + 5),
    entry("free_completed", 0x7F1000000000, 37888, BASE_US + 6),  # the allocated size is written, not this
    entry("oom", 1 << 30, 80 << 30, BASE_US + 7),
    entry("snapshot", 0, 0, BASE_US + 8),
    entry("alloc", 0x7F1000000000, 512, 1_000_000 * 86_400 * 20_000 + BASE_US + 9),  # a later day: same clock
]


def test_allocs_and_completed_frees_become_rows_and_the_rest_is_counted():
    rows, summary = convert(snapshot(TRACE))
    assert rows == [
        (0, "13:09:44.000003", "allocate", 0x7F1000000000, 37632, 0),
        (0, "13:09:44.000004", "allocate", 0x7F1000009400, 256, 0x55D29FB6AA50),
        (0, "13:09:44.000006", "free", 0x7F1000000000, 37632, 0),
        (0, "13:09:44.000009", "allocate", 0x7F1000000000, 512, 0),
    ]
    assert summary.devices == [0]
    assert (summary.allocations, summary.frees, summary.failures, summary.rows) == (3, 1, 0, 4)
    assert summary.unknown_frees == 1
    assert summary.never_freed == 2
    assert summary.oom == 1
    assert summary.skipped == {"segment_alloc": 1, "free_requested": 1, "snapshot": 1}
    assert summary.peak_live_bytes == 37632 + 256
    text = summary.describe("run.csv")
    for fragment in ("wrote 4 rows to run.csv (device 0)", "2 blocks are never freed",
                     "1 frees of blocks allocated before the trace began were skipped",
                     "1 out-of-memory entries", "free_requested 1", "peak live bytes 37888"):
        assert fragment in text, text


def test_oom_entries_become_allocate_failures_on_request():
    rows, summary = convert(snapshot(TRACE), oom_as_failures=True)
    assert (0, "13:09:44.000007", "allocate failure", 0, 80 << 30, 0) in rows
    assert rows.index((0, "13:09:44.000007", "allocate failure", 0, 80 << 30, 0)) == 3
    assert (summary.failures, summary.oom, summary.rows) == (1, 1, 5)


def test_an_alloc_at_a_live_address_is_kept_and_counted():
    trace = [entry("alloc", 0x1000, 100, 1), entry("alloc", 0x1000, 300, 2), entry("free_completed", 0x1000, 0, 3)]
    rows, summary = convert(snapshot(trace))
    assert [(r[2], r[4]) for r in rows] == [("allocate", 100), ("allocate", 300), ("free", 300)]
    assert summary.allocated_while_live == 1
    assert summary.peak_live_bytes == 300  # the older block counts as freed, as the replay frees it first
    assert "1 allocations reuse an address still live" in summary.describe()


def test_entries_without_time_take_the_time_before_them():
    trace = [{"action": "alloc", "addr": 0x2000, "size": 8, "stream": 0},
             entry("alloc", 0x3000, 8, BASE_US + 250_000),
             {"action": "free_completed", "addr": 0x2000, "size": 512, "stream": 0}]
    rows, _ = convert(snapshot(trace))
    assert [r[1] for r in rows] == ["00:00:00.000000", "13:09:44.250000", "13:09:44.250000"]


def test_devices_are_merged_in_time_order_with_the_device_as_thread():
    device0 = [entry("alloc", 0xA000, 10, 100), entry("free_completed", 0xA000, 512, 400)]
    device2 = [entry("alloc", 0xB000, 20, 200), entry("alloc", 0xC000, 30, 300),
               entry("free_completed", 0xB000, 0, 500)]
    rows, summary = convert(snapshot(device0, [], device2))
    assert [(r[0], r[2], r[3]) for r in rows] == [
        (0, "allocate", 0xA000), (2, "allocate", 0xB000), (2, "allocate", 0xC000), (0, "free", 0xA000),
        (2, "free", 0xB000)]
    assert summary.devices == [0, 2]
    assert summary.peak_live_bytes == 60
    only, summary = convert(snapshot(device0, [], device2), device=2)
    assert [(r[0], r[3]) for r in only] == [(2, 0xB000), (2, 0xC000), (2, 0xB000)]
    assert summary.devices == [2] and summary.never_freed == 1
    assert "(device 2)" in summary.describe()
    assert "(devices 0, 2)" in convert(snapshot(device0, [], device2))[1].describe()


def test_each_devices_order_is_kept_even_when_its_clock_steps_back():
    trace = [entry("alloc", 0xA000, 10, 500), entry("free_completed", 0xA000, 0, 499)]
    rows, _ = convert(snapshot(trace))
    assert [r[2] for r in rows] == ["allocate", "free"]


@pytest.mark.parametrize(
    ("snap", "options", "message"),
    [
        ([1, 2], {}, "not a PyTorch memory snapshot"),
        ({"segments": []}, {}, "device_traces"),
        (snapshot([], []), {}, "traces are empty"),
        (snapshot(TRACE), {"device": 1}, "devices 0 to 0"),
        (snapshot(TRACE, []), {"device": 1}, r"device 1 has no trace entries \(devices with entries: \[0\]\)"),
        (snapshot(TRACE), {"device": -1}, "device -1"),
        (snapshot([entry("alloc", 0x10, 8, 1), {"size": 8}]), {}, r"device_traces\[0\]\[1\]: not a trace entry"),
        (snapshot([{"action": "alloc", "size": 8, "stream": 0}]), {}, r"device_traces\[0\]\[0\]: 'addr' must be"),
        (snapshot([entry("alloc", -16, 8, 1)]), {}, "'addr' must be an integer >= 0, not -16"),
        (snapshot([entry("alloc", 0x10, "8", 1)]), {}, "'size' must be an integer"),
        ({"device_traces": [{"action": "alloc"}]}, {}, r"device_traces\[0\] must be a list"),
    ],
)
def test_what_is_not_a_usable_snapshot_is_a_value_error_naming_it(snap, options, message):
    out = io.StringIO()
    with pytest.raises(ValueError, match=message):
        torch_snapshot.convert_snapshot(snap, out, **options)
    assert out.getvalue() == "", "nothing is written before the whole trace is checked"


def write_pickle(path, value):
    with open(path, "wb") as file:
        pickle.dump(value, file)
    return path


def test_convert_writes_plain_or_gzip_by_the_name_and_the_same_rows(tmp_path):
    source = write_pickle(tmp_path / "run.pickle", snapshot(TRACE))
    plain = torch_snapshot.convert(source, tmp_path / "run.csv")
    torch_snapshot.convert(source, tmp_path / "run.csv.gz")
    compressed = (tmp_path / "run.csv.gz").read_bytes()
    assert compressed[:2] == b"\x1f\x8b"
    text = (tmp_path / "run.csv").read_text()
    assert gzip.decompress(compressed).decode() == text
    assert len(parse_log(text)) == plain.rows == 4
    torch_snapshot.convert(source, tmp_path / "again.csv.gz")
    assert (tmp_path / "again.csv.gz").read_bytes() == compressed, "the same snapshot gives the same bytes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again.csv.gz", "run.csv", "run.csv.gz", "run.pickle"]


def test_a_failed_conversion_leaves_no_file(tmp_path):
    source = write_pickle(tmp_path / "empty.pickle", snapshot([]))
    with pytest.raises(ValueError, match="empty"):
        torch_snapshot.convert(source, tmp_path / "out.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.pickle"]


class Payload:
    """Not plain data: unpickling it would call os.system in a careless reader."""

    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_snapshots_holding_objects_or_garbage_are_refused(tmp_path):
    evil = write_pickle(tmp_path / "evil.pickle", {"device_traces": [[Payload()]]})
    with pytest.raises(ValueError, match=r"evil\.pickle.*(posix|os)\.system.*arbitrary code"):
        torch_snapshot.load_snapshot(evil)
    garbage = tmp_path / "garbage.pickle"
    garbage.write_bytes(b"Thread,Time\n")
    with pytest.raises(ValueError, match="garbage.pickle: not a PyTorch memory snapshot"):
        torch_snapshot.load_snapshot(garbage)
    with pytest.raises(OSError):
        torch_snapshot.load_snapshot(tmp_path / "missing.pickle")


def run_cli(*args):
    env = dict(os.environ, PYTHONPATH=str(Path(gpumem.__file__).resolve().parents[1]))
    return subprocess.run([sys.executable, "-m", "gpumem.tools.torch_snapshot", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_command_line_converts_and_reports(tmp_path):
    source = write_pickle(tmp_path / "run.pickle", snapshot(TRACE, [entry("alloc", 0xD000, 64, BASE_US)]))
    result = run_cli(source, tmp_path / "run.csv.gz", "--device", "0", "--oom-as-failures")
    assert result.returncode == 0, result.stderr
    assert "wrote 5 rows to" in result.stdout and "written as allocate failure rows" in result.stdout
    rows = parse_log(gzip.decompress((tmp_path / "run.csv.gz").read_bytes()).decode())
    assert len(rows) == 5 and {r[0] for r in rows} == {0}
    result = run_cli(source, tmp_path / "all.csv")
    assert result.returncode == 0, result.stderr
    assert "(devices 0, 1)" in result.stdout


def test_the_command_line_reports_errors_with_exit_status_1(tmp_path):
    source = write_pickle(tmp_path / "run.pickle", snapshot(TRACE))
    result = run_cli(source, tmp_path / "out.csv", "--device", "3")
    assert result.returncode == 1
    assert "gpumem.tools.torch_snapshot: error: device 3" in result.stderr
    result = run_cli(tmp_path / "missing.pickle", tmp_path / "out.csv")
    assert result.returncode == 1 and "missing.pickle" in result.stderr
    assert not (tmp_path / "out.csv").exists()
    assert run_cli().returncode == 2  # usage


def log_rows(path):
    with gzip.open(path, "rt", newline="") as file:
        reader = csv.reader(file)
        assert next(reader) == HEADER.split(",")
        return [row for row in reader]


def test_a_real_log_survives_the_round_trip_through_a_snapshot(tmp_path):
    # data/logs/thrust_pipeline.csv.gz (a real program's log) turned into the snapshot PyTorch would have
    # recorded, and back: the same rows, but for the Thread column (the device).
    log = REPO / "data" / "logs" / "thrust_pipeline.csv.gz"
    if not log.is_file():
        pytest.skip(f"{log} is not in this checkout")
    original = log_rows(log)
    trace = []
    for _, time, action, pointer, size, stream in original:
        hours, minutes, seconds = time.split(":")
        time_us = round((int(hours) * 3600 + int(minutes) * 60 + float(seconds)) * 1_000_000)
        kind = {"allocate": "alloc", "free": "free_completed"}[action]
        trace.append(entry(kind, int(pointer, 16), int(size), time_us, stream=int(stream, 16)))
    source = write_pickle(tmp_path / "thrust.pickle", snapshot(trace))
    summary = torch_snapshot.convert(source, tmp_path / "thrust.csv.gz")
    converted = log_rows(tmp_path / "thrust.csv.gz")
    assert [row[1:] for row in converted] == [row[1:] for row in original]
    assert summary.unknown_frees == 0 and summary.never_freed == 0


def gpumem_cli():
    """The gpumem command-line tool with a replay command: GPUMEM_CLI, else <build>/cli/gpumem; or None."""
    named = os.environ.get("GPUMEM_CLI")
    candidate = Path(named) if named else Path(gpumem.__file__).resolve().parents[2] / "cli" / "gpumem"
    if not candidate.is_file():
        return None
    probe = subprocess.run([str(candidate), "replay", "--help"], capture_output=True, text=True, timeout=60)
    return None if "unknown command" in probe.stdout + probe.stderr else candidate


def test_gpumem_replay_reads_the_converted_log(tmp_path):
    cli = gpumem_cli()
    if cli is None:
        pytest.skip("no gpumem CLI with a replay command in this build tree (GPUMEM_CLI names one)")
    device0 = TRACE + [entry("alloc", 0x7F2000000000, 1 << 20, BASE_US + 10),
                       entry("free_completed", 0x7F2000000000, 1 << 20, BASE_US + 11)]
    device1 = [entry("alloc", 0x7E0000000000, 3000, BASE_US + 5),
               entry("free_completed", 0x7E0000000000, 0, BASE_US + 12)]
    source = write_pickle(tmp_path / "run.pickle", snapshot(device0, device1))
    summary = torch_snapshot.convert(source, tmp_path / "run.csv.gz", oom_as_failures=True)
    result = subprocess.run([str(cli), "replay", str(tmp_path / "run.csv.gz"), "--simulate", "--csv",
                             "--resource", "pool"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    table = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(table) == 1, result.stdout
    assert int(table[0]["peak_live_bytes"]) == summary.peak_live_bytes
    assert int(table[0]["unknown_frees"]) == 0
    assert int(table[0]["log_failures"]) == summary.failures == 1
