"""The ``gpumem`` command of an installed package: the console script ``gpumem`` and ``python -m gpumem``.

Both run the C++ command-line tool that ships inside the package (``gpumem/_bin/gpumem``, built with the
extension) in place of the Python process, with the same arguments: its output, errors and exit status are
the tool's own. ``gpumem demo`` replays the allocation log bundled in ``gpumem/_data/logs`` unless
``--log`` names another: the tool itself looks only in the source tree and where ``cmake --install`` puts
its data, and a pip install is neither.

``gpumem report SNAPSHOT.pickle [OPTIONS]`` takes a PyTorch memory snapshot (``torch.cuda.memory._dump_snapshot``'s
or gpumem.torch's ``dump_snapshot``'s) where the tool takes an allocation log: the snapshot is converted here
(gpumem.tools.torch_snapshot) into an allocation log and an allocation timeline in a temporary directory,
and the tool runs as a child process with ``report --timeline TIMELINE [OPTIONS] LOG``; the page then has the
"Allocation timeline" section. A snapshot is recognised by its name (``.pickle``, ``.pkl``) or its first
byte (a pickle's protocol mark).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List, NoReturn, Optional, Sequence

_PACKAGE_DIR = Path(__file__).resolve().parent
EXECUTABLE = _PACKAGE_DIR / "_bin" / "gpumem"
"""The command-line tool inside the package."""
DEMO_LOG = _PACKAGE_DIR / "_data" / "logs" / "thrust_pipeline.csv.gz"
"""The allocation log ``gpumem demo`` replays by default (the tool's bundled log, data/logs/ in the source tree)."""


def command_line(arguments: Sequence[str]) -> List[str]:
    """The tool's argv for the user's `arguments` (the tool's name first): the bundled log added to
    ``demo`` when the user gives none and the package has it."""
    arguments = list(arguments)
    if arguments[:1] == ["demo"] and DEMO_LOG.is_file() and not any(
            argument == "--log" or argument.startswith("--log=") for argument in arguments[1:]):
        arguments += ["--log", str(DEMO_LOG)]
    return ["gpumem", *arguments]


_REPORT_OPTIONS_WITH_VALUE = ("-r", "--resource", "-o", "--output", "--timeline")


def _is_snapshot(path: str) -> bool:
    if path.endswith((".pickle", ".pkl")):
        return True
    try:
        with open(path, "rb") as file:
            return file.read(1) == b"\x80"  # PROTO: every pickle of protocol 2 or later starts with it
    except OSError:
        return False


def snapshot_argument(arguments: Sequence[str]) -> Optional[int]:
    """The index in `arguments` (the user's, without the tool's name) of ``report``'s LOG when it is a PyTorch
    memory snapshot, else None."""
    if list(arguments[:1]) != ["report"]:
        return None
    index = 1
    while index < len(arguments):
        argument = arguments[index]
        if argument == "--":
            index += 1
            break
        if argument in _REPORT_OPTIONS_WITH_VALUE:
            index += 2
        elif argument.startswith("-") and argument != "-":
            index += 1
        else:
            break
    if index < len(arguments) and _is_snapshot(arguments[index]):
        return index
    return None


def _report_on_snapshot(arguments: List[str], index: int) -> int:
    """Converts the snapshot at arguments[index] and runs the tool's report on the results; its exit status."""
    from .tools import torch_snapshot

    if any(argument == "--timeline" or argument.startswith("--timeline=") for argument in arguments):
        sys.stderr.write("gpumem report: error: --timeline comes from the snapshot; give one or the other\n")
        return 2
    snapshot = arguments[index]
    with tempfile.TemporaryDirectory(prefix="gpumem-report-") as directory:
        stem = Path(snapshot).stem or "snapshot"
        log = os.path.join(directory, stem + ".csv")
        timeline = os.path.join(directory, stem + ".timeline")
        try:
            summary = torch_snapshot.convert(snapshot, log, timeline_path=timeline)
        except (OSError, ValueError) as error:
            sys.stderr.write(f"gpumem report: error: {error}\n")
            return 1
        print(f"{snapshot}: {summary.describe('the log')}", flush=True)
        argv = command_line(["report", "--timeline", timeline, *arguments[1:index], log, *arguments[index + 1:]])
        return subprocess.run(argv, executable=EXECUTABLE, check=False).returncode


def main(arguments: Optional[Sequence[str]] = None) -> NoReturn:
    """Replaces this process by the tool, run with `arguments` (default: this process's, less its name); for a
    report on a PyTorch snapshot, converts it and runs the tool as a child process, exiting with its status.

    Exits with status 1 and a message on standard error when the package has no tool (a build with
    GPUMEM_BUILD_CLI=OFF).
    """
    if not os.access(EXECUTABLE, os.X_OK):
        sys.stderr.write(f"gpumem: this installation of the Python package has no command-line tool ({EXECUTABLE} "
                         "is missing): it was built without GPUMEM_BUILD_CLI; reinstall it with pip install ./python\n")
        raise SystemExit(1)
    arguments = list(sys.argv[1:] if arguments is None else arguments)
    index = snapshot_argument(arguments)
    if index is not None:
        raise SystemExit(_report_on_snapshot(arguments, index))
    argv = command_line(arguments)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(EXECUTABLE, argv)
